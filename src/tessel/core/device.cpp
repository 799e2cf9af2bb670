#include "tessel/core/device.h"

#include <unistd.h>

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

void host_copy(void* dst, const void* src, int64_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

void host_zero(void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
}

}  // namespace

const char* device_name(Device device) { return device == Device::CPU ? "cpu" : "cuda"; }

int64_t dtype_size(DType dtype) { return dtype == DType::F32 || dtype == DType::I32 ? 4 : 0; }

const char* dtype_name(DType dtype) { return dtype == DType::F32 ? "f32" : "i32"; }

const DeviceMemory& host_memory() {
  static const DeviceMemory memory{.device = Device::CPU,
                                   .alloc = host_alloc,
                                   .release = host_release,
                                   .copy = host_copy,
                                   .zero = host_zero,
                                   .to_host = host_copy,
                                   .from_host = host_copy};
  return memory;
}

}  // namespace tessel
