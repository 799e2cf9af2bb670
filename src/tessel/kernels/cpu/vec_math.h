// Small helpers shared by the CPU kernels.
#pragma once

#include <bit>
#include <cstdint>

namespace tessel::cpu {

// Work (elements touched) below which a kernel runs on one thread: waking the OpenMP team
// costs microseconds, and far more when the cores are busy with other processes.
inline bool worth_parallel(int64_t work) { return work >= (int64_t{1} << 15); }

// exp(x) in plain arithmetic so that loops over it vectorise (glibc's expf stays a scalar call
// without -ffast-math): x = n·ln2 + r with |r| ≤ ln2/2, exp(r) by its degree-7 Taylor series
// (remainder < 1e-8), 2^n assembled in the exponent bits; relative error ~1e-7. Inputs are
// clamped to [-88, 88]; below about -87 (-inf included: masked attention scores) the result is
// exactly 0. NaN stays NaN, so bad values are not hidden.
inline float exp_approx(float x) {
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693359375f;  // ln 2 split so that n·kLn2Hi is exact in float
  const float kLn2Lo = -2.12194440e-4f;
  const float kRoundMagic = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  x = x < -88.0f ? -88.0f : x;            // comparisons keep NaN
  x = x > 88.0f ? 88.0f : x;
  const float shifted = x * kLog2e + kRoundMagic;
  const float n = shifted - kRoundMagic;
  int32_t exponent = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRoundMagic) + 127;
  exponent = exponent > 0 ? exponent : 0;
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>(exponent << 23);
}

inline float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

}  // namespace tessel::cpu
