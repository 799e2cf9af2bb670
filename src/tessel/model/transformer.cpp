#include "tessel/model/transformer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "tessel/core/error.h"
#include "tessel/kernels/cpu/kernels.h"

namespace tessel {

using cpu::WeightLayout;

namespace {
constexpr float kInitStd = 0.02f;  // Megatron's --init-method-std default

inline void zero(Tensor& t) { t.zero(); }
}  // namespace

TransformerChunk::TransformerChunk(const ModelConfig& cfg, ChunkSpec spec, int64_t micro_batch,
                                   ParamRegistry& registry)
    : cfg_(cfg), spec_(spec) {
  cfg_.validate();
  B_ = micro_batch;
  T_ = cfg.seq_length;
  N_ = B_ * T_;
  C_ = cfg.hidden_size;
  F_ = cfg.ffn_size();
  H_ = cfg.num_attention_heads;
  G_ = cfg.query_groups();
  D_ = cfg.head_dim();
  V_ = cfg.vocab_size;
  declare_params(registry);

  positions_.resize(N_);
  for (int64_t n = 0; n < N_; ++n) positions_[n] = static_cast<int32_t>(n % T_);
  if (cfg_.arch == Arch::Llama) {
    rope_cos_ = Tensor::zeros({cfg.max_positions(), D_ / 2});
    rope_sin_ = Tensor::zeros({cfg.max_positions(), D_ / 2});
    cpu::rope_tables(rope_cos_.data(), rope_sin_.data(), cfg.max_positions(), D_, cfg.rotary_base);
  }
  const int64_t HD = H_ * D_, GD = G_ * D_;
  proj_ = Tensor::zeros({N_, C_});
  d_resid_ = Tensor::zeros({N_, C_});
  d_ln_ = Tensor::zeros({N_, C_});
  d_attn_ = Tensor::zeros({N_, HD});
  if (cfg_.arch == Arch::GPT2) {
    d_qkv_ = Tensor::zeros({N_, 3 * C_});
  } else {
    d_q_ = Tensor::zeros({N_, HD});
    d_k_ = Tensor::zeros({N_, GD});
    d_v_ = Tensor::zeros({N_, GD});
    d_hidden2_ = Tensor::zeros({N_, F_});
  }
  d_hidden_ = Tensor::zeros({N_, F_});
  d_act_ = Tensor::zeros({N_, F_});
  if (spec_.has_head) {
    logits_ = Tensor::zeros({N_, V_});
    losses_ = Tensor::zeros({N_});
    loss_lse_ = Tensor::zeros({N_});
  }
}

// Parameters are declared in Hugging Face order with Hugging Face names and shapes (GPT-2's
// Conv1D weights are [in, out]; Llama's nn.Linear weights are [out, in]). Initialisation as
// Megatron: normal(0, 0.02), output projections 0.02/sqrt(2·layers), norms 1, biases 0.
void TransformerChunk::declare_params(ParamRegistry& reg) {
  const float out_std = kInitStd / std::sqrt(2.0f * cfg_.num_layers);
  const int64_t HD = H_ * D_, GD = G_ * D_;
  auto weight = [&](const std::string& name, Shape shape, float std) {
    return reg.add(name, std::move(shape), ParamInit::Normal, std, true);
  };
  auto norm = [&](const std::string& name) { return reg.add(name, {C_}, ParamInit::Ones, 0, false); };
  auto bias = [&](const std::string& name, int64_t n) {
    return reg.add(name, {n}, ParamInit::Zeros, 0, false);
  };
  const bool gpt2 = cfg_.arch == Arch::GPT2;
  if (spec_.has_embedding || (spec_.has_head && cfg_.tied_embeddings())) {
    // A tied head on another stage keeps its own copy, synchronised as Megatron's embedding group.
    wte_ = weight(gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight", {V_, C_}, kInitStd);
  }
  if (spec_.has_embedding && gpt2)
    wpe_ = weight("transformer.wpe.weight", {cfg_.max_positions(), C_}, kInitStd);
  layers_.assign(spec_.num_layers, {});
  for (int i = 0; i < spec_.num_layers; ++i) {
    const int l = spec_.first_layer + i;
    LayerParams& lp = layers_[i];
    if (gpt2) {
      const std::string p = fmt::format("transformer.h.{}.", l);
      lp.ln1_w = norm(p + "ln_1.weight");
      lp.ln1_b = bias(p + "ln_1.bias", C_);
      lp.qkv_w = weight(p + "attn.c_attn.weight", {C_, 3 * C_}, kInitStd);
      lp.qkv_b = bias(p + "attn.c_attn.bias", 3 * C_);
      lp.proj_w = weight(p + "attn.c_proj.weight", {C_, C_}, out_std);
      lp.proj_b = bias(p + "attn.c_proj.bias", C_);
      lp.ln2_w = norm(p + "ln_2.weight");
      lp.ln2_b = bias(p + "ln_2.bias", C_);
      lp.fc_w = weight(p + "mlp.c_fc.weight", {C_, F_}, kInitStd);
      lp.fc_b = bias(p + "mlp.c_fc.bias", F_);
      lp.down_w = weight(p + "mlp.c_proj.weight", {F_, C_}, out_std);
      lp.down_b = bias(p + "mlp.c_proj.bias", C_);
    } else {
      const std::string p = fmt::format("model.layers.{}.", l);
      lp.ln1_w = norm(p + "input_layernorm.weight");
      lp.q_w = weight(p + "self_attn.q_proj.weight", {HD, C_}, kInitStd);
      lp.k_w = weight(p + "self_attn.k_proj.weight", {GD, C_}, kInitStd);
      lp.v_w = weight(p + "self_attn.v_proj.weight", {GD, C_}, kInitStd);
      lp.proj_w = weight(p + "self_attn.o_proj.weight", {C_, HD}, out_std);
      lp.ln2_w = norm(p + "post_attention_layernorm.weight");
      lp.gate_w = weight(p + "mlp.gate_proj.weight", {F_, C_}, kInitStd);
      lp.fc_w = weight(p + "mlp.up_proj.weight", {F_, C_}, kInitStd);
      lp.down_w = weight(p + "mlp.down_proj.weight", {C_, F_}, out_std);
    }
  }
  if (spec_.has_head) {
    if (gpt2) {
      lnf_w_ = norm("transformer.ln_f.weight");
      lnf_b_ = bias("transformer.ln_f.bias", C_);
      lm_head_ = wte_;
    } else {
      lnf_w_ = norm("model.norm.weight");
      lm_head_ = weight("lm_head.weight", {V_, C_}, kInitStd);
    }
  }
}

ChunkActivations TransformerChunk::make_activations() const {
  ChunkActivations a;
  const int64_t HD = H_ * D_, GD = G_ * D_;
  for (int i = 0; i <= spec_.num_layers; ++i) a.resid.push_back(Tensor::zeros({N_, C_}));
  a.layers.resize(spec_.num_layers);
  for (LayerActivations& la : a.layers) {
    la.ln1 = Tensor::zeros({N_, C_});
    la.ln1_rstd = Tensor::zeros({N_});
    la.attn = Tensor::zeros({N_, HD});
    la.lse = Tensor::zeros({B_, H_, T_});
    la.mid = Tensor::zeros({N_, C_});
    la.ln2 = Tensor::zeros({N_, C_});
    la.ln2_rstd = Tensor::zeros({N_});
    if (cfg_.arch == Arch::GPT2) {
      la.ln1_mean = Tensor::zeros({N_});
      la.ln2_mean = Tensor::zeros({N_});
      la.qkv = Tensor::zeros({N_, 3 * C_});
      la.fc = Tensor::zeros({N_, F_});
      la.fc_act = Tensor::zeros({N_, F_});
    } else {
      la.q = Tensor::zeros({N_, HD});
      la.k = Tensor::zeros({N_, GD});
      la.v = Tensor::zeros({N_, GD});
      la.gate = Tensor::zeros({N_, F_});
      la.up = Tensor::zeros({N_, F_});
      la.act = Tensor::zeros({N_, F_});
    }
  }
  if (spec_.has_embedding) a.tokens.resize(N_);
  if (spec_.has_head) {
    a.lnf = Tensor::zeros({N_, C_});
    a.lnf_rstd = Tensor::zeros({N_});
    if (cfg_.arch == Arch::GPT2) a.lnf_mean = Tensor::zeros({N_});
    a.d_lnf = Tensor::zeros({N_, C_});
  }
  return a;
}

int64_t ChunkActivations::bytes() const {
  int64_t n = 0;
  auto add = [&](const Tensor& t) { n += t.empty() ? 0 : t.numel() * 4; };
  for (const Tensor& t : resid) add(t);
  for (const LayerActivations& l : layers)
    for (const Tensor* t : {&l.ln1, &l.ln1_mean, &l.ln1_rstd, &l.qkv, &l.q, &l.k, &l.v, &l.attn,
                            &l.lse, &l.mid, &l.ln2, &l.ln2_mean, &l.ln2_rstd, &l.fc, &l.fc_act,
                            &l.gate, &l.up, &l.act})
      add(*t);
  for (const Tensor* t : {&lnf, &lnf_mean, &lnf_rstd, &d_lnf}) add(*t);
  return n + static_cast<int64_t>(tokens.size()) * 4;
}

int64_t TransformerChunk::scratch_bytes() const {
  int64_t n = static_cast<int64_t>(positions_.size()) * 4;
  for (const Tensor* t : {&rope_cos_, &rope_sin_, &proj_, &d_resid_, &d_ln_, &d_attn_, &d_qkv_,
                          &d_q_, &d_k_, &d_v_, &d_hidden_, &d_hidden2_, &d_act_, &logits_,
                          &losses_, &loss_lse_})
    n += t->empty() ? 0 : t->numel() * 4;
  return n;
}

double TransformerChunk::forward(ChunkActivations& acts, const int32_t* tokens, const float* input,
                                 const int32_t* targets, float grad_scale) {
  if (spec_.has_embedding) {
    for (int64_t n = 0; n < N_; ++n) {
      TESSEL_CHECK(tokens[n] >= 0 && tokens[n] < V_, "token id {} is outside the vocabulary (size {})",
                   tokens[n], V_);
    }
    std::memcpy(acts.tokens.data(), tokens, sizeof(int32_t) * N_);
    cpu::embedding_forward(acts.resid[0].data(), tokens, positions_.data(), val(wte_), val(wpe_),
                           N_, C_);
  } else {
    std::memcpy(acts.resid[0].data(), input, sizeof(float) * N_ * C_);
  }
  for (int i = 0; i < spec_.num_layers; ++i) layer_forward(i, acts);
  acts.loss_sum = spec_.has_head ? head_forward(acts, targets, grad_scale) : 0.0;
  return acts.loss_sum;
}

void TransformerChunk::backward(ChunkActivations& acts, const float* d_output, float* d_input) {
  // dres: the gradient of the residual stream, updated in place from the chunk's output back to
  // its input; it ends as d(input), in the caller's buffer when there is one.
  float* dres = d_input != nullptr ? d_input : d_resid_.data();
  if (spec_.has_head) {
    std::memset(dres, 0, sizeof(float) * N_ * C_);
    head_backward(acts, dres);
  } else {
    std::memcpy(dres, d_output, sizeof(float) * N_ * C_);
  }
  for (int i = spec_.num_layers - 1; i >= 0; --i) layer_backward(i, acts, dres);
  if (spec_.has_embedding)
    cpu::embedding_backward(grd(wte_), grd(wpe_), dres, acts.tokens.data(), positions_.data(), N_,
                            C_);
}

void TransformerChunk::layer_forward(int i, ChunkActivations& acts) {
  const LayerParams& p = layers_[i];
  LayerActivations& a = acts.layers[i];
  const float* x = acts.resid[i].data();  // (N, C)
  float* out = acts.resid[i + 1].data();  // (N, C)
  const float eps = cfg_.norm_epsilon;
  const int64_t HD = H_ * D_, GD = G_ * D_;
  if (cfg_.arch == Arch::GPT2) {
    cpu::layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, val(p.ln1_w),
                           val(p.ln1_b), N_, C_, eps);
    cpu::linear_forward(a.qkv.data(), a.ln1.data(), val(p.qkv_w), val(p.qkv_b), N_, C_, 3 * C_,
                        WeightLayout::InOut);
    const float* qkv = a.qkv.data();  // (N, 3C): q | k | v
    cpu::attention_forward(a.attn.data(), a.lse.data(), qkv, qkv + C_, qkv + 2 * C_, B_, T_, H_,
                           H_, D_, 3 * C_, 3 * C_, 3 * C_, true);
    cpu::linear_forward(proj_.data(), a.attn.data(), val(p.proj_w), val(p.proj_b), N_, C_, C_,
                        WeightLayout::InOut);
    cpu::residual_forward(a.mid.data(), x, proj_.data(), N_ * C_);
    cpu::layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.mid.data(),
                           val(p.ln2_w), val(p.ln2_b), N_, C_, eps);
    cpu::linear_forward(a.fc.data(), a.ln2.data(), val(p.fc_w), val(p.fc_b), N_, C_, F_,
                        WeightLayout::InOut);
    cpu::gelu_forward(a.fc_act.data(), a.fc.data(), N_ * F_);
    cpu::linear_forward(proj_.data(), a.fc_act.data(), val(p.down_w), val(p.down_b), N_, F_, C_,
                        WeightLayout::InOut);
  } else {
    cpu::rmsnorm_forward(a.ln1.data(), a.ln1_rstd.data(), x, val(p.ln1_w), N_, C_, eps);
    cpu::linear_forward(a.q.data(), a.ln1.data(), val(p.q_w), nullptr, N_, C_, HD, WeightLayout::OutIn);
    cpu::linear_forward(a.k.data(), a.ln1.data(), val(p.k_w), nullptr, N_, C_, GD, WeightLayout::OutIn);
    cpu::linear_forward(a.v.data(), a.ln1.data(), val(p.v_w), nullptr, N_, C_, GD, WeightLayout::OutIn);
    cpu::rope_forward(a.q.data(), positions_.data(), rope_cos_.data(), rope_sin_.data(), N_, H_, D_, HD);
    cpu::rope_forward(a.k.data(), positions_.data(), rope_cos_.data(), rope_sin_.data(), N_, G_, D_, GD);
    cpu::attention_forward(a.attn.data(), a.lse.data(), a.q.data(), a.k.data(), a.v.data(), B_, T_,
                           H_, G_, D_, HD, GD, GD, true);
    cpu::linear_forward(proj_.data(), a.attn.data(), val(p.proj_w), nullptr, N_, HD, C_,
                        WeightLayout::OutIn);
    cpu::residual_forward(a.mid.data(), x, proj_.data(), N_ * C_);
    cpu::rmsnorm_forward(a.ln2.data(), a.ln2_rstd.data(), a.mid.data(), val(p.ln2_w), N_, C_, eps);
    cpu::linear_forward(a.gate.data(), a.ln2.data(), val(p.gate_w), nullptr, N_, C_, F_, WeightLayout::OutIn);
    cpu::linear_forward(a.up.data(), a.ln2.data(), val(p.fc_w), nullptr, N_, C_, F_, WeightLayout::OutIn);
    cpu::swiglu_forward(a.act.data(), a.gate.data(), a.up.data(), N_ * F_);
    cpu::linear_forward(proj_.data(), a.act.data(), val(p.down_w), nullptr, N_, F_, C_,
                        WeightLayout::OutIn);
  }
  cpu::residual_forward(out, a.mid.data(), proj_.data(), N_ * C_);
}

