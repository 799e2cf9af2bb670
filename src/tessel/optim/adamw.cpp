#include "tessel/optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include <fmt/ranges.h>

#include "tessel/core/error.h"

namespace tessel {

std::vector<std::string> optimizer_violations(const OptimizerConfig& config) {
  std::vector<std::string> problems;
  if (!(config.beta1 >= 0.0f && config.beta1 < 1.0f))
    problems.push_back(fmt::format("--adam-beta1 {} is not in [0, 1)", config.beta1));
  if (!(config.beta2 >= 0.0f && config.beta2 < 1.0f))
    problems.push_back(fmt::format("--adam-beta2 {} is not in [0, 1)", config.beta2));
  if (!(config.eps > 0.0f))
    problems.push_back(fmt::format("--adam-eps {} is not positive", config.eps));
  if (!(std::isfinite(config.weight_decay) && config.weight_decay >= 0.0f))
    problems.push_back(fmt::format("--weight-decay {} must be a finite number ≥ 0", config.weight_decay));
  if (!(std::isfinite(config.clip_grad) && config.clip_grad >= 0.0f))
    problems.push_back(fmt::format("--clip-grad {} must be a finite number ≥ 0", config.clip_grad));
  return problems;
}

AdamW::AdamW(const Kernels& kernels, ParamRegistry& params, const OptimizerConfig& config,
             std::vector<FlatRange> owned)
    : k_(kernels), params_(params), config_(config), owned_(std::move(owned)) {
  if (owned_.empty()) owned_.push_back({0, params.numel()});
  for (const FlatRange& r : owned_) state_numel_ += r.end - r.begin;
  const std::vector<std::string> problems = optimizer_violations(config);
  if (!problems.empty()) fail("invalid optimizer config: {}", fmt::join(problems, "; "));
  TESSEL_CHECK(params.numel() == 0 || params.values() != nullptr,
               "AdamW needs a finalized parameter registry");
  m_ = alloc_floats(state_numel_, kernels.memory);
  v_ = alloc_floats(state_numel_, kernels.memory);
}

double AdamW::grad_sq_sum(const std::function<bool(const Param&)>& counted) const {
  double sum = 0.0;
  for_each_piece(params_.params(), owned_, [&](const Param& p, int64_t first, int64_t n, int64_t) {
    if (!counted || counted(p)) sum = k_.sum_squares(p.grad + first, n, sum);
  });
  return sum;
}

float AdamW::grad_norm() const { return static_cast<float>(std::sqrt(grad_sq_sum())); }

float AdamW::clip_factor(float norm) const {
  if (config_.clip_grad <= 0.0f) return 1.0f;
  // As Megatron's clip_grad_norm_: the 1e-6 keeps a zero norm from dividing by zero.
  const float scale = static_cast<float>(config_.clip_grad / (static_cast<double>(norm) + 1e-6));
  return scale < 1.0f ? scale : 1.0f;
}

float AdamW::clip(float norm) {
  const float scale = clip_factor(norm);
  if (scale < 1.0f)
    for (const FlatRange& r : owned_) k_.scale(params_.grads() + r.begin, scale, r.end - r.begin);
  return scale;
}

namespace {

// Megatron's rule: every weight decays but biases and norm weights (Param::weight_decay false);
// with --apply-wd-to-qk-layernorm the query and key norms do (by name, as Megatron matches them).
bool decays(const Param& p, const OptimizerConfig& config) {
  const auto ends_with = [&](std::string_view tail) { return std::string_view(p.name).ends_with(tail); };
  return p.weight_decay || (config.apply_wd_to_qk_layernorm && (ends_with("q_norm.weight") || ends_with("k_norm.weight")));
}

}  // namespace

void AdamW::step(StepRates rates) {
  ++step_;
  for_each_piece(params_.params(), owned_, [&](const Param& p, int64_t first, int64_t n, int64_t state) {
    const float wd = decays(p, config_) ? config_.weight_decay : 0.0f;
    const float lr = decoupled_ && decoupled_(p) ? rates.decoupled : rates.lr;
    k_.adamw_update(p.value + first, p.grad + first, m_.get() + state, v_.get() + state, n, lr,
                      config_.beta1, config_.beta2, config_.eps, wd, step_);
  });
}

}  // namespace tessel
