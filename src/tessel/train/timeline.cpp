#include "tessel/train/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/core/error.h"
#include "tessel/core/writable.h"
#include "tessel/train/run_timeline.h"

namespace tessel {

namespace {

// Each rank sends kFields floats per record: a header (pp, tp, dp, cp, 0, ...), then its records,
// ms after the earliest event of any rank: a compute action (kind F, B, I or W as 0 to 3, model
// chunk, microbatch, 0, iteration, start, end, 0) or a call (kCallRecord, group kind, kind of
// call, peer, iteration, start, end, bytes).
constexpr int kFields = 8;
constexpr float kCallRecord = 4;

double since_epoch_us(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

RunTimeline decode(const std::vector<float>& all, const std::vector<int64_t>& starts) {
  RunTimeline t;
  for (size_t r = 0; r + 1 < starts.size(); ++r) {
    const float* h = all.data() + starts[r];
    const int rank = static_cast<int>(r);
    t.lanes.push_back(fmt::format("rank {} (pp {}, tp {}, dp {}, cp {})", r, h[0], h[1], h[2], h[3]));
    for (int64_t i = kFields; i < starts[r + 1] - starts[r]; i += kFields) {
      const float* a = h + i;
      const auto iteration = static_cast<int64_t>(a[4]);
      if (a[0] == kCallRecord)
        t.calls.push_back({rank, static_cast<GroupKind>(a[1]), static_cast<CommOp>(a[2]), static_cast<int>(a[3]),
                           iteration, a[7], a[5], a[6]});
      else
        t.boxes.push_back({rank, static_cast<ActionKind>(a[0]), static_cast<int>(a[1]), static_cast<int>(a[2]),
                           iteration, a[5], a[6]});
    }
  }
  return t;
}

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

void write_pipeline_timeline(const std::string& path, const std::string& flag,
                             const std::vector<TimedIteration>& iterations, bool shown, ProcessGroups& groups) {
  Comm& world = groups.world();
  const RankCoords& at = groups.coords();
  // The earliest event of any rank, as −max(−t), the one reduction that gives a minimum.
  double earliest = -std::numeric_limits<double>::max();
  for (const TimedIteration& it : iterations) {
    earliest = std::max(earliest, -since_epoch_us(it.stats.started));
    for (const ProcessGroups::GroupCall& c : it.calls) earliest = std::max(earliest, -1e6 * c.call.start);
  }
  world.all_reduce(&earliest, 1, ReduceOp::Max);
  const auto ms = [&](double epoch_us) { return static_cast<float>((epoch_us + earliest) / 1e3); };
  std::vector<float> mine = {static_cast<float>(at.pp), static_cast<float>(at.tp), static_cast<float>(at.dp),
                             static_cast<float>(at.cp), 0, 0, 0, 0};
  std::set<int> chunks;  // this rank's model chunks
  for (const TimedIteration& it : iterations) {
    const double started_us = since_epoch_us(it.stats.started);
    const auto iteration = static_cast<float>(it.iteration);
    for (const PipelineExecutor::Stats::TimedAction& a : it.stats.timeline) {
      chunks.insert(a.model_chunk);
      if (!shown) continue;
      mine.insert(mine.end(), {static_cast<float>(a.kind), static_cast<float>(a.model_chunk),
                               static_cast<float>(a.microbatch), 0, iteration, ms(started_us + 1e6 * a.start),
                               ms(started_us + 1e6 * a.end), 0});
    }
    if (!shown) continue;
    for (const ProcessGroups::GroupCall& c : it.calls)
      mine.insert(mine.end(), {kCallRecord, static_cast<float>(c.group), static_cast<float>(c.call.op),
                               static_cast<float>(c.call.peer), iteration, ms(1e6 * c.call.start),
                               ms(1e6 * c.call.end), static_cast<float>(c.call.bytes)});
  }
  std::vector<int64_t> starts;
  const std::vector<float> all = all_gather_lists(world, mine, starts);
  float most_chunks = static_cast<float>(chunks.size());  // named in the boxes where above 1
  world.all_reduce(&most_chunks, 1, ReduceOp::Max);
  check_together(world, [&] {
    if (world.rank() != 0) return;
    RunTimeline timeline = decode(all, starts);
    timeline.chunks_per_rank = static_cast<int>(most_chunks);
    timeline.first_iteration = iterations.front().iteration;
    timeline.last_iteration = iterations.back().iteration;
    const std::string iterations_text = timeline.first_iteration == timeline.last_iteration
                                            ? fmt::format("iteration {}", timeline.first_iteration)
                                            : fmt::format("iterations {} to {}", timeline.first_iteration,
                                                          timeline.last_iteration);
    try {
      // Replaceable: a picture to look at, made again by rerunning; no fsync.
      write_file_atomically(path,
                            ends_with(path, ".svg")
                                ? run_timeline_svg(timeline, fmt::format("tessel train {}: {} as it ran on {} ranks",
                                                                         flag, iterations_text, world.size()))
                                : run_timeline_chrome_trace(timeline, "tessel train " + flag),
                            Durability::kReplaceable);
    } catch (const Error& e) {  // "PATH: write failed (...)", said once with the flag
      std::string why = e.what();
      if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);
      fail("{} {}: {}", flag, path, why);
    }
  });
}

}  // namespace tessel
