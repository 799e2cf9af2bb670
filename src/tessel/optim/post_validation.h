// What the global gradient norm makes of an optimizer step, and optimizer post-validation as the
// zero-bubble paper has it (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §4.2).
//
// The norm is a reduction over every pipeline stage, so waiting for it before the step makes
// every stage wait for the slowest at the end of each iteration. Post-validation steps at once,
// as if neither clipping nor a non-finite norm would change the step, and checks when the norm
// arrives: if clipping would have scaled the gradients, or the norm is not finite, the step is
// undone exactly (parameters, moments, step count and gradients as they were) and redone as the
// plain step would have done it — clipped, or skipped. Either way the parameters are the plain
// step's, bit for bit.
#pragma once

#include <cstdint>
#include <memory>

#include "tessel/core/params.h"
#include "tessel/kernels/kernels.h"
#include "tessel/optim/adamw.h"

namespace tessel {

// Taken as is, taken after clipping to --clip-grad, or skipped: a non-finite norm leaves the
// parameters alone for the iteration, as Megatron's found-inf skip (the run stops instead under
// --check-for-nan-in-loss-and-grad).
enum class StepVerdict : uint8_t { Plain, Clipped, Skipped };
StepVerdict step_verdict(const AdamW& optimizer, double norm);

// The plain step for global gradient norm `norm`: clip then step, or nothing.
StepVerdict checked_step(AdamW& optimizer, double norm, StepRates rates);

class EagerStep {
 public:
  // Keeps a copy of what a step overwrites, this rank's share of it: the owned ranges of the
  // parameters and gradients, the moments and the step count.
  EagerStep(const Kernels& k, AdamW& optimizer, ParamRegistry& params);

  // Saves that state, then steps at `rates` without clipping.
  void step(StepRates rates);
  // Once the norm is known: keeps the step (Plain), or restores the saved state and redoes the
  // step as checked_step would (Clipped, Skipped). The gradients are the step's again either way
  // (they may have been overwritten since).
  StepVerdict validate(double norm);

 private:
  void copy_state(bool save);

  const Kernels& k_;
  AdamW& optimizer_;
  ParamRegistry& params_;
  std::shared_ptr<float> values_, grads_, exp_avg_, exp_avg_sq_;  // (owned) each
  int64_t step_count_ = 0;
  StepRates rates_ = 0.0f;
};

}  // namespace tessel
