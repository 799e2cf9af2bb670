#include "tessel/model/transformer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "tessel/core/error.h"

namespace tessel {

namespace {
constexpr float kInitStd = 0.02f;  // Megatron's --init-method-std default

inline void zero(Tensor& t) { t.zero(); }

// Token ids (tokens or targets) must be in the vocabulary: a clear error, not a zero embedding.
void check_ids(const Kernels& k, const int32_t* ids, int64_t n, int32_t vocab, const char* what) {
  const int64_t bad = k.find_out_of_range(ids, n, 0, vocab);
  if (bad < 0) return;
  int32_t id = 0;
  k.memory.to_host(&id, ids + bad, 4);
  fail("{} id {} is outside the vocabulary (size {})", what, id, vocab);
}

// Tells grad_ready (when given) that these parameters' gradients are final; -1 entries are
// parameters the architecture does not have.
void report(const std::function<void(int)>& grad_ready, std::initializer_list<int> params) {
  if (!grad_ready) return;
  for (int p : params)
    if (p >= 0) grad_ready(p);
}
}  // namespace

TransformerChunk::TransformerChunk(const Kernels& k, const ModelConfig& cfg, ChunkSpec spec,
                                   int64_t micro_batch, TensorParallel tp, ParamRegistry& registry,
                                   ContextParallel cp, MoeGroups moe_groups)
    : k_(k), cfg_(cfg), spec_(spec), tp_(tp), cp_(cp) {
  cfg_.validate();
  const int t = tp_.size();
  TESSEL_CHECK(cfg.num_attention_heads % t == 0 && cfg.query_groups() % t == 0 &&
                   cfg.ffn_size() % t == 0,
               "heads ({}), query groups ({}) and ffn ({}) must divide by the TP size {}",
               cfg.num_attention_heads, cfg.query_groups(), cfg.ffn_size(), t);
  B_ = micro_batch;
  TESSEL_CHECK(cfg.seq_length % (2 * cp_.size()) == 0 || cp_.size() == 1,
               "context parallel needs --seq-length {} divisible by 2 × CP = {}", cfg.seq_length,
               2 * cp_.size());
  T_ = cfg.seq_length / cp_.size();  // this CP rank's rows of every sequence
  N_ = B_ * T_;
  TESSEL_CHECK(!tp_.sequence_parallel || N_ % t == 0,
               "sequence parallel needs micro batch × sequence ({}) divisible by TP {}", N_, t);
  N_l_ = tp_.local_rows(N_);
  C_ = cfg.hidden_size;
  D_ = cfg.head_dim();
  H_l_ = cfg.num_attention_heads / t;
  G_l_ = cfg.query_groups() / t;
  F_l_ = cfg.ffn_size() / t;
  V_l_ = cfg.padded_vocab(t) / t;
  vocab_start_ = tp_.rank() * V_l_;
  V_valid_ = std::clamp<int64_t>(cfg.vocab_size - vocab_start_, 0, V_l_);
  TESSEL_CHECK(cfg.moe.num_experts == 0 ||
                   (cfg.arch == Arch::Llama && (t == 1 || tp_.sequence_parallel)),
               "Mixture of Experts needs --arch llama, and sequence parallel with TP {}", t);
  moe_groups.tp = tp_;
  declare_params(registry, moe_groups);

  // (N) the global position of each row b·T_l + t: this CP rank's positions, for every sequence.
  const std::vector<int32_t> local = cp_.local_positions(cfg.seq_length);
  positions_ = k_.zeros({N_}, DType::I32);
  for (int64_t b = 0; b < B_; ++b)
    k_.memory.from_host(positions_.ints() + b * T_, local.data(), T_ * 4);
  if (cfg_.arch == Arch::Llama) {
    rope_cos_ = k_.zeros({cfg.max_positions(), D_ / 2});
    rope_sin_ = k_.zeros({cfg.max_positions(), D_ / 2});
    k_.rope_tables(rope_cos_.data(), rope_sin_.data(), cfg.max_positions(), D_, cfg.rotary_base);
  }
  const int64_t HD = H_l_ * D_;
  const bool sp = tp_.sequence_parallel;
  proj_full_ = k_.zeros({N_, C_});
  proj_local_ = sp ? k_.zeros({N_l_, C_}) : proj_full_;
  norm_local_ = k_.zeros({N_l_, C_});
  if (sp) rows_full_ = k_.zeros({N_, C_});
  d_resid_ = k_.zeros({N_l_, C_});
  d_ln_full_ = k_.zeros({N_, C_});
  d_ln_local_ = sp ? k_.zeros({N_l_, C_}) : d_ln_full_;
  d_attn_ = k_.zeros({N_, HD});
  d_act_ = k_.zeros({N_, F_l_});
  if (spec_.has_head) {
    logits_ = k_.zeros({N_, V_l_});
    loss_stats_ = k_.zeros({4, N_});
    row_max_global_ = k_.zeros({N_});
  }
}

// Parameters are declared in Hugging Face order with Hugging Face names and global shapes
// (GPT-2's Conv1D weights are [in, out]; Llama's nn.Linear weights are [out, in]), each with
// the slice this TP rank holds. Initialisation as Megatron: normal(0, 0.02), output projections
// 0.02/sqrt(2·layers), norms 1, biases 0.
void TransformerChunk::declare_params(ParamRegistry& reg, const MoeGroups& moe_groups) {
  const float out_std = kInitStd / std::sqrt(2.0f * cfg_.num_layers);
  const int64_t C = C_, F = cfg_.ffn_size(), V = cfg_.vocab_size;
  const int64_t HD = static_cast<int64_t>(cfg_.num_attention_heads) * D_;
  const int64_t GD = static_cast<int64_t>(cfg_.query_groups()) * D_;
  auto split = [&](int dim, int fused = 1, int64_t padded = 0) {
    return ShardSpec{.dim = dim, .group = ShardGroup::TP, .index = tp_.rank(), .count = tp_.size(),
                     .fused_parts = fused, .padded_size = padded};
  };
  const ShardSpec whole{};
  const ShardSpec vocab = split(0, 1, cfg_.padded_vocab(tp_.size()));
  auto weight = [&](const std::string& name, Shape shape, float std, ShardSpec shard) {
    return reg.add(name, std::move(shape), ParamInit::Normal, std, true, shard);
  };
  auto norm = [&](const std::string& name) { return reg.add(name, {C}, ParamInit::Ones, 0, false); };
  auto bias = [&](const std::string& name, int64_t n, ShardSpec shard) {
    return reg.add(name, {n}, ParamInit::Zeros, 0, false, shard);
  };
  const bool gpt2 = cfg_.arch == Arch::GPT2;
  if (spec_.has_embedding || (spec_.has_head && cfg_.tied_embeddings())) {
    // A tied head on another stage keeps its own copy, synchronised as Megatron's embedding group.
    wte_ = weight(gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight", {V, C}, kInitStd,
                  vocab);
  }
  if (spec_.has_embedding && gpt2)
    wpe_ = weight("transformer.wpe.weight", {cfg_.max_positions(), C}, kInitStd, whole);
  layers_.assign(spec_.num_layers, {});
  for (int i = 0; i < spec_.num_layers; ++i) {
    const int l = spec_.first_layer + i;
    LayerParams& lp = layers_[i];
    if (gpt2) {
      const std::string p = fmt::format("transformer.h.{}.", l);
      lp.ln1_w = norm(p + "ln_1.weight");
      lp.ln1_b = bias(p + "ln_1.bias", C, whole);
      lp.qkv_w = weight(p + "attn.c_attn.weight", {C, 3 * C}, kInitStd, split(1, 3));
      lp.qkv_b = bias(p + "attn.c_attn.bias", 3 * C, split(0, 3));
      lp.proj_w = weight(p + "attn.c_proj.weight", {C, C}, out_std, split(0));
      lp.proj_b = bias(p + "attn.c_proj.bias", C, whole);
      lp.ln2_w = norm(p + "ln_2.weight");
      lp.ln2_b = bias(p + "ln_2.bias", C, whole);
      lp.fc_w = weight(p + "mlp.c_fc.weight", {C, F}, kInitStd, split(1));
      lp.fc_b = bias(p + "mlp.c_fc.bias", F, split(0));
      lp.down_w = weight(p + "mlp.c_proj.weight", {F, C}, out_std, split(0));
      lp.down_b = bias(p + "mlp.c_proj.bias", C, whole);
    } else {
      const std::string p = fmt::format("model.layers.{}.", l);
      lp.ln1_w = norm(p + "input_layernorm.weight");
      lp.q_w = weight(p + "self_attn.q_proj.weight", {HD, C}, kInitStd, split(0));
      if (cfg_.add_qkv_bias) lp.q_b = bias(p + "self_attn.q_proj.bias", HD, split(0));
      lp.k_w = weight(p + "self_attn.k_proj.weight", {GD, C}, kInitStd, split(0));
      if (cfg_.add_qkv_bias) lp.k_b = bias(p + "self_attn.k_proj.bias", GD, split(0));
      lp.v_w = weight(p + "self_attn.v_proj.weight", {GD, C}, kInitStd, split(0));
      if (cfg_.add_qkv_bias) lp.v_b = bias(p + "self_attn.v_proj.bias", GD, split(0));
      lp.proj_w = weight(p + "self_attn.o_proj.weight", {C, HD}, out_std, split(1));
      if (cfg_.qk_layernorm) {  // one weight per head dimension, shared by all heads: replicated
        lp.q_norm = reg.add(p + "self_attn.q_norm.weight", {D_}, ParamInit::Ones, 0, false);
        lp.k_norm = reg.add(p + "self_attn.k_norm.weight", {D_}, ParamInit::Ones, 0, false);
        reg.params()[lp.q_norm].grad_partial_over_tp = true;
        reg.params()[lp.k_norm].grad_partial_over_tp = true;
      }
      lp.ln2_w = norm(p + "post_attention_layernorm.weight");
      if (cfg_.moe.is_moe_layer(l)) {
        lp.moe = static_cast<int>(moe_.size());
        moe_.push_back(std::make_unique<MoeLayer>(k_, cfg_, cfg_.moe, l, N_l_, moe_groups, reg));
        continue;
      }
      lp.gate_w = weight(p + "mlp.gate_proj.weight", {F, C}, kInitStd, split(0));
      lp.fc_w = weight(p + "mlp.up_proj.weight", {F, C}, kInitStd, split(0));
      lp.down_w = weight(p + "mlp.down_proj.weight", {C, F}, out_std, split(1));
    }
  }
  if (spec_.has_head) {
    if (gpt2) {
      lnf_w_ = norm("transformer.ln_f.weight");
      lnf_b_ = bias("transformer.ln_f.bias", C, whole);
      lm_head_ = wte_;
    } else {
      lnf_w_ = norm("model.norm.weight");
      lm_head_ = weight("lm_head.weight", {V, C}, kInitStd, vocab);
    }
  }
}

int64_t ChunkActivations::bytes() const {
  int64_t n = 0;
  auto add = [&](const Tensor& t) { n += t.empty() ? 0 : t.numel() * 4; };
  for (const Tensor& t : resid) add(t);
  for (const LayerActivations& l : layers)
    for (const Tensor* t : {&l.ln1, &l.ln1_mean, &l.ln1_rstd, &l.qkv, &l.q, &l.k, &l.v, &l.q_raw,
                            &l.k_raw, &l.q_rstd, &l.k_rstd, &l.attn,
                            &l.lse, &l.mid, &l.ln2, &l.ln2_mean, &l.ln2_rstd, &l.fc, &l.fc_act,
                            &l.gate, &l.up, &l.act, &l.d_qkv, &l.d_q, &l.d_k, &l.d_v,
                            &l.d_attn_out, &l.d_fc, &l.d_gate, &l.d_up, &l.d_mlp_out})
      add(*t);
  for (const LayerActivations& l : layers) n += l.moe.bytes();
  for (const Tensor* t : {&lnf, &lnf_mean, &lnf_rstd, &d_lnf}) add(*t);
  return n + vocab_ids.bytes();
}

int64_t TransformerChunk::scratch_bytes() const {
  int64_t n = positions_.bytes();
  const bool sp = tp_.sequence_parallel;
  for (const Tensor* t : {&rope_cos_, &rope_sin_, &proj_full_, &norm_local_, &rows_full_, &d_resid_,
                          &d_ln_full_, &d_attn_, &d_act_, &logits_, &loss_stats_, &row_max_global_})
    n += t->empty() ? 0 : t->numel() * 4;
  if (sp) n += (proj_local_.numel() + d_ln_local_.numel()) * 4;  // otherwise views
  return n;
}

ChunkActivations TransformerChunk::make_activations() const {
  ChunkActivations a;
  const int64_t HD = H_l_ * D_, GD = G_l_ * D_;
  for (int i = 0; i <= spec_.num_layers; ++i) a.resid.push_back(k_.zeros({N_l_, C_}));
  a.layers.resize(spec_.num_layers);
  for (int i = 0; i < spec_.num_layers; ++i) {
    LayerActivations& la = a.layers[i];
    if (layers_[i].moe >= 0) la.moe = moe_[layers_[i].moe]->make_saved();
    la.ln1 = k_.zeros({N_, C_});
    la.ln1_rstd = k_.zeros({N_l_});
    la.attn = k_.zeros({N_, HD});
    la.lse = k_.zeros({B_, H_l_, T_});
    la.mid = k_.zeros({N_l_, C_});
    la.ln2 = k_.zeros({layers_[i].moe >= 0 ? N_l_ : N_, C_});  // MoE: this rank's rows
    la.ln2_rstd = k_.zeros({N_l_});
    la.d_attn_out = k_.zeros({N_, C_});
    la.d_mlp_out = k_.zeros({N_, C_});
    if (cfg_.arch == Arch::GPT2) {
      la.ln1_mean = k_.zeros({N_l_});
      la.ln2_mean = k_.zeros({N_l_});
      la.qkv = k_.zeros({N_, 3 * HD});
      la.fc = k_.zeros({N_, F_l_});
      la.fc_act = k_.zeros({N_, F_l_});
      la.d_qkv = k_.zeros({N_, 3 * HD});
      la.d_fc = k_.zeros({N_, F_l_});
    } else {
      la.q = k_.zeros({N_, HD});
      la.k = k_.zeros({N_, GD});
      la.v = k_.zeros({N_, GD});
      la.d_q = k_.zeros({N_, HD});
      la.d_k = k_.zeros({N_, GD});
      la.d_v = k_.zeros({N_, GD});
      if (cfg_.qk_layernorm) {
        la.q_raw = k_.zeros({N_, HD});
        la.k_raw = k_.zeros({N_, GD});
        la.q_rstd = k_.zeros({N_ * H_l_});
        la.k_rstd = k_.zeros({N_ * G_l_});
      }
      if (layers_[i].moe < 0) {  // a dense MLP's SwiGLU
        la.gate = k_.zeros({N_, F_l_});
        la.up = k_.zeros({N_, F_l_});
        la.act = k_.zeros({N_, F_l_});
        la.d_gate = k_.zeros({N_, F_l_});
        la.d_up = k_.zeros({N_, F_l_});
      }
    }
  }
  if (spec_.has_embedding) a.vocab_ids = k_.zeros({N_}, DType::I32);
  if (spec_.has_head) {
    a.lnf = k_.zeros({N_, C_});
    a.lnf_rstd = k_.zeros({N_l_});
    if (cfg_.arch == Arch::GPT2) a.lnf_mean = k_.zeros({N_l_});
    a.d_lnf = k_.zeros({N_l_, C_});
  }
  return a;
}

double TransformerChunk::forward(ChunkActivations& acts, const int32_t* tokens, const float* input,
                                 const int32_t* targets, float grad_scale) {
  grad_scale_ = grad_scale;
  if (spec_.has_embedding) {
    embedding_forward(acts, tokens);
  } else {
    k_.copy(acts.resid[0].data(), input, N_l_ * C_);
  }
  for (int i = 0; i < spec_.num_layers; ++i) layer_forward(i, acts);
  acts.loss_sum = spec_.has_head ? head_forward(acts, targets, grad_scale) : 0.0;
  return acts.loss_sum;
}

void TransformerChunk::backward(ChunkActivations& acts, const float* d_output, float* d_input,
                                const std::function<void(int)>& grad_ready) {
  backward_input(acts, d_output, d_input, grad_ready);
  backward_weight(acts, grad_ready);
}

void TransformerChunk::backward_input(ChunkActivations& acts, const float* d_output, float* d_input,
                                      const std::function<void(int)>& grad_ready) {
  // dres: the gradient of the residual stream, updated in place from the chunk's output back to
  // its input; it ends as d(input), in the caller's buffer when there is one.
  float* dres = d_input != nullptr ? d_input : d_resid_.data();
  if (spec_.has_head) {
    k_.zero(dres, N_l_ * C_);
    head_backward(acts, dres);
    // A tied head's weight is the embedding's: final only after the embedding's backward.
    report(grad_ready, {lnf_w_, lnf_b_, lm_head_ != wte_ ? lm_head_ : -1});
  } else {
    k_.copy(dres, d_output, N_l_ * C_);
  }
  for (int i = spec_.num_layers - 1; i >= 0; --i) {
    layer_backward_input(i, acts, dres);
    const LayerParams& p = layers_[i];
    report(grad_ready, {p.ln1_w, p.ln1_b, p.ln2_w, p.ln2_b, p.q_norm, p.k_norm});
  }
  // The embeddings' gradients are scatter-adds of d(input) itself (after a gather under sequence
  // parallel): done here, so d(input) need not be kept for backward_weight.
  if (spec_.has_embedding) {
    embedding_backward(acts, dres);
    report(grad_ready, {wte_, wpe_});
  }
}

// Last layer first, as backward_input, so data parallelism's buckets (cut from the end of the
// parameters) fill in the same order.
void TransformerChunk::backward_weight(ChunkActivations& acts,
                                       const std::function<void(int)>& grad_ready) {
  for (int i = spec_.num_layers - 1; i >= 0; --i) {
    layer_backward_weight(i, acts, grad_ready);
    const LayerParams& p = layers_[i];
    report(grad_ready, {p.qkv_w, p.qkv_b, p.q_w, p.q_b, p.k_w, p.k_b, p.v_w, p.v_b, p.proj_w,
                        p.proj_b, p.fc_w, p.fc_b, p.gate_w, p.down_w, p.down_b});
  }
}

// The vocabulary-parallel embedding: each TP rank looks up the tokens of its vocabulary shard
// (zeros for the rest), the partial rows are summed over TP (reduce-scattered under sequence
// parallel), then the replicated position embedding is added to this rank's rows.
void TransformerChunk::embedding_forward(ChunkActivations& acts, const int32_t* tokens) {
  check_ids(k_, tokens, N_, cfg_.vocab_size, "token");
  k_.embedding_shard_ids(acts.vocab_ids.ints(), tokens, N_, vocab_start_, V_valid_);
  float* x = acts.resid[0].data();  // (N_l, C)
  k_.embedding_forward(d_ln_full_.data(), acts.vocab_ids.ints(), nullptr, val(wte_), nullptr, N_,
                         C_);
  tp_.reduce_rows(d_ln_full_.data(), x, N_, C_);
  if (wpe_ >= 0) {
    const int32_t* pos = positions_.ints() + tp_.first_row(N_);
    k_.embedding_forward(norm_local_.data(), pos, nullptr, val(wpe_), nullptr, N_l_, C_);
    k_.residual_forward(x, x, norm_local_.data(), N_l_ * C_);
  }
}

void TransformerChunk::embedding_backward(ChunkActivations& acts, float* dres) {
  if (wpe_ >= 0) {
    const int32_t* pos = positions_.ints() + tp_.first_row(N_);
    k_.embedding_backward(grd(wpe_), nullptr, dres, pos, nullptr, N_l_, C_);
  }
  float* full = tp_.sequence_parallel ? rows_full_.data() : dres;
  tp_.gather_rows(dres, full, N_, C_);
  k_.embedding_backward(grd(wte_), nullptr, full, acts.vocab_ids.ints(), nullptr, N_, C_);
}

// LayerNorm (gpt2, with bias b) or RMSNorm (llama; mean unused) over this rank's rows.
void TransformerChunk::norm_forward(float* out, float* mean, float* rstd, const float* x, int w,
                                    int b) {
  if (cfg_.arch == Arch::GPT2) {
    k_.layernorm_forward(out, mean, rstd, x, val(w), val(b), N_l_, C_, cfg_.norm_epsilon);
  } else {
    k_.rmsnorm_forward(out, rstd, x, val(w), N_l_, C_, cfg_.norm_epsilon);
  }
}

void TransformerChunk::norm_backward(float* dx, const float* dout, const float* x,
                                     const float* mean, const float* rstd, int w, int b) {
  if (cfg_.arch == Arch::GPT2) {
    k_.layernorm_backward(dx, grd(w), grd(b), dout, x, val(w), mean, rstd, N_l_, C_);
  } else {
    k_.rmsnorm_backward(dx, grd(w), dout, x, val(w), rstd, N_l_, C_);
  }
}

void TransformerChunk::row_parallel_exit(float* out, const float* x, int bias) {
  float* proj = proj_local_.data();
  tp_.reduce_rows(proj_full_.data(), proj, N_, C_);
  if (bias >= 0) k_.bias_forward(proj, val(bias), N_l_, C_);
  k_.residual_forward(out, x, proj, N_l_ * C_);
}

void TransformerChunk::row_parallel_exit_backward(float* d_out, const float* dres) {
  tp_.gather_rows(dres, d_out, N_, C_);  // a copy without sequence parallel
}

void TransformerChunk::layer_forward(int i, ChunkActivations& acts) {
  const LayerParams& p = layers_[i];
  LayerActivations& a = acts.layers[i];
  const float* x = acts.resid[i].data();  // (N_l, C)
  float* out = acts.resid[i + 1].data();  // (N_l, C)
  const int64_t HD = H_l_ * D_, GD = G_l_ * D_;
  const bool sp = tp_.sequence_parallel;
  // Attention: norm on this rank's rows, gathered to all rows for the column-parallel q, k, v.
  float* ln1 = sp ? norm_local_.data() : a.ln1.data();
  norm_forward(ln1, a.ln1_mean.data(), a.ln1_rstd.data(), x, p.ln1_w, p.ln1_b);
  tp_.gather_rows(ln1, a.ln1.data(), N_, C_);
  if (cfg_.arch == Arch::GPT2) {
    k_.linear_forward(a.qkv.data(), a.ln1.data(), val(p.qkv_w), val(p.qkv_b), N_, C_, 3 * HD,
                        WeightLayout::InOut);
    const float* qkv = a.qkv.data();  // (N, 3·H_l·D): q | k | v of this rank's heads
    cp_.attention_forward(a.attn.data(), a.lse.data(), qkv, qkv + HD, qkv + 2 * HD, B_, T_, H_l_,
                          H_l_, D_, 3 * HD, 3 * HD, 3 * HD);
    k_.linear_forward(proj_full_.data(), a.attn.data(), val(p.proj_w), nullptr, N_, HD, C_,
                        WeightLayout::InOut);
  } else {
    // With --qk-layernorm the projections go to q_raw, k_raw and their per-head norms to q, k.
    const bool qk_norm = p.q_norm >= 0;
    float* q = qk_norm ? a.q_raw.data() : a.q.data();
    float* k = qk_norm ? a.k_raw.data() : a.k.data();
    k_.linear_forward(q, a.ln1.data(), val(p.q_w), val(p.q_b), N_, C_, HD, WeightLayout::OutIn);
    k_.linear_forward(k, a.ln1.data(), val(p.k_w), val(p.k_b), N_, C_, GD, WeightLayout::OutIn);
    k_.linear_forward(a.v.data(), a.ln1.data(), val(p.v_w), val(p.v_b), N_, C_, GD, WeightLayout::OutIn);
    if (qk_norm) {  // as Qwen3: RMSNorm over each head's D values, rows = N·heads
      k_.rmsnorm_forward(a.q.data(), a.q_rstd.data(), q, val(p.q_norm), N_ * H_l_, D_,
                           cfg_.norm_epsilon);
      k_.rmsnorm_forward(a.k.data(), a.k_rstd.data(), k, val(p.k_norm), N_ * G_l_, D_,
                           cfg_.norm_epsilon);
    }
    k_.rope_forward(a.q.data(), positions_.ints(), rope_cos_.data(), rope_sin_.data(), N_, H_l_, D_, HD);
    k_.rope_forward(a.k.data(), positions_.ints(), rope_cos_.data(), rope_sin_.data(), N_, G_l_, D_, GD);
    cp_.attention_forward(a.attn.data(), a.lse.data(), a.q.data(), a.k.data(), a.v.data(), B_, T_,
                          H_l_, G_l_, D_, HD, GD, GD);
    k_.linear_forward(proj_full_.data(), a.attn.data(), val(p.proj_w), nullptr, N_, HD, C_,
                        WeightLayout::OutIn);
  }
  row_parallel_exit(a.mid.data(), x, p.proj_b);

  // MLP: the same pattern, column-parallel up (and gate), row-parallel down. An MoE layer takes
  // this rank's rows (moe.h splits its shared expert over TP itself): out = mid + MoE(ln2).
  if (p.moe >= 0) {
    norm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.mid.data(), p.ln2_w, p.ln2_b);
    moe_[p.moe]->forward(a.moe, proj_local_.data(), a.ln2.data(), N_l_, grad_scale_);
    k_.residual_forward(out, a.mid.data(), proj_local_.data(), N_l_ * C_);
    const RouterStats& st = a.moe.stats;
    RouterTotals& t = router_totals_;
    t.tokens_per_expert.resize(st.tokens_per_expert.size(), 0.0);
    for (size_t e = 0; e < st.tokens_per_expert.size(); ++e) t.tokens_per_expert[e] += st.tokens_per_expert[e];
    t.dropped += st.dropped;
    t.aux_loss += st.aux_loss;
    t.z_loss += st.z_loss;
    ++t.forwards;
    return;
  }
  float* ln2 = sp ? norm_local_.data() : a.ln2.data();
  norm_forward(ln2, a.ln2_mean.data(), a.ln2_rstd.data(), a.mid.data(), p.ln2_w, p.ln2_b);
  tp_.gather_rows(ln2, a.ln2.data(), N_, C_);
  if (cfg_.arch == Arch::GPT2) {
    k_.linear_forward(a.fc.data(), a.ln2.data(), val(p.fc_w), val(p.fc_b), N_, C_, F_l_,
                        WeightLayout::InOut);
    k_.gelu_forward(a.fc_act.data(), a.fc.data(), N_ * F_l_);
    k_.linear_forward(proj_full_.data(), a.fc_act.data(), val(p.down_w), nullptr, N_, F_l_, C_,
                        WeightLayout::InOut);
  } else {
    k_.linear_forward(a.gate.data(), a.ln2.data(), val(p.gate_w), nullptr, N_, C_, F_l_, WeightLayout::OutIn);
    k_.linear_forward(a.up.data(), a.ln2.data(), val(p.fc_w), nullptr, N_, C_, F_l_, WeightLayout::OutIn);
    k_.swiglu_forward(a.act.data(), a.gate.data(), a.up.data(), N_ * F_l_);
    k_.linear_forward(proj_full_.data(), a.act.data(), val(p.down_w), nullptr, N_, F_l_, C_,
                        WeightLayout::OutIn);
  }
  row_parallel_exit(out, a.mid.data(), p.down_b);
}

