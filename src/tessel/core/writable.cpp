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

void write_file_atomically(const std::string& path, const std::string& bytes) {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, host, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TESSEL_CHECK(fd >= 0, "{}: cannot create ({})", tmp, std::strerror(errno));
  size_t done = 0;
  int error = 0;
  while (done < bytes.size() && error == 0) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n > 0) done += static_cast<size_t>(n);
    else if (n < 0 && errno != EINTR) error = errno;
  }
  if (::close(fd) != 0 && error == 0) error = errno;  // NFS reports a full disk at close
  if (error == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    ::unlink(tmp.c_str());
    fail("{}: cannot rename {} over it ({})", path, tmp, std::strerror(rename_error));
  }
  if (error == 0) return;
  ::unlink(tmp.c_str());
  fail("{}: write failed ({})", tmp, std::strerror(error));
}

}  // namespace tessel
