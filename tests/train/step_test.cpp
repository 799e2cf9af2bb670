// train/step.h in one process with no model: a registry of two parameters whose gradients are a
// function of the iteration and of the parameters (an iteration computed on other parameters
// computes other gradients), scaled per iteration to a norm below --clip-grad, above it, or
// holding a NaN. The plain step ends where checked_step ends; post-validation ends where the plain
// step ends, bit for bit, with the counts its rule predicts; the numerics checks recompute an
// iteration through the step's computation and stop, skip or warn as numerics.h says.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "support/fixtures.h"
#include "support/weight_and_bias.h"
#include "tessel/core/error.h"
#include "tessel/optim/post_validation.h"
#include "tessel/train/step.h"

namespace tessel {
namespace {

enum class Norm { Below, Above, NaN };  // against --clip-grad 1
constexpr Norm B = Norm::Below, A = Norm::Above, N = Norm::NaN;

constexpr double kCounted = 48;  // the tokens each iteration's loss counts

// Iteration `it`'s gradients on the current parameters: a norm of about 0.06 below the clip, 6
// above it.
void set_grads(ParamRegistry& reg, int64_t it, Norm norm) {
  const float scale = norm == Norm::Above ? 1.0f : 0.01f;
  for (int64_t i = 0; i < reg.numel(); ++i)
    reg.grads()[i] =
        scale * (std::sin(0.37f * static_cast<float>(i) + static_cast<float>(it)) + 0.5f * reg.values()[i]);
  if (norm == Norm::NaN) reg.grads()[reg.numel() / 2] = std::numeric_limits<float>::quiet_NaN();
}

// Σ token losses of iteration `it` on the current parameters.
double loss_sum(ParamRegistry& reg, int64_t it) {
  return kCounted * (3.0 + 0.01 * static_cast<double>(it % 7) + 0.1 * reg.values()[0]);
}

OptimOptions optim_options(bool post_validation) {
  OptimOptions o;
  o.adamw.clip_grad = 1.0f;
  o.post_validation = post_validation;
  o.lr = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup_iters = 2, .train_iters = 200,
          .style = LrDecayStyle::Cosine};
  return o;
}

// AdamW's first and second moments, one after the other.
std::vector<float> moments(const AdamW& optimizer) {
  std::vector<float> m(optimizer.exp_avg(), optimizer.exp_avg() + optimizer.numel());
  m.insert(m.end(), optimizer.exp_avg_sq(), optimizer.exp_avg_sq() + optimizer.numel());
  return m;
}

// One run of the step over iterations whose norms `norms` gives (the last one repeated).
struct StepRun {
  StepRun(const std::vector<Norm>& n, bool post_validation, FaultOptions f, bool quiet = true)
      : norms(n), optim(optim_options(post_validation)), faults(std::move(f)), log(200, 1, "", false, quiet),
        optimizer(cpu_kernels(), params, optim.adamw), numerics(cpu_kernels(), faults, params, groups, log),
        step(cpu_kernels(), optim, batches, optimizer, numerics, groups,
             {.compute = [this] { return compute(); },
              .stage_sq_sum = [this] { return optimizer.grad_sq_sum(); },
              .gather_params = [this] { ++gathers; },
              .record = [this](const IterationStats& s) { recorded.push_back(s); }}) {}

  // As the pipeline does: each gradient finished (the last parameter's first) is handed to the
  // numerics guard before its reduction.
  double compute() {
    ++computations[it];
    set_grads(params, it, norms[std::min<size_t>(it - 1, norms.size() - 1)]);
    for (int index = static_cast<int>(params.params().size()) - 1; index >= 0; --index)
      numerics.before_reduction(it, index);
    return loss_sum(params, it);
  }

  void iterate() {
    ++it;
    IterationStats s;
    s.iteration = it;
    step.take(s, kCounted);
    step.record(s);
  }

  std::vector<float> values() { return {params.values(), params.values() + params.numel()}; }

