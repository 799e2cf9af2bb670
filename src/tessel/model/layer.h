// What the model's layers share: their view of the parameter registry, the hook that tells data
// parallelism a gradient is final, the list that carves one microbatch's saved activations out
// of one allocation (and the declared shapes of every tensor), and the scratch buffers a chunk's
// layers share.
//
// Every layer is a small class with the same shape (llm.c's forward/backward pairs, split for
// zero-bubble schedules): its constructor declares its parameters (Hugging Face names, global
// shapes, shard specs) and the buffers it holds for all microbatches (LayerBuffers), allocating
// nothing itself; list_saved() lists what its backward needs in a per-microbatch Saved;
// forward() fills it; backward_input() computes the input gradient (and the gradients that need
// no saved output gradient), leaving each linear's output gradient in Saved; backward_weight()
// turns those into weight gradients. Backward kernels accumulate (+=).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/params.h"
#include "tessel/core/tensor.h"
#include "tessel/kernels/kernels.h"
#include "tessel/model/config.h"

namespace tessel {

// Initialisation as Megatron: normal(0, --init-method-std) for weights (ModelConfig's
// init_method_std), the output projections (attention's and the MLPs' down) normal(0, std /
// sqrt(2 · layers)) (output_init_std); norms 1, biases 0.
float output_init_std(const ModelConfig& cfg);

// grad_ready(index): parameter `index`'s gradient is final for this step (data parallelism starts
// reducing there). Empty: nobody listens.
using GradReady = std::function<void(int)>;
// Reports each of `params` (registry indices; -1 entries are parameters the model lacks).
void report_ready(const GradReady& ready, std::initializer_list<int> params);

// A layer's parameters: registry indices, read through the registry they were declared in once
// it is finalized (memory is assigned by ParamRegistry::finalize, after the layers declare).
class ParamView {
 public:
  explicit ParamView(const ParamRegistry& registry) : registry_(&registry) {}
  // The memory of parameter `index`; nullptr for -1 (a parameter the architecture lacks).
  float* value(int index) const { return index < 0 ? nullptr : registry_->params()[index].value; }
  float* grad(int index) const { return index < 0 ? nullptr : registry_->params()[index].grad; }

 private:
  const ParamRegistry* registry_;
};

// Packed documents (--reset-position-ids, --reset-attention-mask): what a microbatch's rows bring
// besides their tokens, in the model's memory, (N) i32 each over this rank's rows b·T_l + t;
// nullptr: one document per sequence. They stay valid until the microbatch's backward.
struct PackedRows {
  const int32_t* position_ids = nullptr;  // each row's position in its document (RoPE, learned positions)
  const int32_t* key_start = nullptr;     // its document's first position in the sequence (attention)
  // Under context parallelism, (B, T) the whole sequences' key_start in global position order, for
  // the layers that run whole sequences (Gated DeltaNet); without CP unused (key_start is that).
  const int32_t* sequence_key_start = nullptr;
  // (N) each row's sample index in the run, which keys the dropout masks (kernels/dropout.h);
  // nullptr in a forward without gradients (evaluation, inference): no dropout.
  const int32_t* sample_ids = nullptr;
  // (N) the same samples, in evaluation's forwards too: the key of the MoE router's random logits
  // under --moe-router-force-load-balancing, which Megatron draws in evaluation as in training.
  // Each reader has its own input (TransformerChunk::microbatch_inputs), read when it needs it.
  const int32_t* routing_sample_ids = nullptr;
};

// The memory a tensor holds: none for one never allocated (a default Tensor's shape is a scalar's).
inline int64_t held_bytes(const Tensor& t) { return t.data() != nullptr ? t.bytes() : 0; }

// Which rows of an MoE layer a buffer's first dimension counts: those it routes out of this rank,
// or those that arrive at this rank's experts. Dropless routing cannot know in advance how many a
// step brings: the buffer is sized for a balanced load and grows through Kernels::reserve.
enum class RoutedRows : uint8_t { Sent, Received };
struct Growth {
  RoutedRows rows = RoutedRows::Sent;
  int64_t balanced = 0;  // of those rows at a balanced load
  int64_t floor = 0;     // rows it holds whatever the load (the shared expert's, beside them)
};

// A tensor as a layer declares it: which part of the chunk holds it, what it is, its shape, and
// the bytes it takes (64-byte aligned inside a list's one allocation; a growing buffer's own, at
// its balanced-load size). The declare-only build of a chunk reads these (the planner, --profile-report).
struct DeclaredTensor {
  std::string part;  // "layers", "MoE layers", "embedding", "head", "residual stream", ...
  std::string name;  // "attention q", "MLP hidden", ...
  Shape shape;
  DType dtype = DType::F32;
  int64_t bytes = 0;
  std::optional<Growth> growth;  // an MoE buffer that grows with the routing
};

// The bytes of `tensors` together (growing buffers at their balanced-load size).
int64_t declared_bytes(const std::vector<DeclaredTensor>& tensors);

// The tensors a group of layers declares, and their memory (llm.c's single allocation and
// pointer carving): each layer adds what it needs; allocate() makes one buffer for all of them and
// points every added tensor into it, each growing buffer apart (Kernels::reserve may replace it).
// The real build allocates the list; the declare-only build only reads declared().
class TensorList {
 public:
  // The part of the chunk the tensors added next belong to (DeclaredTensor::part).
  void set_part(std::string part) { part_ = std::move(part); }
  // `tensor` must stay where it is until allocate() or carve().
  void add(Tensor& tensor, Shape shape, std::string name, DType dtype = DType::F32);
  // A buffer of its own (f32), `shape` for the balanced load, that grows with the routed rows.
  void add_growing(Tensor& tensor, Shape shape, std::string name, Growth growth);
  void allocate(const Kernels& k);
  // Points every added tensor into `arena` (at least bytes() long) instead: memory that others
  // share (recomputed activations, model/recompute.h). No growing buffers.
  void carve(const Tensor& arena);
  // The one allocation's size; the growing buffers are apart.
  int64_t bytes() const { return bytes_; }
  const std::vector<DeclaredTensor>& declared() const { return declared_; }

