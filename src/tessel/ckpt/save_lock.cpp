#include "tessel/ckpt/save_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <regex>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "tessel/core/error.h"

namespace tessel {

namespace {

namespace fs = std::filesystem;

std::string read_all(int fd) {
  std::string text;
  char buffer[512];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, at);
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
    at += n;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

std::string this_run() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("pid {} on host {} since {:%Y-%m-%d %H:%M:%S} UTC", ::getpid(), host,
                     fmt::gmtime(std::chrono::system_clock::to_time_t(std::chrono::system_clock::now())));
}

constexpr const char* kLockName = ".tessel-save.lock";

// What writes cut short leave: the temporary files a write renames when complete (AtomicFile's
// NAME.tmp.HOST.PID.N: rank_00000.safetensors.tmp.h.12.0, config.json.tmp.h.12.3; the .tmp123
// and fixed ".tmp" names of older runs' saves) and the probes of require_writable_dir. Only the
// lock's holder writes the folder, so none of them belongs to a write in flight.
int remove_leftovers(const fs::path& dir) {
  static const std::regex leftover(
      R"(.+\.tmp\..+\.[0-9]+\.[0-9]+|)"
      R"((rank_[0-9]+\.safetensors|metadata\.json|latest_checkpointed_iteration\.txt)\.tmp[0-9]*|)"
      R"(\.tessel-write-probe-.*)");
  int removed = 0;
  std::error_code error;
  for (fs::recursive_directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (it.depth() >= 1) it.disable_recursion_pending();  // DIR and DIR/iter_*
    if (!it->is_regular_file(error)) continue;
    if (!std::regex_match(it->path().filename().string(), leftover)) continue;
    if (fs::remove(it->path(), error)) ++removed;  // a link's name, never what it points to
  }
  return removed;
}

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

}  // namespace

SaveLock::SaveLock(const std::string& dir, const std::string& flag)
    : dir_(dir), flag_(flag), path_(dir + "/" + kLockName) {
  dir_fd_ = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  TESSEL_CHECK(dir_fd_ >= 0, "{} {}: cannot open the folder ({})", flag, dir, std::strerror(errno));
  const auto refuse = [&](const std::string& why) {
    if (fd_ >= 0) ::close(fd_);
    ::close(dir_fd_);
    fail("{} {}: {}", flag, dir, why);
  };
  // O_NOFOLLOW: a lock file that is a link (planted, or in a folder received from someone else)
  // is refused, not written through; O_NONBLOCK: a FIFO there cannot hang the open.
  fd_ = ::openat(dir_fd_, kLockName, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd_ < 0 && errno == ELOOP)
    refuse(fmt::format("the lock file {} is a symbolic link: tessel writes no file through a link it did "
                       "not make; remove the link and start again", path_));
  if (fd_ < 0) refuse(fmt::format("cannot create the lock file {} ({})", path_, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)
    refuse(fmt::format("the lock file {} is not a plain file of this folder alone ({}): tessel rewrites it; "
                       "remove it and start again",
                       path_, S_ISREG(st.st_mode) ? fmt::format("{} hard links", st.st_nlink) : "not a regular file"));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = read_all(fd_);
    if (error == EWOULDBLOCK)
      refuse(fmt::format("another run is writing this folder ({}; it holds {}): give this run its own "
                         "{} folder, or stop the other first",
                         holder.empty() ? "which has not named itself yet" : holder, path_, flag));
    refuse(fmt::format("cannot lock {} ({}): tessel needs a file system with flock(2) to keep a second run "
                       "out of the folder", path_, std::strerror(error)));
  }
  stale_holder_ = read_all(fd_);
  const std::string mine = this_run() + "\n";
  const bool named = ::ftruncate(fd_, 0) == 0 &&
                     ::pwrite(fd_, mine.data(), mine.size(), 0) == static_cast<ssize_t>(mine.size());
  if (!named) refuse(fmt::format("cannot write the lock file {} ({})", path_, std::strerror(errno)));
  removed_leftovers_ = remove_leftovers(dir);
}

SaveLock::~SaveLock() {
  // Emptied first: a lock file that names no one was released, not left by a killed run.
  [[maybe_unused]] const int emptied = ::ftruncate(fd_, 0);
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
  ::close(dir_fd_);
}

void SaveLock::check() const {
  struct stat held {}, now {}, lock_held {}, lock_now {};
  const bool same_folder = ::fstat(dir_fd_, &held) == 0 && ::stat(dir_.c_str(), &now) == 0 && same_file(held, now);
  TESSEL_CHECK(same_folder,
               "{} {}: the folder was deleted or replaced while this run held its lock: stopped rather than "
               "making it again, where no lock would keep a second run out", flag_, dir_);
  const bool same_lock = ::fstat(fd_, &lock_held) == 0 &&
                         ::fstatat(dir_fd_, kLockName, &lock_now, AT_SYMLINK_NOFOLLOW) == 0 &&
                         same_file(lock_held, lock_now);
  TESSEL_CHECK(same_lock,
               "{} {}: the lock file {} was deleted or replaced while this run held it: another run may be "
               "writing the folder; stopped", flag_, dir_, path_);
}

}  // namespace tessel
