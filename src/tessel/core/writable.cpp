#include "tessel/core/writable.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/ranges.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <utility>

#include "tessel/core/error.h"
#include "tessel/core/path_clashes.h"

namespace tessel {

namespace {

namespace fs = std::filesystem;

std::string host_name() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return host;
}

// The folder that holds `path` ("." for a bare name) and the name in it ("" for a path that ends
// in a folder: "out/", "..").
std::pair<std::string, std::string> folder_and_name(const std::string& path) {
  const fs::path p(path);
  const std::string dir = p.parent_path().string(), name = p.filename().string();
  return {dir.empty() ? std::string(".") : dir, name == "." || name == ".." ? std::string() : name};
}

// A folder held to create, rename and remove names in (O_PATH: a folder this user may write but
// not list will do), whatever its path names later.
int open_folder(const std::string& dir) { return ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC); }

int fsync_past_signals(int fd) {
  int synced;
  do synced = ::fsync(fd);
  while (synced != 0 && errno == EINTR);
  return synced;
}

// Writes, flushes and removes a small probe file in the folder `dir`: the system's reason when
// that fails, "" otherwise. The probe is created exclusively and never through a link; one a
// killed run of the same pid left (pids repeat in containers) is removed first: unlink never
// follows a link.
std::string probe_folder(const std::string& dir, int tag) {
  const int dir_fd = open_folder(dir);
  if (dir_fd < 0) return std::strerror(errno);
  const std::string probe = fmt::format(".tessel-write-probe-{}-{}", ::getpid(), tag);
  ::unlinkat(dir_fd, probe.c_str(), 0);
  const int fd = ::openat(dir_fd, probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  const int open_error = errno;
  const bool written = fd >= 0 && ::write(fd, "t", 1) == 1 && ::fsync(fd) == 0;
  const int write_error = fd < 0 ? open_error : errno;
  if (fd >= 0) ::close(fd);
  ::unlinkat(dir_fd, probe.c_str(), 0);
  ::close(dir_fd);
  return written ? std::string() : std::strerror(write_error);
}

}  // namespace

void require_writable_dir(const std::string& flag, const std::string& dir, int tag) {
  std::error_code error;
  fs::create_directories(dir, error);
  TESSEL_CHECK(!error, "{} {}: cannot create the folder ({})", flag, dir, error.message());
  TESSEL_CHECK(fs::is_directory(dir), "{} {}: not a folder", flag, dir);
  const std::string why = probe_folder(dir, tag);
  TESSEL_CHECK(why.empty(), "{} {}: cannot write into the folder ({})", flag, dir, why);
}

void require_writable_file(const std::string& flag, const std::string& path, int tag) {
  const auto [dir, name] = folder_and_name(path);
  TESSEL_CHECK(!name.empty(), "{} {}: names a folder: give the file to write", flag, path);
  const std::string why = probe_folder(dir, tag);
  TESSEL_CHECK(why.empty(), "{} {}: cannot write into its folder {} ({})", flag, path, dir, why);
  struct stat file {};
  if (::lstat(path.c_str(), &file) != 0) return;  // made new
  TESSEL_CHECK(!S_ISDIR(file.st_mode), "{} {}: a folder, not a file: give the file to write", flag, path);
  // In a sticky folder (/tmp) rename(2) replaces no other user's file (EPERM) unless this user
  // owns the folder or is root.
  struct stat folder {};
  const uid_t me = ::geteuid();
  const bool replaceable = ::stat(dir.c_str(), &folder) == 0 &&
                           (!(folder.st_mode & S_ISVTX) || me == 0 || file.st_uid == me || folder.st_uid == me);
  TESSEL_CHECK(replaceable,
               "{} {}: the file belongs to another user (uid {}) in a sticky folder, where this user "
               "cannot replace it: remove it, or write elsewhere", flag, path, file.st_uid);
}

void require_apart_from_sources(const std::string& flag, const std::string& dir,
                                const std::vector<std::pair<std::string, std::string>>& sources) {
  CommandPaths paths{.output_folders = {{flag, dir}}};
  for (const auto& [source_flag, source] : sources) paths.inputs.push_back({source_flag, source});
  const std::vector<std::string> clashes = path_clashes(paths);
  TESSEL_CHECK(clashes.empty(), "{}", fmt::join(clashes, "; "));
}

