// bf16 mixed precision's one rounding: a float to the nearest bfloat16 (round to nearest, ties to
// even — what the GPU's conversion does), kept as the float of equal value. Under --bf16 every
// GEMM rounds its two operands so; products of two bf16 values are exact in fp32, so a GEMM over
// rounded operands with fp32 accumulation is what a bf16 tensor-core GEMM computes, up to the
// order of the sums. Everything else (norms' statistics, softmax, loss, gradients, the optimizer)
// stays fp32. Used by the CPU reference and the CUDA kernels alike.
#pragma once

#include <cstdint>
#include <cstring>

#include "tessel/core/host_device.h"

namespace tessel {

// The upper 16 bits of the rounded float: its bfloat16 encoding. NaN stays a
// (quiet) NaN.
TESSEL_HOST_DEVICE inline uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);  // ties go to the even upper half
  return static_cast<uint16_t>(u >> 16);
}

TESSEL_HOST_DEVICE inline float bf16_value(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

TESSEL_HOST_DEVICE inline float round_to_bf16(float x) { return bf16_value(bf16_bits(x)); }

}  // namespace tessel
