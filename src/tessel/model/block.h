// One Transformer layer, pre-norm: x → x + Drop(Mixer(Norm(x))) → · + Drop(MLP(Norm(·))) (Drop:
// --hidden-dropout in training, Megatron's bias-dropout-add), the mixer
// attention or, on the layers --linear-attention-freq picks, Gated DeltaNet (by the global layer
// index), the MLP an MoE layer on the layers --moe-layer-freq picks. Under tensor parallelism the residual stream
// and the norms hold this rank's rows (all of them without sequence parallel); each norm's
// output is gathered to all rows on entering a column-parallel region and its input gradient
// reduced (reduce-scattered under sequence parallel) on leaving it. An MoE layer routes this
// rank's rows (its shared expert gathers them itself).
#pragma once

#include <cstdint>
#include <type_traits>
#include <variant>

#include "tessel/model/attention.h"
#include "tessel/model/config.h"
#include "tessel/model/gated_delta_net.h"
#include "tessel/model/layer.h"
#include "tessel/model/layer_context.h"
#include "tessel/model/mlp.h"
#include "tessel/model/moe/moe.h"
#include "tessel/model/norm.h"
#include "tessel/model/recompute.h"

namespace tessel {

// The token mixers a layer may hold, one alternative each. Every mixer has the same members: its
// Saved and DecodeState, list_saved(s, lists, recompute), forward(s, out_local, in, partial,
// packed), backward_input(s, d_in, d_out_local, in, scratch), backward_weight(s, in),
// recompute(s, recompute) (what --recompute-modules recomputes of it), input_half_params() and
// weight_half_params(), list_decode_state(d, list) and decode(s, d, out, in, start, n). A new
// mixer is one more alternative here and its line in make_mixer (block.cpp).
using Mixer = std::variant<Attention, GatedDeltaNet>;
// The MLPs a layer may hold: the dense one (over TP, on all rows) or the MoE layer (on this
// rank's rows).
using FeedForward = std::variant<Mlp, MoeLayer>;

// What each alternative saves (or carries while decoding), the same alternative as the layer's.
template <class Variant>
struct SavedOf;
template <class... M>
struct SavedOf<std::variant<M...>> {
  using type = std::variant<typename M::Saved...>;
};
template <class... M>
struct DecodeStateOf;
template <class... M>
struct DecodeStateOf<std::variant<M...>> {
  using type = std::variant<typename M::DecodeState...>;
};

class TransformerBlock {
 public:
  // N rows (B·T_l), N_l this rank's; C hidden.
  struct Saved {
    Norm::Saved norm1, norm2;  // (N_l) statistics
    Tensor in1;                // (N, C) mixer input: norm1's output gathered to all rows
    SavedOf<Mixer>::type mixer;
    Tensor mid;                // (N_l, C) the residual stream after the mixer
    Tensor in2;                // (N, C) MLP input, gathered; an MoE layer's (N_l, C) own rows
    SavedOf<FeedForward>::type ffn;
    const int32_t* sample_ids = nullptr;  // the forward's rows' samples: the dropout's key (none: no dropout)

    // The MoE layer's buffers that grow with the routing load (none for a dense MLP).
    int64_t growing_bytes() const {
      const auto* moe = std::get_if<MoeLayer::Saved>(&ffn);
      return moe != nullptr ? moe->growing_bytes() : 0;
    }
  };

  // Layer `layer` (global index) of the chunk ctx describes (model/layer_context.h): the mixer
  // --linear-attention-freq picks for it, the MLP --moe-layer-freq picks; its modules declare
  // their buffers in ctx.buffers. `recompute`: what it recomputes in its backward.
  TransformerBlock(const LayerContext& ctx, int layer, LayerRecompute recompute = {});

