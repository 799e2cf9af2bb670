// Loss scaling, as Megatron-LM's grad scalers (megatron/core/optimizer/grad_scaler.py) and its
// mixed-precision optimizer's found-inf logic (optimizer.py) do it. The loss is multiplied by the
// scale before backward, so that small gradients survive fp16's range; the reduced gradients are
// multiplied by the inverse before the norm, clipping and the step. A non-finite gradient on any
// rank (an fp16 operand that overflowed to inf) skips the step on every rank, and the dynamic
// scaler backs off; train/step.cpp calls update() once per iteration with that verdict.
//
// Which scaler, as get_megatron_optimizer chooses: --loss-scale (static) under --fp16, --bf16 or
// the distributed optimizer; the dynamic one under --fp16 without it; none otherwise (scale 1).
// As Megatron's `if config.loss_scale`, --loss-scale 0 counts as not given.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessel/kernels/types.h"

namespace tessel {

// Megatron's flags (arguments.py, _add_mixed_precision_args), with its defaults.
struct LossScaleOptions {
  std::optional<float> loss_scale;           // --loss-scale: a static scale
  float initial_loss_scale = 4294967296.0f;  // --initial-loss-scale: 2^32
  float min_loss_scale = 1.0f;               // --min-loss-scale
  double loss_scale_window = 1000;           // --loss-scale-window (a float in Megatron too)
  int hysteresis = 2;                        // --hysteresis
};

enum class LossScaling : uint8_t { None, Constant, Dynamic };

// The scaler a run gets.
LossScaling loss_scaling(const LossScaleOptions& options, Precision precision, bool distributed_optimizer);

// Every rule the options break for `scaling` (Megatron's asserts), one message each naming the flag.
std::vector<std::string> loss_scale_violations(const LossScaleOptions& options, LossScaling scaling);

class LossScaler {
 public:
  // What Megatron's DynamicGradScaler.state_dict holds (a constant scaler's is its scale alone).
  struct State {
    float scale = 1.0f;
    int64_t growth_tracker = 0;      // iterations without an overflow since the last growth or overflow
    int64_t hysteresis_tracker = 0;  // overflows left before the scale backs off
    bool operator==(const State&) const = default;
  };

  LossScaler(LossScaling scaling, const LossScaleOptions& options);

  LossScaling scaling() const { return scaling_; }
  // The loss's multiplier, in fp32 as Megatron keeps it: 1 without a scaler.
  float scale() const { return state_.scale; }
  // The gradients' multiplier: 1 / scale computed in double and rounded to fp32, as Megatron's.
  float inv_scale() const;
  // After an iteration: found_inf when a gradient was not finite (its step skipped). The dynamic
  // scaler's rules, grad_scaler.py's: an overflow zeroes the growth tracker and takes one from the
  // hysteresis tracker, and from its running out on, each overflow multiplies the scale by 0.5
  // (not below --min-loss-scale); --loss-scale-window iterations in a row without one double it
  // and refill the hysteresis tracker. The others ignore it.
  void update(bool found_inf);

  const State& state() const { return state_; }
  // The checkpoint's record ("scale", "growth_tracker", "hysteresis_tracker": Megatron's names).
  nlohmann::json to_json() const;
  // The dynamic scaler takes a checkpoint's record (the others keep their flag's scale, as
  // Megatron's); throws Error naming `where` for a malformed one.
  void restore(const nlohmann::json& record, const std::string& where);

 private:
  LossScaling scaling_;
  LossScaleOptions options_;
  State state_;
};

}  // namespace tessel
