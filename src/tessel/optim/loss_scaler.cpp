#include "tessel/optim/loss_scaler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"

namespace tessel {

LossScaling loss_scaling(const LossScaleOptions& options, Precision precision, bool distributed_optimizer) {
  const bool given = options.loss_scale && *options.loss_scale != 0.0f;
  if (given && (precision != Precision::FP32 || distributed_optimizer)) return LossScaling::Constant;
  return precision == Precision::FP16 && !given ? LossScaling::Dynamic : LossScaling::None;
}

std::vector<std::string> loss_scale_violations(const LossScaleOptions& o, LossScaling scaling) {
  std::vector<std::string> v;
  const auto positive = [&v](const char* flag, double value) {
    if (!(value > 0) || !std::isfinite(value)) v.push_back(fmt::format("{} must be positive and finite (got {})", flag, value));
  };
  if (scaling == LossScaling::Constant) positive("--loss-scale", *o.loss_scale);
  if (scaling != LossScaling::Dynamic) return v;
  positive("--initial-loss-scale", o.initial_loss_scale);
  positive("--min-loss-scale", o.min_loss_scale);
  if (o.min_loss_scale > o.initial_loss_scale)
    v.push_back(fmt::format("--min-loss-scale {} is above --initial-loss-scale {}", o.min_loss_scale,
                            o.initial_loss_scale));
  positive("--loss-scale-window", o.loss_scale_window);
  if (o.hysteresis <= 0) v.push_back(fmt::format("--hysteresis must be positive (got {})", o.hysteresis));
  return v;
}

LossScaler::LossScaler(LossScaling scaling, const LossScaleOptions& options) : scaling_(scaling), options_(options) {
  if (scaling == LossScaling::Constant) state_.scale = *options.loss_scale;
  if (scaling == LossScaling::Dynamic) state_ = {options.initial_loss_scale, 0, options.hysteresis};
}

float LossScaler::inv_scale() const { return static_cast<float>(1.0 / static_cast<double>(state_.scale)); }

void LossScaler::update(bool found_inf) {
  if (scaling_ != LossScaling::Dynamic) return;
  if (found_inf) {
    state_.growth_tracker = 0;
    if (--state_.hysteresis_tracker <= 0) state_.scale = std::max(state_.scale * 0.5f, options_.min_loss_scale);
    return;
  }
  // Compared as Megatron compares its int tracker with the (float) window: a fractional window
  // is never reached.
  if (static_cast<double>(++state_.growth_tracker) == options_.loss_scale_window) {
    state_.growth_tracker = 0;
    state_.hysteresis_tracker = options_.hysteresis;
    state_.scale *= 2.0f;
  }
}

nlohmann::json LossScaler::to_json() const {
  return {{"scale", state_.scale},
          {"growth_tracker", state_.growth_tracker},
          {"hysteresis_tracker", state_.hysteresis_tracker}};
}

void LossScaler::restore(const nlohmann::json& record, const std::string& where) {
  if (scaling_ != LossScaling::Dynamic) return;  // a constant scale is the flag's, as Megatron's
  const auto field = [&](const char* key, bool (nlohmann::json::*is)() const noexcept) -> const nlohmann::json& {
    TESSEL_CHECK(record.is_object() && record.contains(key) && (record[key].*is)(),
                 "{}: grad_scaler.{} is missing or not a number", where, key);
    return record[key];
  };
  State s{field("scale", &nlohmann::json::is_number).get<float>(),
          field("growth_tracker", &nlohmann::json::is_number_integer).get<int64_t>(),
          field("hysteresis_tracker", &nlohmann::json::is_number_integer).get<int64_t>()};
  TESSEL_CHECK(s.scale > 0 && std::isfinite(s.scale), "{}: grad_scaler.scale {} is not a positive finite number",
               where, s.scale);
  state_ = s;
}

}  // namespace tessel
