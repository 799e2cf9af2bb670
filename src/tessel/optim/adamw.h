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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessel/core/params.h"
#include "tessel/kernels/kernels.h"

namespace tessel {

// Named after the flags --weight-decay, --adam-beta1, --adam-beta2, --adam-eps, --clip-grad.
// The learning rate comes from the schedule (lr_schedule.h), one value per step().
struct OptimizerConfig {
  float weight_decay = 0.01f;  // applied only to parameters with weight_decay == true
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float clip_grad = 1.0f;  // max global gradient norm; 0 disables clipping
  // --apply-wd-to-qk-layernorm (Qwen3-Next's rule): the q/k norm weights decay too, where the
  // other norm weights and the biases do not.
  bool apply_wd_to_qk_layernorm = false;
};

// Every rule the config breaks (betas in [0, 1), eps positive, decay and clipping not negative),
// one message each naming the flag; empty when valid.
std::vector<std::string> optimizer_violations(const OptimizerConfig& config);

// The learning rates of one step, one per parameter group (Megatron's param groups, each with
// its max_lr and min_lr under one schedule): `decoupled` for the decoupled group's parameters
// (--decoupled-lr: the input embedding and the output layer), `lr` for the others. One rate
// alone is every group's.
struct StepRates {
  StepRates(float rate) : lr(rate), decoupled(rate) {}  // NOLINT: one rate is every group's
  StepRates(float rate, float decoupled_rate) : lr(rate), decoupled(decoupled_rate) {}
  float lr, decoupled;
};

class AdamW {
 public:
  // `params` must be finalized and outlive the optimizer. Throws tessel::Error on a bad config.
  // `owned`: the parts of the flat buffers this rank updates (the distributed optimizer's shard,
  // ascending, disjoint); empty means all of it. m and v are kept for those parts only.
  // The state lives in the kernels' memory.
  AdamW(const Kernels& kernels, ParamRegistry& params, const OptimizerConfig& config,
        std::vector<FlatRange> owned = {});

  // Σ g² over the owned gradients, accumulated in double in a fixed order: the same bits
  // whatever the number of threads. Only parameters `counted` accepts (all when empty) count:
  // a parameter replicated over TP, or a tied copy, must count on one rank only.
  double grad_sq_sum(const std::function<bool(const Param&)>& counted = {}) const;
  float grad_norm() const;  // sqrt(grad_sq_sum()), one process

  // Scales the owned gradients by clip_grad / (norm + 1e-6) when that is below 1 (and
  // clip_grad > 0). `norm` is the global gradient norm. Returns the factor applied (1 when none).
  float clip(float norm);
  // The factor clip(norm) would apply.
  float clip_factor(float norm) const;

  // One AdamW update of the owned parameters at learning rate `lr`; the step count goes up
  // first, so the first call uses step 1 in the bias corrections.
  void step(StepRates rates);
  // The parameters that step at StepRates::decoupled (none until set).
  void set_decoupled_group(std::function<bool(const Param&)> in_group) { decoupled_ = std::move(in_group); }

  // State, for checkpoints: m and v hold numel() floats each, the owned ranges in order, in
  // memory() (read and written through its to_host and from_host).
  const OptimizerConfig& config() const { return config_; }
  ParamRegistry& params() const { return params_; }  // what it updates
  const std::vector<FlatRange>& owned() const { return owned_; }
  int64_t numel() const { return state_numel_; }
  const DeviceMemory& memory() const { return k_.memory; }
  float* exp_avg() { return m_.get(); }
  float* exp_avg_sq() { return v_.get(); }
  const float* exp_avg() const { return m_.get(); }
  const float* exp_avg_sq() const { return v_.get(); }
  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) { step_ = step; }

 private:
  const Kernels& k_;
  ParamRegistry& params_;
  OptimizerConfig config_;
  std::vector<FlatRange> owned_;
  int64_t state_numel_ = 0;
  std::shared_ptr<float> m_, v_;  // (numel)
  int64_t step_ = 0;
  std::function<bool(const Param&)> decoupled_;
};

}  // namespace tessel
