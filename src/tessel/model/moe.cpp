#include "tessel/model/moe.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "tessel/core/error.h"

namespace tessel {

namespace {
constexpr float kInitStd = 0.02f;  // Megatron's --init-method-std default

// Megatron's moe_layer_freq string: a Python list expression of 0/1 built from list literals,
// '+' (concatenation), '* integer' (repetition) and parentheses, e.g. "([1]*3+[0]*1)*2".
class PatternParser {
 public:
  explicit PatternParser(const std::string& text) : text_(text) {}

  std::vector<int> parse() {
    std::vector<int> v = expr();
    skip_space();
    if (pos_ != text_.size()) error("unexpected '{}'", text_[pos_]);
    return v;
  }

 private:
  std::vector<int> expr() {
    std::vector<int> v = term();
    while (accept('+')) {
      std::vector<int> more = term();
      v.insert(v.end(), more.begin(), more.end());
    }
    return v;
  }
  std::vector<int> term() {
    std::vector<int> v = atom();
    while (accept('*')) {
      const int64_t times = integer();
      std::vector<int> repeated;
      for (int64_t i = 0; i < times; ++i) repeated.insert(repeated.end(), v.begin(), v.end());
      v = std::move(repeated);
    }
    return v;
  }
  std::vector<int> atom() {
    if (accept('(')) {
      std::vector<int> v = expr();
      expect(')');
      return v;
    }
    expect('[');
    std::vector<int> v;
    if (accept(']')) return v;
    do {
      v.push_back(static_cast<int>(integer()));
    } while (accept(','));
    expect(']');
    return v;
  }
  int64_t integer() {
    skip_space();
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (start == pos_ || pos_ - start > 6) error("expected a small integer at position {}", start);
    return std::stoll(text_.substr(start, pos_ - start));
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) error("expected '{}' at position {}", c, pos_);
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) {
    fail("--moe-layer-freq \"{}\": {}", text_, fmt::format(format, std::forward<Args>(args)...));
  }