AtomicFile::AtomicFile(std::string path, Durability durability)
    : path_(std::move(path)), durability_(durability) {
  // PATH.tmp.HOST.PID.N: the host and pid name the writer (ranks of several nodes share a file
  // system), N this process's files (threads, or one path written twice, never meet).
  static std::atomic<uint64_t> count{0};
  const std::string suffix = fmt::format(".tmp.{}.{}.{}", host_name(), ::getpid(), count++);
  const auto [dir, name] = folder_and_name(path_);
  name_ = name;
  temp_ = path_ + suffix;
  temp_name_ = name_ + suffix;
  TESSEL_CHECK(!name_.empty(), "{}: names a folder, not a file to write", path_);
  dir_fd_ = open_folder(dir);
  // O_EXCL: never a file another writer has open; O_NOFOLLOW with it: never through a link
  // planted at the name. 0666 less the umask, as fopen and ofstream create files.
  if (dir_fd_ >= 0)
    fd_ = ::openat(dir_fd_, temp_name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd_ >= 0) return;
  const int error = errno;
  if (dir_fd_ >= 0) ::close(dir_fd_);
  fail("{}: cannot create its temporary file {} ({})", path_, temp_name_, std::strerror(error));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (dir_fd_ < 0) return;
  if (!committed_) ::unlinkat(dir_fd_, temp_name_.c_str(), 0);
  ::close(dir_fd_);
}

void AtomicFile::write(const void* data, size_t size) {
  // About a thousand kernel calls a GiB however small the writes (one document's tokens each).
  constexpr size_t kBuffer = size_t{1} << 20;
  TESSEL_CHECK(fd_ >= 0, "{}: written after commit", path_);
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
    // The file a user named, not the temporary: it is left as it was, the temporary removed.
    TESSEL_CHECK(n > 0, "{}: write failed ({})", path_,
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
    TESSEL_CHECK(fsync_past_signals(fd_) == 0, "{}: fsync failed ({})", path_, std::strerror(errno));
  // NFS reports a full disk at close. Never closed twice, not even on EINTR: Linux has released
  // the descriptor either way, and a second close could close another thread's new file.
  const int closed = ::close(fd_);
  fd_ = -1;
  TESSEL_CHECK(closed == 0, "{}: write failed at close ({})", path_, std::strerror(errno));
  TESSEL_CHECK(::renameat(dir_fd_, temp_name_.c_str(), dir_fd_, name_.c_str()) == 0,
               "{}: cannot rename {} over it ({})", path_, temp_, std::strerror(errno));
  committed_ = true;
  if (durability_ != Durability::kDurable) return;
  // The rename is on disk only once the folder that holds the name is. Some file systems (FUSE
  // mounts, some network ones) cannot sync a folder: EINVAL says so, and there is nothing more
  // this writer can do to make the name durable there.
  const int folder = ::openat(dir_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TESSEL_CHECK(folder >= 0, "{}: cannot open its folder to sync it ({})", path_, std::strerror(errno));
  const int synced = fsync_past_signals(folder);
  const int error = errno;
  ::close(folder);
  TESSEL_CHECK(synced == 0 || error == EINVAL, "{}: cannot sync its folder ({})", path_, std::strerror(error));
}

void write_file_atomically(const std::string& path, std::string_view bytes, Durability durability) {
  AtomicFile file(path, durability);
  file.write(bytes);
  file.commit();
}

std::FILE* open_growing_file(const std::string& path, std::string_view initial) {
  // One writer: the process growing the file holds a lock on it; a second one would replace it
  // under the first, whose records would then go to a file without a name.
  const int current = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (current >= 0) {
    const bool held = ::flock(current, LOCK_SH | LOCK_NB) != 0;
    ::close(current);
    TESSEL_CHECK(!held, "{}: another process is writing it: give this one its own file", path);
  }
  write_file_atomically(path, initial, Durability::kReplaceable);
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  TESSEL_CHECK(fd >= 0, "{}: cannot open to append to ({})", path, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    fail("{}: another process is writing it: give this one its own file", path);
  }
  std::FILE* file = ::fdopen(fd, "a");
  if (file != nullptr) return file;
  const int error = errno;
  ::close(fd);
  fail("{}: cannot open to append to ({})", path, std::strerror(error));
}

}  // namespace tessel
