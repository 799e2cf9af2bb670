// The names inside a checkpoint that its writer (checkpoint.cpp) and its readers
// (checkpoint_read.cpp) share.
#pragma once

#include <fmt/format.h>

#include <string>

namespace tessel::checkpoint_format {

inline constexpr const char* kExpAvg = "optim.exp_avg/";
inline constexpr const char* kExpAvgSq = "optim.exp_avg_sq/";
inline constexpr const char* kSlicesKey = "tessel.slices";

inline std::string rank_file_name(int rank) { return fmt::format("rank_{:05d}.safetensors", rank); }

}  // namespace tessel::checkpoint_format