  void list_saved(Saved& s, SavedLists& lists) const;
  // out (N_l, C) = the layer applied to x (N_l, C); grad_scale weighs an MoE layer's auxiliary
  // losses (moe.h); packed: the rows' documents. `recomputing`: the same forward again inside a
  // backward (full recompute), which leaves the router statistics alone.
  void forward(Saved& s, float* out, const float* x, float grad_scale, const PackedRows& packed,
               ChunkScratch& scratch, bool recomputing = false);
  // dres (N_l, C) holds d(out) on entry and d(x) on exit: each branch's input gradient is reduced
  // over TP and accumulated into it by its norm's backward; the identity path needs nothing. The
  // norms' (and QK-norm's) weight gradients are finished here and reported to `ready`. A layer
  // recomputing modules recomputes them first; one whose weight gradients read a recomputed
  // tensor (LayerRecompute::weights_in_input_pass) computes and reports them here too.
  void backward_input(Saved& s, float* dres, const float* x, ChunkScratch& scratch,
                      const GradReady& ready);
  // The linears' weight gradients from what backward_input left in s; reports them. Nothing for
  // a layer that did them in backward_input.
  void backward_weight(Saved& s, const GradReady& ready);

  // Incremental decoding of one sequence (infer/decoder.h): what the layer's mixer carries from
  // position to position — attention's keys and values, or Gated DeltaNet's conv history and
  // delta-rule state. The MLP or MoE layer carries nothing: each token is routed alone, as in
  // training.
  struct DecodeState {
    DecodeStateOf<Mixer>::type mixer;
  };
  void list_decode_state(DecodeState& d, TensorList& list) const;
  // out (n, C) = the layer applied to x (n, C), the rows at positions start … start+n−1 that
  // follow those d has read; d takes them in. s is scratch. One sequence, one process.
  void decode(Saved& s, DecodeState& d, float* out, const float* x, int64_t start, int64_t n,
              ChunkScratch& scratch);

  MoeLayer* moe() { return std::get_if<MoeLayer>(&ffn_); }
  const MoeLayer* moe() const { return std::get_if<MoeLayer>(&ffn_); }
  const LayerRecompute& recompute() const { return recompute_; }

 private:
  // The selected modules' forward again, from x and what the layer kept (selective recompute).
  void recompute_modules(Saved& s, const float* x, ChunkScratch& scratch);
  void weight_gradients(Saved& s, const GradReady& ready);
  // The hidden dropout of the mixer's or the MLP's output (kind) over this rank's rows.
  DropoutSite dropout(const Saved& s, DropoutKind kind) const {
    return dropout_keys_.rows(hidden_dropout_, dropout_site(layer_, kind), s.sample_ids);
  }
  // The gradient of a dropped branch's output from dres (N_l, C): dres itself without dropout.
  const float* branch_gradient(const Saved& s, DropoutKind kind, const float* dres, ChunkScratch& scratch) const;
  // f(mixer, its Saved) / f(MLP, its Saved) on the layer's alternative.
  template <class F>
  void with_mixer(Saved& s, F&& f) {
    std::visit([&](auto& m) { f(m, std::get<typename std::remove_cvref_t<decltype(m)>::Saved>(s.mixer)); }, mixer_);
  }
  template <class F>
  void with_ffn(Saved& s, F&& f) {
    std::visit([&](auto& m) { f(m, std::get<typename std::remove_cvref_t<decltype(m)>::Saved>(s.ffn)); }, ffn_);
  }
  // Norm 2's output from s.mid into s.in2: gathered to all rows for the dense MLP, this rank's
  // rows for the MoE layer.
  void norm2_forward(Saved& s, ChunkScratch& scratch);

  const Kernels& k_;
  TensorParallel tp_;
  int64_t N_, N_l_, C_;
  Norm norm1_;
  Mixer mixer_;
  Norm norm2_;
  FeedForward ffn_;
  LayerRecompute recompute_;
  int layer_;
  float hidden_dropout_;  // --hidden-dropout
  DropoutKeys dropout_keys_;
};

}  // namespace tessel
