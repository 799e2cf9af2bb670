// A real run as tessel train --pipeline-timeline and --profile draw it: every rank's compute
// actions and communication calls of some iterations, gathered to the first rank (timeline.h),
// and the two files made of it — a Chrome trace (chrome://tracing, ui.perfetto.dev) and an SVG
// picture in `tessel schedule`'s style, with each send drawn as an arrow to its receive and each
// collective as a mark on its rank's lane. Microbatches are numbered from 1 in both, as the seed
// and `tessel schedule` number them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/parallel/layout.h"
#include "tessel/pipeline/schedule.h"

namespace tessel {

// Times in ms after the earliest event of any rank.
struct RunTimeline {
  struct Box {
    int rank;
    ActionKind kind;
    int model_chunk, microbatch;  // microbatch from 0, as the executor runs them
    int64_t iteration;
    double start, end;
  };
  struct Call {
    int rank;
    GroupKind group;
    CommOp op;
    int peer;  // a send's or receive's world rank; -1 for a collective
    int64_t iteration;
    double bytes, start, end;
  };
  std::vector<std::string> lanes;  // a name per world rank: "rank 0 (pp 0, tp 0, dp 0, cp 0)"
  std::vector<Box> boxes;
  std::vector<Call> calls;
  int chunks_per_rank = 1;
  int64_t first_iteration = 0, last_iteration = 0;
};

// A send and the receive that took it, as indices into calls: the k-th send from rank a to rank b
// over a group in an iteration pairs with the k-th receive on b from a over it (the order both
// were posted in). A send or receive left without a partner is in none.
struct RunMessage {
  size_t send, recv;
};
std::vector<RunMessage> pair_messages(const RunTimeline& timeline);

bool is_collective(CommOp op);

std::string run_timeline_chrome_trace(const RunTimeline& timeline, const std::string& tool);
std::string run_timeline_svg(const RunTimeline& timeline, const std::string& title);

}  // namespace tessel
