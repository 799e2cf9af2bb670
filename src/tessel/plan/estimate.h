// One layout of one run, and what the planner predicts for it: memory per pipeline stage (every
// rank of a stage holds the same: TP shards and EP experts are equal), the step time and its
// parts, throughput and MFU. Built from the code that runs the layout — the rank layout
// (parallel/layout), the stage assignment (pipeline/stages), the schedule generators, lowering
// and simulator (pipeline/schedule, simulate) — and the models in plan/memory.h and plan/time.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessel/parallel/layout.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/pipeline/stages.h"
#include "tessel/plan/cluster.h"
#include "tessel/plan/model.h"

namespace tessel {

enum class Recompute : uint8_t { None, Selective, Full };  // --recompute-granularity
// The planned run's arithmetic (tessel runs FP32 and --bf16; the published runs are fp16 or bf16).
enum class PlannedPrecision : uint8_t { FP32, BF16, FP16 };
// How attention's core runs: Megatron's unfused softmax (scores kept, as in both papers), a
// flash kernel (no scores kept), or tessel's CPU kernel (flash-style, fp32).
enum class AttentionBackend : uint8_t { Unfused, Flash, Tessel };

std::string recompute_name(Recompute r);  // "none" | "selective" | "full"
Recompute parse_recompute(const std::string& name);
std::string precision_name(PlannedPrecision p);
std::string attention_backend_name(AttentionBackend a);
AttentionBackend parse_attention_backend(const std::string& name);  // "unfused" | "flash"

struct PlanRun {
  ParallelConfig parallel;  // world = the GPU count; dp is derived
  int64_t micro_batch = 1;
  int64_t global_batch = 1;
  Recompute recompute = Recompute::None;
  PlannedPrecision precision = PlannedPrecision::BF16;
  AttentionBackend attention = AttentionBackend::Flash;
  int first_stage_layers = -1;  // --decoder-first-pipeline-num-layers
  int last_stage_layers = -1;   // --decoder-last-pipeline-num-layers
  std::string pipeline_layout;  // --pipeline-model-parallel-layout
  std::string schedule;         // empty: 1f1b, interleaved with --vpp
  int microbatch_group = 0;
  bool overlap_grad_reduce = false;
  bool post_validation = false;  // --enable-optimizer-post-validation: a copy of the step's state
  // Megatron-LM overlaps the backward's TP all-reduce with the weight-gradient GEMMs (its async
  // tensor-model-parallel all-reduce, from late 2021; --no-async-tensor-model-parallel-allreduce
  // turns it off). tessel's CPU ranks never overlap it.
  bool async_tp_allreduce = true;
  int threads = 1;              // CPU: threads per rank
  // Dropless MoE: the busiest rank's routed rows against a balanced load (the planner cannot
  // know the router's balance; --moe-load-factor). A capacity factor bounds it instead.
  double moe_load_factor = 1.0;

  int dp() const { return parallel.dp(); }
  int microbatches() const { return static_cast<int>(global_batch / (micro_batch * parallel.dp())); }
  StageOptions stage_options() const;
  ScheduleConfig schedule_config() const;
  std::string describe() const;  // "TP 4 · PP 8 (VPP 2) · EP 8 · DP 2 · mb 1 · selective · dist-opt"
};

// The rules `tessel train` checks for a run's model, layout, batch, stages and schedule: its one
// list (train/plan.h), which sits above the planner in the layers, so the planner's callers hand
// it in — train/planned_run.h's planned_run_violations, one message per broken rule. `sizes` is
// the model as tessel's trainer sees it.
using TrainRules = std::function<std::vector<std::string>(const ModelConfig& sizes, const PlanRun& run)>;

// Every rule the run breaks — tessel's training rules (`rules`) and the planner's (the cluster's
// size, whole nodes, what tessel's CPU ranks run) — one message each.
std::vector<std::string> run_violations(const PlanModel& model, const PlanRun& run, const Cluster& cluster,
                                        const TrainRules& rules);
// The GPU count alone: positive, and whole nodes on GPU clusters (more than one node).
std::vector<std::string> gpu_count_violations(int gpus, const Cluster& cluster);

// One figure with the formula that gave it, for --explain and the breakdowns.
struct Term {
  std::string name;
  double value = 0;     // bytes or seconds
  std::string formula;  // symbols, e.g. "b·s·h·(34/t + 5·a·s/(h·t))"
  std::string numbers;  // the same with the numbers put in
};

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
  double bubble = 0;        // its idle time in the simulated schedule
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
