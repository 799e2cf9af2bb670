#include "demo_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "tessel/core/error.h"

namespace tessel {

ProcessGroups demo_groups(const MpiRuntime& runtime, const std::string& name,
                          ParallelConfig config) {
  if (runtime.world_size() != kDemoRanks)
    throw ConfigError(
        fmt::format("tessel demo {} needs {} ranks, this run has {}: "
                    "run it as `mpirun -n {} tessel demo {}`",
                    name, kDemoRanks, runtime.world_size(), kDemoRanks, name));
  config.world = kDemoRanks;
  return ProcessGroups::create(Layout(config), runtime.world_rank());
}

std::vector<float> parse_floats(const std::string& text, const char* flag) {
  std::vector<float> values;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    try {
      values.push_back(std::stof(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || item.find_first_not_of(" ", used) != std::string::npos)
      throw ConfigError(fmt::format("{} '{}': not a comma-separated list of numbers", flag, text));
  }
  if (values.empty()) throw ConfigError(fmt::format("{} is empty", flag));
  return values;
}

std::string list_text(const float* values, int64_t n) {
  return fmt::format("[{:.4g}]", fmt::join(values, values + n, ", "));
}

float max_abs_difference(const float* a, const float* b, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    // Equal infinities (a row that sees no key has lse −inf) differ by nothing; std::max would
    // pass a NaN over.
    const float d = a[i] == b[i] ? 0.0f : std::fabs(a[i] - b[i]);
    m = std::isnan(d) ? INFINITY : std::max(m, d);
    if (std::isinf(m)) return m;
  }
  return m;
}

// mpirun forwards each rank's stdout on its own, so ranks printing for themselves could
// interleave. The Comm moves floats, and a byte (0–255) is exact in a float.
void print_by_rank(Comm& world, const std::string& text) {
  const float length = static_cast<float>(text.size());
  std::vector<float> lengths(world.size());
  world.all_gather(&length, lengths.data(), 1);
  const int64_t longest =
      static_cast<int64_t>(*std::max_element(lengths.begin(), lengths.end())) + 1;  // never 0
  std::vector<float> mine(longest, 0.0f), all(longest * world.size());
  for (size_t i = 0; i < text.size(); ++i) mine[i] = static_cast<unsigned char>(text[i]);
  world.all_gather(mine.data(), all.data(), longest);
  if (world.rank() != 0) return;
  for (int r = 0; r < world.size(); ++r)
    for (int64_t i = 0; i < static_cast<int64_t>(lengths[r]); ++i)
      std::putchar(static_cast<char>(static_cast<unsigned char>(all[r * longest + i])));
  std::fflush(stdout);
}

void print_from_rank0(Comm& world, const std::string& text) {
  print_by_rank(world, world.rank() == 0 ? text : std::string());
}

void check_against_one_process(Comm& world, float difference, const std::string& result) {
  world.all_reduce(&difference, 1, ReduceOp::Max);
  if (difference > 1e-5f)
    throw JobError(fmt::format("{} differs from one process's by {:.1e}", result, difference));
}

}  // namespace tessel
