// The time model (planner-internal): what one microbatch costs on one model chunk — GEMMs at an
// achieved fraction of peak, memory-bound kernels at an achieved fraction of memory bandwidth,
// the TP, CP and EP collectives on the links the rank layout puts them on (exposed where
// Megatron cannot hide them) — and what one iteration adds after the pipeline: the DP gradient
// reduction, the tied embedding's all-reduce, the optimizer step. The pipeline itself (bubble,
// point-to-point messages) is the simulated schedule (estimate.cpp).
#pragma once

#include "tessel/plan/shape.h"

namespace tessel {

// Seconds by kind.
struct Seconds {
  double gemm = 0, memory = 0, tp = 0, cp = 0, ep = 0;
  double total() const { return gemm + memory + tp + cp + ep; }
  Seconds& operator+=(const Seconds& o) {
    gemm += o.gemm, memory += o.memory, tp += o.tp, cp += o.cp, ep += o.ep;
    return *this;
  }
};

// One microbatch on one model chunk: its forward and its backward (recomputation included).
struct ChunkCost {
  Seconds forward, backward;
  // Of the backward, the weight-gradient GEMMs: what a zero-bubble schedule's W runs (the rest is
  // its I). None on tessel's CPU ranks under full recompute, whose weight gradients read the
  // recomputed tensors and so run inside I.
  double weight_gradients = 0;
};
ChunkCost chunk_cost(const RunShape& shape, const ChunkSpec& chunk);

// A point-to-point activation (or gradient) between two pipeline stages, one direction.
double p2p_seconds(const RunShape& shape, int stage, int peer);

// After the pipeline has drained, with their formulas.
struct IterationTail {
  double dp = 0, embedding = 0, optimizer = 0;
  std::vector<Term> terms;
};
IterationTail iteration_tail(const RunShape& shape, int64_t dense_params, int64_t expert_params,
                             double last_backward_seconds);

// The rates a rank achieves alone (the efficiency model applied; a CPU rank on its threads).
double gemm_rate(const RunShape& shape);
double memory_rate(const RunShape& shape);
// CPU ranks' threads over the cores (at least 1; 1 on GPU clusters). Open MPI yields the core
// of a rank waiting in an oversubscribed job, so the busy ranks share all cores: the step is at
// least the whole job's compute over the cores.
double oversubscription(const RunShape& shape);

}  // namespace tessel