 private:
  void point_into(const Tensor& arena);

  struct Target {
    Tensor* tensor;
    int64_t offset;  // into the one allocation; -1 for a growing buffer
  };
  std::vector<Target> targets_;  // declared_'s, in the same order, until allocated
  std::vector<DeclaredTensor> declared_;
  std::string part_;
  int64_t bytes_ = 0;
};

// Where a layer puts each saved tensor: `kept`, the microbatch's own allocation, held from its
// forward to the end of its backward; or `recomputed`, memory all the chunk's microbatches share,
// which holds a tensor only inside one backward_input — the forward's value is overwritten by
// the next microbatch, and backward_input recomputes it (a gradient: computes it) before use.
struct SavedLists {
  TensorList& kept;
  TensorList& recomputed;
  TensorList& pick(bool recompute) { return recompute ? recomputed : kept; }
  void set_part(const std::string& part) {
    kept.set_part(part);
    recomputed.set_part(part);
  }
};

// Where a layer's constructor declares the buffers it holds for all microbatches: `scratch`, used
// only inside one call (one call runs at a time), and `shared`, recomputed activations all
// microbatches share. Whoever builds the layers allocates both once every layer has declared.
struct LayerBuffers {
  TensorList& scratch;
  TensorList& shared;
};

// Buffers that live only inside one forward or backward call, shared by all the layers of a
// chunk and all microbatches (one call runs at a time). N rows (B·T_l), N_l this rank's share
// under sequence parallel (else N), C hidden; declared by the chunk.
struct ChunkScratch {
  Tensor full;        // (N, C) a row-parallel output's partial sums before the TP reduction
  Tensor local;       // (N_l, C) the same reduced (a view of `full` without sequence parallel)
  Tensor norm_out;    // (N_l, C) a norm's output before it is gathered (sequence parallel)
  Tensor full_grad;   // (N, C) a column-parallel input's gradient before the TP reduction
  Tensor local_grad;  // (N_l, C) the same reduced (a view of `full_grad` without sequence parallel)
  Tensor rows_full;   // (N, C) gathered gradient rows (sequence parallel only)
  Tensor d_heads;     // (N, H_l·D) the attention output's gradient
  Tensor d_attn;      // (N, H_l·D) the core attention output's, under the output gate
  Tensor d_hidden;    // (N, F_l) an MLP activation's gradient
  Tensor d_branch;    // (N_l, C) a dropped output's gradient (--hidden-dropout > 0)
};

}  // namespace tessel
