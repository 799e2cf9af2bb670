// Small helpers shared by the CPU kernels.
#pragma once

#include <bit>
#include <cmath>
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

// erf(x) in plain arithmetic, so that loops over it vectorise (glibc's erff stays a scalar call,
// and was 6 % of a small GPT's step with the exact GELU). For |x| < 1, x · p(x²); from 1 on,
// 1 − exp(−x²) · q(x), q fitting exp(x²)·erfc(x) on [1, 4] (in u = (x − 2.5) / 1.5); both least-
// squares fits on Chebyshev nodes, made for tessel. Past 4, erf is 1 in float. Absolute error
// below 1.3e-7 and relative below 1.8e-7 (every float of [−6, 6] against double erf; glibc's
// erff 7.7e-8). NaN stays NaN.
inline float erf_approx(float x) {
  const float a = std::fabs(x) > 4.0f ? 4.0f : std::fabs(x);  // the comparison keeps NaN
  const float s = a * a;
  float p = 7.882500446e-05f;
  p = p * s - 8.018859014e-04f;
  p = p * s + 5.189312812e-03f;
  p = p * s - 2.685432954e-02f;
  p = p * s + 1.128359749e-01f;
  p = p * s - 3.761262691e-01f;
  p = p * s + 1.128379166e+00f;
  const float u = (a - 2.5f) * (1.0f / 1.5f);
  float q = -3.692937449e-05f;
  q = q * u + 9.640629660e-05f;
  q = q * u - 1.439469706e-04f;
  q = q * u + 3.678646644e-04f;
  q = q * u - 1.017119239e-03f;
  q = q * u + 2.425888219e-03f;
  q = q * u - 5.567332340e-03f;
  q = q * u + 1.248403471e-02f;
  q = q * u - 2.700572538e-02f;
  q = q * u + 5.611095852e-02f;
  q = q * u - 1.115210047e-01f;
  q = q * u + 2.108063575e-01f;
  return std::copysign(a < 1.0f ? a * p : 1.0f - exp_approx(-s) * q, x);
}

inline float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

}  // namespace tessel::cpu
