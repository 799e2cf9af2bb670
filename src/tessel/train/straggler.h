// --log-straggler (Megatron's flag): which rank holds the others up. Every rank waits for the
// slowest at each collective, so their step times are all alike; what differs is the time a rank
// computes, its step less the time it was blocked in communication (comm.h's counters). Every
// --log-interval iterations the ranks gather their mean compute time over the interval, and the
// first rank logs the median and the --straggler-minmax-count slowest and fastest ranks.
#pragma once

#include <cstdint>

#include "tessel/parallel/groups.h"
#include "tessel/train/log.h"
#include "tessel/train/options.h"

namespace tessel {

class StragglerLog {
 public:
  explicit StragglerLog(const LogOptions& options) : options_(options) {}
  // After each iteration; collective over the world at the end of every interval.
  void add(const IterationStats& s, TrainLog& log, ProcessGroups& groups);

 private:
  const LogOptions& options_;
  int64_t first_ = 0;  // the interval's first iteration
  int iterations_ = 0;
  double compute_ms_ = 0;
};

}  // namespace tessel
