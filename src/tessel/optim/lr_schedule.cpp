#include "tessel/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <utility>
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

int64_t LrScheduleConfig::iterations() const {
  return sample_based() ? train_samples / std::max<int64_t>(global_batch, 1) : train_iters;
}

int64_t LrScheduleConfig::decay_steps() const {
  if (saved_decay_steps >= 0) return saved_decay_steps;
  if (sample_based()) return decay_samples.value_or(train_samples);
  return decay_iters.value_or(train_iters) * global_batch;
}

double LrScheduleConfig::warmup_steps() const {
  if (saved_warmup_steps >= 0) return saved_warmup_steps;
  if (warmup_fraction) return *warmup_fraction * static_cast<double>(decay_steps());
  return static_cast<double>(sample_based() ? warmup_samples : warmup_iters * global_batch);
}

namespace {

// Megatron's OptimizerParamScheduler asserts 0 <= lr_warmup_steps < lr_decay_steps, the decay's
// length defaulting to the run's (--lr-decay-iters to --train-iters, --lr-decay-samples to
// --train-samples), whatever the decay style: a warmup that does not end before the decay does
// would leave no decay (and divide by 0 where it ends exactly there). Compared in the flags' own
// units, so that no product can wrap; empty when the rule holds or its inputs are broken already
// (negative, mixed or missing lengths, each named by its own rule).
std::string warmup_past_decay(const LrScheduleConfig& config) {
  if (config.saved_decay_steps >= 0) return {};  // the save's lengths: resume.cpp checks them
  const bool samples = config.sample_based();
  const int64_t run = samples ? config.train_samples : config.train_iters;
  const std::optional<int64_t> given = samples ? config.decay_samples : config.decay_iters;
  const int64_t decay = given.value_or(run);
  const int64_t warmup = samples ? config.warmup_samples : config.warmup_iters;
  if (decay <= 0 || warmup < 0 || run < 0) return {};
  const char* unit = samples ? "samples" : "iterations";
  const std::string decay_named =
      given ? fmt::format("{} {}", samples ? "--lr-decay-samples" : "--lr-decay-iters", *given)
                : fmt::format("{} {}, as --{} is not given", samples ? "--train-samples" : "--train-iters", run,
                              samples ? "lr-decay-samples" : "lr-decay-iters");
  if (config.warmup_fraction) {
    // fraction × decay < decay; a fraction past 1, below 0 or NaN has its own rule as well
    if (!(*config.warmup_fraction >= 1)) return {};
    return fmt::format("--lr-warmup-fraction {} leaves no decay: the warmup must end before the decay's {} {} "
                       "({}), as Megatron's scheduler asserts warmup < decay",
                       *config.warmup_fraction, decay, unit, decay_named);
  }
  if (warmup < decay) return {};
  return fmt::format("{} {} is not below the decay's {} {} ({}): Megatron's scheduler asserts warmup < decay",
                     samples ? "--lr-warmup-samples" : "--lr-warmup-iters", warmup, decay, unit, decay_named);
}

}  // namespace

