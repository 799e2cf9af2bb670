// A run the planner describes, apart from what it predicts (planner-wide, below the models): the
// engine that runs it, the layout, batch, recompute, precision and schedule flags of `tessel
// train`, the rules it must keep, and a figure with its formula. The memory and time models
// (shape.h, memory.h, time.h) read it; estimate.h puts their predictions together.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tessel/model/recompute.h"
#include "tessel/parallel/layout.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/pipeline/stages.h"
#include "tessel/plan/cluster.h"
#include "tessel/plan/model.h"

namespace tessel {

// Which engine's run is planned, apart from the device it runs on (--engine).
//   Tessel: the memory is what the model's declare-only build declares (TransformerChunk::declare,
//     plan/tessel_chunks.cpp) with the executor's slots, tessel's ZeRO-1 optimizer state; its
//     pipeline messages are non-blocking, its backward never overlaps the TP all-reduce, its last
//     chunk computes the head's gradient in the forward. The CUDA backend fills the same kernel
//     table behind the same layers, so a tessel run on a GPU cluster holds the same tensors as on
//     CPU ranks, in fp32 (tessel train's default; the planner does not model --bf16 on CUDA yet),
//     and is timed at the cluster's rates: a GPU preset's peak is its bf16 tensor-core rate, which
//     tessel's fp32 GEMMs do not reach, so its step there is a lower bound until a cluster file
//     gives the rates tessel's CUDA kernels achieve.
//   Megatron: Megatron-LM's layout as Korthikanti et al. 2022 count it (plan/memory.cpp) and its
//     blocking point-to-point; the published runs' engine (plan/published*.cpp), beside which
//     Megatron's own formula is shown (plan/megatron_memory.h).
// What the device alone changes stays the cluster's: CPU ranks' threads and shared cores, their
// one node, the node's memory shared by its ranks, whole GPU nodes.
enum class PlannedEngine : uint8_t { Tessel, Megatron };
PlannedEngine parse_engine(const std::string& name);  // "tessel" | "megatron"
// Without --engine: tessel on CPU ranks (the only engine there), Megatron-LM on GPU clusters (the
// engine of the presets' published runs).
PlannedEngine default_engine(const Cluster& cluster);

// What the formulas and the time model count of a run's recompute: none, selective (core
// attention again in the backward), full (every layer keeps only its input).
enum class Recompute : uint8_t { None, Selective, Full };
// The planned run's arithmetic (tessel runs FP32 and --bf16; the published runs are fp16 or bf16).
enum class PlannedPrecision : uint8_t { FP32, BF16, FP16 };
// How attention's core runs: Megatron's unfused softmax (scores kept, as in both papers), a
// flash kernel (no scores kept), or tessel's CPU kernel (flash-style, fp32).
enum class AttentionBackend : uint8_t { Unfused, Flash, Tessel };

std::string recompute_name(Recompute r);  // "none" | "selective" | "full"
Recompute parse_recompute(const std::string& name);  // --recompute-granularity: "" is none
// The options of a kind the search tries or a published run names: full is uniform, one layer a
// group (Korthikanti et al.'s full recompute).
RecomputeOptions planned_recompute(Recompute kind);
// tessel plan's recompute flags as the planned run takes them, or the first rule they break: the
// formulas count full recompute only as uniform, one layer a group (the default when no method
// is given), and "none" is no recompute.
RecomputeOptions parse_planned_recompute(const RecomputeOptions& flags);
std::string precision_name(PlannedPrecision p);
std::string attention_backend_name(AttentionBackend a);
AttentionBackend parse_attention_backend(const std::string& name);  // "unfused" | "flash"

struct PlanRun {
  std::optional<PlannedEngine> engine;  // --engine; unset: the cluster's default_engine
  ParallelConfig parallel;  // world = the GPU count; dp is derived
  int64_t micro_batch = 1;
  int64_t global_batch = 1;
  // tessel train's own options, passed whole to tessel's declare-only build and tessel train's
  // rules; recompute_kind() is what the formulas read.
  RecomputeOptions recompute;
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
  // turns it off). tessel's ranks never overlap it.
  bool async_tp_allreduce = true;
  int threads = 1;              // CPU: threads per rank
  // Dropless MoE: the busiest rank's routed rows against a balanced load (the planner cannot
  // know the router's balance; --moe-load-factor). A capacity factor bounds it instead.
  double moe_load_factor = 1.0;

  PlannedEngine engine_on(const Cluster& cluster) const { return engine.value_or(default_engine(cluster)); }
  int dp() const { return parallel.dp(); }
  Recompute recompute_kind() const { return parse_recompute(recompute.effective_granularity()); }
  int microbatches() const { return static_cast<int>(global_batch / (micro_batch * parallel.dp())); }
  StageOptions stage_options(int mtp_layers) const;
  ScheduleConfig schedule_config() const;
  std::string describe() const;  // "TP 4 · PP 8 (VPP 2) · EP 8 · DP 2 · mb 1 · selective · dist-opt"
};

// The rules `tessel train` checks for a run's model, layout, batch, stages and schedule: its one
// list (train/plan.h), which sits above the planner in the layers, so the planner's callers hand
// it in — train/planned_run.h's planned_run_violations, one message per broken rule. `sizes` is
// the model as tessel's trainer sees it.
using TrainRules = std::function<std::vector<std::string>(const ModelConfig& sizes, const PlanRun& run)>;

// Every rule the run breaks — tessel's training rules (`rules`) and the planner's (the cluster's
// size, whole nodes, what the engine runs and on which device) — one message each.
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

}  // namespace tessel
