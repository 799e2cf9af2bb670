// How an FP8 recipe scales each GEMM operand, as Transformer Engine's recipes define it (Megatron's
// --fp8-recipe, --fp8-format). An operand x is quantised as fp8(x · s) on its grid (kernels/fp8.h)
// and read back as fp8 · d, d = 1/s — the "scale" and "scale_inv" of TE — with one s per block:
//
//   tensorwise (Float8CurrentScaling): one block, the whole tensor; s = largest / amax in fp32.
//   delayed    (DelayedScaling): one block; s given, from the tensor's amax history
//              (kernels/fp8_history.h), not from the tensor itself.
//   blockwise  (Float8BlockScaling): activations and gradients in 1×128 blocks along the GEMM's
//              contraction dimension, weights in 128×128 tiles; s = largest / amax rounded down to
//              a power of two (TE's default: scales constrained to powers of 2).
//   mxfp8      (MXFP8BlockScaling): every operand in 1×32 blocks along the contraction dimension;
//              d = the E8M0 power of two at or above amax / largest (TE's float_to_e8m0 rounds up).
//
// A block's amax of 0 or not finite gives s = 1 (an all-zero block stays zero; a non-finite one
// saturates, or stays NaN). --fp8-format e4m3 uses E4M3 everywhere; hybrid uses E5M2 for the
// gradients (the backward's dout) and E4M3 for activations and weights.
#pragma once

#include <cstdint>
#include <cstring>

#include "tessel/core/host_device.h"
#include "tessel/kernels/fp8.h"

namespace tessel {

enum class Fp8Scaling : uint8_t { Delayed, Tensorwise, Blockwise, Mxfp8 };

// What a GEMM operand of a linear layer is: its recipe treats each differently.
enum class Fp8Operand : uint8_t { Activation, Weight, Gradient };

// The run's recipe: its scaling and the format of each kind of operand.
struct Fp8Recipe {
  Fp8Scaling scaling = Fp8Scaling::Delayed;
  bool hybrid = false;  // --fp8-format hybrid: E5M2 gradients

  Fp8Format format(Fp8Operand operand) const {
    return hybrid && operand == Fp8Operand::Gradient ? Fp8Format::E5M2 : Fp8Format::E4M3;
  }
};

// How a block's amax sets its scale.
enum class Fp8ScaleRule : uint8_t { Given, Fp32, PowerOfTwo, E8m0 };

// The quantisation of one stored (rows, cols) operand: blocks of block_rows × block_cols (a block
// at the matrix's edge is cut short), each scaled by `rule` from its own amax, or all by `scale`
// with Given.
struct Fp8Quantisation {
  Fp8Format format = Fp8Format::E4M3;
  Fp8ScaleRule rule = Fp8ScaleRule::Fp32;
  int64_t block_rows = 0, block_cols = 0;  // 0: the matrix's whole extent
  float scale = 1.0f;                      // with Given: s
};

// The blocks of the block recipes: 1×128 (and 128×128 for weights), MXFP8's 1×32.
constexpr int64_t kFp8Block = 128;
constexpr int64_t kMxfp8Block = 32;

// The quantisation `recipe` gives an operand stored (rows, cols) whose GEMM contracts along its
// columns (contracts_along_cols) or along its rows. Delayed's scale is the caller's to set.
inline Fp8Quantisation fp8_operand_quantisation(const Fp8Recipe& recipe, Fp8Operand operand,
                                                bool contracts_along_cols) {
  Fp8Quantisation q;
  q.format = recipe.format(operand);
  // A one-dimensional block of `length` along the contraction.
  const auto along_contraction = [&](int64_t length) {
    q.block_rows = contracts_along_cols ? 1 : length;
    q.block_cols = contracts_along_cols ? length : 1;
  };
  switch (recipe.scaling) {
    case Fp8Scaling::Delayed:
      q.rule = Fp8ScaleRule::Given;
      break;
    case Fp8Scaling::Tensorwise:
      q.rule = Fp8ScaleRule::Fp32;
      break;
    case Fp8Scaling::Blockwise:
      q.rule = Fp8ScaleRule::PowerOfTwo;
      if (operand == Fp8Operand::Weight) {
        q.block_rows = q.block_cols = kFp8Block;
      } else {
        along_contraction(kFp8Block);
      }
      break;
    case Fp8Scaling::Mxfp8:
      q.rule = Fp8ScaleRule::E8m0;
      along_contraction(kMxfp8Block);
      break;
  }
  return q;
}

// s for a block of amax `amax` under `rule` (not Given).
TESSEL_HOST_DEVICE inline float fp8_scale_from_amax(Fp8ScaleRule rule, Fp8Format format, float amax) {
  if (!(amax > 0.0f) || amax > 3.4028234663852886e38f) return 1.0f;  // 0, NaN or inf
  const float largest = fp8_largest(format);
  if (rule == Fp8ScaleRule::E8m0) return 1.0f / e8m0_value(e8m0_bits_at_least(amax / largest));
  float s = largest / amax;
  if (s > 3.4028234663852886e38f) s = 3.4028234663852886e38f;  // a tiny amax: the largest float
  if (rule == Fp8ScaleRule::PowerOfTwo) {
    uint32_t u;
    std::memcpy(&u, &s, sizeof(u));
    u &= 0xff800000u;  // the mantissa zeroed: s rounded down to a power of two
    std::memcpy(&s, &u, sizeof(s));
  }
  return s;
}

// x quantised with scale s and read back: fp8(x · s) · (1/s).
TESSEL_HOST_DEVICE inline float fp8_fake_quantise(Fp8Format format, float x, float s) {
  return fp8_value(format, fp8_bits(format, x * s)) * (1.0f / s);
}

}  // namespace tessel
