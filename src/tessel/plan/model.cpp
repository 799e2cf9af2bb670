#include "tessel/plan/model.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/model/config.h"

namespace tessel {

int64_t PlanModel::q_width() const {
  if (multi_latent_attention)
    return static_cast<int64_t>(cfg.num_attention_heads) * (mla.qk_head_dim + mla.qk_pos_emb_head_dim);
  return static_cast<int64_t>(cfg.num_attention_heads) * head_dim();
}

int64_t PlanModel::kv_width() const {
  if (multi_latent_attention) return q_width();  // every head has its own key, decompressed
  return static_cast<int64_t>(cfg.query_groups()) * head_dim();
}

int64_t PlanModel::v_width() const {
  if (multi_latent_attention) return static_cast<int64_t>(cfg.num_attention_heads) * mla.v_head_dim;
  return q_width();
}

std::vector<std::string> PlanModel::violations() const {
  // Multi-latent attention's head dimensions are its own: the sizes are checked as if hidden
  // were heads × 2 (the other rules do not change).
  ModelConfig sizes = cfg;
  if (multi_latent_attention && cfg.hidden_size > 0 && cfg.num_attention_heads > 0) {
    sizes.ffn_hidden_size = cfg.ffn_size();
    sizes.hidden_size = cfg.num_attention_heads * 2;
    sizes.kv_channels = 0;
  }
  std::vector<std::string> v = sizes.violations();
  if (multi_latent_attention) {
    if (cfg.arch != Arch::Llama) v.push_back("--multi-latent-attention needs --arch llama");
    if (mla.q_lora_rank < 0 || mla.kv_lora_rank <= 0 || mla.qk_head_dim <= 0 ||
        mla.qk_pos_emb_head_dim < 0 || mla.v_head_dim <= 0)
      v.push_back("--multi-latent-attention needs positive --kv-lora-rank, --qk-head-dim and "
                  "--v-head-dim (and --q-lora-rank, --qk-pos-emb-head-dim not negative)");
  }
  if (cfg.moe.num_experts < 0)
    v.push_back(fmt::format("--num-experts must not be negative (got {})", cfg.moe.num_experts));
  if (cfg.moe.num_experts > 0) {
    for (std::string& m : cfg.moe.violations(1, cfg.num_layers)) v.push_back(std::move(m));
    if (cfg.arch != Arch::Llama) v.push_back("--num-experts needs --arch llama (Qwen-MoE style experts)");
  }
  return v;
}

// ---- parameters ----------------------------------------------------------------------------
// Counted from the sizes, as Megatron-LM builds the layers: the models of GPU clusters may use what
// tessel does not build (multi-latent attention, --kv-channels). tessel's own ranks (CPU
// clusters) count the parameters their model declares instead (stage_params, tessel_chunks.cpp).

namespace {

// A layer's parameters, its mixer Gated DeltaNet (`linear`) or attention.
ParamSplit layer_params_of(const PlanModel& m, int layer, bool linear) {
  const ModelConfig& c = m.cfg;
  const int64_t h = c.hidden_size, q = m.q_width(), kv = m.kv_width(), vw = m.v_width();
  ParamSplit p;
  if (c.arch == Arch::GPT2) {  // c_attn W and b, c_proj W; c_fc W and b, mlp c_proj W
    const int64_t F = m.ffn();
    p.tp = h * (q + 2 * kv) + (q + 2 * kv) + vw * h + h * F + F + F * h;
    p.replicated = 6 * h;  // ln_1 and ln_2 weight and bias, both c_proj biases
    return p;
  }
  p.replicated = 2 * h;  // input and post-attention RMSNorm
  if (linear) {
    const LinearAttentionConfig& g = c.linear;
    const int64_t Hv = g.num_value_heads;
    // in_proj: q, k, v (conv_dim rows), z, β, α; conv1d; A_log, dt_bias; out_proj — all by head
    p.tp += h * (g.conv_dim() + g.value_dim() + 2 * Hv) + g.conv_dim() * g.conv_kernel_dim + 2 * Hv +
            g.value_dim() * h;
    p.replicated += g.value_head_dim;  // the gated norm's gain, shared by the heads
  } else if (m.multi_latent_attention) {
    const MlaConfig& a = m.mla;
    const int64_t heads = c.num_attention_heads, rope = a.qk_pos_emb_head_dim;
    if (a.q_lora_rank > 0) {
      p.replicated += h * a.q_lora_rank + a.q_lora_rank;  // down projection and its norm
      p.tp += a.q_lora_rank * q;
    } else {
      p.tp += h * q;
    }
    p.replicated += h * (a.kv_lora_rank + rope) + a.kv_lora_rank;
    p.tp += a.kv_lora_rank * heads * (a.qk_head_dim + a.v_head_dim) + vw * h;
  } else {
    p.tp += h * (q + 2 * kv) + vw * h;
    if (c.attention_output_gate) p.tp += h * q;  // the gate's rows of q_proj
    if (c.add_qkv_bias) p.tp += q + 2 * kv;
    if (c.qk_layernorm) p.replicated += 2 * m.head_dim();
  }
  if (!m.is_moe_layer(layer)) {
    p.tp += 3 * h * m.ffn();
    return p;
  }
  const MoeConfig& e = c.moe;
  p.replicated += static_cast<int64_t>(e.num_experts) * h;  // the router
  p.experts = static_cast<int64_t>(e.num_experts) * 3 * h * m.expert_ffn();
  if (e.shared_expert_size > 0) {
    p.tp += 3 * h * e.shared_expert_size;
    if (e.shared_expert_gate) p.replicated += h;  // the shared expert's gate, [1, C]
  }
  return p;
}

}  // namespace

ParamSplit layer_params(const PlanModel& m, int layer) { return layer_params_of(m, layer, m.is_linear_layer(layer)); }

ParamSplit mtp_params(const PlanModel& m) {
  ParamSplit one = layer_params_of(m, m.cfg.num_layers - 1, false);
  const int64_t h = m.cfg.hidden_size;
  one.replicated += 3 * h;  // the embedding's and the hidden state's norms, the final norm
  one.tp += 2 * h * h;      // fc [C, 2C]
  ParamSplit all;
  for (int i = 0; i < m.mtp_layers(); ++i) all += one;
  return all;
}

ParamSplit embedding_params(const PlanModel& m, int tp) {
  ParamSplit p;
  p.tp = m.cfg.padded_vocab(tp) * m.cfg.hidden_size;
  if (m.cfg.arch == Arch::GPT2) p.replicated = static_cast<int64_t>(m.cfg.max_positions()) * m.cfg.hidden_size;
  return p;
}

ParamSplit head_params(const PlanModel& m, int tp) {
  ParamSplit p;
  p.replicated = (m.cfg.arch == Arch::GPT2 ? 2 : 1) * static_cast<int64_t>(m.cfg.hidden_size);
  if (!m.cfg.tied_embeddings()) p.tp = m.cfg.padded_vocab(tp) * m.cfg.hidden_size;
  return p;
}

namespace {
int64_t unpadded_vocab_params(const PlanModel& m) {
  return static_cast<int64_t>(m.cfg.vocab_size) * m.cfg.hidden_size * (m.cfg.tied_embeddings() ? 1 : 2);
}
}  // namespace

int64_t total_params(const PlanModel& m) {
  int64_t n = unpadded_vocab_params(m) + embedding_params(m, 1).replicated + head_params(m, 1).replicated;
  for (int l = 0; l < m.cfg.num_layers; ++l) n += layer_params(m, l).total();
  return n + mtp_params(m).total();
}

int64_t active_params(const PlanModel& m) {
  int64_t n = unpadded_vocab_params(m) + embedding_params(m, 1).replicated + head_params(m, 1).replicated;
  for (int l = 0; l < m.cfg.num_layers; ++l) {
    const ParamSplit p = layer_params(m, l);
    n += p.tp + p.replicated;
    if (p.experts > 0) n += p.experts / m.cfg.moe.num_experts * m.cfg.moe.topk;
  }
  return n;
}

// ---- FLOPs ---------------------------------------------------------------------------------

double gdn_delta_rule_flops(const PlanModel& m) {
  const double C = kGdnChunk, dk = m.cfg.linear.key_head_dim, dv = m.cfg.linear.value_head_dim;
  return 6 * C * dk + 4 * C * dv + 6 * dk * dv + 2 * C * C / 3;
}

double gdn_delta_rule_recompute_flops(const PlanModel& m) {
  const double C = kGdnChunk, dk = m.cfg.linear.key_head_dim, dv = m.cfg.linear.value_head_dim;
  return 2 * C * (dk + dv) + 4 * dk * dv;
}

namespace {

LayerFlops layer_flops_of(const PlanModel& m, int layer, int64_t context, bool linear) {
  const ModelConfig& c = m.cfg;
  const double h = c.hidden_size, q = static_cast<double>(m.q_width()), kv = static_cast<double>(m.kv_width()),
               vw = static_cast<double>(m.v_width());
  LayerFlops f;
  if (linear) {
    const LinearAttentionConfig& g = c.linear;
    const double Hv = g.num_value_heads;
    f.dense = 2 * h * (g.conv_dim() + g.value_dim() + 2 * Hv) + 2 * g.value_dim() * h;  // in_proj, out_proj
    f.delta_rule = Hv * gdn_delta_rule_flops(m);
  } else if (m.multi_latent_attention) {
    const MlaConfig& a = m.mla;
    const double heads = c.num_attention_heads, rope = a.qk_pos_emb_head_dim;
    f.replicated = 2 * (a.q_lora_rank > 0 ? h * a.q_lora_rank : 0) + 2 * h * (a.kv_lora_rank + rope);
    f.dense = 2 * ((a.q_lora_rank > 0 ? a.q_lora_rank * q : h * q) +
                   a.kv_lora_rank * heads * (a.qk_head_dim + a.v_head_dim) + vw * h);
  } else {
    f.dense = 2 * (h * (q * (c.attention_output_gate ? 2 : 1) + 2 * kv) + vw * h);
  }
  if (!linear) f.attention = 2.0 * context * (q + vw);
  const double mlp_matrices = m.swiglu() ? 3 : 2;
  if (!m.is_moe_layer(layer)) {
    f.dense += 2 * mlp_matrices * h * m.ffn();
    return f;
  }
  const MoeConfig& e = c.moe;
  f.replicated += 2 * h * e.num_experts + (e.shared_expert_gate ? 2 * h : 0);
  f.experts = 2.0 * e.topk * mlp_matrices * h * m.expert_ffn();
  f.dense += 2 * mlp_matrices * h * e.shared_expert_size;
  return f;
}

}  // namespace

LayerFlops layer_flops(const PlanModel& m, int layer, int64_t context) {
  return layer_flops_of(m, layer, context, m.is_linear_layer(layer));
}

LayerFlops mtp_flops(const PlanModel& m, int64_t context) {
  LayerFlops f = layer_flops_of(m, m.cfg.num_layers - 1, context, false);
  f.dense += 2.0 * 2 * m.cfg.hidden_size * m.cfg.hidden_size;  // fc
  return f;
}

double head_flops_per_token(const PlanModel& m) {
  return 2.0 * m.cfg.hidden_size * m.cfg.vocab_size;
}

double model_flops_per_iteration(const PlanModel& m, int64_t global_batch) {
  const int64_t s = m.cfg.seq_length;
  double per_token = head_flops_per_token(m);
  for (int l = 0; l < m.cfg.num_layers; ++l) per_token += layer_flops(m, l, s).total();
  per_token += m.mtp_layers() * (mtp_flops(m, s).total() + head_flops_per_token(m));
  return 3.0 * per_token * static_cast<double>(global_batch) * s;
}

}  // namespace tessel
