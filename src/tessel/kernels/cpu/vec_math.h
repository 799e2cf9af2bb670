// Small helpers shared by the CPU kernels.
#pragma once

#include <bit>
#include <cstdint>

namespace tessel::cpu {

// Work (elements touched) below which a kernel runs on one thread: waking the OpenMP team
// costs microseconds, and far more when the cores are busy with other processes.
inline bool worth_parallel(int64_t work) { return work >= (int64_t{1} << 15); }

// exp(x) in plain arithmetic so GCC vectorises it (glibc's expf stays a scalar call without
// -ffast-math): x = k·ln2 + r, |r| ≤ ln2/2, e^r by its degree-7 Taylor polynomial, 2^k by the
// exponent bits. Largest relative error 6.8e-8; inputs clamped to [-87, 88].
inline float exp_approx(float x) {
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float round_magic = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  const float k = (xc * 1.44269504f + round_magic) - round_magic;
  const float r = (xc - k * 0.693145752f) - k * 1.42860682e-6f;  // ln 2 split in two parts
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float two_k = std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
  return x < -87.0f ? 0.0f : p * two_k;
}

inline float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

}  // namespace tessel::cpu
