// FP8's grids, as the OCP 8-bit floating point specification (OFP8) defines them, and MXFP8's
// E8M0 scales (OCP Microscaling formats). Under --fp8-format every GEMM operand of a linear layer
// is divided by its scale, rounded to one of these grids and multiplied back (train/fp8_recipe.h
// says which scale and grid each operand takes); products of two FP8 values are exact in fp32, so
// an fp32 GEMM over such operands is what an FP8 tensor-core GEMM computes, up to the order of the
// sums. Used by the CPU reference and the CUDA kernels alike.
//
//   E4M3: bias 7, largest finite 448, subnormals of step 2^-9, no infinity; S.1111.111 is NaN.
//   E5M2: bias 15, largest finite 57344, subnormals of step 2^-16; S.11111.00 is ±inf, S.11111.xx
//         (xx ≠ 0) NaN — IEEE binary16's upper byte.
// Rounding is to nearest, ties to even, and saturating as the GPU's conversion with
// __NV_SATFINITE and Transformer Engine's casts are: a magnitude past the largest finite, ±inf
// included, becomes the largest finite of its sign. NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>

#include "tessel/core/host_device.h"

namespace tessel {

enum class Fp8Format : uint8_t { E4M3, E5M2 };

struct Fp8Grid {
  uint32_t mantissa_bits;
  uint32_t bias;
  float largest;      // the largest finite magnitude
  uint8_t nan;        // the positive NaN this code writes
  uint8_t largest_code;
};

TESSEL_HOST_DEVICE inline Fp8Grid fp8_grid(Fp8Format format) {
  return format == Fp8Format::E4M3 ? Fp8Grid{3, 7, 448.0f, 0x7f, 0x7e}
                                   : Fp8Grid{2, 15, 57344.0f, 0x7e, 0x7b};
}

TESSEL_HOST_DEVICE inline float fp8_largest(Fp8Format format) { return fp8_grid(format).largest; }

// The code of x rounded to `format`'s grid.
TESSEL_HOST_DEVICE inline uint8_t fp8_bits(Fp8Format format, float x) {
  const Fp8Grid g = fp8_grid(format);
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | g.nan);
  uint32_t largest;
  std::memcpy(&largest, &g.largest, sizeof(largest));
  if (a >= largest) return static_cast<uint8_t>(sign | g.largest_code);  // saturates, inf included
  const uint32_t smallest_normal = (128u - g.bias) << 23;  // 2^(1-bias) as float bits
  if (a < smallest_normal) {
    // A subnormal of step 2^(1-bias-mantissa_bits), or zero: the float's significand shifted
    // down to that step, rounded to nearest even. A count of 2^mantissa_bits is the smallest
    // normal, whose code it is.
    const uint32_t exponent = a >> 23;
    const uint32_t shift = 151u - g.bias - g.mantissa_bits - exponent;  // bits below the step
    if (exponent == 0 || shift > 24u) return sign;  // below half a step: zero
    const uint32_t significand = (a & 0x7fffffu) | 0x800000u;
    uint32_t q = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (q & 1u) != 0)) ++q;
    return static_cast<uint8_t>(sign | q);
  }
  const uint32_t dropped = 23u - g.mantissa_bits;
  uint32_t r = a + ((1u << (dropped - 1u)) - 1u) + ((a >> dropped) & 1u);  // ties to even
  r -= (127u - g.bias) << 23;  // rebias; a carry out of the mantissa has raised the exponent
  return static_cast<uint8_t>(sign | (r >> dropped));
}

// The value of an FP8 code; NaN for the NaN codes.
TESSEL_HOST_DEVICE inline float fp8_value(Fp8Format format, uint8_t bits) {
  const Fp8Grid g = fp8_grid(format);
  const uint32_t sign = static_cast<uint32_t>(bits & 0x80u) << 24;
  const uint32_t exponent = (bits & 0x7fu) >> g.mantissa_bits;
  const uint32_t mantissa = bits & ((1u << g.mantissa_bits) - 1u);
  const uint32_t top_exponent = (1u << (7u - g.mantissa_bits)) - 1u;
  uint32_t u;
  if (format == Fp8Format::E4M3 && (bits & 0x7fu) == 0x7fu) {
    u = 0x7fc00000u;
  } else if (format == Fp8Format::E5M2 && exponent == top_exponent) {
    u = sign | 0x7f800000u | (mantissa << 21);
  } else if (exponent == 0) {  // zero or a subnormal: mantissa · 2^(1-bias-mantissa_bits)
    u = sign;
    if (mantissa != 0) {
      const uint32_t step_bits = (128u - g.bias - g.mantissa_bits) << 23;
      float step;
      std::memcpy(&step, &step_bits, sizeof(step));
      const float magnitude = static_cast<float>(mantissa) * step;
      return sign != 0 ? -magnitude : magnitude;
    }
  } else {
    u = sign | ((exponent + 127u - g.bias) << 23) | (mantissa << (23u - g.mantissa_bits));
  }
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

TESSEL_HOST_DEVICE inline float round_to_fp8(Fp8Format format, float x) {
  return fp8_value(format, fp8_bits(format, x));
}

// E8M0: an unsigned power of two 2^(bits-127), 0xff NaN — MXFP8's per-block scale.
TESSEL_HOST_DEVICE inline float e8m0_value(uint8_t bits) {
  const uint32_t u = bits == 0xffu ? 0x7fc00000u
                     : bits == 0 ? 0x00400000u : static_cast<uint32_t>(bits) << 23;  // 2^-127: a float subnormal
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// The E8M0 code of the smallest power of two at or above x > 0 (Transformer Engine's
// float_to_e8m0: the exponent, rounded up when the mantissa is not zero), so that a block whose
// amax over the grid's largest is x stays within the grid; 2^127 and NaN cap it.
TESSEL_HOST_DEVICE inline uint8_t e8m0_bits_at_least(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0xffu;
  if ((u & 0x80000000u) != 0 || u == 0) return 0;
  if (u >= 0x7f000000u) return 0xfeu;  // 2^127 and above, inf included: the largest scale
  uint32_t exponent = u >> 23;
  const uint32_t mantissa = u & 0x7fffffu;
  // A float subnormal below 2^-127 rounds up to it; one above, to 2^-126.
  if (exponent == 0) return mantissa > 0x400000u ? 1u : 0u;
  if (mantissa != 0) ++exponent;
  return static_cast<uint8_t>(exponent);
}

}  // namespace tessel