std::vector<std::string> lr_schedule_violations(const LrScheduleConfig& config) {
  std::vector<std::string> problems;
  if (!(std::isfinite(config.lr) && config.lr >= 0.0f))
    problems.push_back(fmt::format("--lr {} must be a finite number ≥ 0", config.lr));
  if (!(config.min_lr >= 0.0f && config.min_lr <= config.lr))
    problems.push_back(fmt::format("--min-lr {} is not within [0, --lr {}]", config.min_lr, config.lr));
  if (!(config.warmup_init >= 0.0f && config.warmup_init <= config.lr))
    problems.push_back(fmt::format("--lr-warmup-init {} is not within [0, --lr {}]", config.warmup_init, config.lr));
  for (const auto& [flag, value] : {std::pair<const char*, int64_t>{"--lr-warmup-iters", config.warmup_iters},
                                    {"--train-iters", config.train_iters},
                                    {"--lr-warmup-samples", config.warmup_samples},
                                    {"--train-samples", config.train_samples}})
    if (value < 0) problems.push_back(fmt::format("{} {} is negative", flag, value));
  // Megatron's scheduler asserts lr_decay_steps > 0: a decay given as 0 is refused, not taken for
  // the run's length (which a decay left out is).
  for (const auto& [flag, value] : {std::pair<const char*, std::optional<int64_t>>{"--lr-decay-iters", config.decay_iters},
                                    {"--lr-decay-samples", config.decay_samples}})
    if (value && *value <= 0)
      problems.push_back(fmt::format("{} {} must be positive (left out, the decay lasts the run): Megatron's "
                                     "scheduler asserts decay steps > 0", flag, *value));
  // The schedule counts samples: iterations × G must be a number (2^63 − 1 at most).
  for (const auto& [flag, value] : {std::pair<const char*, int64_t>{"--train-iters", config.train_iters},
                                    {"--lr-decay-iters", config.decay_iters.value_or(0)},
                                    {"--lr-warmup-iters", config.warmup_iters}})
    if (config.global_batch > 0 && value > std::numeric_limits<int64_t>::max() / config.global_batch)
      problems.push_back(fmt::format("{} {} × --global-batch-size {} is past 2^63 samples", flag, value,
                                     config.global_batch));
  if (config.warmup_fraction && !(*config.warmup_fraction >= 0 && *config.warmup_fraction <= 1))
    problems.push_back(fmt::format("--lr-warmup-fraction {} is not within [0, 1]", *config.warmup_fraction));
  // Megatron's assertions: one kind of training (the other kind's flags not given), one warmup length.
  const bool samples = config.sample_based();
  using Given = std::pair<const char*, bool>;  // a flag of the other kind, and whether it was given
  const std::vector<Given> other_kind =
      samples ? std::vector<Given>{{"--train-iters", config.train_iters > 0},
                                   {"--lr-decay-iters", config.decay_iters.has_value()},
                                   {"--lr-warmup-iters", config.warmup_iters > 0}}
              : std::vector<Given>{{"--lr-decay-samples", config.decay_samples.has_value()},
                                   {"--lr-warmup-samples", config.warmup_samples > 0}};
  for (const auto& [flag, given] : other_kind)
    if (given)
      problems.push_back(fmt::format("{} {} --train-samples: {}-based training takes {} and {}", flag,
                                     samples ? "with" : "without", samples ? "sample" : "iteration",
                                     samples ? "--lr-decay-samples" : "--lr-decay-iters",
                                     samples ? "--lr-warmup-samples" : "--lr-warmup-iters"));
  const Given warmup = samples ? Given{"--lr-warmup-samples", config.warmup_samples > 0}
                               : Given{"--lr-warmup-iters", config.warmup_iters > 0};
  if (config.warmup_fraction && warmup.second)
    problems.push_back(fmt::format("--lr-warmup-fraction and {}: give one", warmup.first));
  if (std::string broken = warmup_past_decay(config); !broken.empty()) problems.push_back(std::move(broken));
  return problems;
}

LrScheduleConfig decoupled_schedule(const LrScheduleConfig& config, float lr, std::optional<float> min_lr) {
  LrScheduleConfig decoupled = config;
  decoupled.lr = lr;
  decoupled.min_lr = min_lr.value_or(config.min_lr);
  return decoupled;
}

std::vector<std::string> decoupled_lr_violations(const LrScheduleConfig& config, std::optional<float> lr,
                                                 std::optional<float> min_lr) {
  if (!lr) return {};
  std::vector<std::string> problems;
  if (!(std::isfinite(*lr) && *lr >= 0.0f))
    problems.push_back(fmt::format("--decoupled-lr {} must be a finite number ≥ 0", *lr));
  const float floor = min_lr.value_or(config.min_lr);
  if (!(floor >= 0.0f && floor <= *lr))
    problems.push_back(fmt::format("{} {} is not within [0, --decoupled-lr {}]",
                                   min_lr ? "--decoupled-min-lr" : "--min-lr (the decoupled group's floor)",
                                   floor, *lr));
  if (!(config.warmup_init <= *lr))
    problems.push_back(fmt::format("--lr-warmup-init {} is above --decoupled-lr {}: the decoupled group's "
                                   "warmup starts there too", config.warmup_init, *lr));
  return problems;
}

LrSchedule::LrSchedule(const LrScheduleConfig& config)
    : config_(config), decay_(config.decay_steps()), warmup_(config.warmup_steps()) {
  const std::vector<std::string> problems = lr_schedule_violations(config);
  if (!problems.empty()) fail("invalid lr schedule: {}", fmt::join(problems, "; "));
}

float LrSchedule::at_samples(int64_t samples) const {
  const double lr = config_.lr, min_lr = config_.min_lr, init = config_.warmup_init;
  const double n = static_cast<double>(samples);
  if (warmup_ > 0 && n <= warmup_) return static_cast<float>(init + (lr - init) * n / warmup_);
  if (config_.style == LrDecayStyle::Constant) return config_.lr;
  if (samples > decay_) return config_.min_lr;
  const double ratio = (n - warmup_) / (static_cast<double>(decay_) - warmup_);
  const double coeff = config_.style == LrDecayStyle::Linear ? 1.0 - ratio
                                                             : 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
  return static_cast<float>(min_lr + coeff * (lr - min_lr));
}

}  // namespace tessel