// dres (N_l, C) holds d(layer output) on entry and d(layer input) on exit: each branch's input
// gradient is reduced over TP and accumulated into it by the norm's backward; the identity path
// needs nothing. The linears' output gradients stay in acts for layer_backward_weight.
void TransformerChunk::layer_backward_input(int i, ChunkActivations& acts, float* dres) {
  const LayerParams& p = layers_[i];
  LayerActivations& a = acts.layers[i];
  const float* x = acts.resid[i].data();
  const int64_t HD = H_l_ * D_, GD = G_l_ * D_;
  const WeightLayout layout = cfg_.arch == Arch::GPT2 ? WeightLayout::InOut : WeightLayout::OutIn;

  // MLP (an MoE layer's on this rank's rows: no TP exchange around it)
  if (p.moe < 0) row_parallel_exit_backward(a.d_mlp_out.data(), dres);
  zero(d_act_);
  zero(d_ln_full_);
  if (p.moe >= 0) {
    zero(d_ln_local_);
    moe_[p.moe]->backward_input(a.moe, d_ln_local_.data(), dres, a.ln2.data());
  } else if (cfg_.arch == Arch::GPT2) {
    k_.linear_backward(d_act_.data(), nullptr, nullptr, a.d_mlp_out.data(), a.fc_act.data(),
                         val(p.down_w), N_, F_l_, C_, layout);
    zero(a.d_fc);
    k_.gelu_backward(a.d_fc.data(), d_act_.data(), a.fc.data(), N_ * F_l_);
    k_.linear_backward(d_ln_full_.data(), nullptr, nullptr, a.d_fc.data(), a.ln2.data(),
                         val(p.fc_w), N_, C_, F_l_, layout);
  } else {
    k_.linear_backward(d_act_.data(), nullptr, nullptr, a.d_mlp_out.data(), a.act.data(),
                         val(p.down_w), N_, F_l_, C_, layout);
    zero(a.d_gate);
    zero(a.d_up);
    k_.swiglu_backward(a.d_gate.data(), a.d_up.data(), d_act_.data(), a.gate.data(), a.up.data(),
                         N_ * F_l_);
    k_.linear_backward(d_ln_full_.data(), nullptr, nullptr, a.d_gate.data(), a.ln2.data(),
                         val(p.gate_w), N_, C_, F_l_, layout);
    k_.linear_backward(d_ln_full_.data(), nullptr, nullptr, a.d_up.data(), a.ln2.data(),
                         val(p.fc_w), N_, C_, F_l_, layout);
  }
  if (p.moe < 0) tp_.reduce_rows(d_ln_full_.data(), d_ln_local_.data(), N_, C_);
  // The norms' small weight (and bias) gradients are computed here, with their input gradient.
  norm_backward(dres, d_ln_local_.data(), a.mid.data(), a.ln2_mean.data(), a.ln2_rstd.data(),
                p.ln2_w, p.ln2_b);

  // Attention
  row_parallel_exit_backward(a.d_attn_out.data(), dres);
  zero(d_attn_);
  zero(d_ln_full_);
  k_.linear_backward(d_attn_.data(), nullptr, nullptr, a.d_attn_out.data(), a.attn.data(),
                       val(p.proj_w), N_, HD, C_, layout);
  if (cfg_.arch == Arch::GPT2) {
    zero(a.d_qkv);
    const float* qkv = a.qkv.data();
    float* dqkv = a.d_qkv.data();
    cp_.attention_backward(dqkv, dqkv + HD, dqkv + 2 * HD, d_attn_.data(), qkv, qkv + HD,
                           qkv + 2 * HD, a.attn.data(), a.lse.data(), B_, T_, H_l_, H_l_, D_,
                           3 * HD, 3 * HD, 3 * HD);
    k_.linear_backward(d_ln_full_.data(), nullptr, nullptr, dqkv, a.ln1.data(), val(p.qkv_w), N_,
                         C_, 3 * HD, layout);
  } else {
    zero(a.d_q);
    zero(a.d_k);
    zero(a.d_v);
    cp_.attention_backward(a.d_q.data(), a.d_k.data(), a.d_v.data(), d_attn_.data(), a.q.data(),
                           a.k.data(), a.v.data(), a.attn.data(), a.lse.data(), B_, T_, H_l_, G_l_,
                           D_, HD, GD, GD);
    k_.rope_backward(a.d_q.data(), positions_.ints(), rope_cos_.data(), rope_sin_.data(), N_,
                       H_l_, D_, HD);
    k_.rope_backward(a.d_k.data(), positions_.ints(), rope_cos_.data(), rope_sin_.data(), N_,
                       G_l_, D_, GD);
    if (p.q_norm >= 0) qk_norm_backward(a, p);
    k_.linear_backward(d_ln_full_.data(), nullptr, nullptr, a.d_q.data(), a.ln1.data(),
                         val(p.q_w), N_, C_, HD, layout);
    k_.linear_backward(d_ln_full_.data(), nullptr, nullptr, a.d_k.data(), a.ln1.data(),
                         val(p.k_w), N_, C_, GD, layout);
    k_.linear_backward(d_ln_full_.data(), nullptr, nullptr, a.d_v.data(), a.ln1.data(),
                         val(p.v_w), N_, C_, GD, layout);
  }
  tp_.reduce_rows(d_ln_full_.data(), d_ln_local_.data(), N_, C_);
  norm_backward(dres, d_ln_local_.data(), x, a.ln1_mean.data(), a.ln1_rstd.data(), p.ln1_w, p.ln1_b);
}

