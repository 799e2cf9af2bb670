#include "tessel/train/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/core/error.h"
#include "tessel/core/writable.h"

namespace tessel {

namespace {

// Each rank sends a header (its coordinates and its start after the earliest rank's, in ms) and
// then its actions, kFields floats each: header pp, tp, dp, cp, start; action kind, model chunk,
// microbatch, start, end.
constexpr int kFields = 5;

char action_letter(float kind) { return "FBIW"[static_cast<int>(kind)]; }

nlohmann::json trace_events(const std::vector<float>& all, const std::vector<int64_t>& counts,
                            const std::vector<int64_t>& offsets, int chunks_per_rank, int64_t iteration) {
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
    const double start_ms = h[4];
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
                        {"ts", 1e3 * (start_ms + a[3])},
                        {"dur", 1e3 * (a[4] - a[3])},
                        {"args", {{"microbatch", microbatch}, {"model_chunk", chunk}}}});
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"iteration", iteration}, {"tool", "tessel train --pipeline-timeline"}}}};
}

}  // namespace

void write_pipeline_timeline(const std::string& path, const PipelineExecutor::Stats& last, int64_t iteration,
                             ProcessGroups& groups) {
  Comm& world = groups.world();
  const RankCoords& at = groups.coords();
  // The earliest start, as −max(−t), the one reduction that gives a minimum.
  const double started_us =
      std::chrono::duration<double, std::micro>(last.started.time_since_epoch()).count();
  double earliest = -started_us;
  world.all_reduce(&earliest, 1, ReduceOp::Max);
  std::vector<float> mine = {static_cast<float>(at.pp), static_cast<float>(at.tp), static_cast<float>(at.dp),
                             static_cast<float>(at.cp), static_cast<float>((started_us + earliest) / 1e3)};
  std::set<int> chunks;  // this rank's model chunks
  for (const PipelineExecutor::Stats::TimedAction& a : last.timeline) {
    mine.insert(mine.end(), {static_cast<float>(a.kind), static_cast<float>(a.model_chunk),
                             static_cast<float>(a.microbatch), static_cast<float>(1e3 * a.start),
                             static_cast<float>(1e3 * a.end)});
    chunks.insert(a.model_chunk);
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
      write_file_atomically(
          path, trace_events(all, counts, offsets, static_cast<int>(most_chunks), iteration).dump() + "\n",
          Durability::kReplaceable);
    } catch (const Error& e) {
      fail("--pipeline-timeline {}: {}", path, e.what());
    }
  });
}

}  // namespace tessel
