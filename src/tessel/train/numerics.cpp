#include "tessel/train/numerics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessel/ckpt/finite_weights.h"
#include "tessel/core/error.h"

namespace tessel {

namespace {

// Megatron's spiky-loss rule (rerun_state_machine.py): the largest |loss| of the first 100
// iterations is the scale; a loss at least 10 times that is a spike.
constexpr int kSpikeSamples = 100;
constexpr double kSpikeFactor = 10.0;
constexpr double kInjectedSpike = 1000.0;

bool finite(const NumericsGuard::Result& r) { return std::isfinite(r.loss) && std::isfinite(r.grad_norm); }

int64_t parse_count(const std::string& text, const std::string& whole) {
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
  }
  TESSEL_CHECK(used == text.size() && value >= 0,
               "--inject-fault {}: '{}' is not a whole non-negative number", whole, text);
  return value;
}

}  // namespace

FaultInjection parse_fault_injection(const std::string& text) {
  FaultInjection f;
  if (text.empty()) return f;
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  TESSEL_CHECK(parts.size() == 2 || parts.size() == 3,
               "--inject-fault {}: expected KIND:ITERATION[:RANK]", text);
  if (parts[0] == "nan-grad") f.kind = FaultInjection::Kind::NanGrad;
  else if (parts[0] == "transient-nan-grad") f.kind = FaultInjection::Kind::TransientNanGrad;
  else if (parts[0] == "loss-spike") f.kind = FaultInjection::Kind::LossSpike;
  else fail("--inject-fault {}: unknown kind '{}' (nan-grad, transient-nan-grad or loss-spike)", text, parts[0]);
  f.iteration = parse_count(parts[1], text);
  if (parts.size() == 3) f.rank = static_cast<int>(std::min<int64_t>(parse_count(parts[2], text), 1 << 30));
  return f;
}

std::vector<std::string> fault_violations(const FaultOptions& o) {
  std::vector<std::string> v;
  if (o.rerun_mode != "disabled" && o.rerun_mode != "validate_results")
    v.push_back(fmt::format("--rerun-mode {} is not disabled or validate_results (report_stats is "
                            "not supported: tessel's computations are deterministic)", o.rerun_mode));
  try {
    parse_fault_injection(o.inject);
  } catch (const Error& e) {
    v.push_back(e.what());
  }
  auto non_negative = [&](const char* flag, double value) {
    if (!(std::isfinite(value) && value >= 0))
      v.push_back(fmt::format("{} {} must be a finite number ≥ 0", flag, value));
  };
  non_negative("--exit-duration-in-mins", o.exit_duration_mins);
  non_negative("--distributed-timeout-seconds", o.distributed_timeout_seconds);
  if (!(std::isfinite(o.distributed_timeout_minutes) && o.distributed_timeout_minutes > 0))
    v.push_back(fmt::format("--distributed-timeout-minutes {} must be a finite number > 0",
                            o.distributed_timeout_minutes));
  return v;
}

NumericsGuard::NumericsGuard(const Kernels& k, const FaultOptions& options, ParamRegistry& params,
                             ProcessGroups& groups, TrainLog& log)
    : k_(k), options_(options), params_(params), groups_(groups), log_(log),
      injection_(parse_fault_injection(options.inject)),
      rerun_(options.rerun_mode == "validate_results") {}

void NumericsGuard::before_reduction(int64_t iteration, int index) {
  Param& p = params_.params()[index];
  using Kind = FaultInjection::Kind;
  const bool injecting = (injection_.kind == Kind::NanGrad && injected_pass_ != pass_) ||
                         (injection_.kind == Kind::TransientNanGrad && injected_pass_ < 0);
  if (injecting && iteration == injection_.iteration && groups_.world_rank() == injection_.rank) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    k_.memory.from_host(p.grad, &nan, 4);
    injected_pass_ = pass_;
  }
  if (probing_ && !probed_) {
    const int64_t bad = first_non_finite(k_, p.grad, p.numel());
    if (bad >= 0) probed_ = describe(p, bad);
  }
}

NumericsGuard::Result NumericsGuard::observed(int64_t iteration, Result r) const {
  if (injection_.kind == FaultInjection::Kind::LossSpike && iteration == injection_.iteration)
    r.loss *= kInjectedSpike;
  return r;
}

bool NumericsGuard::agreed_finite(const Result& r) {
  double bad = finite(r) ? 0.0 : 1.0;  // one replica's norm may differ from another's
  groups_.world().all_reduce(&bad, 1, ReduceOp::Max);
  return bad == 0.0;
}

bool NumericsGuard::check(int64_t iteration, Result& result, const Recompute& recompute) {
  result = observed(iteration, result);
  if (!agreed_finite(result)) {
    if (!options_.check_nan) return false;
    stop_non_finite(iteration, result, recompute);
  }
  if (options_.check_spiky_loss && spiky(result.loss)) report_spike(iteration, result, recompute);
  return true;
}