// dres (N, C) holds d(layer output) on entry and d(layer input) on exit: each branch's input
// gradient is accumulated into it by the norm's backward, the identity path needs nothing.
void TransformerChunk::layer_backward(int i, ChunkActivations& acts, float* dres) {
  const LayerParams& p = layers_[i];
  LayerActivations& a = acts.layers[i];
  const float* x = acts.resid[i].data();
  const int64_t HD = H_ * D_, GD = G_ * D_;
  if (cfg_.arch == Arch::GPT2) {
    zero(d_act_);
    cpu::linear_backward(d_act_.data(), grd(p.down_w), grd(p.down_b), dres, a.fc_act.data(),
                         val(p.down_w), N_, F_, C_, WeightLayout::InOut);
    zero(d_hidden_);
    cpu::gelu_backward(d_hidden_.data(), d_act_.data(), a.fc.data(), N_ * F_);
    zero(d_ln_);
    cpu::linear_backward(d_ln_.data(), grd(p.fc_w), grd(p.fc_b), d_hidden_.data(), a.ln2.data(),
                         val(p.fc_w), N_, C_, F_, WeightLayout::InOut);
    cpu::layernorm_backward(dres, grd(p.ln2_w), grd(p.ln2_b), d_ln_.data(), a.mid.data(),
                            val(p.ln2_w), a.ln2_mean.data(), a.ln2_rstd.data(), N_, C_);
    zero(d_attn_);
    cpu::linear_backward(d_attn_.data(), grd(p.proj_w), grd(p.proj_b), dres, a.attn.data(),
                         val(p.proj_w), N_, C_, C_, WeightLayout::InOut);
    zero(d_qkv_);
    const float* qkv = a.qkv.data();
    float* dqkv = d_qkv_.data();
    cpu::attention_backward(dqkv, dqkv + C_, dqkv + 2 * C_, d_attn_.data(), qkv, qkv + C_,
                            qkv + 2 * C_, a.attn.data(), a.lse.data(), B_, T_, H_, H_, D_, 3 * C_,
                            3 * C_, 3 * C_, true);
    zero(d_ln_);
    cpu::linear_backward(d_ln_.data(), grd(p.qkv_w), grd(p.qkv_b), dqkv, a.ln1.data(),
                         val(p.qkv_w), N_, C_, 3 * C_, WeightLayout::InOut);
    cpu::layernorm_backward(dres, grd(p.ln1_w), grd(p.ln1_b), d_ln_.data(), x, val(p.ln1_w),
                            a.ln1_mean.data(), a.ln1_rstd.data(), N_, C_);
  } else {
    zero(d_act_);
    cpu::linear_backward(d_act_.data(), grd(p.down_w), nullptr, dres, a.act.data(), val(p.down_w),
                         N_, F_, C_, WeightLayout::OutIn);
    zero(d_hidden_);   // d gate
    zero(d_hidden2_);  // d up
    cpu::swiglu_backward(d_hidden_.data(), d_hidden2_.data(), d_act_.data(), a.gate.data(),
                         a.up.data(), N_ * F_);
    zero(d_ln_);
    cpu::linear_backward(d_ln_.data(), grd(p.gate_w), nullptr, d_hidden_.data(), a.ln2.data(),
                         val(p.gate_w), N_, C_, F_, WeightLayout::OutIn);
    cpu::linear_backward(d_ln_.data(), grd(p.fc_w), nullptr, d_hidden2_.data(), a.ln2.data(),
                         val(p.fc_w), N_, C_, F_, WeightLayout::OutIn);
    cpu::rmsnorm_backward(dres, grd(p.ln2_w), d_ln_.data(), a.mid.data(), val(p.ln2_w),
                          a.ln2_rstd.data(), N_, C_);
    zero(d_attn_);
    cpu::linear_backward(d_attn_.data(), grd(p.proj_w), nullptr, dres, a.attn.data(),
                         val(p.proj_w), N_, HD, C_, WeightLayout::OutIn);
    zero(d_q_);
    zero(d_k_);
    zero(d_v_);
    cpu::attention_backward(d_q_.data(), d_k_.data(), d_v_.data(), d_attn_.data(), a.q.data(),
                            a.k.data(), a.v.data(), a.attn.data(), a.lse.data(), B_, T_, H_, G_,
                            D_, HD, GD, GD, true);
    cpu::rope_backward(d_q_.data(), positions_.data(), rope_cos_.data(), rope_sin_.data(), N_, H_,
                       D_, HD);
    cpu::rope_backward(d_k_.data(), positions_.data(), rope_cos_.data(), rope_sin_.data(), N_, G_,
                       D_, GD);
    zero(d_ln_);
    cpu::linear_backward(d_ln_.data(), grd(p.q_w), nullptr, d_q_.data(), a.ln1.data(), val(p.q_w),
                         N_, C_, HD, WeightLayout::OutIn);
    cpu::linear_backward(d_ln_.data(), grd(p.k_w), nullptr, d_k_.data(), a.ln1.data(), val(p.k_w),
                         N_, C_, GD, WeightLayout::OutIn);
    cpu::linear_backward(d_ln_.data(), grd(p.v_w), nullptr, d_v_.data(), a.ln1.data(), val(p.v_w),
                         N_, C_, GD, WeightLayout::OutIn);
    cpu::rmsnorm_backward(dres, grd(p.ln1_w), d_ln_.data(), x, val(p.ln1_w), a.ln1_rstd.data(), N_,
                          C_);
  }
}

