// fp16 mixed precision's one rounding: a float to the nearest IEEE binary16 (round to nearest,
// ties to even; past the largest finite, 65504, to ±inf; below 2^-14 to the subnormals, kept, not
// flushed: what the GPU's conversion does), kept as the float of equal value. Under --fp16 every
// GEMM rounds its two operands so; products of two fp16 values (11 significant bits each) are
// exact in fp32, so a GEMM over rounded operands with fp32 accumulation is what an fp16
// tensor-core GEMM with fp32 accumulation computes, up to the order of the sums. Unlike bf16,
// fp16's range is narrow: an operand past 65504 (a loss-scaled gradient) becomes inf, which is
// the overflow the loss scaler (optim/loss_scaler.h) detects. Used by the CPU reference and the
// CUDA kernels alike.
#pragma once

#include <cstdint>
#include <cstring>

#include "tessel/core/host_device.h"

namespace tessel {

// The binary16 encoding of x rounded. NaN stays a (quiet) NaN.
TESSEL_HOST_DEVICE inline uint16_t fp16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  // 65520 (0x477ff000) is the tie between 65504 (odd mantissa) and 2^16: it and above are inf.
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < 0x38800000u) {  // below 2^-14: a subnormal of step 2^-24, or zero
    const uint32_t exponent = a >> 23;
    const uint32_t shift = 126u - exponent;  // the significand's bits below 2^-24
    if (exponent == 0 || shift > 24u) return static_cast<uint16_t>(sign);  // below 2^-25: zero
    const uint32_t significand = (a & 0x7fffffu) | 0x800000u;
    uint32_t q = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (q & 1u) != 0)) ++q;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t r = a - 0x38000000u;      // the exponent rebiased from 127 to 15
  r += 0xfffu + ((r >> 13) & 1u);    // ties go to the even upper part; a carry raises the exponent
  return static_cast<uint16_t>(sign | (r >> 13));
}

TESSEL_HOST_DEVICE inline float fp16_value(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  uint32_t u;
  if (exponent == 0x1fu) {
    u = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent == 0) {  // zero or a subnormal: mantissa · 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return sign != 0 ? -magnitude : magnitude;
  } else {
    u = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  }
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

TESSEL_HOST_DEVICE inline float round_to_fp16(float x) { return fp16_value(fp16_bits(x)); }

}  // namespace tessel
