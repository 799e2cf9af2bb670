#include "tessel/core/device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "tessel/core/error.h"

namespace tessel {

namespace {

// The machine's memory, in bytes (0 when unknown).
double physical_memory() {
  static const double bytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  return bytes > 0 ? bytes : 0;
}

void* host_alloc(int64_t bytes) {
  // A request past the machine's memory is granted (overcommit) and fails page by page while it
  // is zeroed: minutes, then a bare "out of memory" or the OOM killer. Refused at once instead.
  const double memory = physical_memory();
  if (bytes < 0 || (memory > 0 && static_cast<double>(bytes) > memory))
    fail("cannot allocate {:.1f} GiB at once: more than this machine's memory of {:.1f} GiB",
         static_cast<double>(bytes) / (1 << 30), memory / (1 << 30));
  size_t size = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  if (size == 0) size = 64;
  void* p = std::aligned_alloc(64, size);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, size);
  return p;
}

void host_release(void* p) { std::free(p); }

size_t whole_pages(int64_t bytes) {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGE_SIZE));
  return (std::max<size_t>(static_cast<size_t>(bytes), 1) + page - 1) / page * page;
}

// An anonymous mapping: zeros, each page taken from the system when first written.
void* host_reserve(int64_t bytes) {
  const double memory = physical_memory();
  if (bytes < 0 || (memory > 0 && static_cast<double>(bytes) > memory))
    fail("cannot reserve {:.1f} GiB: more than this machine's memory of {:.1f} GiB",
         static_cast<double>(bytes) / (1 << 30), memory / (1 << 30));
  void* p = ::mmap(nullptr, whole_pages(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

void host_unreserve(void* p, int64_t bytes) {
  if (p != nullptr) ::munmap(p, whole_pages(bytes));
}

void host_copy(void* dst, const void* src, int64_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

void host_zero(void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
}

// Whole pages are handed back (a private anonymous page reads as zeros once touched again); the
// partial pages at either end are zeroed.
void host_discard(void* dst, int64_t bytes) {
  if (bytes <= 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGE_SIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(dst), end = begin + static_cast<uintptr_t>(bytes);
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (first >= last || ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) {
    std::memset(dst, 0, static_cast<size_t>(bytes));
    return;
  }
  std::memset(dst, 0, first - begin);
  std::memset(reinterpret_cast<void*>(last), 0, end - last);
}

}  // namespace

const char* device_name(Device device) { return device == Device::CPU ? "cpu" : "cuda"; }

int64_t dtype_size(DType dtype) { return dtype == DType::F32 || dtype == DType::I32 ? 4 : 0; }

const char* dtype_name(DType dtype) { return dtype == DType::F32 ? "f32" : "i32"; }

const DeviceMemory& host_memory() {
  static const DeviceMemory memory{.device = Device::CPU,
                                   .alloc = host_alloc,
                                   .release = host_release,
                                   .reserve = host_reserve,
                                   .unreserve = host_unreserve,
                                   .copy = host_copy,
                                   .zero = host_zero,
                                   .discard = host_discard,
                                   .to_host = host_copy,
                                   .from_host = host_copy};
  return memory;
}

}  // namespace tessel
