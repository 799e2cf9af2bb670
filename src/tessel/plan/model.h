// The model as the planner sees it: tessel's ModelConfig (the sizes `tessel train` takes, with
// the same flag and JSON names: dense, MoE, and the Qwen3-Next hybrid of Gated DeltaNet and gated
// attention layers with MTP; its dropout, whose masks Megatron keeps and tessel redraws) plus what
// only the planner models — Megatron-LM features tessel does not train yet (multi-latent
// attention) — and the counts every estimate is built
// on: parameters per layer and how they split over TP, EP and ETP, and matrix-multiply FLOPs per
// token. Layer kinds (Gated DeltaNet or attention, MoE or dense) follow the global layer index,
// so any pipeline split counts each stage's own layers.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/family/family.h"
#include "tessel/model/config.h"

namespace tessel {

struct PlanModel {
  std::string name;  // the preset or file it came from
  ModelConfig cfg;
  bool multi_latent_attention = false;  // --multi-latent-attention
  MlaConfig mla;  // family/family.h

  int head_dim() const { return cfg.head_dim(); }  // --kv-channels, or hidden / heads
  int64_t q_width() const;   // every head's query (and key, MLA) width: heads × dims
  int64_t kv_width() const;  // the key/value heads' width: groups × head dim (MLA: heads × dims)
  int64_t v_width() const;   // the values' width, the attention output: heads × value dims
  int ffn() const { return cfg.ffn_size(); }
  int expert_ffn() const { return cfg.moe.ffn_hidden_size > 0 ? cfg.moe.ffn_hidden_size : cfg.ffn_size(); }
  bool swiglu() const { return cfg.arch == Arch::Llama; }
  bool is_moe_layer(int layer) const { return cfg.moe.is_moe_layer(layer); }
  bool is_linear_layer(int layer) const { return cfg.linear.is_linear_layer(layer); }  // Gated DeltaNet
  int mtp_layers() const { return cfg.mtp_num_layers; }

