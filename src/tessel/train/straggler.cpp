#include "tessel/train/straggler.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace tessel {

void StragglerLog::add(const IterationStats& s, TrainLog& log, ProcessGroups& groups) {
  if (!options_.straggler) return;
  if (iterations_ == 0) first_ = s.iteration;
  double blocked_ms = 0;
  for (const IterationStats::Comm& c : s.comm) blocked_ms += 1e3 * c.seconds;
  compute_ms_ += std::max(0.0, s.iteration_time_ms - blocked_ms);
  ++iterations_;
  if (s.iteration % std::max<int64_t>(options_.interval, 1) != 0) return;

  Comm& world = groups.world();
  const float mine = static_cast<float>(compute_ms_ / iterations_);
  std::vector<float> ms(world.size());
  world.all_gather(&mine, ms.data(), 1);
  std::vector<int> ranks(world.size());
  std::iota(ranks.begin(), ranks.end(), 0);
  std::stable_sort(ranks.begin(), ranks.end(), [&](int a, int b) { return ms[a] > ms[b]; });
  std::vector<float> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
  const int named = static_cast<int>(std::min<int64_t>(options_.straggler_minmax_count, world.size()));
  auto list = [&](bool slowest) {
    std::string text;
    for (int i = 0; i < named; ++i) {
      const int r = ranks[slowest ? i : world.size() - 1 - i];
      text += fmt::format("{}rank {} {:.1f} ms ({:.2f}× the median)", i ? ", " : "", r, ms[r],
                          median > 0 ? ms[r] / median : 1.0);
    }
    return text;
  };
  log.message(fmt::format("straggler: iterations {}-{}: compute time per iteration (the step less "
                          "its time blocked in communication), median {:.1f} ms over {} ranks; "
                          "slowest {}; fastest {}",
                          first_, s.iteration, median, world.size(), list(true), list(false)));
  iterations_ = 0;
  compute_ms_ = 0;
}

}  // namespace tessel