  std::vector<Norm> norms;
  OptimOptions optim;
  BatchSchedule batches = BatchSchedule::constant(optim.lr.global_batch);
  FaultOptions faults;
  ParamRegistry params = testing::weight_and_bias();
  ProcessGroups groups = ProcessGroups::single();
  TrainLog log;
  AdamW optimizer;
  NumericsGuard numerics;
  int64_t it = 0;
  std::map<int64_t, int> computations;  // by iteration
  int gathers = 0;
  std::vector<IterationStats> recorded;
  TrainStep step;
};

FaultOptions fault_options(bool check_nan, const std::string& inject = "") {
  FaultOptions f;
  f.check_nan = check_nan;
  f.inject = inject;
  return f;
}

void expect_same_stats(const IterationStats& got, const IterationStats& want) {
  EXPECT_EQ(got.iteration, want.iteration);
  EXPECT_EQ(got.lr, want.lr) << "iteration " << want.iteration;
  EXPECT_EQ(got.skipped, want.skipped) << "iteration " << want.iteration;
  if (want.skipped) return;  // a non-finite loss or norm
  EXPECT_EQ(got.loss, want.loss) << "iteration " << want.iteration;
  EXPECT_EQ(got.grad_norm, want.grad_norm) << "iteration " << want.iteration;
}

// The plain step is NumericsGuard::check, then checked_step at the schedule's rate, or a skip:
// each iteration ends with the parameters, moments, step count and statistics of that sequence
// computed by hand.
TEST(TrainStep, PlainStepEndsWhereCheckedStepEnds) {
  const std::vector<Norm> norms = {B, A, B, N, A, B};
  StepRun run(norms, false, fault_options(false));
  ParamRegistry params = testing::weight_and_bias();
  const OptimOptions optim = optim_options(false);
  AdamW optimizer(cpu_kernels(), params, optim.adamw);
  const LrSchedule lr(optim.lr);
  for (int64_t it = 1; it <= static_cast<int64_t>(norms.size()); ++it) {
    run.iterate();
    IterationStats want;
    want.iteration = it;
    want.lr = lr.for_step(optimizer.step_count());
    set_grads(params, it, norms[it - 1]);
    want.loss = loss_sum(params, it) / kCounted;
    want.grad_norm = std::sqrt(optimizer.grad_sq_sum());
    want.skipped = !std::isfinite(want.grad_norm);
    if (!want.skipped) checked_step(optimizer, want.grad_norm, static_cast<float>(want.lr));
    ASSERT_EQ(run.recorded.size(), static_cast<size_t>(it));
    expect_same_stats(run.recorded.back(), want);
    EXPECT_EQ(run.values(), std::vector<float>(params.values(), params.values() + params.numel())) << it;
    EXPECT_EQ(moments(run.optimizer), moments(optimizer)) << it;
    EXPECT_EQ(run.optimizer.step_count(), optimizer.step_count()) << it;
    EXPECT_EQ(run.computations[it], 1) << it;
  }
  EXPECT_EQ(run.gathers, 5);  // after every step taken, not after the skipped one
}

struct Case {
  std::string name;
  std::vector<Norm> norms;
  bool check_nan = false;
  int settle_every = 0;  // settle after every this many iterations, as before an evaluation (0: never)
  std::string inject;
  std::string eager_stop;  // what stopped the post-validation run
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// What post-validation's rule makes of the norms: a step is taken before its norm only after a
// step the norm left alone; one the norm changes is redone and, unless its norm arrived before
// the next iteration (the last, or a settle), the next iteration runs again to a plain step.
PostValidationCounts predicted(const Case& c) {
  PostValidationCounts want;
  bool before_norm = true;
  const size_t n = c.norms.size();
  const FaultInjection injected = parse_fault_injection(c.inject);
  for (size_t i = 0; i < n; ++i) {
    const bool plain = c.norms[i] == Norm::Below && !(injected.kind == FaultInjection::Kind::NanGrad &&
                                                      injected.iteration == static_cast<int64_t>(i + 1));
    const bool settled = i + 1 == n || (c.settle_every > 0 && (i + 1) % c.settle_every == 0);
    if (!before_norm) ++want.after_norm;
    else if (plain) ++want.kept;
    else {
      ++want.redone;
      want.rerun += !settled;
    }
    before_norm = plain;
  }
  return want;
}

// The run over the case's iterations, settling as asked and at the end; the error that stopped
// it, if any.
std::string run_case(StepRun& run, const Case& c) {
  try {
    for (size_t i = 1; i <= c.norms.size(); ++i) {
      run.iterate();
      if (i == c.norms.size() || (c.settle_every > 0 && i % c.settle_every == 0)) run.step.settle();
    }
  } catch (const JobError& e) {
    return e.what();
  }
  return "";
}

class TrainStepPostValidation : public ::testing::TestWithParam<Case> {};

TEST_P(TrainStepPostValidation, EndsWhereThePlainStepEndsWithThePredictedCounts) {
  const Case c = GetParam();
  StepRun plain(c.norms, false, fault_options(c.check_nan, c.inject));
  StepRun eager(c.norms, true, fault_options(c.check_nan, c.inject));
  const std::string plain_error = run_case(plain, c);
  const std::string eager_error = run_case(eager, c);
  ASSERT_EQ(plain_error.empty(), eager_error.empty()) << plain_error << "\n" << eager_error;
  ASSERT_EQ(eager.recorded.size(), plain.recorded.size());
  for (size_t i = 0; i < plain.recorded.size(); ++i) expect_same_stats(eager.recorded[i], plain.recorded[i]);
  if (!plain_error.empty()) {
    // Stopped at the first NaN, before its step (plain) or when its step is settled (eager).
    const size_t nan = std::find(c.norms.begin(), c.norms.end(), Norm::NaN) - c.norms.begin();
    const std::string at = "iteration " + std::to_string(nan + 1) + ": loss";
    EXPECT_NE(plain_error.find(at), std::string::npos) << plain_error;
    EXPECT_NE(eager_error.find(at), std::string::npos) << eager_error;
    EXPECT_NE(eager_error.find(c.eager_stop), std::string::npos) << eager_error;
    EXPECT_EQ(plain.recorded.size(), nan);
    return;
  }
  EXPECT_EQ(eager.values(), plain.values());
  EXPECT_EQ(moments(eager.optimizer), moments(plain.optimizer));
  EXPECT_EQ(eager.optimizer.step_count(), plain.optimizer.step_count());
  const PostValidationCounts want = predicted(c), got = eager.step.post_validation();
  EXPECT_EQ(got.kept, want.kept);
  EXPECT_EQ(got.redone, want.redone);
  EXPECT_EQ(got.rerun, want.rerun);
  EXPECT_EQ(got.after_norm, want.after_norm);
  ASSERT_GT(want.kept + want.redone, 0);
  int computations = 0;
  for (const auto& [it, n] : eager.computations) computations += n;
  EXPECT_EQ(computations, static_cast<int>(c.norms.size() + want.rerun));
}


INSTANTIATE_TEST_SUITE_P(
    Norms, TrainStepPostValidation,
    ::testing::Values(Case{.name = "below", .norms = {B, B, B, B}},
                      Case{.name = "above_then_below", .norms = {A, A, A, B, B, A, B, B}},
                      Case{.name = "alternating", .norms = {B, A, B, A, B, A, B}},
                      Case{.name = "last_above", .norms = {B, B, B, A}},
                      Case{.name = "nan_skipped", .norms = {B, N, B, B, N, N, B, A, B}},
                      Case{.name = "settled_between", .norms = {B, A, B, A, A, B, B, A, B},
                           .settle_every = 2},
                      Case{.name = "nan_stops_when_settled", .norms = {B, B, N, B}, .check_nan = true,
                           .eager_stop = "the step post-validation took is not kept"},
                      Case{.name = "nan_stops_after_the_norm", .norms = {B, A, N, B}, .check_nan = true,
                           .eager_stop = "a reproducible fault"},
                      // Iteration 3 ran on iteration 2's undone step: run again, it holds the
                      // injected NaN again and is skipped as in the plain run.
                      Case{.name = "injected_nan_rerun", .norms = {B, A, B, B}, .inject = "nan-grad:3"}),
    [](const auto& info) { return info.param.name; });

// The error that stops a run with `inject` in iteration 3, which it computes twice: once, and
// again to tell a reproducible fault from a transient one.
std::string stop_in_iteration_3(const std::string& inject) {
  StepRun run({B}, false, fault_options(true, inject));
  run.iterate();
  run.iterate();
  const std::string error = testing::error_of([&] { run.iterate(); });
  EXPECT_EQ(run.computations[3], 2);
  EXPECT_EQ(run.recorded.size(), 2u);
  EXPECT_NE(error.find("iteration 3: loss"), std::string::npos) << error;
  return error;
}

// A NaN gradient injected the first time iteration 3 is computed: a transient fault.
TEST(TrainStep, TransientNanIsRecomputedAndReportedTransient) {
  const std::string error = stop_in_iteration_3("transient-nan-grad:3");
  EXPECT_NE(error.find("a transient fault (the machine), not a reproducible one"), std::string::npos)
      << error;
}

// Every time: a reproducible fault, the stop naming the parameter whose backward left the NaN.
TEST(TrainStep, ReproducibleNanStopsNamingTheIterationAndTheParameter) {
  const std::string error = stop_in_iteration_3("nan-grad:3");
  EXPECT_NE(error.find("h.bias (element 0) on rank 0 (tp 0, cp 0, pp 0, dp 0), as its backward left it"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("a reproducible fault"), std::string::npos) << error;
}

// --no-check-for-nan-in-loss-and-grad: the iteration is recorded as skipped and leaves the
// weights, the moments and the step count as they were; the next one steps.
TEST(TrainStep, SkippedStepLeavesWeightsMomentsAndStepCount) {
  StepRun run({B}, false, fault_options(false, "nan-grad:2"));
  run.iterate();
  const std::vector<float> values = run.values(), state = moments(run.optimizer);
  run.iterate();
  EXPECT_TRUE(run.recorded.back().skipped);
  EXPECT_EQ(run.values(), values);
  EXPECT_EQ(moments(run.optimizer), state);
  EXPECT_EQ(run.optimizer.step_count(), 1);
  EXPECT_EQ(run.computations[2], 1);  // a skip is not recomputed
  run.iterate();
  EXPECT_FALSE(run.recorded.back().skipped);
  EXPECT_EQ(run.optimizer.step_count(), 2);
  EXPECT_NE(run.values(), values);
}

// --check-for-spiky-loss with a loss 1000 times too large in iteration 104: the plain step
// computes it again and reports it; post-validation, whose step was taken before the loss was
// known, reports it when the step is settled, not recomputed. Training goes on either way.
FaultOptions spike_faults() {
  FaultOptions f = fault_options(true, "loss-spike:104");
  f.check_spiky_loss = true;
  return f;
}

// The log of the run's first 106 iterations, its step settled after them.
std::string logged_run(StepRun& run) {
  ::testing::internal::CaptureStdout();
  for (int i = 0; i < 106; ++i) run.iterate();
  run.step.settle();
  return ::testing::internal::GetCapturedStdout();
}

TEST(TrainStep, SpikyLossIsRecomputedAndReported) {
  StepRun run({B}, false, spike_faults(), false);
  const std::string output = logged_run(run);
  EXPECT_EQ(run.computations[104], 2);
  EXPECT_EQ(run.computations[103], 1);
  EXPECT_NE(output.find("warning: iteration 104: spiky loss"), std::string::npos) << output;
  EXPECT_NE(output.find("recomputed alike: reproducible"), std::string::npos) << output;
  EXPECT_EQ(run.recorded.size(), 106u);
}

TEST(TrainStep, SpikyLossUnderPostValidationIsReportedWhenSettled) {
  StepRun run({B}, true, spike_faults(), false);
  const std::string output = logged_run(run);
  EXPECT_EQ(run.computations[104], 1);
  EXPECT_NE(output.find("warning: iteration 104: spiky loss"), std::string::npos) << output;
  EXPECT_NE(output.find("not recomputed: post-validation took its step before the loss was known"),
            std::string::npos)
      << output;
  EXPECT_EQ(run.step.post_validation().kept, 106);
  EXPECT_EQ(run.recorded.size(), 106u);
}

}  // namespace
}  // namespace tessel
