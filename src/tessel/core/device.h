// Where memory lives and how it is reached. A backend's kernel table (kernels/kernels.h) carries
// one DeviceMemory; tensors and the parameter buffers are allocated through it, and every place
// that must read values on the host (token ids, MoE dispatch counts, loss scalars, checkpoint and
// Hugging Face I/O) goes through its to_host, the one path from a device to the host.
#pragma once

#include <cstdint>

namespace tessel {

enum class Device : uint8_t { CPU, CUDA };
const char* device_name(Device device);  // "cpu", "cuda"

// Element types: F32 for weights, activations and gradients; I32 for token ids, positions and
// routing indices. (bf16 joins for compute under --bf16.)
enum class DType : uint8_t { F32, I32 };
int64_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "i32"

struct DeviceMemory {
  Device device = Device::CPU;
  // Zero-filled, 64-byte aligned; throws std::bad_alloc, or tessel::Error for more than the
  // machine's memory at once. release(nullptr) does nothing.
  void* (*alloc)(int64_t bytes) = nullptr;
  void (*release)(void* p) = nullptr;
  // Zero-filled as alloc's, for a large buffer of which parts may stay unused: on the host its
  // pages are taken only when first written (the parameter registry's flat buffers, whose slices
  // of other ranks fully sharded data parallelism never keeps). unreserve takes the same size.
  void* (*reserve)(int64_t bytes) = nullptr;
  void (*unreserve)(void* p, int64_t bytes) = nullptr;
  // Within the device; the ranges may not overlap.
  void (*copy)(void* dst, const void* src, int64_t bytes) = nullptr;
  void (*zero)(void* dst, int64_t bytes) = nullptr;
  // The contents are no longer needed: the range reads as zeros afterwards, and on the host the
  // whole pages inside it go back to the system until written again (fully sharded data
  // parallelism's freed units). On a GPU it zeroes and keeps the memory.
  void (*discard)(void* dst, int64_t bytes) = nullptr;
  // Host ↔ device. On the CPU both are copies (nothing when dst == src).
  void (*to_host)(void* host_dst, const void* src, int64_t bytes) = nullptr;
  void (*from_host)(void* dst, const void* host_src, int64_t bytes) = nullptr;
};

// The host's memory (malloc-family), which is also the CPU backend's.
const DeviceMemory& host_memory();

}  // namespace tessel
