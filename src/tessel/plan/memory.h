// The memory model (planner-internal): parameters, gradients and optimizer state per rank, and
// the activations one microbatch leaves on one model chunk — Megatron-LM's layout as Korthikanti
// et al. 2022 count it (§4, Table 2, generalised to grouped-query attention, SwiGLU, MoE and
// flash attention) for Megatron's engine; for tessel's, on any device, its own: what the model's
// declare-only build of each chunk declares (plan/tessel_chunks.cpp). How many microbatches are in flight
// comes from the generated schedule itself (estimate.cpp walks it).
#pragma once

#include <string>
#include <vector>

#include "tessel/plan/shape.h"

namespace tessel {

// What one microbatch keeps on one model chunk until its backward, summed, with every item.
struct ChunkMemory {
  double saved = 0;      // bytes kept from forward to backward
  double slot = 0;       // per in-flight microbatch besides (tessel: the executor's slot buffers)
  double transient = 0;  // alive only while the chunk runs (recomputed layers, logits)
  double gradient = 0;   // tessel: its input gradient, which may still be leaving when the slot is reused
  double shared = 0;     // tessel: once per chunk, whatever the microbatches (the recompute arena)
  std::vector<Term> terms;         // of the bytes per microbatch
  std::vector<Term> shared_terms;  // of `shared`
};
ChunkMemory chunk_activations(const RunShape& shape, const ChunkSpec& chunk);

// Megatron's saved tensors of one token (bytes on one TP rank) that Korthikanti et al.'s count
// does not have: a Gated DeltaNet mixer's (in place of attention's), gated attention's and
// QK-norm's (megatron_memory.cpp names them as differences from the formula). These are
// Megatron-LM's with FLA's kernels (bf16 activations, fp32 statistics, no weight-pass
// gradients), its engine's only: tessel's come from its declare-only build.
struct MemoryItem {
  std::string name;
  double per_token;
  std::string formula;
};
std::vector<MemoryItem> gdn_mixer_items(const RunShape& shape);
std::vector<MemoryItem> attention_extra_items(const RunShape& shape);

// Buffers a rank keeps for all microbatches (tessel: each chunk's scratch, MoE and CP workspaces).
std::vector<Term> rank_buffers(const RunShape& shape, int stage);

// Parameters on one rank of `stage`, all and the routed experts' among them.
struct StageParams {
  int64_t dense = 0, experts = 0;
};
StageParams stage_params(const RunShape& shape, int stage);

// Weights, gradients and optimizer state of one rank: the three terms.
std::vector<Term> state_terms(const RunShape& shape, const StageParams& params);

// tessel's layout on any device, from the model's declare-only build (tessel_chunks.cpp);
// Megatron's is in memory.cpp.
ChunkMemory tessel_chunk_activations(const RunShape& shape, const ChunkSpec& chunk);
std::vector<Term> tessel_rank_buffers(const RunShape& shape, int stage);
StageParams tessel_stage_params(const RunShape& shape, int stage);

std::string bytes_str(double bytes);  // "1.23 GiB", "45.6 MiB", "789 B"

}  // namespace tessel
