// What a training run reports besides its iteration lines: the run's shape at the start, and at
// the end the pipeline's bubble, (--profile-report) GEMM throughput, memory and communication,
// and the Chrome traces of --pipeline-timeline and --profile (train/timeline.h).
#pragma once

#include <array>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "tessel/core/params.h"
#include "tessel/data/dataset_builder.h"
#include "tessel/kernels/kernels.h"
#include "tessel/model/transformer.h"
#include "tessel/parallel/groups.h"
#include "tessel/pipeline/executor.h"
#include "tessel/train/log.h"
#include "tessel/train/plan.h"
#include "tessel/train/timeline.h"

namespace tessel {

// The model, the data and the batch arithmetic, and (several ranks) the layout.
void report_run(TrainLog& log, const TrainPlan& plan, ProcessGroups& groups,
                const ParamRegistry& params, const GptDataSplits& data);

// Where a rank's communication went: (rank, group kind, kind of call, peer; -1 first: all peers).
using CommKey = std::tuple<int, std::string, std::string, int>;

// What the end-of-run reports add up over the iterations. The first iteration sizes buffers and
// warms caches, so profiles start at the second (the pipeline's idle time too, unless the run
// has one iteration).
class RunTotals {
 public:
  RunTotals(const Kernels& k, const TrainPlan& plan, ProcessGroups& groups)
      : k_(k), plan_(plan), groups_(groups) {}
  // Before iteration `it` runs: turns the GEMM counters on where the profile starts.
  void start_iteration(int64_t it);
  // After it: its statistics and the pipeline's.
  void add(const IterationStats& s, const PipelineExecutor::Stats& pipeline);  // collective
  // Each rank's peak saved activations, with PP > 1 its idle fraction, peak microbatches in
  // flight and mean time per compute action (F, B, I, W); then with --profile-report GEMM
  // throughput, peak memory against the analytic sum and communication; with --pipeline-timeline
  // the last iteration's actions, with --profile the profiler window's. Collective over the world.
  // `read_seconds`: the data loader's thread's reading of one batch.
  void report(TrainLog& log, const ParamRegistry& params, const TransformerChunk& chunk,
              double read_seconds);

 private:
  const Kernels& k_;
  const TrainPlan& plan_;
  ProcessGroups& groups_;
  double profiled_seconds_ = 0, profiled_data_wait_seconds_ = 0;
  int profiled_iterations_ = 0;
  std::map<CommKey, IterationStats::PeerComm> profiled_comm_;  // every rank's, summed
  // The spans of the iterations' pipelines over the world: the pending one's, the latest end so
  // far, and the time the counted ones cover.
  void add_span();  // adds the pending span once it has arrived
  void report_profile_window(TrainLog& log);  // --profile's trace; collective
  std::array<double, 2> span_{};
  Request span_request_;
  bool span_pending_ = false, span_counted_ = false;
  double last_end_ = 0, span_seconds_ = 0;
  PipelineExecutor::Stats actions_;  // compute time and count per action kind, summed
  std::vector<TimedIteration> last_;     // the last iteration's, for --pipeline-timeline
  std::vector<TimedIteration> profiled_;  // the --profile window's
  int peak_in_flight_ = 0;
  int64_t peak_activation_bytes_ = 0;
};

}  // namespace tessel
