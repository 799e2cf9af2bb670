// Activation recomputation, with Megatron-Core's flags and meanings: what a layer keeps of its
// forward for the backward, and what it recomputes there instead.
//   --recompute-granularity full      a layer keeps nothing but its input; with
//       --recompute-method uniform    groups of --recompute-num-layers layers keep only the
//                                     group's input and are recomputed together;
//       --recompute-method block      the first --recompute-num-layers layers of every model
//                                     chunk are recomputed, each on its own, the rest keep all;
//   --recompute-granularity selective the modules of --recompute-modules (default core_attn):
//       core_attn       the core attention's statistics (flash-style attention never stores the
//                       T × T scores: what it keeps is the output, which the output projection
//                       keeps too, and the softmax statistics (B, H, T), recomputed);
//       layernorm       the norms' outputs (the q/k/v and MLP inputs) and statistics;
//       mlp             the dense MLP's hidden activations (its input kept);
//       moe             the whole MoE layer (its input kept);
//       moe_act         the routed experts' activation output;
//       shared_experts  the shared expert's hidden activations;
//       gdn_norm_out    the Gated DeltaNet's gated-norm output (out_proj's input), from the delta
//                       rule's output, z and the norm's statistics, which it keeps.
// The recomputed forward runs inside the backward's input half (I), before the input gradient,
// under every schedule. A recomputed tensor lives only there, in memory the chunk's microbatches
// share; the weight gradients that read one (every recomputed module's but core_attn's) run in
// the same I rather than a deferred W.
#pragma once

#include <string>
#include <vector>

namespace tessel {

struct RecomputeOptions {
  std::string granularity;           // --recompute-granularity: "" (none) | full | selective
  std::string method;                // --recompute-method: "" | uniform | block (full only)
  int num_layers = 0;                // --recompute-num-layers (full only; 0: not given)
  std::vector<std::string> modules;  // --recompute-modules (selective; empty: core_attn)
  bool activations = false;          // --recompute-activations: Megatron's older name for selective

  std::string effective_granularity() const { return activations ? "selective" : granularity; }
};

// What one layer recomputes.
struct LayerRecompute {
  bool full = false;  // everything but the input of its group (full granularity)
  bool core_attn = false, layernorm = false, mlp = false, moe = false, moe_act = false,
       shared_experts = false, gdn_norm_out = false;

  bool any() const { return core_attn || weights_in_input_pass(); }
  // Whether the layer's weight gradients read a recomputed tensor, and so run inside I.
  bool weights_in_input_pass() const {
    return full || layernorm || mlp || moe || moe_act || shared_experts || gdn_norm_out;
  }
};

// Every rule the flags break, as Megatron-Core's TransformerConfig checks them, one message each:
// granularity full or selective; full needs a method and 1 ≤ --recompute-num-layers ≤
// `chunk_layers` (the most layers a model chunk holds); selective takes neither; modules from
// Megatron-Core's list, mla_up_proj refused (no multi-latent attention here), the MoE ones only
// with --num-experts, the shared expert's only with one, gdn_norm_out only with Gated DeltaNet
// layers; --recompute-modules needs selective.
std::vector<std::string> recompute_violations(const RecomputeOptions& options, int chunk_layers,
                                              bool moe, bool shared_expert, bool gdn);

// Layer `layer` (0-based inside a chunk of `chunk_layers`) under valid options, and the first
// layer of its recompute group (itself unless uniform groups several).
LayerRecompute layer_recompute(const RecomputeOptions& options, int layer, int chunk_layers);
int recompute_group_start(const RecomputeOptions& options, int layer);

}  // namespace tessel
