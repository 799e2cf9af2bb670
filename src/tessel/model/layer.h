// What the model's layers share: their view of the parameter registry, the hook that tells data
// parallelism a gradient is final, the list that carves one microbatch's saved activations out
// of one allocation, and the scratch buffers a chunk's layers share.
//
// Every layer is a small class with the same shape (llm.c's forward/backward pairs, split for
// zero-bubble schedules): its constructor declares its parameters (Hugging Face names, global
// shapes, shard specs); list_saved() lists what its backward needs in a per-microbatch Saved;
// forward() fills it; backward_input() computes the input gradient (and the gradients that need
// no saved output gradient), leaving each linear's output gradient in Saved; backward_weight()
// turns those into weight gradients. Backward kernels accumulate (+=).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "tessel/core/params.h"
#include "tessel/core/tensor.h"
#include "tessel/kernels/kernels.h"

namespace tessel {

// Initialisation as Megatron: normal(0, --init-method-std 0.02) for weights, the output
// projections (attention's and the MLPs' down) normal(0, 0.02 / sqrt(2 · layers)); norms 1,
// biases 0.
inline constexpr float kInitStd = 0.02f;
float output_init_std(int num_layers);

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
};

// One allocation for one (chunk, microbatch) slot's saved activations (llm.c's single allocation
// and pointer carving): each layer adds the tensors its backward needs; allocate() makes one
// buffer for all of them and points every added tensor into it. The list is the only record of
// the sizes: bytes() is what was allocated.
class SavedBuffers {
 public:
  // `tensor` must stay where it is until allocate().
  void add(Tensor& tensor, Shape shape, DType dtype = DType::F32);
  void allocate(const Kernels& k);
  int64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    Tensor* tensor;
    Shape shape;
    DType dtype;
    int64_t offset;
  };
  std::vector<Entry> entries_;
  int64_t bytes_ = 0;
};

// Buffers that live only inside one forward or backward call, shared by all the layers of a
// chunk and all microbatches (one call runs at a time). N rows (B·T_l), N_l this rank's share
// under sequence parallel (else N), C hidden; sized by the chunk.
struct ChunkScratch {
  Tensor full;        // (N, C) a row-parallel output's partial sums before the TP reduction
  Tensor local;       // (N_l, C) the same reduced (a view of `full` without sequence parallel)
  Tensor norm_out;    // (N_l, C) a norm's output before it is gathered (sequence parallel)
  Tensor full_grad;   // (N, C) a column-parallel input's gradient before the TP reduction
  Tensor local_grad;  // (N_l, C) the same reduced (a view of `full_grad` without sequence parallel)
  Tensor rows_full;   // (N, C) gathered gradient rows (sequence parallel only)
  Tensor d_heads;     // (N, H_l·D) the attention output's gradient
  Tensor d_hidden;    // (N, F_l) an MLP activation's gradient

  int64_t bytes() const;
};

}  // namespace tessel
