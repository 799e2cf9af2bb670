#include "tessel/core/writable.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tessel/core/error.h"

namespace tessel {

void require_writable_dir(const std::string& flag, const std::string& dir, int tag) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  TESSEL_CHECK(!error, "{} {}: cannot create the folder ({})", flag, dir, error.message());
  TESSEL_CHECK(std::filesystem::is_directory(dir), "{} {}: not a folder", flag, dir);
  const std::string probe = fmt::format("{}/.tessel-write-probe-{}-{}", dir, ::getpid(), tag);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TESSEL_CHECK(fd >= 0, "{} {}: cannot write into the folder ({})", flag, dir, std::strerror(errno));
  const bool written = ::write(fd, "t", 1) == 1 && ::fsync(fd) == 0;
  const int write_error = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  TESSEL_CHECK(written, "{} {}: cannot write into the folder ({})", flag, dir,
               std::strerror(write_error));
}

}  // namespace tessel
