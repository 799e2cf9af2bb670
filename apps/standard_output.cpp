#include "standard_output.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tessel/core/error.h"

namespace tessel {

void flush_standard_output() {
  const int flushed = std::fflush(stdout);
  const int reason = errno;
  // A write that failed earlier leaves the error flag; its errno is gone by now.
  if (flushed != 0) fail("cannot write the standard output: {}", std::strerror(reason));
  if (std::ferror(stdout)) fail("cannot write the standard output: an earlier write failed");
}

}  // namespace tessel
