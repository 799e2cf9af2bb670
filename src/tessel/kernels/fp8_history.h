// Delayed scaling's state for one FP8 tensor (Transformer Engine's DelayedScaling, Megatron's
// --fp8-recipe delayed): the amaxes of the last --fp8-amax-history-len steps and the scale they
// gave. Each quantisation of the tensor uses the scale as it stands and records the tensor's amax
// in the newest entry; at the update the scale is recomputed from the history —
// --fp8-amax-compute-algo most_recent: the newest amax; max: the largest — as
// largest / amax / 2^--fp8-margin (an amax of 0 or not finite keeps the scale it had), and the
// history moves on by one: the oldest entry is dropped and a new newest one starts at 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tessel/kernels/fp8.h"

namespace tessel {

enum class AmaxCompute : uint8_t { MostRecent, Max };

class Fp8History {
 public:
  explicit Fp8History(int length) : amax_(static_cast<size_t>(std::max(length, 1)), 0.0f) {}

  float scale() const { return scale_; }
  // The entries, newest first (what a checkpoint saves).
  const std::vector<float>& amaxes() const { return amax_; }

  // A quantisation of the tensor saw `amax`: the newest entry keeps the largest of the step's.
  void record(float amax) {
    if (amax > amax_[0] || std::isnan(amax)) amax_[0] = amax;
  }

  void update(Fp8Format format, AmaxCompute compute, int margin) {
    float amax = amax_[0];
    if (compute == AmaxCompute::Max)
      for (float a : amax_)
        if (a > amax || std::isnan(a)) amax = a;
    if (amax > 0.0f && std::isfinite(amax)) {
      const float s = std::ldexp(fp8_largest(format) / amax, -margin);
      scale_ = std::isfinite(s) ? s : 3.4028234663852886e38f;
    }
    std::rotate(amax_.rbegin(), amax_.rbegin() + 1, amax_.rend());  // the oldest becomes the newest slot
    amax_[0] = 0.0f;
  }

  // A checkpoint's state put back.
  void restore(std::vector<float> amaxes, float scale) {
    amax_ = std::move(amaxes);
    scale_ = scale;
  }

 private:
  std::vector<float> amax_;
  float scale_ = 1.0f;
};

}  // namespace tessel
