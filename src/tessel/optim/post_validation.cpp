#include "tessel/optim/post_validation.h"

#include <cmath>

namespace tessel {

StepVerdict step_verdict(const AdamW& optimizer, double norm) {
  if (!std::isfinite(norm)) return StepVerdict::Skipped;
  return optimizer.clip_factor(static_cast<float>(norm)) < 1.0f ? StepVerdict::Clipped : StepVerdict::Plain;
}

StepVerdict checked_step(AdamW& optimizer, double norm, StepRates rates) {
  const StepVerdict verdict = step_verdict(optimizer, norm);
  if (verdict == StepVerdict::Skipped) return verdict;
  optimizer.clip(static_cast<float>(norm));
  optimizer.step(rates);
  return verdict;
}

EagerStep::EagerStep(const Kernels& k, AdamW& optimizer, ParamRegistry& params)
    : k_(k), optimizer_(optimizer), params_(params) {
  const int64_t n = optimizer.numel();
  for (auto* buffer : {&values_, &grads_, &exp_avg_, &exp_avg_sq_}) *buffer = alloc_floats(n, k.memory);
}

// The owned ranges of the flat parameters and gradients, packed in order as the moments are.
void EagerStep::copy_state(bool save) {
  int64_t at = 0;
  for (const FlatRange& r : optimizer_.owned()) {
    const int64_t n = r.end - r.begin;
    float* value = params_.values() + r.begin;
    float* grad = params_.grads() + r.begin;
    if (save) {
      k_.copy(values_.get() + at, value, n);
      k_.copy(grads_.get() + at, grad, n);
    } else {
      k_.copy(value, values_.get() + at, n);
      k_.copy(grad, grads_.get() + at, n);
    }
    at += n;
  }
  const int64_t n = optimizer_.numel();
  if (save) {
    k_.copy(exp_avg_.get(), optimizer_.exp_avg(), n);
    k_.copy(exp_avg_sq_.get(), optimizer_.exp_avg_sq(), n);
    step_count_ = optimizer_.step_count();
  } else {
    k_.copy(optimizer_.exp_avg(), exp_avg_.get(), n);
    k_.copy(optimizer_.exp_avg_sq(), exp_avg_sq_.get(), n);
    optimizer_.set_step_count(step_count_);
  }
}

void EagerStep::step(StepRates rates) {
  copy_state(true);
  rates_ = rates;
  optimizer_.step(rates);
}

StepVerdict EagerStep::validate(double norm) {
  const StepVerdict verdict = step_verdict(optimizer_, norm);
  if (verdict == StepVerdict::Plain) return verdict;
  copy_state(false);
  return checked_step(optimizer_, norm, rates_);
}

}  // namespace tessel