void NumericsGuard::check_evaluation(int64_t iteration, const std::string& split, double loss) const {
  if (std::isfinite(loss)) return;
  const std::string what = fmt::format("iteration {}: the {} loss {} is not finite", iteration, split, loss);
  if (options_.check_nan)
    throw JobError(what + " (--check-for-nan-in-loss-and-grad): the weights are finite, so its data "
                          "or the model diverging; stopped");
  log_.message("warning: " + what);
}

bool NumericsGuard::spiky(double loss) {
  if (spike_samples_ < kSpikeSamples) {
    spike_max_ = std::max(spike_max_, std::abs(loss));
    ++spike_samples_;
    return false;
  }
  return std::abs(loss) >= kSpikeFactor * spike_max_;
}

std::string NumericsGuard::describe(const Param& p, int64_t element) const {
  const RankCoords& at = groups_.coords();
  return fmt::format("{} (element {}) on rank {} (tp {}, cp {}, pp {}, dp {})", p.name, element,
                     groups_.world_rank(), at.tp, at.cp, at.pp, at.dp);
}

std::optional<std::string> NumericsGuard::first_non_finite_grad() const {
  for (const Param& p : params_.params()) {
    const int64_t bad = first_non_finite(k_, p.grad, p.numel());
    if (bad >= 0) return describe(p, bad);
  }
  return std::nullopt;
}

void NumericsGuard::stop_non_finite(int64_t iteration, const Result& r, const Recompute& recompute) {
  Comm& world = groups_.world();
  // After the reduction a NaN has spread to every rank of the group: where it arose is known
  // only from the recomputation's look before the reduction.
  std::optional<RankMessage> where = first_error(world, first_non_finite_grad());
  if (where) where->message += " after the gradient reduction";
  std::string verdict = "--rerun-mode disabled: not recomputed";
  if (rerun_) {
    probing_ = true;
    probed_.reset();
    pass_ = 1;
    const Result again = observed(iteration, recompute());
    probing_ = false;
    pass_ = 0;
    const bool reproduced = !agreed_finite(again);
    std::optional<RankMessage> origin = first_error(world, probed_);
    if (reproduced) {
      verdict = "recomputing the iteration reproduced it: a reproducible fault (the data or the "
                "hyper-parameters, such as --lr), not a transient one";
      if (origin) where = RankMessage{origin->rank, origin->message + ", as its backward left it"};
    } else {
      verdict = fmt::format("recomputing the iteration gave loss {:.6g} and gradient norm {:.6g}: a "
                            "transient fault (the machine), not a reproducible one; a restart "
                            "from the last save goes on", again.loss, again.grad_norm);
    }
  }
  throw JobError(fmt::format(
      "iteration {}: loss {:.6g} and gradient norm {:.6g}: not finite (--check-for-nan-in-loss-and-grad); "
      "first non-finite gradient: {}; {}; stopped before the optimizer step (nothing of this iteration is saved)",
      iteration, r.loss, r.grad_norm, where ? where->message : "none (only the loss)", verdict));
}

void NumericsGuard::report_spike(int64_t iteration, Result& r, const Recompute& recompute) {
  const double spike = r.loss;
  std::string verdict;
  if (rerun_) {
    pass_ = 1;
    const Result again = observed(iteration, recompute());
    pass_ = 0;
    verdict = again.loss == r.loss
                  ? "; recomputed alike: reproducible (the data?)"
                  : fmt::format("; recomputed as {:.6g}: transient (the machine?)", again.loss);
    r = again;
  }
  warn_spike(iteration, spike, verdict);
}

void NumericsGuard::check_settled(int64_t iteration, Result& r) {
  r = observed(iteration, r);
  if (options_.check_spiky_loss && std::isfinite(r.loss) && spiky(r.loss))
    warn_spike(iteration, r.loss,
               "; not recomputed: post-validation took its step before the loss was known");
  if (options_.check_nan && !finite(r))
    throw JobError(fmt::format(
        "iteration {}: loss {:.6g} and gradient norm {:.6g}: not finite "
        "(--check-for-nan-in-loss-and-grad; the step post-validation took is not kept)",
        iteration, r.loss, r.grad_norm));
}

void NumericsGuard::warn_spike(int64_t iteration, double spike, const std::string& verdict) {
  log_.message(fmt::format("warning: iteration {}: spiky loss {:.6g}, at least {} times the largest "
                           "of the first {} ({:.6g}) (--check-for-spiky-loss){}; training goes on",
                           iteration, spike, kSpikeFactor, kSpikeSamples, spike_max_, verdict));
}

}  // namespace tessel