  // Every rule the description breaks (the ModelConfig's and the planner's own), one message each.
  std::vector<std::string> violations() const;
};

// One layer's parameters by how they split: `tp` is divided over tensor parallelism (its
// column- and row-parallel weights and their split biases), `replicated` is whole on every TP
// rank (norms, row-parallel biases, MLA's down projections, the router), `experts` is all
// routed experts together, divided over EP and ETP.
struct ParamSplit {
  int64_t tp = 0;
  int64_t replicated = 0;
  int64_t experts = 0;
  int64_t total() const { return tp + replicated + experts; }
  ParamSplit& operator+=(const ParamSplit& o) {
    tp += o.tp, replicated += o.replicated, experts += o.experts;
    return *this;
  }
};

// Megatron-LM's counts (GPU clusters, the model's totals); CPU ranks count tessel's declared ones.
// A Gated DeltaNet layer: in_proj's q, k, v, z, β and α rows, conv1d, A_log and dt_bias split by
// head over TP, its gated norm's gain replicated, out_proj split by its input; a gated attention
// layer's q_proj holds the output gate's rows too (2 · heads · head dim).
ParamSplit layer_params(const PlanModel& m, int layer);
// All MTP layers (Megatron's MultiTokenPredictionLayer, Qwen3-Next's mtp.*): the embedding's and
// the hidden state's norms, fc [C, 2C] (column-parallel), one full-attention layer with the last
// layer's MLP (MoE), and its final norm. The head is the model's; a last stage without the
// embedding keeps its own copy (stage_params), like a tied head.
ParamSplit mtp_params(const PlanModel& m);
// The token embedding (and GPT-2's learned positions) / the final norm and untied LM head; the
// vocabulary padded for `tp` as Megatron pads it.
ParamSplit embedding_params(const PlanModel& m, int tp);
ParamSplit head_params(const PlanModel& m, int tp);
int64_t total_params(const PlanModel& m);   // the whole model (unpadded vocabulary), MTP included
int64_t active_params(const PlanModel& m);  // per token through the main model: top-k of the routed experts

// Matrix-multiply FLOPs of one token's forward pass through one layer, split as the time model
// needs them. Attention is counted over the whole sequence (`context` keys, the causal mask not
// discounted: Korthikanti et al.'s and Narayanan et al.'s convention).
struct LayerFlops {
  double dense = 0;      // projections and the dense MLP (or the shared expert), split over TP
  double attention = 0;  // Q·Kᵀ and scores·V, split over TP (and CP's sequence)
  double delta_rule = 0;  // a Gated DeltaNet layer's chunked delta rule (gdn_delta_rule_flops), split over TP (and CP's heads)
  double replicated = 0;  // whole on every TP rank: the MoE router, MLA's down projections
  double experts = 0;     // the top-k routed experts' MLPs, split over ETP
  double total() const { return dense + attention + delta_rule + replicated + experts; }
};
LayerFlops layer_flops(const PlanModel& m, int layer, int64_t context);
// One MTP layer: fc [C, 2C] and its full-attention + MoE layer (the head's logits are
// head_flops_per_token's, once more).
LayerFlops mtp_flops(const PlanModel& m, int64_t context);

// The chunked gated delta rule's FLOPs per token and value head, forward (chunk C = 64, key and
// value head dims dk, dv), counted from the chunked form's matrix products (docs/QWEN3_NEXT.md §3.1,
// Hugging Face's torch_chunk_gated_delta_rule; FLA's chunk_gated_delta_rule runs the same
// products in its kernels): K·Kᵀ, Q·Kᵀ and W = Ainv·(βe^c ⊙ K), 2·C·dk each; U0 = Ainv·(β ⊙ V)
// and (QKᵀ ⊙ D)·U, 2·C·dv each; W·S, (e^c ⊙ Q)·S and the state update (K ⊙ e^{c_C − c})ᵀ·U,
// 2·dk·dv each; the triangular inverse (I + A)^{-1}, C³/3 multiply-adds a chunk:
//   6·C·dk + 4·C·dv + 6·dk·dv + 2·C²/3.
// The backward is twice that plus what FLA recomputes instead of saving (recompute_w_u_fwd's W
// and U0, chunk_gated_delta_rule_fwd_h's chunk states): 2·C·(dk + dv) + 4·dk·dv
// (gdn_delta_rule_recompute_flops).
double gdn_delta_rule_flops(const PlanModel& m);
double gdn_delta_rule_recompute_flops(const PlanModel& m);
inline constexpr int kGdnChunk = 64;
double head_flops_per_token(const PlanModel& m);  // the LM head's logits, 2·h·V

// Model FLOPs of one iteration (forward + backward = 3 × forward, no recomputation; MTP layers
// and their head included): the FLOP convention of every MFU and TFLOP/s figure the planner prints.
double model_flops_per_iteration(const PlanModel& m, int64_t global_batch);

// The model from a file: tessel's JSON (keys are the flag names with '_', as `tessel train
// --model-config`, plus the planner's own keys) or a Hugging Face config.json (told apart by
// its "model_type", read by its family's planner_sizes: family/family.h).
PlanModel load_plan_model(const std::string& path);
void plan_model_from_json(const nlohmann::json& j, PlanModel& m, const std::string& source);
nlohmann::json plan_model_to_json(const PlanModel& m);

// Presets: gpt3-175b, the PTD-P paper's ptdp-1.7b … ptdp-1t, Korthikanti et al.'s ka-22b …
// ka-1t, llama3-8b/70b/405b, mixtral-8x7b, qwen3-moe-60l (a Qwen3-MoE-style guess at the seed's
// 60-layer, 512-expert model), qwen3-next-80b-a3b and qwen3.5-397b-a17b (the seed's real model),
// deepseek-v3. Throws a ConfigError naming the known ones for any other name.
PlanModel model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace tessel
