// The parameter registry (DESIGN invariant 2). Every parameter has its Hugging Face name, its
// global shape and a shard spec saying which dimension is split over which group and which slice
// this rank holds. Checkpoints, gradient sync, the gradient norm and import/export read it.
//
// Values and gradients of all parameters live in two flat buffers laid out alike (llm.c), so
// "parameter i" and "gradient i" sit at the same offset: flat all-reduce and flat I/O are trivial.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel {

// The group a split dimension is divided over: tensor parallel, or expert tensor parallel (a
// routed expert's matrices, --expert-tensor-parallel-size).
enum class ShardGroup : uint8_t { None, TP, ETP };

// Which slice of the global tensor this rank holds. `sections` (global sizes along `dim`, summing
// to it) says that dimension concatenates blocks each split alike: GPT-2's fused q,k,v (three
// equal), Gated DeltaNet's [Q | K | V] rows (Qwen3.5's in_proj_qkv and conv1d). Empty: one block.
// `padded_size` > 0 pads dimension `dim` to that size before splitting (the vocabulary, as
// Megatron's --make-vocab-size-divisible-by): local elements past the global size are padding.
//
// A routed expert's parameter (Mixture of Experts) is held by one rank of the expert-parallel
// group alone: `expert_rank` of `expert_ranks` (-1: not an expert). It is whole there, or split
// over ETP along `dim` like any other split. Its gradient is reduced over expert-DP only.
struct ShardSpec {
  int dim = -1;  // -1: not split
  ShardGroup group = ShardGroup::None;
  int index = 0;
  int count = 1;
  std::vector<int64_t> sections;
  int64_t padded_size = 0;
  int expert_rank = -1;
  int expert_ranks = 1;

  bool expert() const { return expert_rank >= 0; }
  // "" when `sections` fit a split dimension of `size` (none, or summing to it, each divisible by
  // `count`); else what does not, for the caller's message.
  std::string sections_problem(int64_t size) const;
};

// A range [begin, end) of the parameter registry's flat buffers.
struct FlatRange {
  int64_t begin = 0, end = 0;
};

// Normal: normal(0, init_std); LogUniform: log U(0, init_std] (Gated DeltaNet's A_log).
enum class ParamInit : uint8_t { Normal, Ones, Zeros, LogUniform };

struct Param {
  std::string name;   // global Hugging Face name
  Shape global_shape;
  ShardSpec shard;
  Shape local_shape;
  ParamInit init = ParamInit::Normal;
  float init_std = 0.0f;     // for ParamInit::Normal (the upper bound for LogUniform)
  bool weight_decay = true;  // false for biases and norm weights
  int64_t offset = 0;        // into the registry's flat buffers
  float* value = nullptr;
  float* grad = nullptr;

  int64_t numel() const { return shape_numel(local_shape); }
  Tensor value_tensor() const { return Tensor::view(value, local_shape); }
  Tensor grad_tensor() const { return Tensor::view(grad, local_shape); }
  // The global flat index of local element `local` (row-major in both); -1 for padding.
  int64_t global_index(int64_t local) const;
  // Replicated on the ranks of a tensor-parallel group (norms, row-parallel biases, routers):
  // under sequence parallel its gradient is summed over TP, and the global norm counts it once.
  // An unsplit expert is not: each EP rank holds other experts.
  bool replicated() const { return shard.dim < 0 && !shard.expert(); }
  // A replicated parameter whose gradient each TP rank computes from part of the work even
  // without sequence parallel (QK-norm weights: each rank normalises only its own heads): it is
  // summed over TP like every replicated parameter under sequence parallel.
  bool grad_partial_over_tp = false;
  // A norm's weight the model scales by (1 + w) (--apply-layernorm-1p), which Hugging Face's
  // Llama files hold as 1 + w (family/weights.h HfLayout::plain_norms).
  bool zero_centred = false;
};

// Calls f(param, first element, count, position) for every piece of a parameter that lies in
// `ranges` (ascending, disjoint: the parts of the flat buffers a rank's optimizer owns), in flat
// order; `position` counts the elements of the ranges before the piece (where its optimizer
// state sits).
template <typename F>
void for_each_piece(const std::vector<Param>& params, const std::vector<FlatRange>& ranges, F&& f) {
  int64_t position = 0;
  for (const FlatRange& r : ranges) {
    for (const Param& p : params) {
      const int64_t begin = std::max(r.begin, p.offset), end = std::min(r.end, p.offset + p.numel());
      if (begin < end) f(p, begin - p.offset, end - begin, position + begin - r.begin);
    }
    position += r.end - r.begin;
  }
}

class ParamRegistry {
 public:
  // Declares a parameter; memory is assigned by finalize(). Returns its index.
  int add(std::string name, Shape global_shape, ParamInit init, float init_std, bool weight_decay,
          ShardSpec shard = {});
  // Allocates the flat value and gradient buffers in `memory` (a backend's, kernels.h) and
  // points every Param into them.
  void finalize(const DeviceMemory& memory = host_memory());
  // Sets every element to f(seed, name, global element index): independent of the layout. Only
  // those inside `only` (a fully sharded rank's slices) when it is not empty.
  void init_values(uint64_t seed, const std::vector<FlatRange>& only = {});
  void zero_grads();
  // A parameter's values on the host and back (checkpoints, Hugging Face I/O): the one path
  // between the registry's memory and the host.
  std::vector<float> to_host(const Param& p) const;
  void from_host(Param& p, const float* values);
  const DeviceMemory& memory() const { return *memory_; }

  bool has(const std::string& name) const { return index_.count(name) != 0; }
  int index(const std::string& name) const;  // throws for an unknown name
  Param& get(const std::string& name);
  const Param& get(const std::string& name) const;
  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }

  float* values() { return values_.get(); }
  float* grads() { return grads_.get(); }
  bool finalized() const { return values_ != nullptr; }
  int64_t numel() const { return numel_; }

 private:
  // Elements [first, first + n) of p.
  void init_piece(Param& p, int64_t first, int64_t n, uint64_t seed);

  std::vector<Param> params_;
  std::unordered_map<std::string, int> index_;
  std::shared_ptr<float> values_, grads_;
  int64_t numel_ = 0;
  const DeviceMemory* memory_ = &host_memory();
};

}  // namespace tessel
