#include "tessel/train/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/core/error.h"
#include "tessel/core/writable.h"

namespace tessel {

namespace {

// Each rank sends kFields floats per record: a header (pp, tp, dp, cp, 0, 0), then its actions
// (kind, model chunk, microbatch, iteration, start, end; ms after the earliest rank's start).
constexpr int kFields = 6;

char action_letter(float kind) { return "FBIW"[static_cast<int>(kind)]; }

nlohmann::json trace_events(const std::vector<float>& all, const std::vector<int64_t>& counts,
                            const std::vector<int64_t>& offsets, int chunks_per_rank, int64_t first,
                            int64_t last, const std::string& flag) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < counts.size(); ++r) {
    const float* h = all.data() + offsets[r];
    events.push_back(
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", 0},
         {"tid", r},
         {"args",
          {{"name", fmt::format("rank {} (pp {}, tp {}, dp {}, cp {})", r, h[0], h[1], h[2], h[3])}}}});
    events.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", r}, {"args", {{"sort_index", r}}}});
    for (int64_t i = kFields; i < counts[r]; i += kFields) {
      const float* a = h + i;
      const int chunk = static_cast<int>(a[1]), microbatch = static_cast<int>(a[2]);
      const std::string name = chunks_per_rank > 1
                                   ? fmt::format("{}{} c{}", action_letter(a[0]), microbatch, chunk)
                                   : fmt::format("{}{}", action_letter(a[0]), microbatch);
      events.push_back({{"name", name},
                        {"cat", std::string(1, action_letter(a[0]))},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", r},
                        {"ts", 1e3 * a[4]},
                        {"dur", 1e3 * (a[5] - a[4])},
                        {"args", {{"microbatch", microbatch}, {"model_chunk", chunk},
                                  {"iteration", static_cast<int64_t>(a[3])}}}});
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"iterations", {first, last}}, {"tool", "tessel train " + flag}}}};
}

double since_epoch_us(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

}  // namespace

void write_pipeline_timeline(const std::string& path, const std::string& flag,
                             const std::vector<TimedIteration>& iterations, bool shown, ProcessGroups& groups) {
  Comm& world = groups.world();
  const RankCoords& at = groups.coords();
  // The earliest start of any rank, as −max(−t), the one reduction that gives a minimum.
  double earliest = -std::numeric_limits<double>::max();
  for (const TimedIteration& it : iterations) earliest = std::max(earliest, -since_epoch_us(it.stats.started));
  world.all_reduce(&earliest, 1, ReduceOp::Max);
  std::vector<float> mine = {static_cast<float>(at.pp), static_cast<float>(at.tp), static_cast<float>(at.dp),
                             static_cast<float>(at.cp), 0, 0};
  std::set<int> chunks;  // this rank's model chunks
  for (const TimedIteration& it : iterations) {
    const double start_ms = (since_epoch_us(it.stats.started) + earliest) / 1e3;
    for (const PipelineExecutor::Stats::TimedAction& a : it.stats.timeline) {
      chunks.insert(a.model_chunk);
      if (!shown) continue;
      mine.insert(mine.end(), {static_cast<float>(a.kind), static_cast<float>(a.model_chunk),
                               static_cast<float>(a.microbatch), static_cast<float>(it.iteration),
                               static_cast<float>(start_ms + 1e3 * a.start), static_cast<float>(start_ms + 1e3 * a.end)});
    }
  }
  std::vector<float> sizes(world.size());
  const float size_here = static_cast<float>(mine.size());
  world.all_gather(&size_here, sizes.data(), 1);
  std::vector<int64_t> counts(world.size()), offsets(world.size());
  int64_t total = 0;
  for (int r = 0; r < world.size(); ++r) {
    counts[r] = static_cast<int64_t>(sizes[r]);
    offsets[r] = total;
    total += counts[r];
  }
  std::vector<float> all(total);
  world.all_gather_v(mine.data(), all.data(), counts.data(), offsets.data());
  float most_chunks = static_cast<float>(chunks.size());  // named in the boxes where above 1
  world.all_reduce(&most_chunks, 1, ReduceOp::Max);
  check_together(world, [&] {
    if (world.rank() != 0) return;
    try {
      // Replaceable: a trace to look at, made again by rerunning; no fsync.
      write_file_atomically(path,
                            trace_events(all, counts, offsets, static_cast<int>(most_chunks),
                                         iterations.front().iteration, iterations.back().iteration, flag)
                                    .dump() +
                                "\n",
                            Durability::kReplaceable);
    } catch (const Error& e) {  // "PATH: write failed (...)", said once with the flag
      std::string why = e.what();
      if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);
      fail("{} {}: {}", flag, path, why);
    }
  });
}

}  // namespace tessel
