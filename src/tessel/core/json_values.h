// Numbers read from JSON files (model configs, Hugging Face config.json, checkpoint metadata),
// checked. nlohmann's get<int>() turns 4294967298 into 2 and 2.7 into 2 without a word; these
// refuse both, and a float that is not finite or does not fit.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "tessel/core/error.h"

namespace tessel {

// A whole number within [lo, hi]: a JSON integer, or a JSON float without a fraction (4.0).
// Throws tessel::Error "SOURCE: KEY VALUE is not a whole number in [lo, hi]".
inline int64_t json_whole_number(const nlohmann::json& value, const std::string& source,
                                 const std::string& key, int64_t lo, int64_t hi) {
  auto refuse = [&] {
    fail("{}: {} {} is not a whole number in [{}, {}]", source, key, value.dump(), lo, hi);
  };
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi)) refuse();
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) {
    const int64_t x = value.get<int64_t>();
    if (x < lo || x > hi) refuse();
    return x;
  }
  if (!value.is_number_float()) refuse();
  const double d = value.get<double>();
  // Doubles up to 2^63 hold only whole numbers beyond 2^53: the bounds compare as doubles.
  if (!std::isfinite(d) || d != std::floor(d) || d < static_cast<double>(lo) ||
      d > static_cast<double>(hi))
    refuse();
  return static_cast<int64_t>(d);
}

// An integer of type T (int, int64_t, uint32_t, ...) within T's range.
template <typename T>
T json_integer(const nlohmann::json& value, const std::string& source, const std::string& key) {
  static_assert(std::is_integral_v<T> && sizeof(T) <= 8 && !std::is_same_v<T, uint64_t>);
  return static_cast<T>(json_whole_number(value, source, key, std::numeric_limits<T>::min(),
                                          std::numeric_limits<T>::max()));
}

// A finite number that fits T (float or double).
template <typename T>
T json_number(const nlohmann::json& value, const std::string& source, const std::string& key) {
  TESSEL_CHECK(value.is_number(), "{}: {} {} is not a number", source, key, value.dump());
  const double d = value.get<double>();
  TESSEL_CHECK(std::isfinite(d) && std::abs(d) <= std::numeric_limits<T>::max(),
               "{}: {} {} is not a finite number of its type", source, key, value.dump());
  return static_cast<T>(d);
}

}  // namespace tessel
