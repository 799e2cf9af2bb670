// The per-rank sizes of one run that the memory and the time models share (planner-internal):
// the parallel sizes, the rows a rank holds, element sizes, the model chunks from the stage
// assignment `tessel train` uses, the schedule, and the real rank layout for the links.
#pragma once

#include <algorithm>
#include <vector>

#include "tessel/model/transformer.h"
#include "tessel/plan/run.h"

namespace tessel {

struct RunShape {
  RunShape(const PlanModel& model, const PlanRun& run, const Cluster& cluster);

  const PlanModel& model;
  const PlanRun& run;
  const Cluster& cluster;
  PlannedEngine engine;  // the run's, or the cluster's default (run.h)
  int t, cp, pp, v, ep, etp, dp, edp;
  bool sp;
  int64_t b, s;     // micro batch, sequence
  int64_t N;        // tokens of one microbatch on a rank: b · s / CP
  int64_t rows;     // of those, the rows outside TP regions: N / t under sequence parallel
  double e;         // bytes per activation element (2 for bf16 / fp16, 4 for fp32)
  double w_bytes, g_bytes, o_bytes;  // per parameter: weight, gradient, optimizer state
  int64_t V_l;      // vocabulary rows per TP rank (padded)
  int microbatches;
  StageOptions stages;            // the layers' assignment, the schedule's chunk placement
  std::vector<ChunkSpec> chunks;  // every model chunk, in model order (p · v of them)
  ScheduleConfig schedule;
  Layout layout;

  std::vector<ChunkSpec> stage_chunks(int stage) const { return rank_chunks(chunks, stages, stage); }
  // Routed rows against a balanced load (k per row a rank routes): what the busiest rank's experts
  // receive, and what a rank sends. Padded to a capacity, every expert takes capacity = factor ×
  // its share of the token group's rows (the group that decides the drop: TP under sequence
  // parallel, CP), so a rank sends and receives factor × group rows; a capacity without padding
  // bounds the rows by the factor (buffers grow to the most rows ever seen, so a long run reaches
  // the bound); dropless rows follow the router, assumed at the run's load factor.
  double moe_send_load() const {
    const MoeConfig& e = model.cfg.moe;
    return e.pad_to_capacity && e.capacity_factor > 0 ? e.capacity_factor * (sp ? t : 1) * cp : 1.0;
  }
  double moe_load() const {
    const MoeConfig& e = model.cfg.moe;
    if (e.pad_to_capacity && e.capacity_factor > 0) return moe_send_load();
    return e.capacity_factor > 0 ? e.capacity_factor : run.moe_load_factor;
  }
  // The rows the busiest rank's experts compute on in a typical step, for the step time: the
  // run's load factor, cut at an unpadded capacity (memory plans for the bound, time for the
  // load the router gives; the rows over the capacity are dropped, not computed).
  double moe_compute_load() const {
    const MoeConfig& e = model.cfg.moe;
    if (e.pad_to_capacity && e.capacity_factor > 0) return moe_send_load();
    return e.capacity_factor > 0 ? std::min(e.capacity_factor, run.moe_load_factor) : run.moe_load_factor;
  }
  // tessel's engine (on any device): its declared memory, non-blocking messages, no TP overlap.
  bool plans_tessel() const { return engine == PlannedEngine::Tessel; }
  // How the groups of a kind sit on the nodes (the group spread over the most nodes): a
  // collective runs inside each node over NVLink and between nodes over the NICs (NCCL's
  // hierarchy); and whether the pipeline link from `stage` to `next` crosses nodes.
  struct Placement {
    int ranks = 1, nodes = 1, per_node = 1;
  };
  Placement placement(GroupKind kind) const;
  bool pp_link_spans_nodes(int stage, int next) const;
  // This machine's ranks share one node, however many there are (oversubscribed).
  int node_of(int rank) const { return cluster.cpu() ? 0 : rank / cluster.devices_per_node; }
};

// Bytes per parameter of the weights, gradients and optimizer state for a precision (Megatron's
// table in docs/source/api-guide/dist_optimizer.md, and tessel's fp32 AdamW).
struct StateBytes {
  double weight, grad, optimizer;
};
StateBytes state_bytes(PlannedPrecision p);

}  // namespace tessel
