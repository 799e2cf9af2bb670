// What every layer of a chunk is built from, gathered once per chunk and passed by const
// reference: the kernel table, the registry the layers declare their parameters in, the model's
// configuration, this rank's groups (TP, CP and the MoE layers' EP, ETP and token group: a place
// alone in a declare-only build, model/declare.cpp), the microbatch's sizes, the chunk's tables
// (row positions, RoPE) and the buffers the layers declare their scratch and shared memory in.
// A layer's constructor takes the context and what is its own (its layer index, its recompute
// choices), nothing else.
#pragma once

#include <cstdint>

#include "tessel/comm/comm.h"
#include "tessel/core/params.h"
#include "tessel/core/tensor.h"
#include "tessel/kernels/kernels.h"
#include "tessel/model/config.h"
#include "tessel/model/layer.h"
#include "tessel/parallel/context_parallel.h"
#include "tessel/parallel/tensor_parallel.h"

namespace tessel {

// How an MoE layer's routed tokens reach its experts (--moe-token-dispatcher-type): Megatron's
// all-to-all over EP (model/moe/dispatch.h) or its all-gather over ETP × EP
// (model/moe/allgather_dispatch.h).
enum class MoeDispatcherType : uint8_t { AllToAll, AllGather };

// The groups an MoE layer talks over besides TP, and which dispatcher moves its tokens; a default
// group is one process.
struct MoeGroups {
  CommGroup ep;   // expert parallel: the experts are split over it
  CommGroup etp;  // expert tensor parallel: each expert's F is split over it
  // The ranks holding parts of the same sequences (TP under sequence parallel, × CP: Megatron's
  // tp_cp group): the load-balancing loss counts tokens over it, as Megatron's.
  CommGroup token_group;
  CommGroup tp_ep;  // ETP × EP (Megatron's tp_ep group): the all-gather dispatcher's
  MoeDispatcherType dispatcher = MoeDispatcherType::AllToAll;
};

// `group`, or for a default group (one process, no communicator) the process's LocalComm in k's
// memory: what a module that calls its group even alone talks over.
inline CommGroup communicating(const CommGroup& group, const Kernels& k) {
  return group.communicates() || group.size() > 1 ? group : CommGroup(local_comm(k.memory));
}

// What a layer keys its hidden dropout by besides the microbatch's samples (kernels/dropout.h):
// the seed and the global positions of this rank's rows, those from chunk row first_row (its
// share under sequence parallel).
struct DropoutKeys {
  uint64_t seed = 0;
  const int32_t* positions = nullptr;  // (N) the chunk's row positions
  int64_t first_row = 0;

  // The mask of dropout p at `site` over this rank's rows, for the rows' samples (PackedRows::
  // sample_ids; nullptr, or p = 0: none).
  DropoutSite rows(float p, uint32_t site, const int32_t* sample_ids) const {
    if (p <= 0 || sample_ids == nullptr) return {};
    return {.p = p, .seed = seed, .site = site, .samples = sample_ids + first_row,
            .positions = positions + first_row, .feature_offset = 0};
  }
};

struct LayerContext {
  const Kernels& k;
  ParamRegistry& registry;
  const ModelConfig& cfg;
  TensorParallel tp;   // heads, MLP neurons and the vocabulary split over it
  ContextParallel cp;  // each sequence's positions split over it
  MoeGroups moe;
  int64_t B = 1;    // sequences in a microbatch
  int64_t T_l = 0;  // this CP rank's rows of each sequence
  // The chunk's tables, shared by its layers: (N) i32 each row's global position; llama's RoPE
  // tables (max positions, rotary dims / 2). Empty where nothing reads them.
  Tensor positions, rope_cos, rope_sin;
  LayerBuffers buffers;

  uint64_t seed = 0;  // --seed: dropout's key
  bool decoding = false;  // built for incremental decoding alone (ChunkBuild::decoding)

  int64_t rows() const { return B * T_l; }                      // N
  int64_t local_rows() const { return tp.local_rows(rows()); }  // N_l, this rank's under SP
  DropoutKeys dropout_keys() const { return {seed, positions.ints(), tp.first_row(rows())}; }
};

// One process (no TP, CP or expert parallelism), B sequences of T rows: what a layer's test or
// benchmark builds it from.
inline LayerContext one_process_context(const Kernels& k, ParamRegistry& registry, const ModelConfig& cfg,
                                        const LayerBuffers& buffers, int64_t B = 1, int64_t T = 0) {
  return LayerContext{.k = k, .registry = registry, .cfg = cfg, .tp = no_tensor_parallel(k),
                      .cp = no_context_parallel(k), .moe = {}, .B = B, .T_l = T, .positions = {},
                      .rope_cos = {}, .rope_sin = {}, .buffers = buffers};
}

}  // namespace tessel
