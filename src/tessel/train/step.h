// The optimizer step of every iteration of one run: the plain step and optimizer post-validation.
//
// The plain step waits for the iteration's gradient norm: the ranks agree the loss and the norm
// are finite (NumericsGuard::check, which may compute the iteration again), then clip to
// --clip-grad and step, or skip a non-finite step, and gather the distributed optimizer's
// parameters.
//
// Under --enable-optimizer-post-validation the step is taken at once (EagerStep) while the norm
// and the loss are summed over the pipeline stages during the next iteration, and validated when
// they arrive (settle). A step it redoes makes the iteration since run on the undone parameters
// run again, so it steps before the norm only while the last verdict was Plain: once clipping or
// a non-finite norm has changed a step, the plain step is taken until a norm needs neither (a run
// that clips for a stretch reruns one iteration, not each). Without the plain step's
// recomputation, a non-finite norm under --check-for-nan-in-loss-and-grad stops the run when it
// is settled. Either way every iteration ends with the plain step's parameters, bit for bit.
//
// The step reaches the model and the gradient reductions only through StepHooks, so that it runs
// in one process with no model (tests/train/step_test.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "tessel/comm/comm.h"
#include "tessel/core/params.h"
#include "tessel/kernels/kernels.h"
#include "tessel/optim/adamw.h"
#include "tessel/optim/lr_schedule.h"
#include "tessel/optim/post_validation.h"
#include "tessel/parallel/groups.h"
#include "tessel/train/batch_schedule.h"
#include "tessel/train/log.h"
#include "tessel/train/numerics.h"
#include "tessel/train/options.h"

namespace tessel {

struct StepHooks {
  // One computation of the current iteration from the start, on the current batch: gradients
  // zeroed, forward and backward over this rank's microbatches, gradients reduced. Returns this
  // rank's Σ token losses (the last stage's; 0 elsewhere). It may run twice in an iteration.
  std::function<double()> compute;
  // Σ g² of this stage's reduced gradients, the same on every rank of the stage.
  std::function<double()> stage_sq_sum;
  // After an optimizer step: every rank gets every updated parameter (distributed optimizer).
  std::function<void()> gather_params;
  // An iteration's statistics once its step is final, in iteration order.
  std::function<void(const IterationStats&)> record;
};

// What optimizer post-validation did with the run's steps, for its end report.
struct PostValidationCounts {
  int64_t kept = 0;        // taken before the norm and valid
  int64_t redone = 0;      // taken before the norm, undone and redone when it arrived
  int64_t rerun = 0;       // iterations run again because they ran on a step since redone
  int64_t after_norm = 0;  // plain steps, taken after the norm (the last verdict was not Plain)

  std::string describe() const;
};

class TrainStep {
 public:
  // Everything must outlive the step. Post-validation's copy of the optimizer's state costs the
  // parameters' size four times. `batches` are the iterations' global batches, which the
  // learning-rate schedule advances by.
  TrainStep(const Kernels& k, const OptimOptions& options, const BatchSchedule& batches, AdamW& optimizer,
            NumericsGuard& numerics, ProcessGroups& groups, StepHooks hooks);

  // Iteration s.iteration on the current batch, whose loss counts `counted` tokens: computes it
  // and steps. Sets s.lr and, unless its step awaits the norm, s.loss, s.grad_norm and s.skipped.
  // May settle the previous iteration's step. Collective over the world.
  void take(IterationStats& s, double counted);
  // After take(), with the iteration's other statistics: recorded now, or when its step is settled.
  void record(const IterationStats& s);
  // Validates the step awaiting its norm, if any: before anything outside the step reads the
  // parameters or the log (an evaluation, a save, the end of the run). Collective over the world.
  void settle();

  const PostValidationCounts& post_validation() const { return counts_; }

 private:
  // An eagerly taken step awaiting its iteration's gradient norm and loss, summed over the
  // pipeline stages while the next iteration runs.
  struct PendingStep {
    bool active = false;
    IterationStats stats;
    double sq = 0, loss = 0;  // this stage's Σ g² and token losses, summed over the stages on arrival
    double counted = 0;       // the iteration's counted tokens
    Request sq_sum, loss_sum;
  };

  // Steps at once; the iteration's norm and loss start their sums over the stages.
  void eager_step(StepRates rates, double loss_sum, double counted);
  // The rates of the step after the optimizer's successful ones: --lr's schedule, and the
  // decoupled group's (--decoupled-lr) on the same.
  StepRates rates() const;
  // The norm, then NumericsGuard::check, then clip and step, or skip.
  void plain_step(IterationStats& s, double counted);
  // The pending step's norm and loss are in: keep it, or redo it as the plain step would.
  StepVerdict settle_pending();
  // The current computation's result summed over the stages (and the loss over DP × CP).
  NumericsGuard::Result computed(double counted);

  const OptimOptions& options_;
  const BatchSchedule& batches_;
  AdamW& optimizer_;
  NumericsGuard& numerics_;
  ProcessGroups& groups_;
  StepHooks hooks_;
  LrSchedule lr_;
  std::optional<LrSchedule> decoupled_lr_;  // with --decoupled-lr
  std::optional<EagerStep> eager_;  // under post-validation
  PendingStep pending_;
  bool step_before_norm_;
  PostValidationCounts counts_;
};

}  // namespace tessel