// The head's backward runs inside its forward: the loss gradient's scale is known in advance
// (1 / tokens of the global batch), and doing so means the (N, V) logits are shared scratch
// rather than a per-microbatch tensor — the largest activation of a small-hidden, large-vocab model.
double TransformerChunk::head_forward(ChunkActivations& acts, const int32_t* targets,
                                      float grad_scale) {
  const float* x = acts.resid.back().data();
  if (cfg_.arch == Arch::GPT2) {
    cpu::layernorm_forward(acts.lnf.data(), acts.lnf_mean.data(), acts.lnf_rstd.data(), x,
                           val(lnf_w_), val(lnf_b_), N_, C_, cfg_.norm_epsilon);
  } else {
    cpu::rmsnorm_forward(acts.lnf.data(), acts.lnf_rstd.data(), x, val(lnf_w_), N_, C_,
                         cfg_.norm_epsilon);
  }
  // logits (N, V) = lnf (N, C) · Wᵀ with W (V, C): the tied embedding or lm_head.weight.
  cpu::linear_forward(logits_.data(), acts.lnf.data(), val(lm_head_), nullptr, N_, C_, V_,
                      WeightLayout::OutIn);
  if (targets == nullptr) return 0.0;
  for (int64_t n = 0; n < N_; ++n) {
    TESSEL_CHECK(targets[n] >= 0 && targets[n] < V_, "target id {} is outside the vocabulary (size {})",
                 targets[n], V_);
  }
  cpu::cross_entropy_forward(losses_.data(), loss_lse_.data(), logits_.data(), targets, N_, V_);
  double loss_sum = 0;
  for (int64_t n = 0; n < N_; ++n) loss_sum += losses_.data()[n];
  if (grad_scale > 0) {
    cpu::cross_entropy_backward(logits_.data(), logits_.data(), loss_lse_.data(), targets,
                                grad_scale, N_, V_);
    zero(acts.d_lnf);
    cpu::linear_backward(acts.d_lnf.data(), grd(lm_head_), nullptr, logits_.data(),
                         acts.lnf.data(), val(lm_head_), N_, C_, V_, WeightLayout::OutIn);
  }
  return loss_sum;
}

void TransformerChunk::head_backward(ChunkActivations& acts, float* dres) {
  const float* x = acts.resid.back().data();
  if (cfg_.arch == Arch::GPT2) {
    cpu::layernorm_backward(dres, grd(lnf_w_), grd(lnf_b_), acts.d_lnf.data(), x, val(lnf_w_),
                            acts.lnf_mean.data(), acts.lnf_rstd.data(), N_, C_);
  } else {
    cpu::rmsnorm_backward(dres, grd(lnf_w_), acts.d_lnf.data(), x, val(lnf_w_),
                          acts.lnf_rstd.data(), N_, C_);
  }
}

}  // namespace tessel
