#include "tessel/ckpt/save_lock.h"

#include <fcntl.h>
#include <sys/file.h>
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

// What saves cut short leave: the temporary files a write renames when complete (AtomicFile's
// rank_00000.safetensors.tmp.HOST.PID.N, metadata.json.tmp.HOST.PID.N,
// latest_checkpointed_iteration.txt.tmp.HOST.PID.N, the .tmp123 and fixed ".tmp" names of older
// runs) and the probes of require_writable_dir. Only the lock's holder writes the folder, so none
// of them belongs to a write in flight.
int remove_leftovers(const fs::path& dir) {
  static const std::regex leftover(
      R"(((rank_[0-9]+\.safetensors|metadata\.json|latest_checkpointed_iteration\.txt))"
      R"(\.tmp([0-9]*|\..+\.[0-9]+\.[0-9]+))|)"
      R"((\.tessel-write-probe-.*))");
  int removed = 0;
  std::error_code error;
  for (fs::recursive_directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (it.depth() >= 1) it.disable_recursion_pending();  // DIR and DIR/iter_*
    if (!it->is_regular_file(error)) continue;
    if (!std::regex_match(it->path().filename().string(), leftover)) continue;
    if (fs::remove(it->path(), error)) ++removed;
  }
  return removed;
}

}  // namespace

SaveLock::SaveLock(const std::string& dir) : path_(dir + "/.tessel-save.lock") {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TESSEL_CHECK(fd_ >= 0, "--save {}: cannot create the lock file {} ({})", dir, path_,
               std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = read_all(fd_);
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK)
      fail("--save {}: another run is writing this folder ({}; it holds {}): give this run its own "
           "--save folder, or stop the other first",
           dir, holder.empty() ? "which has not named itself yet" : holder, path_);
    fail("--save {}: cannot lock {} ({}): tessel needs a file system with flock(2) to keep a "
         "second run out of the folder", dir, path_, std::strerror(error));
  }
  stale_holder_ = read_all(fd_);
  const std::string mine = this_run() + "\n";
  const bool named = ::ftruncate(fd_, 0) == 0 &&
                     ::pwrite(fd_, mine.data(), mine.size(), 0) == static_cast<ssize_t>(mine.size());
  const int error = errno;
  if (!named) {
    ::close(fd_);
    fail("--save {}: cannot write the lock file {} ({})", dir, path_, std::strerror(error));
  }
  removed_leftovers_ = remove_leftovers(dir);
}

SaveLock::~SaveLock() {
  if (fd_ < 0) return;
  // Emptied first: a lock file that names no one was released, not left by a killed run.
  [[maybe_unused]] const int emptied = ::ftruncate(fd_, 0);
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

}  // namespace tessel
