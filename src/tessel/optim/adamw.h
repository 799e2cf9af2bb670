// AdamW over a parameter registry, with gradient-norm clipping. The moments m and v are flat
// buffers laid out exactly like the registry's flat gradients, so parameter i's state sits at
// its offset in all four buffers and a checkpoint writes each buffer in one piece.
//
// Built to grow into the distributed pieces without changing shape:
// - grad_sq_sum() is the local Σ g²; across ranks it is all-reduced before the square root,
//   and clip() takes the resulting global norm;
// - step() updates parameter by parameter through the flat offsets, so a distributed optimizer
//   can restrict it to the shard [begin, end) of the flat buffers it owns.
#pragma once

#include <cstdint>
#include <memory>

#include "tessel/model/params.h"

namespace tessel {

// Named after the flags --weight-decay, --adam-beta1, --adam-beta2, --adam-eps, --clip-grad.
// The learning rate comes from the schedule (lr_schedule.h), one value per step().
struct OptimizerConfig {
  float weight_decay = 0.01f;  // applied only to parameters with weight_decay == true
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float clip_grad = 1.0f;  // max global gradient norm; 0 disables clipping
};

class AdamW {
 public:
  // `params` must be finalized and outlive the optimizer. Throws tessel::Error on a bad config.
  AdamW(ParamRegistry& params, const OptimizerConfig& config);

  // Σ g² over every gradient of the registry, accumulated in double in a fixed order: the same
  // bits whatever the number of threads.
  double grad_sq_sum() const;
  float grad_norm() const;  // sqrt(grad_sq_sum())

  // Scales every gradient by clip_grad / (norm + 1e-6) when that is below 1 (and clip_grad > 0).
  // `norm` is the global gradient norm. Returns the factor applied (1 when none).
  float clip(float norm);

  // One AdamW update of every parameter at learning rate `lr`; the step count goes up first,
  // so the first call uses step 1 in the bias corrections.
  void step(float lr);

  // State, for checkpoints: m and v have numel() floats each, laid out like the gradients.
  const OptimizerConfig& config() const { return config_; }
  int64_t numel() const { return params_.numel(); }
  float* exp_avg() { return m_.get(); }
  float* exp_avg_sq() { return v_.get(); }
  const float* exp_avg() const { return m_.get(); }
  const float* exp_avg_sq() const { return v_.get(); }
  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) { step_ = step; }

 private:
  ParamRegistry& params_;
  OptimizerConfig config_;
  std::shared_ptr<float> m_, v_;  // (numel)
  int64_t step_ = 0;
};

}  // namespace tessel
