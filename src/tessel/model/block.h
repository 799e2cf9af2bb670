// One Transformer layer, pre-norm: x → x + Mixer(Norm(x)) → · + MLP(Norm(·)), the mixer
// attention or, on the layers --linear-attention-freq picks, Gated DeltaNet (by the global layer
// index), the MLP an MoE layer on the layers --moe-layer-freq picks. Under tensor parallelism the residual stream
// and the norms hold this rank's rows (all of them without sequence parallel); each norm's
// output is gathered to all rows on entering a column-parallel region and its input gradient
// reduced (reduce-scattered under sequence parallel) on leaving it. An MoE layer routes this
// rank's rows (its shared expert gathers them itself).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

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

class TransformerBlock {
 public:
  // N rows (B·T_l), N_l this rank's; C hidden.
  struct Saved {
    Norm::Saved norm1, norm2;  // (N_l) statistics
    Tensor in1;                // (N, C) mixer input: norm1's output gathered to all rows
    Attention::Saved attention;
    GatedDeltaNet::Saved gdn;
    Tensor mid;                // (N_l, C) the residual stream after attention
    Tensor in2;                // (N, C) MLP input, gathered; an MoE layer's (N_l, C) own rows
    Mlp::Saved mlp;
    MoeLayer::Saved moe;
  };

  // Layer `layer` (global index) of the chunk ctx describes (model/layer_context.h); its modules
  // declare their buffers in ctx.buffers. `recompute`: what it recomputes in its backward.
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
    Attention::KvCache attention;
    GatedDeltaNet::RecurrentState gdn;
  };
  void list_decode_state(DecodeState& d, TensorList& list) const;
  // out (n, C) = the layer applied to x (n, C), the rows at positions start … start+n−1 that
  // follow those d has read; d takes them in. s is scratch. One sequence, one process.
  void decode(Saved& s, DecodeState& d, float* out, const float* x, int64_t start, int64_t n,
              ChunkScratch& scratch);

  MoeLayer* moe() { return moe_ ? moe_.get() : nullptr; }
  const MoeLayer* moe() const { return moe_ ? moe_.get() : nullptr; }
  const LayerRecompute& recompute() const { return recompute_; }

 private:
  // The selected modules' forward again, from x and what the layer kept (selective recompute).
  void recompute_modules(Saved& s, const float* x, ChunkScratch& scratch);
  void weight_gradients(Saved& s, const GradReady& ready);

  const Kernels& k_;
  TensorParallel tp_;
  int64_t N_, N_l_, C_;
  Norm norm1_;
  std::optional<Attention> attention_;  // one of the two mixers
  std::optional<GatedDeltaNet> gdn_;
  Norm norm2_;
  std::optional<Mlp> mlp_;
  std::unique_ptr<MoeLayer> moe_;
  LayerRecompute recompute_;
};

}  // namespace tessel
