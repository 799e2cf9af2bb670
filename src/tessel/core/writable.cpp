#include "tessel/core/writable.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
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

namespace {

// PATH.tmp.HOST.PID.N: the host and pid name the writer (ranks of several nodes share a file
// system), N this process's files (threads, or one path written twice, never meet).
std::string temporary_name(const std::string& path) {
  static std::atomic<uint64_t> count{0};
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("{}.tmp.{}.{}.{}", path, host, ::getpid(), count++);
}

int fsync_past_signals(int fd) {
  int synced;
  do synced = ::fsync(fd);
  while (synced != 0 && errno == EINTR);
  return synced;
}

// The rename is on disk only once the folder that holds the name is.
void sync_folder(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  const std::string dir = parent.empty() ? std::string(".") : parent;
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TESSEL_CHECK(fd >= 0, "{}: cannot open its folder {} to sync it ({})", path, dir,
               std::strerror(errno));
  const int synced = fsync_past_signals(fd);
  const int error = errno;
  ::close(fd);
  // Some file systems (FUSE mounts, some network ones) cannot sync a folder: EINVAL says so, and
  // there is nothing more this writer can do to make the name durable there.
  TESSEL_CHECK(synced == 0 || error == EINVAL, "{}: cannot sync its folder {} ({})", path, dir,
               std::strerror(error));
}

}  // namespace

AtomicFile::AtomicFile(std::string path, Durability durability)
    : path_(std::move(path)), temp_(temporary_name(path_)), durability_(durability) {
  // O_EXCL: never a file another writer has open; O_NOFOLLOW with it: never through a link
  // planted at the name. 0666 less the umask, as fopen and ofstream create files.
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  TESSEL_CHECK(fd_ >= 0, "{}: cannot create ({})", temp_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, size_t size) {
  // About a thousand kernel calls a GiB however small the writes (one document's tokens each).
  constexpr size_t kBuffer = size_t{1} << 20;
  TESSEL_CHECK(fd_ >= 0, "{}: written after commit", temp_);
  if (size == 0) return;
  const char* bytes = static_cast<const char*>(data);
  if (buffer_.size() + size > kBuffer) flush();
  if (size >= kBuffer) return write_through(bytes, size);
  buffer_.append(bytes, size);
}

void AtomicFile::write_through(const char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd_, data + done, size - done);  // short on a signal or a full disk
    if (n < 0 && errno == EINTR) continue;
    TESSEL_CHECK(n > 0, "{}: write failed ({})", temp_,
                 n < 0 ? std::strerror(errno) : "the system wrote nothing");
    done += static_cast<size_t>(n);
  }
}

void AtomicFile::flush() {
  write_through(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFile::commit() {
  TESSEL_CHECK(fd_ >= 0, "{}: committed twice", path_);
  flush();
  if (durability_ == Durability::kDurable)
    TESSEL_CHECK(fsync_past_signals(fd_) == 0, "{}: fsync failed ({})", temp_, std::strerror(errno));
  // NFS reports a full disk at close. Never closed twice, not even on EINTR: Linux has released
  // the descriptor either way, and a second close could close another thread's new file.
  const int closed = ::close(fd_);
  fd_ = -1;
  TESSEL_CHECK(closed == 0, "{}: write failed at close ({})", temp_, std::strerror(errno));
  TESSEL_CHECK(::rename(temp_.c_str(), path_.c_str()) == 0, "{}: cannot rename {} over it ({})",
               path_, temp_, std::strerror(errno));
  committed_ = true;
  if (durability_ == Durability::kDurable) sync_folder(path_);
}

void write_file_atomically(const std::string& path, std::string_view bytes, Durability durability) {
  AtomicFile file(path, durability);
  file.write(bytes);
  file.commit();
}

}  // namespace tessel