// q_norm and k_norm's gradients cover this rank's heads only; the trainer sums them over TP
// (Param::grad_partial_over_tp).
void TransformerChunk::qk_norm_backward(LayerActivations& a, const LayerParams& p) {
  // d_attn_ (N, H_l·D) is free after attention's backward: it holds d(normalised) while d_q and
  // d_k are rewritten as d(raw).
  float* d_normed = d_attn_.data();
  k_.copy(d_normed, a.d_q.data(), N_ * H_l_ * D_);
  zero(a.d_q);
  k_.rmsnorm_backward(a.d_q.data(), grd(p.q_norm), d_normed, a.q_raw.data(), val(p.q_norm),
                        a.q_rstd.data(), N_ * H_l_, D_);
  k_.copy(d_normed, a.d_k.data(), N_ * G_l_ * D_);
  zero(a.d_k);
  k_.rmsnorm_backward(a.d_k.data(), grd(p.k_norm), d_normed, a.k_raw.data(), val(p.k_norm),
                        a.k_rstd.data(), N_ * G_l_, D_);
}

// Each linear's weight (and bias) gradient from its input, saved by forward, and its output
// gradient, saved by layer_backward_input. A row-parallel bias was added after the TP reduction
// to this rank's rows only: its gradient sums those rows of the gathered output gradient.
void TransformerChunk::layer_backward_weight(int i, ChunkActivations& acts,
                                             const std::function<void(int)>& grad_ready) {
  const LayerParams& p = layers_[i];
  const LayerActivations& a = acts.layers[i];
  const int64_t HD = H_l_ * D_, GD = G_l_ * D_;
  const int64_t own_rows = tp_.first_row(N_) * C_;  // offset of this rank's rows in (N, C)
  const WeightLayout layout = cfg_.arch == Arch::GPT2 ? WeightLayout::InOut : WeightLayout::OutIn;

  // MLP
  if (p.down_b >= 0) k_.bias_backward(grd(p.down_b), a.d_mlp_out.data() + own_rows, N_l_, C_);
  if (p.moe >= 0) {
    moe_[p.moe]->backward_weight(const_cast<MoeLayer::Saved&>(a.moe), a.ln2.data(), grad_ready);
  } else if (cfg_.arch == Arch::GPT2) {
    k_.linear_backward(nullptr, grd(p.down_w), nullptr, a.d_mlp_out.data(), a.fc_act.data(),
                         val(p.down_w), N_, F_l_, C_, layout);
    k_.linear_backward(nullptr, grd(p.fc_w), grd(p.fc_b), a.d_fc.data(), a.ln2.data(),
                         val(p.fc_w), N_, C_, F_l_, layout);
  } else {
    k_.linear_backward(nullptr, grd(p.down_w), nullptr, a.d_mlp_out.data(), a.act.data(),
                         val(p.down_w), N_, F_l_, C_, layout);
    k_.linear_backward(nullptr, grd(p.gate_w), nullptr, a.d_gate.data(), a.ln2.data(),
                         val(p.gate_w), N_, C_, F_l_, layout);
    k_.linear_backward(nullptr, grd(p.fc_w), nullptr, a.d_up.data(), a.ln2.data(), val(p.fc_w),
                         N_, C_, F_l_, layout);
  }

  // Attention
  if (p.proj_b >= 0) k_.bias_backward(grd(p.proj_b), a.d_attn_out.data() + own_rows, N_l_, C_);
  k_.linear_backward(nullptr, grd(p.proj_w), nullptr, a.d_attn_out.data(), a.attn.data(),
                       val(p.proj_w), N_, HD, C_, layout);
  if (cfg_.arch == Arch::GPT2) {
    k_.linear_backward(nullptr, grd(p.qkv_w), grd(p.qkv_b), a.d_qkv.data(), a.ln1.data(),
                         val(p.qkv_w), N_, C_, 3 * HD, layout);
  } else {
    k_.linear_backward(nullptr, grd(p.q_w), grd(p.q_b), a.d_q.data(), a.ln1.data(), val(p.q_w),
                         N_, C_, HD, layout);
    k_.linear_backward(nullptr, grd(p.k_w), grd(p.k_b), a.d_k.data(), a.ln1.data(), val(p.k_w),
                         N_, C_, GD, layout);
    k_.linear_backward(nullptr, grd(p.v_w), grd(p.v_b), a.d_v.data(), a.ln1.data(), val(p.v_w),
                         N_, C_, GD, layout);
  }
}

