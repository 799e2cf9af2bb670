// Non-finite values and loss spikes, as Megatron checks them (--check-for-nan-in-loss-and-grad,
// on by default; --rerun-mode validate_results; --check-for-spiky-loss).
//
// Once per iteration, after the global gradient norm and before the optimizer step, the ranks
// agree whether the loss and the norm are finite. If not, the run stops before the step with an
// error naming the iteration and the first parameter (and rank) whose gradient is non-finite;
// under validate_results the iteration is first computed again, and the error says whether that
// reproduced the fault — a reproducible one comes from the data or the hyper-parameters, a
// transient one from the machine. Without the check the step is skipped (Megatron's
// skipped_iter): no optimizer update, the weights, moments and step count unchanged, the
// iteration counted and logged as skipped.
// A spiky loss (at least 10 times the largest of the first 100 after the start) is recomputed
// the same way and reported; training goes on. Weights read from a file, and weights about to
// be saved or exported, must be finite too; so must an evaluation's loss under the check.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/params.h"
#include "tessel/kernels/kernels.h"
#include "tessel/parallel/groups.h"
#include "tessel/train/log.h"
#include "tessel/train/options.h"

namespace tessel {

// --inject-fault KIND:ITERATION[:RANK], for the tests of this file's checks: `nan-grad` writes
// NaN into the first gradient rank RANK's backward finishes in ITERATION, every time that
// iteration is computed; `transient-nan-grad` only the first time; `loss-spike` multiplies the
// loss checked in ITERATION by 1000.
struct FaultInjection {
  enum class Kind { None, NanGrad, TransientNanGrad, LossSpike };
  Kind kind = Kind::None;
  int64_t iteration = 0;
  int rank = 0;
};
// Throws tessel::Error naming the problem.
FaultInjection parse_fault_injection(const std::string& text);

// The rules of the fault options: a known --rerun-mode, a valid --inject-fault, finite
// non-negative limits.
std::vector<std::string> fault_violations(const FaultOptions& options);

class NumericsGuard {
 public:
  // What an iteration computed, the same on every rank.
  struct Result {
    double loss = 0, grad_norm = 0;
  };
  // Computes the current iteration again from the start (the same data): zeroes the gradients,
  // runs forward and backward, reduces, and returns the new result.
  using Recompute = std::function<Result()>;

  NumericsGuard(const Kernels& k, const FaultOptions& options, ParamRegistry& params,
                ProcessGroups& groups, TrainLog& log);

  // Called as the last microbatch's backward finishes gradient `index`, before it is reduced
  // (the pipeline's grad_ready hook): injects a fault, and while an iteration is recomputed,
  // notes the first gradient that comes out non-finite.
  void before_reduction(int64_t iteration, int index);
  // The iteration is computed again for another reason (post-validation undid the step it ran
  // on): an injected reproducible fault strikes it again.
  void iteration_rerun() {
    if (injection_.kind == FaultInjection::Kind::NanGrad) injected_pass_ = -1;
  }

  // Once per iteration after the global norm, before the optimizer step; collective over the
  // world. Returns whether the step may be taken: false only for a non-finite result without
  // --check-for-nan-in-loss-and-grad; with it, a non-finite result throws tessel::JobError on
  // every rank. A spiky loss is logged; `result` becomes the recomputed one.
  bool check(int64_t iteration, Result& result, const Recompute& recompute);

  // Once per iteration whose optimizer step post-validation took before its loss was known, when
  // that step is validated (`result` is the settled one, the same on every rank): an injected
  // loss spike strikes it, and a spiky loss is reported as check() does, but not recomputed (the
  // iteration's batch is gone); under --check-for-nan-in-loss-and-grad a non-finite result throws
  // tessel::JobError on every rank. Communicates nothing.
  void check_settled(int64_t iteration, Result& result);

  // An evaluation's loss on `split` after `iteration`, the same on every rank: a non-finite one
  // throws tessel::JobError under --check-for-nan-in-loss-and-grad (the weights were finite: the
  // split's data or the model diverging), else is logged as a warning. Communicates nothing.
  void check_evaluation(int64_t iteration, const std::string& split, double loss) const;

 private:
  Result observed(int64_t iteration, Result r) const;  // with an injected loss spike
  bool agreed_finite(const Result& r);
  bool spiky(double loss);
  [[noreturn]] void stop_non_finite(int64_t iteration, const Result& r, const Recompute& recompute);
  void report_spike(int64_t iteration, Result& r, const Recompute& recompute);
  void warn_spike(int64_t iteration, double spike, const std::string& verdict);
  // This rank's first non-finite gradient, "NAME (element I) on rank R (tp …)", or none.
  std::optional<std::string> first_non_finite_grad() const;
  std::string describe(const Param& p, int64_t element) const;

  const Kernels& k_;
  const FaultOptions& options_;
  ParamRegistry& params_;
  ProcessGroups& groups_;
  TrainLog& log_;
  FaultInjection injection_;
  bool rerun_ = false;
  int pass_ = 0;            // 0: the iteration's first computation, 1: its recomputation
  int injected_pass_ = -1;  // the pass a NaN gradient was injected in
  bool probing_ = false;
  std::optional<std::string> probed_;  // the first non-finite gradient before its reduction
  int spike_samples_ = 0;
  double spike_max_ = 0;
};

}  // namespace tessel
