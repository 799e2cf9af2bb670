#include "tessel/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

#include "tessel/core/error.h"

namespace tessel {

namespace {

// The mapped files, for the SIGBUS handler to name the one a fault is in: fixed slots, filled
// under a mutex, read without one in the handler (which may only read lock-free atomics).
struct MappedRange {
  std::atomic<const uint8_t*> begin{nullptr};
  std::atomic<int64_t> size{0};
  char path[512] = {};
};
MappedRange mapped_ranges[64];
std::mutex mapped_ranges_mutex;
struct sigaction previous_sigbus {};
// Where a FileBytes::copy in progress on this thread resumes after a fault. Volatile: the
// compiler must not drop its stores around a memcpy that does not read it (the handler does).
thread_local sigjmp_buf* volatile copy_in_progress = nullptr;

void write_stderr(const char* text) {
  for (size_t left = std::strlen(text); left > 0;) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

void on_sigbus(int, siginfo_t* info, void*) {
  if (copy_in_progress != nullptr) siglongjmp(*copy_in_progress, 1);
  const uint8_t* at = static_cast<const uint8_t*>(info->si_addr);
  for (const MappedRange& r : mapped_ranges) {
    const uint8_t* begin = r.begin.load();
    if (begin == nullptr || at < begin || at >= begin + r.size.load()) continue;
    write_stderr("tessel: error: ");
    write_stderr(r.path);
    write_stderr(": the file shrank under the run (a read past its new end); a data file must "
                 "stay as it is while a run reads it\n");
    ::_exit(1);
  }
  // Not in a mapped data file: the handler before ours (or the default action) takes the fault,
  // which recurs when this returns.
  sigaction(SIGBUS, &previous_sigbus, nullptr);
}

void install_sigbus_handler() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO | SA_NODEFER;  // not blocked after a siglongjmp out of it
    sigaction(SIGBUS, &action, &previous_sigbus);
  });
}

void register_mapping(const uint8_t* begin, int64_t size, const std::string& path) {
  install_sigbus_handler();
  const std::lock_guard<std::mutex> lock(mapped_ranges_mutex);
  for (MappedRange& r : mapped_ranges) {
    if (r.begin.load() != nullptr) continue;
    std::snprintf(r.path, sizeof r.path, "%s", path.c_str());
    r.size = size;
    r.begin = begin;
    return;
  }
}

void unregister_mapping(const uint8_t* begin) {
  const std::lock_guard<std::mutex> lock(mapped_ranges_mutex);
  for (MappedRange& r : mapped_ranges)
    if (r.begin.load() == begin) r.begin = nullptr;
}

}  // namespace

FileBytes FileBytes::map(const std::string& path) {
  FileBytes f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY);
  TESSEL_CHECK(fd >= 0, "{}: cannot open ({})", path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  f.size_ = st.st_size;
  if (f.size_ > 0) {  // mmap of zero bytes fails; an empty file is simply no bytes
    void* p = ::mmap(nullptr, static_cast<size_t>(f.size_), PROT_READ, MAP_PRIVATE, fd, 0);
    const int mmap_errno = errno;
    ::close(fd);
    TESSEL_CHECK(p != MAP_FAILED, "{}: cannot map ({})", path, std::strerror(mmap_errno));
    f.data_ = static_cast<const uint8_t*>(p);
    f.mapped_ = true;
    register_mapping(f.data_, f.size_, path);
  } else {
    ::close(fd);
  }
  return f;
}

FileBytes FileBytes::own(std::string name, std::string bytes) {
  FileBytes f;
  f.path_ = std::move(name);
  f.owned_ = std::move(bytes);
  f.data_ = reinterpret_cast<const uint8_t*>(f.owned_.data());
  f.size_ = static_cast<int64_t>(f.owned_.size());
  return f;
}

FileBytes::~FileBytes() { release(); }

void FileBytes::copy(int64_t offset, int64_t n, void* out) const {
  if (!mapped_) {
    std::memcpy(out, data_ + offset, static_cast<size_t>(n));
    return;
  }
  sigjmp_buf resume;
  sigjmp_buf* const outer = copy_in_progress;
  if (sigsetjmp(resume, 0) != 0) {
    copy_in_progress = outer;
    fail("{}: the file shrank under the run (bytes [{}, {}) of the {} mapped at its start are gone); "
         "a data file must stay as it is while a run reads it",
         path_, offset, offset + n, size_);
  }
  copy_in_progress = &resume;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(out, data_ + offset, static_cast<size_t>(n));
  std::atomic_signal_fence(std::memory_order_seq_cst);
  copy_in_progress = outer;
}

void FileBytes::release() {
  if (mapped_) unregister_mapping(data_);
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
  data_ = nullptr;
  size_ = 0;
  mapped_ = false;
}

FileBytes::FileBytes(FileBytes&& other) noexcept { *this = std::move(other); }

FileBytes& FileBytes::operator=(FileBytes&& other) noexcept {
  if (this == &other) return *this;
  release();
  path_ = std::move(other.path_);
  mapped_ = other.mapped_;
  size_ = other.size_;
  if (mapped_) {
    data_ = other.data_;
  } else {
    owned_ = std::move(other.owned_);
    data_ = reinterpret_cast<const uint8_t*>(owned_.data());
  }
  other.data_ = nullptr;
  other.size_ = 0;
  other.mapped_ = false;
  return *this;
}

}  // namespace tessel
