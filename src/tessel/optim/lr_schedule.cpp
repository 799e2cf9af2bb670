#include "tessel/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include <fmt/ranges.h>

#include "tessel/core/error.h"

namespace tessel {

LrDecayStyle parse_lr_decay_style(std::string_view name) {
  if (name == "constant") return LrDecayStyle::Constant;
  if (name == "linear") return LrDecayStyle::Linear;
  if (name == "cosine") return LrDecayStyle::Cosine;
  fail("--lr-decay-style: unknown style '{}' (expected constant, linear or cosine)", name);
}

std::string lr_decay_style_name(LrDecayStyle style) {
  switch (style) {
    case LrDecayStyle::Constant: return "constant";
    case LrDecayStyle::Linear: return "linear";
    case LrDecayStyle::Cosine: return "cosine";
  }
  return "?";
}

std::vector<std::string> lr_schedule_violations(const LrScheduleConfig& config) {
  std::vector<std::string> problems;
  if (!(std::isfinite(config.lr) && config.lr >= 0.0f))
    problems.push_back(fmt::format("--lr {} must be a finite number ≥ 0", config.lr));
  if (!(config.min_lr >= 0.0f && config.min_lr <= config.lr))
    problems.push_back(fmt::format("--min-lr {} is not within [0, --lr {}]", config.min_lr,
                                   config.lr));
  if (config.warmup_iters < 0)
    problems.push_back(fmt::format("--lr-warmup-iters {} is negative", config.warmup_iters));
  if (config.decay_iters < 0)
    problems.push_back(fmt::format("--lr-decay-iters {} is negative", config.decay_iters));
  if (config.style != LrDecayStyle::Constant && config.decay_over() <= 0)
    problems.push_back("--lr-decay-iters (or --train-iters) must be positive to decay the lr");
  return problems;
}

LrSchedule::LrSchedule(const LrScheduleConfig& config)
    : config_(config),
      decay_iters_(config.decay_over()) {
  const std::vector<std::string> problems = lr_schedule_violations(config);
  if (!problems.empty()) fail("invalid lr schedule: {}", fmt::join(problems, "; "));
}

float LrSchedule::at(int64_t it) const {
  const double lr = config_.lr, min_lr = config_.min_lr;
  const int64_t warmup = config_.warmup_iters;
  if (warmup > 0 && it <= warmup) return static_cast<float>(lr * it / warmup);
  if (config_.style == LrDecayStyle::Constant) return config_.lr;
  // decay_iters ≤ warmup leaves no decay phase: min_lr right after warmup.
  if (it >= decay_iters_) return config_.min_lr;
  const double ratio =
      std::clamp(static_cast<double>(it - warmup) / static_cast<double>(decay_iters_ - warmup),
                 0.0, 1.0);
  const double coeff = config_.style == LrDecayStyle::Linear
                           ? 1.0 - ratio
                           : 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
  return static_cast<float>(min_lr + coeff * (lr - min_lr));
}

}  // namespace tessel
