#include "tessel/train/batch_schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <optional>

namespace tessel {

namespace {

// A number of the schedule as Megatron's _parse_numeric_value reads it: Python's float() of the
// text without its suffix (a sign, digits with single underscores between them, a fraction, an
// exponent), times the suffix's power of ten, truncated toward 0. Nothing when it is none, or
// (where Python's integers would go on) beyond int64.
std::optional<int64_t> schedule_number(std::string_view text) {
  std::string s;
  for (char c : text) s += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double multiplier = 1;
  if (!s.empty()) {
    const char suffix = s.back();
    const double powers[] = {1e12, 1e9, 1e6, 1e3};
    const std::string_view suffixes = "TBMK";
    if (const size_t at = suffixes.find(suffix); at != std::string_view::npos) {
      multiplier = powers[at];
      s.pop_back();
    }
  }
  if (!s.empty() && s.front() == '+') s.erase(0, 1);
  std::string digits;  // underscores dropped where Python allows them: between two digits
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') {
      digits += s[i];
      continue;
    }
    if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
        !std::isdigit(static_cast<unsigned char>(s[i + 1])))
      return std::nullopt;
  }
  double value = 0;
  const char* end = digits.data() + digits.size();
  const auto [stop, error] = std::from_chars(digits.data(), end, value);
  if (digits.empty() || error != std::errc() || stop != end) return std::nullopt;
  const double scaled = value * multiplier;
  if (!std::isfinite(scaled) || std::fabs(scaled) >= 9.2e18) return std::nullopt;
  return static_cast<int64_t>(scaled);
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

// Iterations of `batch` from `consumed` samples until `end` are consumed.
int64_t iterations_until(int64_t consumed, int64_t end, int64_t batch) {
  return consumed >= end ? 0 : (end - consumed + batch - 1) / batch;
}

}  // namespace

BatchSchedule BatchSchedule::constant(int64_t global_batch) {
  BatchSchedule s;
  s.steps_ = {{.from_sample = 0, .global_batch = global_batch}};
  return s;
}

BatchSchedule BatchSchedule::parse(std::string_view text, int64_t seq_length,
                                   std::vector<std::string>& violations) {
  const size_t before = violations.size();
  const auto broken = [&](const std::string& what) {
    violations.push_back(fmt::format("--step-batch-size-schedule \"{}\": {}", text, what));
  };
  std::string spaced(text);
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  std::vector<BatchStep> steps;
  size_t at = 0;
  while ((at = spaced.find_first_not_of(" \t\n\r\f\v", at)) != std::string::npos) {
    const size_t end = std::min(spaced.find_first_of(" \t\n\r\f\v", at), spaced.size());
    const std::string entry = spaced.substr(at, end - at);
    at = end;
    const size_t colon = entry.find(':');
    if (colon == std::string::npos) {
      broken(fmt::format("entry '{}' is not THRESHOLD:BATCH_SIZE", entry));
      continue;
    }
    const std::string threshold = entry.substr(0, colon), batch = entry.substr(colon + 1);
    const std::optional<int64_t> from = schedule_number(threshold), size = schedule_number(batch);
    for (const auto& [number, value] : {std::pair{threshold, from}, std::pair{batch, size}})
      if (!value)
        broken(fmt::format("'{}' in entry '{}' is not a number with an optional K, M, B or T suffix "
                           "(within ±9.2e18)", number, entry));
    if (from && size)
      steps.push_back({.from_sample = seq_length > 0 ? floor_div(*from, seq_length) : *from,
                       .global_batch = *size});
  }
  if (violations.size() == before) {
    std::stable_sort(steps.begin(), steps.end(),
                     [](const BatchStep& a, const BatchStep& b) { return a.from_sample < b.from_sample; });
    const std::string unit = seq_length > 0 ? fmt::format(" (tokens / --seq-length {})", seq_length) : "";
    if (steps.empty()) broken("no entry");
    else if (steps.front().from_sample != 0)
      broken(fmt::format("the first threshold must be 0, got {} samples{}", steps.front().from_sample, unit));
    for (size_t i = 1; i < steps.size(); ++i)
      if (steps[i].from_sample == steps[i - 1].from_sample)
        broken(fmt::format("the thresholds must be strictly increasing, got {} samples{} twice",
                           steps[i].from_sample, unit));
    for (const BatchStep& step : steps)
      if (step.global_batch <= 0) broken(fmt::format("batch size {} is not positive", step.global_batch));
  }
  BatchSchedule s = constant(1);
  if (violations.size() == before) s.steps_ = std::move(steps);
  return s;
}

int64_t BatchSchedule::batch_at(int64_t consumed) const {
  int64_t batch = steps_.front().global_batch;
  for (const BatchStep& step : steps_)
    if (consumed >= step.from_sample) batch = step.global_batch;
  return batch;
}

BatchSchedule::Walk BatchSchedule::walk(int64_t iterations) const {
  Walk w;
  int64_t left = iterations;
  if (iterations >= resumed_iteration_) {  // a step below the resumed consumption takes none
    w.consumed = resumed_consumed_;
    left -= resumed_iteration_;
  }
  for (size_t k = 0; k < steps_.size() && left > 0; ++k) {
    const int64_t batch = steps_[k].global_batch;
    const int64_t here =
        k + 1 == steps_.size() ? left : std::min(left, iterations_until(w.consumed, steps_[k + 1].from_sample, batch));
    if (here > 0) w.reached.push_back(steps_[k]);
    w.consumed += here * batch;
    left -= here;
  }
  return w;
}

int64_t BatchSchedule::iterations_for(int64_t samples) const {
  int64_t consumed = 0, iterations = 0;
  for (size_t k = 0; k < steps_.size() && consumed < samples; ++k) {
    const int64_t end = k + 1 == steps_.size() ? samples : std::min(samples, steps_[k + 1].from_sample);
    const int64_t here = iterations_until(consumed, end, steps_[k].global_batch);
    consumed += here * steps_[k].global_batch;
    iterations += here;
  }
  return iterations;
}

BatchSchedule BatchSchedule::resumed_after(int64_t iteration, int64_t consumed) const {
  BatchSchedule s = *this;
  s.resumed_iteration_ = iteration;
  s.resumed_consumed_ = consumed;
  return s;
}

std::string BatchSchedule::describe(int64_t seq_length) const {
  std::vector<std::string> steps;
  for (const BatchStep& step : steps_)
    steps.push_back(seq_length > 0 ? fmt::format("{} from sample {} ({} tokens)", step.global_batch,
                                                 step.from_sample, step.from_sample * seq_length)
                                   : fmt::format("{} from sample {}", step.global_batch, step.from_sample));
  return fmt::format("--step-batch-size-schedule: global batch {}", fmt::join(steps, ", "));
}

}  // namespace tessel