// The vocabulary-parallel head and loss. Each TP rank computes the logits of its vocabulary
// shard for all N rows; the softmax statistics are combined over TP (max, then Σ exp and the
// target logit), so no rank ever holds a whole row. The head's backward runs here too: the
// loss gradient's scale is known in advance (1 / tokens of the global batch), so the (N, V_l)
// logits are shared scratch rather than a per-microbatch tensor — the largest activation of a
// small-hidden, large-vocab model.
double TransformerChunk::head_forward(ChunkActivations& acts, const int32_t* targets,
                                      float grad_scale) {
  float* lnf = tp_.sequence_parallel ? norm_local_.data() : acts.lnf.data();
  norm_forward(lnf, acts.lnf_mean.data(), acts.lnf_rstd.data(), acts.resid.back().data(), lnf_w_,
               lnf_b_);
  tp_.gather_rows(lnf, acts.lnf.data(), N_, C_);
  // logits (N, V_l) = lnf (N, C) · Wᵀ with W (V_l, C): the tied embedding or lm_head.weight.
  k_.linear_forward(logits_.data(), acts.lnf.data(), val(lm_head_), nullptr, N_, C_, V_l_,
                      WeightLayout::OutIn);
  if (targets == nullptr) return 0.0;
  check_ids(k_, targets, N_, cfg_.vocab_size, "target");
  float* row_max = loss_stats_.data();    // (N)
  float* sum_exp = row_max + N_;          // (N) followed by
  float* target_logit = sum_exp + N_;     // (N): reduced together
  float* lse = target_logit + N_;         // (N)
  float* global_max = row_max_global_.data();
  k_.cross_entropy_partial_forward(row_max, sum_exp, target_logit, logits_.data(), targets,
                                     vocab_start_, N_, V_l_, V_valid_);
  k_.copy(global_max, row_max, N_);
  if (tp_.size() > 1) {
    tp_.comm->all_reduce(global_max, N_, ReduceOp::Max);
    k_.cross_entropy_rescale(sum_exp, row_max, global_max, N_);
    tp_.comm->all_reduce(sum_exp, 2 * N_, ReduceOp::Sum);
  }
  const double loss_sum = k_.cross_entropy_finish(lse, global_max, sum_exp, target_logit, N_);
  if (grad_scale > 0) {
    k_.cross_entropy_backward(logits_.data(), logits_.data(), lse, targets, vocab_start_,
                                grad_scale, N_, V_l_, V_valid_);
    zero(d_ln_full_);
    k_.linear_backward(d_ln_full_.data(), grd(lm_head_), nullptr, logits_.data(),
                         acts.lnf.data(), val(lm_head_), N_, C_, V_l_, WeightLayout::OutIn);
    tp_.reduce_rows(d_ln_full_.data(), d_ln_local_.data(), N_, C_);
    k_.copy(acts.d_lnf.data(), d_ln_local_.data(), N_l_ * C_);
  }
  return loss_sum;
}

void TransformerChunk::head_backward(ChunkActivations& acts, float* dres) {
  norm_backward(dres, acts.d_lnf.data(), acts.resid.back().data(), acts.lnf_mean.data(),
                acts.lnf_rstd.data(), lnf_w_, lnf_b_);
}

}  // namespace tessel
