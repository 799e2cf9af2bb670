// One layout of one run, and what the planner predicts for it: memory per pipeline stage (every
// rank of a stage holds the same: TP shards and EP experts are equal), the step time and its
// parts, throughput and MFU. Built from the code that runs the layout — the rank layout
// (parallel/layout), the stage assignment (pipeline/stages), the schedule generators, lowering
// and simulator (pipeline/schedule, simulate) — and the models in plan/memory.h and plan/time.h.
#pragma once

#include <string>
#include <vector>

#include "tessel/plan/run.h"

namespace tessel {

struct StageMemory {
  int stage = 0;
  std::vector<int> ranks;       // the world ranks of this stage (the real rank layout)
  int layers = 0;               // Transformer layers it holds
  int64_t params = 0;           // on one rank of the stage
  int64_t expert_params = 0;    // of those, routed experts
  double weights = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0, runtime = 0;
  int peak_in_flight = 0;       // (microbatch, chunk) forwards whose backward had not run, at the peak
  std::vector<Term> terms;      // every part with its formula
  double total() const { return weights + grads + optimizer + activations + buffers + runtime; }
};

struct StepTime {
  double step = 0;          // seconds per iteration
  int stage = 0;            // the busiest pipeline stage, whose parts these are
  double compute = 0;       // its compute (GEMMs, memory-bound kernels, recompute)
  double tp_comm = 0, cp_comm = 0, ep_comm = 0;  // exposed
  double pp_comm = 0;       // its blocked point-to-point time
  double idle = 0;          // its idle time in the simulated schedule: waiting for the other stages
  double bubble = 0;        // the pipeline's bubble: all stages' idle share of the schedule (a fraction)
  double dp_comm = 0, embedding_sync = 0, optimizer = 0;
  double makespan = 0;      // the simulated pipeline part
  std::vector<Term> terms;
};

// A layout's memory against the limit, for the fullest stage: how much is spare, or by how much
// (and what fraction of the limit) it is over. The runtime allowance (the cluster's
// runtime_memory_gib per rank, --runtime-memory-gib) is part of the peak and stated beside it.
struct MemoryVerdict {
  int stage = 0;            // the fullest stage
  double peak_gib = 0, limit_gib = 0, runtime_gib = 0;
  double spare_gib() const { return limit_gib - peak_gib; }  // negative: over
  double over_fraction() const { return peak_gib / limit_gib - 1; }
  bool fits() const { return peak_gib <= limit_gib; }
  std::string text() const;  // "fits, 3.8 GiB spare" | "over by 2.78 GiB (3.5 % of 80.0 GiB)"
};
MemoryVerdict memory_verdict(const std::vector<StageMemory>& stages, double limit_gib);

struct Estimate {
  PlanRun run;
  std::vector<StageMemory> stages;  // one per pipeline rank
  StepTime time;
  double model_flops = 0;           // per iteration (model_flops_per_iteration)
  double tokens_per_s_per_gpu = 0, tflops_per_gpu = 0, mfu = 0;
  double memory_limit_gib = 0;      // what one rank may use
  double peak_memory_gib() const;
  bool fits() const { return peak_memory_gib() <= memory_limit_gib; }
  MemoryVerdict verdict() const { return memory_verdict(stages, memory_limit_gib); }
};

// The estimate for a valid run (run_violations empty).
Estimate estimate(const PlanModel& model, const PlanRun& run, const Cluster& cluster);

// Memory only (the search's first filter): the stages' memory without the time model.
std::vector<StageMemory> estimate_memory(const PlanModel& model, const PlanRun& run, const Cluster& cluster);
double memory_limit_gib(const PlanRun& run, const Cluster& cluster);

}  // namespace tessel
