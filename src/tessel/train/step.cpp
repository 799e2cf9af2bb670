#include "tessel/train/step.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

namespace tessel {

std::string PostValidationCounts::describe() const {
  return fmt::format(
      "optimizer post-validation: {} steps taken before their gradient norm and kept, {} redone "
      "({} iterations run again), {} taken after the norm as the step before had been changed",
      kept, redone, rerun, after_norm);
}

TrainStep::TrainStep(const Kernels& k, const OptimOptions& options, const BatchSchedule& batches, AdamW& optimizer,
                     NumericsGuard& numerics, ProcessGroups& groups, StepHooks hooks)
    : options_(options), batches_(batches), optimizer_(optimizer), numerics_(numerics), groups_(groups),
      hooks_(std::move(hooks)), lr_(options.lr), step_before_norm_(options.post_validation) {
  if (options.post_validation) eager_.emplace(k, optimizer, optimizer.params());
  if (options.decoupled_lr)
    decoupled_lr_.emplace(decoupled_schedule(options.lr, *options.decoupled_lr, options.decoupled_min_lr));
}

StepRates TrainStep::rates() const {
  // A skipped step does not advance the schedule. Megatron's scheduler advances by each
  // successful step's global batch; here by the batches of the first iterations, one per
  // successful step: the same unless a step skipped before a change of the batch size.
  const int64_t samples = batches_.consumed_before(optimizer_.step_count() + 1);
  const float lr = lr_.at_samples(samples);
  return {lr, decoupled_lr_ ? decoupled_lr_->at_samples(samples) : lr};
}

void TrainStep::take(IterationStats& s, double counted) {
  s.lr = rates().lr;
  if (step_before_norm_) {
    const double loss_sum = hooks_.compute();
    if (!pending_.active || settle_pending() == StepVerdict::Plain)
      return eager_step(rates(), loss_sum, counted);
    // This iteration ran on parameters since undone: it runs again, to the plain step.
    numerics_.iteration_rerun();
    s.lr = rates().lr;
    ++counts_.rerun;
  }
  plain_step(s, counted);
}

void TrainStep::eager_step(StepRates rates, double loss_sum, double counted) {
  // The stage's sums are in; their sum over the stages starts (the loss's over DP × CP first).
  pending_.active = true;
  pending_.counted = counted;
  pending_.sq = hooks_.stage_sq_sum();
  pending_.loss = loss_sum;
  groups_.dp_cp().all_reduce(&pending_.loss, 1);
  pending_.sq_sum = groups_.pp().all_reduce_async(&pending_.sq, 1);
  pending_.loss_sum = groups_.pp().all_reduce_async(&pending_.loss, 1);
  eager_->step(rates);
  hooks_.gather_params();
}

NumericsGuard::Result TrainStep::computed(double counted) {
  double loss = hooks_.compute();
  double sq = hooks_.stage_sq_sum();
  groups_.pp().all_reduce(&sq, 1);
  // Only the last stage computed the token losses; the loss is the mean over every counted token
  // of the global batch (DESIGN invariant 1).
  groups_.pp().all_reduce(&loss, 1);
  groups_.dp_cp().all_reduce(&loss, 1);
  return {loss / counted, std::sqrt(sq)};
}

void TrainStep::plain_step(IterationStats& s, double counted) {
  if (options_.post_validation) ++counts_.after_norm;
  const NumericsGuard::Recompute recompute = [&] { return computed(counted); };
  NumericsGuard::Result result = recompute();
  const bool finite = numerics_.check(s.iteration, result, recompute);
  s.loss = result.loss;
  s.grad_norm = result.grad_norm;
  const StepVerdict verdict =
      finite ? checked_step(optimizer_, s.grad_norm, rates()) : StepVerdict::Skipped;
  if (verdict != StepVerdict::Skipped) hooks_.gather_params();
  s.skipped = verdict == StepVerdict::Skipped;
  step_before_norm_ = options_.post_validation && verdict == StepVerdict::Plain;
}

void TrainStep::record(const IterationStats& s) {
  if (pending_.active) pending_.stats = s;
  else hooks_.record(s);
}

void TrainStep::settle() {
  if (pending_.active) settle_pending();
}

StepVerdict TrainStep::settle_pending() {
  pending_.active = false;
  pending_.sq_sum.wait();
  pending_.loss_sum.wait();
  IterationStats& s = pending_.stats;
  NumericsGuard::Result settled{pending_.loss / pending_.counted, std::sqrt(pending_.sq)};
  numerics_.check_settled(s.iteration, settled);
  s.loss = settled.loss;
  s.grad_norm = settled.grad_norm;
  const StepVerdict verdict = eager_->validate(s.grad_norm);
  if (verdict != StepVerdict::Plain) hooks_.gather_params();
  s.skipped = verdict == StepVerdict::Skipped;
  hooks_.record(s);
  step_before_norm_ = verdict == StepVerdict::Plain;
  ++(step_before_norm_ ? counts_.kept : counts_.redone);
  return verdict;
}

}  // namespace tessel