  const std::string& text_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<std::string> MoeConfig::violations(int ep_size, int num_layers) const {
  std::vector<std::string> v;
  if (num_experts < 1) v.push_back(fmt::format("--num-experts {} must be at least 1", num_experts));
  if (topk < 1 || topk > num_experts) {
    v.push_back(fmt::format("--moe-router-topk {} must be between 1 and --num-experts {}", topk,
                            num_experts));
  }
  if (ep_size < 1 || (num_experts > 0 && num_experts % ep_size != 0)) {
    v.push_back(fmt::format("--num-experts {} must be divisible by --expert-model-parallel-size {}",
                            num_experts, ep_size));
  }
  if (topk == 1 && !score_sigmoid && !pre_softmax) {
    v.push_back(
        "--moe-router-topk 1 with softmax scores needs --moe-router-pre-softmax (a softmax "
        "over one logit has no gradient)");
  }
  if (ffn_hidden_size < 0)
    v.push_back(fmt::format("--moe-ffn-hidden-size {} is negative", ffn_hidden_size));
  if (shared_expert_size < 0) {
    v.push_back(
        fmt::format("--moe-shared-expert-intermediate-size {} is negative", shared_expert_size));
  }
  if (capacity_factor < 0) {
    v.push_back(fmt::format("--moe-expert-capacity-factor {} is negative", capacity_factor));
  }
  if (pad_to_capacity && capacity_factor <= 0) {
    v.push_back("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
  }
  if (aux_loss_coeff < 0 || z_loss_coeff < 0) {
    v.push_back(
        fmt::format("--moe-aux-loss-coeff {} and --moe-z-loss-coeff {} must not be negative",
                    aux_loss_coeff, z_loss_coeff));
  }
  if (!layer_pattern.empty() && static_cast<int>(layer_pattern.size()) != num_layers) {
    v.push_back(fmt::format("--moe-layer-freq has {} entries for {} layers", layer_pattern.size(),
                            num_layers));
  }
  return v;
}

std::vector<int> parse_moe_layer_freq(const std::string& text, int num_layers) {
  const bool interval = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  std::vector<int> pattern;
  if (interval) {
    TESSEL_CHECK(text.size() <= 6 && std::stoi(text) >= 1,
                 "--moe-layer-freq {}: the interval must be at least 1", text);
    const int every = std::stoi(text);
    for (int i = 0; i < num_layers; ++i) pattern.push_back(i % every == 0 ? 1 : 0);
    return pattern;
  }
  pattern = PatternParser(text).parse();
  TESSEL_CHECK(static_cast<int>(pattern.size()) == num_layers,
               "--moe-layer-freq \"{}\" has {} entries for {} layers", text, pattern.size(),
               num_layers);
  for (int p : pattern) {
    TESSEL_CHECK(p == 0 || p == 1, "--moe-layer-freq \"{}\": entries must be 0 or 1, not {}", text,
                 p);
  }
  return pattern;
}

int64_t moe_expert_capacity(int64_t N, int64_t E, int64_t k, double factor) {
  // As Python computes it: (num_tokens / num_experts) in double, times the factor, ceil.
  const double capacity = std::ceil(static_cast<double>(N * k) / static_cast<double>(E) * factor);
  return std::min<int64_t>(static_cast<int64_t>(capacity), N);
}

MoeLayer::MoeLayer(const Kernels& k, const ModelConfig& model, const MoeConfig& moe, int layer,
                   int64_t max_tokens, const MoeGroups& groups, ParamRegistry& registry)
    : k_(k),
      moe_(moe),
      ep_(groups.ep != nullptr ? groups.ep : no_tensor_parallel(k).comm),
      etp_(groups.etp != nullptr ? groups.etp : no_tensor_parallel(k).comm),
      token_group_(groups.token_group),
      tp_(groups.tp.comm != nullptr ? groups.tp : no_tensor_parallel(k)) {
  const std::vector<std::string> problems = moe.violations(ep_->size(), model.num_layers);
  TESSEL_CHECK(problems.empty(), "MoE layer {}: {}", layer, fmt::join(problems, "; "));
  TESSEL_CHECK(max_tokens >= 0, "MoE layer {}: max_tokens {} is negative", layer, max_tokens);
  C_ = model.hidden_size;
  F_ = moe.ffn_hidden_size > 0 ? moe.ffn_hidden_size : model.ffn_size();
  F_s_ = moe.shared_expert_size;
  E_ = moe.num_experts;
  topk_ = moe.topk;
  P_ = ep_->size();
  ep_rank_ = ep_->rank();
  Q_ = etp_->size();
  etp_rank_ = etp_->rank();
  E_l_ = E_ / P_;
  first_expert_ = ep_rank_ * E_l_;
  max_tokens_ = max_tokens;
  const int T = tp_.size();
  TESSEL_CHECK(T == 1 || tp_.sequence_parallel,
               "MoE layer {}: tensor parallelism ({}) needs sequence parallel", layer, T);
  TESSEL_CHECK(F_ % Q_ == 0, "MoE layer {}: expert size {} does not split over ETP {}", layer, F_,
               Q_);
  TESSEL_CHECK(F_s_ % T == 0, "MoE layer {}: shared expert size {} does not split over TP {}",
               layer, F_s_, T);
  F_l_ = F_ / Q_;
  F_sl_ = F_s_ / T;

  // Hugging Face order: router, experts, shared expert, its gate.
  const std::string p = fmt::format("model.layers.{}.mlp.", layer);
  const float out_std = kInitStd / std::sqrt(2.0f * model.num_layers);
  auto weight = [&](const std::string& name, Shape shape, float std, ShardSpec shard = {}) {
    return registry.add(name, std::move(shape), ParamInit::Normal, std, true, shard);
  };
  // An expert's gate/up split by rows (dim 0) and down by columns (dim 1) over ETP.
  auto expert = [&](int dim) {
    return ShardSpec{.dim = Q_ > 1 ? dim : -1, .group = Q_ > 1 ? ShardGroup::ETP : ShardGroup::None,
                     .index = etp_rank_, .count = Q_, .expert_rank = ep_rank_, .expert_ranks = P_};
  };
  router_ = weight(p + "gate.weight", {E_, C_}, kInitStd);
  for (int64_t e = first_expert_; e < first_expert_ + E_l_; ++e) {
    const std::string q = fmt::format("{}experts.{}.", p, e);
    experts_.push_back({.gate = weight(q + "gate_proj.weight", {F_, C_}, kInitStd, expert(0)),
                        .up = weight(q + "up_proj.weight", {F_, C_}, kInitStd, expert(0)),
                        .down = weight(q + "down_proj.weight", {C_, F_}, out_std, expert(1))});
  }
  if (F_s_ > 0) {
    auto split = [&](int dim) {
      return T > 1 ? ShardSpec{.dim = dim, .group = ShardGroup::TP, .index = tp_.rank(), .count = T}
                   : ShardSpec{};
    };
    shared_.gate = weight(p + "shared_expert.gate_proj.weight", {F_s_, C_}, kInitStd, split(0));
    shared_.up = weight(p + "shared_expert.up_proj.weight", {F_s_, C_}, kInitStd, split(0));
    shared_.down = weight(p + "shared_expert.down_proj.weight", {C_, F_s_}, out_std, split(1));
    shared_gate_ = weight(p + "shared_expert_gate.weight", {1, C_}, kInitStd);
  }

  const int64_t N = std::max<int64_t>(max_tokens_, 1);
  k_.reserve(send_, N * topk_, C_);
  k_.reserve(arrival_, N * topk_ * Q_, C_);
  k_.reserve(expert_rows_, N * topk_ * Q_, C_);
  if (Q_ > 1) k_.reserve(own_rows_, N * topk_, C_);
  k_.reserve(d_act_, std::max(N * topk_ * Q_, N * T), std::max(F_l_, F_sl_));
  k_.reserve(d_probs_, N, topk_);
  if (F_s_ > 0 && T > 1) {
    shared_full_ = k_.zeros({N * T, C_});
    shared_local_ = k_.zeros({N, C_});
  }
  keep_ = k_.zeros({N * topk_}, DType::I32);
  for (auto* v : {&counts_out_, &counts_in_, &offsets_out_, &offsets_in_}) v->resize(P_);
  etp_counts_.resize(Q_);
  etp_offsets_.resize(Q_);
  row_cursor_ = k_.zeros({E_}, DType::I32);
  first_rows_.resize(E_);
  group_counts_ = k_.zeros({E_ + 1});
  count_buffer_ = k_.zeros({E_ + Q_ * P_ * E_l_});
  host_counts_.resize(E_ + Q_ * P_ * E_l_);
  stats_buffer_.resize(E_ + 1);
}

std::vector<int> MoeLayer::param_indices() const {
  std::vector<int> ids = {router_};
  for (const ExpertParams& e : experts_) ids.insert(ids.end(), {e.gate, e.up, e.down});
  if (F_s_ > 0) ids.insert(ids.end(), {shared_.gate, shared_.up, shared_.down, shared_gate_});
  return ids;
}

MoeLayer::Saved MoeLayer::make_saved() const {
  Saved s;
  const int64_t N = std::max<int64_t>(max_tokens_, 1), N_g = N * tp_.size();
  // Routed rows: N·k leave this rank; as many arrive at each ETP rank when the load is balanced
  // (dropless routing may bring more: those buffers grow on first need).
  const int64_t rows = N * topk_, expert_rows = rows * Q_;
  s.logits = k_.zeros({N, E_});
  s.experts = k_.zeros({N * topk_}, DType::I32);
  s.probs = k_.zeros({N, topk_});
  s.slot_row = k_.zeros({N * topk_}, DType::I32);
  if (moe_.aux_loss_coeff > 0) {
    s.aux_scores = k_.zeros({N, E_});
    s.aux_counts = k_.zeros({E_});
  }
  if (moe_.z_loss_coeff > 0) s.lse = k_.zeros({N});
  s.send_rows.resize(P_);
  for (auto* v : {&s.block_rows, &s.block_src, &s.block_dst}) v->resize(Q_ * P_ * E_l_);
  s.expert_rows.resize(E_l_);
  s.etp_rows.resize(Q_);
  s.combined = k_.zeros({rows, C_});
  s.expert_in = k_.zeros({expert_rows, C_});
  s.d_expert_out = k_.zeros({expert_rows, C_});
  for (Tensor* t : {&s.gate, &s.up, &s.act, &s.d_gate, &s.d_up})
    *t = k_.zeros({expert_rows, F_l_});
  if (F_s_ > 0) {
    if (tp_.size() > 1) s.shared_in = k_.zeros({N_g, C_});
    for (Tensor* t :
         {&s.shared_gate, &s.shared_up, &s.shared_act, &s.d_shared_gate, &s.d_shared_up})
      *t = k_.zeros({N_g, F_sl_});
    s.shared_out = k_.zeros({N, C_});
    s.d_shared_out = k_.zeros({N_g, C_});
    s.shared_scale = k_.zeros({N});
    s.d_shared_logit = k_.zeros({N});
  }
  s.d_logits = k_.zeros({N, E_});
  s.stats.tokens_per_expert.assign(E_, 0.0);
  return s;
}

int64_t MoeLayer::Saved::bytes() const {
  int64_t n = 0;
  for (const Tensor* t :
       {&logits,     &probs,        &aux_scores,   &aux_counts,     &lse,
        &combined,   &expert_in,    &gate,         &up,             &act,
        &d_expert_out, &d_gate,     &d_up,         &shared_in,      &shared_gate,
        &shared_up,  &shared_act,   &shared_out,   &shared_scale,   &d_shared_out,
        &d_shared_gate, &d_shared_up, &d_shared_logit, &d_logits, &experts, &slot_row})
    n += t->bytes();
  for (const auto* v : {&send_rows, &block_rows, &block_src, &block_dst, &expert_rows, &etp_rows})
    n += static_cast<int64_t>(v->size()) * 8;
  return n;
}

int64_t MoeLayer::scratch_bytes() const {
  int64_t n = 0;
  for (const Tensor* t : {&keep_, &send_, &arrival_, &expert_rows_, &own_rows_, &d_act_, &d_probs_,
                          &shared_full_, &shared_local_})
    n += t->bytes();
  return n;
}

// ---- forward ---------------------------------------------------------------------------------

double MoeLayer::forward(Saved& s, float* out, const float* x, int64_t N, float grad_scale) {
  TESSEL_CHECK(N >= 0 && N <= max_tokens_, "MoE forward: {} rows for a layer sized for {}", N,
               max_tokens_);
  s.N = N;
  const int64_t tokens = route(s, x);
  s.aux_grad_scale = static_cast<float>(tokens) * grad_scale;
  plan_dispatch(s);

  // Permute: this rank's rows, one copy per kept assignment, grouped by expert (pads stay zero).
  float* send = k_.reserve(send_, s.rows_out, C_);
  if (moe_.pad_to_capacity) k_.zero(send, s.rows_out * C_);
  k_.moe_permute_forward(send, x, s.slot_row.ints(), N, topk_, C_);
  float* arrival = to_experts(s, send);
  to_expert_order(s, k_.reserve(s.expert_in, s.rows_in, C_), arrival);
  experts_forward(s);
  to_arrival_order(s, arrival, expert_rows_.data());
  float* combined = k_.reserve(s.combined, s.rows_out, C_);
  from_experts(s, arrival, combined);
  // Unpermute and combine: out[n] = Σ_j probs[n, j] · (expert j's output for row n).
  k_.moe_unpermute_forward(out, combined, s.probs.data(), s.slot_row.ints(), N, topk_, C_);
  if (F_s_ > 0) shared_forward(s, out, x);
  return static_cast<double>(tokens) * (s.stats.aux_loss + s.stats.z_loss);
}

// Router logits, the auxiliary losses and the top-k choice with its capacity drop; fills
// s.experts, s.probs and keep_. Returns T, the microbatch's tokens over the token group.
int64_t MoeLayer::route(Saved& s, const float* x) {
  const int64_t N = s.N;
  const auto score = moe_.score_sigmoid ? RouterScore::Sigmoid : RouterScore::Softmax;
  const bool aux = moe_.aux_loss_coeff > 0, z = moe_.z_loss_coeff > 0;
  float* logits = s.logits.data();
  if (N > 0) k_.linear_forward(logits, x, val(router_), nullptr, N, C_, E_, WeightLayout::OutIn);
  k_.moe_topk_forward(s.experts.ints(), s.probs.data(), logits, N, E_, topk_, score,
                      moe_.pre_softmax);

  // The load-balancing loss counts the top-k choices (before dropping) of the whole sequence:
  // the counts per expert and N (the last entry), summed over the token group.
  float* counts = group_counts_.data();  // (E + 1)
  k_.moe_count_assignments(counts, s.experts.ints(), nullptr, N * topk_, E_);
  const float rows = static_cast<float>(N);
  k_.memory.from_host(counts + E_, &rows, 4);
  if (token_group_ != nullptr && token_group_->size() > 1 && (aux || z))
    token_group_->all_reduce(counts, E_ + 1);
  float group_rows = 0;
  k_.memory.to_host(&group_rows, counts + E_, 4);
  const int64_t tokens = static_cast<int64_t>(group_rows);
  s.aux_tokens = tokens;
  s.stats.aux_loss = s.stats.z_loss = 0;
  if (aux) {
    k_.copy(s.aux_counts.data(), counts, E_);
    k_.moe_aux_scores_forward(s.aux_scores.data(), logits, N, E_, score);
    s.stats.aux_loss = k_.moe_aux_loss_forward(s.aux_scores.data(), s.aux_counts.data(), N, E_,
                                               topk_, tokens, moe_.aux_loss_coeff);
  }
  if (z) s.stats.z_loss = k_.moe_z_loss_forward(s.lse.data(), logits, N, E_, z_coeff());

  drop_over_capacity(s);
  return tokens;
}

// As one process would drop over the whole microbatch (DESIGN invariant 1): with its rows split
// over the token group (TP under sequence parallel, CP), every rank gathers the group's choices,
// runs the same drop against the microbatch's capacity and keeps its own rows' verdicts.
// (Megatron drops per rank against a per-rank capacity instead.) Ties between equal
// probabilities go to the lower gathered index: the sequence's order under sequence parallel.
void MoeLayer::drop_over_capacity(Saved& s) {
  const int64_t n = s.N * topk_;
  const int G = token_group_ != nullptr ? token_group_->size() : 1;
  int32_t* keep = keep_.ints();
  if (moe_.capacity_factor <= 0) {  // dropless: a capacity no expert can exceed keeps every row
    k_.moe_capacity_drop(keep, s.experts.ints(), s.probs.data(), s.N, E_, topk_, s.N);
    return;
  }
  s.capacity = capacity(s.N * G);
  if (G == 1) {
    k_.moe_capacity_drop(keep, s.experts.ints(), s.probs.data(), s.N, E_, topk_, s.capacity);
    return;
  }
  float* choices = k_.reserve(choices_, 2, n);  // this rank's [experts | probs]
  float* group_choices = k_.reserve(group_choices_, 2 * G, n);
  k_.moe_pack_choices(choices, s.experts.ints(), s.probs.data(), n);
  token_group_->all_gather(choices, group_choices, 2 * n);
  int32_t* experts = k_.reserve_ints(group_experts_, G, n);
  float* probs = k_.reserve(group_probs_, G, n);
  int32_t* group_keep = k_.reserve_ints(group_keep_, G, n);
  k_.moe_unpack_choices(experts, probs, group_choices, G, n);
  k_.moe_capacity_drop(group_keep, experts, probs, s.N * G, E_, topk_, s.capacity);
  k_.memory.copy(keep, group_keep + n * token_group_->rank(), n * 4);
}

// Megatron divides the z-loss coefficient by the token group's size, so that the ranks' means
// add up to the mean over the sequence.
float MoeLayer::z_coeff() const {
  const int split = token_group_ != nullptr ? token_group_->size() : 1;
  return moe_.z_loss_coeff / static_cast<float>(split);
}

int64_t MoeLayer::capacity(int64_t N) const {
  return moe_expert_capacity(N, E_, topk_, moe_.capacity_factor);
}

// The grouped pass: each local expert's rows are contiguous in expert order; one SwiGLU MLP per
// expert over them (this ETP rank's F_l of its neurons). Outputs (R, C) in expert_rows_: partial
// sums over ETP.
void MoeLayer::experts_forward(Saved& s) {
  const int64_t R = s.rows_in, F = F_l_;
  float* in = s.expert_in.data();
  float* gate = k_.reserve(s.gate, R, F);
  float* up = k_.reserve(s.up, R, F);
  float* act = k_.reserve(s.act, R, F);
  float* y = k_.reserve(expert_rows_, R, C_);
  int64_t o = 0;
  for (int64_t e = 0; e < E_l_; ++e) {
    const int64_t M = s.expert_rows[e];
    const ExpertParams& w = experts_[e];
    if (M > 0) {
      k_.linear_forward(gate + o * F, in + o * C_, val(w.gate), nullptr, M, C_, F,
                          WeightLayout::OutIn);
      k_.linear_forward(up + o * F, in + o * C_, val(w.up), nullptr, M, C_, F,
                          WeightLayout::OutIn);
      k_.swiglu_forward(act + o * F, gate + o * F, up + o * F, M * F);
      k_.linear_forward(y + o * C_, act + o * F, val(w.down), nullptr, M, F, C_,
                          WeightLayout::OutIn);
    }
    o += M;
  }
}

// Megatron's SharedExpertMLP under sequence parallel: out += sigmoid(x · gateᵀ) · MLP(x), the
// MLP over all TP ranks' rows with this rank's F_s/TP neurons, its partial sums reduce-scattered
// back to this rank's rows; the gate on this rank's rows. Without TP the same with one rank.
void MoeLayer::shared_forward(Saved& s, float* out, const float* x) {
  const int64_t N = s.N, N_g = N * tp_.size(), F = F_sl_;
  if (N == 0) return;
  if (tp_.size() > 1) tp_.gather_rows(x, s.shared_in.data(), N_g, C_);
  const float* in = shared_input(s, x);
  float* scale = s.shared_scale.data();
  k_.linear_forward(s.shared_gate.data(), in, val(shared_.gate), nullptr, N_g, C_, F,
                      WeightLayout::OutIn);
  k_.linear_forward(s.shared_up.data(), in, val(shared_.up), nullptr, N_g, C_, F,
                      WeightLayout::OutIn);
  k_.swiglu_forward(s.shared_act.data(), s.shared_gate.data(), s.shared_up.data(), N_g * F);
  float* partial = tp_.size() > 1 ? shared_full_.data() : s.shared_out.data();
  k_.linear_forward(partial, s.shared_act.data(), val(shared_.down), nullptr, N_g, F, C_,
                      WeightLayout::OutIn);
  if (tp_.size() > 1) tp_.reduce_rows(partial, s.shared_out.data(), N_g, C_);
  k_.linear_forward(scale, x, val(shared_gate_), nullptr, N, C_, 1, WeightLayout::OutIn);
  k_.sigmoid_gate_forward(out, scale, s.shared_out.data(), N, C_);
}

// ---- backward --------------------------------------------------------------------------------

void MoeLayer::backward(Saved& s, float* dx, const float* dout, const float* x,
                        const std::function<void(int)>& grad_ready) {
  backward_input(s, dx, dout, x);
  backward_weight(s, x, grad_ready);
}

void MoeLayer::backward_input(Saved& s, float* dx, const float* dout, const float* x) {
  const int64_t N = s.N, R = s.rows_in;
  // Combine's backward: d(probs[n, j]) = dout[n] · y, d(y) = probs[n, j] · dout[n], in dispatch
  // order.
  float* d_probs = k_.reserve(d_probs_, N, topk_);
  float* send = k_.reserve(send_, s.rows_out, C_);
  if (moe_.pad_to_capacity) k_.zero(send, s.rows_out * C_);
  const float* probs = s.probs.data();
  k_.moe_unpermute_backward(d_probs, send, dout, s.combined.data(), probs, s.slot_row.ints(), N,
                            topk_, C_);
  float* arrival = to_experts(s, send);
  float* d_y = k_.reserve(s.d_expert_out, R, C_);
  to_expert_order(s, d_y, arrival);
  float* d_in = k_.reserve(expert_rows_, R, C_);
  experts_backward_input(s, d_y, d_in);
  to_arrival_order(s, arrival, d_in);
  from_experts(s, arrival, send);
  k_.moe_permute_backward(dx, send, s.slot_row.ints(), N, topk_, C_);

  if (F_s_ > 0) shared_backward_input(s, dx, dout, x);

  // The router: d(logits) from the routing weights and the auxiliary losses, then d(x).
  const auto score = moe_.score_sigmoid ? RouterScore::Sigmoid : RouterScore::Softmax;
  float* d_logits = s.d_logits.data();
  k_.zero(d_logits, N * E_);
  k_.moe_topk_backward(d_logits, d_probs, s.logits.data(), s.experts.ints(), probs, N, E_, topk_,
                         score, moe_.pre_softmax);
  if (moe_.aux_loss_coeff > 0) {
    k_.moe_aux_loss_backward(d_logits, s.logits.data(), s.aux_scores.data(), s.aux_counts.data(),
                               N, E_, topk_, s.aux_tokens, moe_.aux_loss_coeff, s.aux_grad_scale,
                               score);
  }
  if (moe_.z_loss_coeff > 0) {
    k_.moe_z_loss_backward(d_logits, s.logits.data(), s.lse.data(), N, E_, z_coeff(),
                             s.aux_grad_scale);
  }
  if (N > 0) {
    k_.linear_backward(dx, nullptr, nullptr, d_logits, x, val(router_), N, C_, E_,
                         WeightLayout::OutIn);
  }
}

// The experts' input gradients d_in (R, C) from d_y (R, C), expert by expert (partial sums over
// ETP); d(gate) and d(up) stay in s for backward_weight.
void MoeLayer::experts_backward_input(Saved& s, const float* d_y, float* d_in) {
  const int64_t R = s.rows_in, F = F_l_;
  float* d_gate = k_.reserve(s.d_gate, R, F);
  float* d_up = k_.reserve(s.d_up, R, F);
  float* d_act = k_.reserve(d_act_, std::max(R, s.N * tp_.size()), std::max(F_l_, F_sl_));
  k_.zero(d_gate, R * F);
  k_.zero(d_up, R * F);
  k_.zero(d_in, R * C_);
  const float* in = s.expert_in.data();
  int64_t o = 0;
  for (int64_t e = 0; e < E_l_; ++e) {
    const int64_t M = s.expert_rows[e];
    const ExpertParams& w = experts_[e];
    if (M > 0) {
      k_.zero(d_act, M * F);
      k_.linear_backward(d_act, nullptr, nullptr, d_y + o * C_, s.act.data() + o * F,
                           val(w.down), M, F, C_, WeightLayout::OutIn);
      k_.swiglu_backward(d_gate + o * F, d_up + o * F, d_act, s.gate.data() + o * F,
                           s.up.data() + o * F, M * F);
      k_.linear_backward(d_in + o * C_, nullptr, nullptr, d_gate + o * F, in + o * C_,
                           val(w.gate), M, C_, F, WeightLayout::OutIn);
      k_.linear_backward(d_in + o * C_, nullptr, nullptr, d_up + o * F, in + o * C_, val(w.up),
                           M, C_, F, WeightLayout::OutIn);
    }
    o += M;
  }
}

// The shared expert's backward, mirroring shared_forward: this rank's rows of d(output) gathered
// over TP, the column- and row-parallel linears' input gradients reduce-scattered back.
void MoeLayer::shared_backward_input(Saved& s, float* dx, const float* dout, const float* x) {
  const int64_t N = s.N, N_g = N * tp_.size(), F = F_sl_;
  if (N == 0) return;
  const bool split = tp_.size() > 1;
  const float* scale = s.shared_scale.data();
  float* d_out = split ? shared_local_.data() : s.d_shared_out.data();  // (N, C)
  float* d_logit = s.d_shared_logit.data();
  k_.sigmoid_gate_backward(d_out, d_logit, dout, s.shared_out.data(), scale, N, C_);
  if (split) tp_.gather_rows(d_out, s.d_shared_out.data(), N_g, C_);
  float* d_act = d_act_.data();  // sized for N_g rows of F_s/TP by experts_backward_input
  k_.zero(d_act, N_g * F);
  k_.linear_backward(d_act, nullptr, nullptr, s.d_shared_out.data(), s.shared_act.data(),
                       val(shared_.down), N_g, F, C_, WeightLayout::OutIn);
  s.d_shared_gate.zero();
  s.d_shared_up.zero();
  k_.swiglu_backward(s.d_shared_gate.data(), s.d_shared_up.data(), d_act, s.shared_gate.data(),
                       s.shared_up.data(), N_g * F);
  const float* in = shared_input(s, x);
  float* d_in = split ? shared_full_.data() : dx;  // (N_g, C): partial sums over TP
  if (split) k_.zero(d_in, N_g * C_);
  k_.linear_backward(d_in, nullptr, nullptr, s.d_shared_gate.data(), in, val(shared_.gate), N_g,
                       C_, F, WeightLayout::OutIn);
  k_.linear_backward(d_in, nullptr, nullptr, s.d_shared_up.data(), in, val(shared_.up), N_g, C_,
                       F, WeightLayout::OutIn);
  if (split) {
    tp_.reduce_rows(d_in, shared_local_.data(), N_g, C_);
    k_.residual_forward(dx, dx, shared_local_.data(), N * C_);
  }
  k_.linear_backward(dx, nullptr, nullptr, d_logit, x, val(shared_gate_), N, C_, 1,
                       WeightLayout::OutIn);
}

void MoeLayer::backward_weight(Saved& s, const float* x,
                               const std::function<void(int)>& grad_ready) {
  const int64_t N = s.N;
  if (N > 0) {
    k_.linear_backward(nullptr, grd(router_), nullptr, s.d_logits.data(), x, val(router_), N, C_,
                         E_, WeightLayout::OutIn);
  }
  const int64_t F = F_l_;
  int64_t o = 0;
  for (int64_t e = 0; e < E_l_; ++e) {
    const int64_t M = s.expert_rows[e];
    const ExpertParams& w = experts_[e];
    if (M > 0) {
      const float* in = s.expert_in.data() + o * C_;
      k_.linear_backward(nullptr, grd(w.down), nullptr, s.d_expert_out.data() + o * C_,
                           s.act.data() + o * F, val(w.down), M, F, C_, WeightLayout::OutIn);
      k_.linear_backward(nullptr, grd(w.gate), nullptr, s.d_gate.data() + o * F, in, val(w.gate),
                           M, C_, F, WeightLayout::OutIn);
      k_.linear_backward(nullptr, grd(w.up), nullptr, s.d_up.data() + o * F, in, val(w.up), M,
                           C_, F, WeightLayout::OutIn);
    }
    o += M;
  }
  if (F_s_ > 0 && N > 0) {
    const int64_t N_g = N * tp_.size();
    const float* in = shared_input(s, x);
    k_.linear_backward(nullptr, grd(shared_.down), nullptr, s.d_shared_out.data(),
                         s.shared_act.data(), val(shared_.down), N_g, F_sl_, C_,
                         WeightLayout::OutIn);
    k_.linear_backward(nullptr, grd(shared_.gate), nullptr, s.d_shared_gate.data(), in,
                         val(shared_.gate), N_g, C_, F_sl_, WeightLayout::OutIn);
    k_.linear_backward(nullptr, grd(shared_.up), nullptr, s.d_shared_up.data(), in,
                         val(shared_.up), N_g, C_, F_sl_, WeightLayout::OutIn);
    k_.linear_backward(nullptr, grd(shared_gate_), nullptr, s.d_shared_logit.data(), x,
                         val(shared_gate_), N, C_, 1, WeightLayout::OutIn);
  }
  if (grad_ready) {
    const std::vector<int> ids = param_indices();
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) grad_ready(*it);
  }
}

}  // namespace tessel
