#include "tessel/model/moe/router.h"

#include <algorithm>
#include <cmath>

#include "tessel/core/error.h"
#include "tessel/kernels/router_rows.h"

namespace tessel {

int64_t moe_expert_capacity(int64_t N, int64_t E, int64_t k, double factor) {
  // As Python computes it: (num_tokens / num_experts) in double, times the factor, ceil.
  const double capacity = std::ceil(static_cast<double>(N * k) / static_cast<double>(E) * factor);
  return std::min<int64_t>(static_cast<int64_t>(capacity), N);
}

int64_t moe_first_routed_rows(int64_t N, const MoeConfig& moe, int G) {
  if (moe.pad_to_capacity && moe.capacity_factor > 0)
    return moe.num_experts * moe_expert_capacity(N * G, moe.num_experts, moe.topk, moe.capacity_factor);
  return N * moe.topk;
}

TopKRouter::TopKRouter(const LayerContext& ctx, int layer, int64_t max_tokens)
    : k_(ctx.k),
      params_(ctx.registry),
      moe_(ctx.cfg.moe),
      C_(ctx.cfg.hidden_size),
      E_(moe_.num_experts),
      topk_(moe_.topk),
      max_tokens_(std::max<int64_t>(max_tokens, 1)),
      token_group_(ctx.moe.token_group),
      keys_(ctx.dropout_keys()),
      random_site_(router_rows::random_logits_site(layer)) {
  TensorList& scratch = ctx.buffers.scratch;
  weight_ = ctx.registry.add(ctx.cfg.layer_prefix(layer) + "mlp.gate.weight", {E_, C_}, ParamInit::Normal, ctx.cfg.init_method_std, true);
  const int64_t n = max_tokens_ * topk_;
  scratch.add(keep_, {n}, "router capacity verdicts", DType::I32);
  scratch.add(group_counts_, {E_ + 1}, "router load-balancing counts");
  const int G = token_group_.size();
  if (moe_.capacity_factor > 0 && G > 1) {
    scratch.add(choices_, {2, n}, "router choices");
    scratch.add(group_choices_, {2 * G, n}, "router token group's choices");
    scratch.add(group_experts_, {G, n}, "router token group's experts", DType::I32);
    scratch.add(group_probs_, {G, n}, "router token group's probabilities");
    scratch.add(group_keep_, {G, n}, "router token group's verdicts", DType::I32);
  }
}

void TopKRouter::list_saved(Saved& s, TensorList& buffers) const {
  const int64_t N = max_tokens_;
  buffers.add(s.logits, {N, E_}, "router logits");
  buffers.add(s.experts, {N * topk_}, "router chosen experts", DType::I32);
  buffers.add(s.probs, {N, topk_}, "router probabilities");
  if (moe_.aux_loss_coeff > 0) {
    buffers.add(s.aux_scores, {N, E_}, "router aux-loss scores");
    buffers.add(s.aux_counts, {E_}, "router aux-loss counts");
  }
  if (moe_.z_loss_coeff > 0) buffers.add(s.lse, {N}, "router z-loss log-sum-exp");
  buffers.add(s.d_logits, {N, E_}, "router logits' gradient");
}

// The gate's output, or under forced load balancing the random logits in its place: the gate is
// not computed then, as nothing reads its output (backward takes the random logits' gradient for
// it).
void TopKRouter::logits_forward(Saved& s, const float* x, const int32_t* sample_ids) {
  if (s.N == 0) return;
  if (!moe_.force_load_balancing) {
    // The table's GEMM: the gate stays out of FP8 (--fp8-format), as Megatron's router does.
    linear_forward_products(k_.gemm, s.logits.data(), x, params_.value(weight_), s.N, C_, E_, WeightLayout::OutIn);
    return;
  }
  TESSEL_CHECK(sample_ids != nullptr && keys_.positions != nullptr,
               "--moe-router-force-load-balancing keys the router's random logits by the tokens' samples, "
               "which this forward does not have (generation)");
  k_.moe_random_logits(s.logits.data(), sample_ids + keys_.first_row, keys_.positions + keys_.first_row, s.N,
                       E_, keys_.seed, random_site_);
}

int64_t TopKRouter::forward(Saved& s, const float* x, int64_t N, float grad_scale, const int32_t* sample_ids) {
  s.N = N;
  const bool aux = moe_.aux_loss_coeff > 0, z = moe_.z_loss_coeff > 0;
  float* logits = s.logits.data();
  logits_forward(s, x, sample_ids);
  k_.moe_topk_forward(s.experts.ints(), s.probs.data(), logits, N, E_, topk_, score(),
                      moe_.pre_softmax);

  // The load-balancing loss counts the top-k choices (before dropping) of the whole sequence:
  // the counts per expert and N (the last entry), summed over the token group.
  float* counts = group_counts_.data();  // (E + 1)
  k_.moe_count_assignments(counts, s.experts.ints(), nullptr, N * topk_, E_);
  const float rows = static_cast<float>(N);
  k_.memory.from_host(counts + E_, &rows, 4);
  if (token_group_.size() > 1 && (aux || z))
    token_group_.comm().all_reduce(counts, E_ + 1);
  float group_rows = 0;
  k_.memory.to_host(&group_rows, counts + E_, 4);
  const int64_t tokens = static_cast<int64_t>(group_rows);
  s.aux_tokens = tokens;
  s.aux_grad_scale = static_cast<float>(tokens) * grad_scale;
  s.aux_loss = s.z_loss = 0;
  if (aux) {
    k_.copy(s.aux_counts.data(), counts, E_);
    k_.moe_aux_scores_forward(s.aux_scores.data(), logits, N, E_, score());
    s.aux_loss = k_.moe_aux_loss_forward(s.aux_scores.data(), s.aux_counts.data(), N, E_, topk_,
                                         tokens, moe_.aux_loss_coeff);
  }
  if (z) s.z_loss = k_.moe_z_loss_forward(s.lse.data(), logits, N, E_, z_coeff());
  drop_over_capacity(s);
  return tokens;
}

// Every rank of the token group gathers the group's choices, runs the same drop against the
// microbatch's capacity and keeps its own rows' verdicts. Ties between equal probabilities go to
// the lower gathered index: the sequence's order under sequence parallel.
void TopKRouter::drop_over_capacity(Saved& s) {
  const int64_t n = s.N * topk_;
  const int G = token_group_.size();
  int32_t* keep = keep_.ints();
  if (moe_.capacity_factor <= 0) {  // dropless: a capacity no expert can exceed keeps every row
    k_.moe_capacity_drop(keep, s.experts.ints(), s.probs.data(), s.N, E_, topk_, s.N);
    return;
  }
  s.capacity = moe_expert_capacity(s.N * G, E_, topk_, moe_.capacity_factor);
  if (G == 1) {
    k_.moe_capacity_drop(keep, s.experts.ints(), s.probs.data(), s.N, E_, topk_, s.capacity);
    return;
  }
  float* choices = k_.reserve(choices_, 2, n);  // this rank's [experts | probs]
  float* group_choices = k_.reserve(group_choices_, 2 * G, n);
  k_.moe_pack_choices(choices, s.experts.ints(), s.probs.data(), n);
  token_group_.comm().all_gather(choices, group_choices, 2 * n);
  int32_t* experts = k_.reserve_ints(group_experts_, G, n);
  float* probs = k_.reserve(group_probs_, G, n);
  int32_t* group_keep = k_.reserve_ints(group_keep_, G, n);
  k_.moe_unpack_choices(experts, probs, group_choices, G, n);
  k_.moe_capacity_drop(group_keep, experts, probs, s.N * G, E_, topk_, s.capacity);
  k_.memory.copy(keep, group_keep + n * token_group_.rank(), n * 4);
}

// Megatron divides the z-loss coefficient by the token group's size, so that the ranks' means
// add up to the mean over the sequence.
float TopKRouter::z_coeff() const {
  const int split = token_group_.size();
  return moe_.z_loss_coeff / static_cast<float>(split);
}

void TopKRouter::backward_input(Saved& s, float* dx, const float* d_probs, const float* x) const {
  const int64_t N = s.N;
  float* d_logits = s.d_logits.data();
  k_.zero(d_logits, N * E_);
  k_.moe_topk_backward(d_logits, d_probs, s.logits.data(), s.experts.ints(), s.probs.data(), N, E_,
                       topk_, score(), moe_.pre_softmax);
  if (moe_.aux_loss_coeff > 0) {
    k_.moe_aux_loss_backward(d_logits, s.logits.data(), s.aux_scores.data(), s.aux_counts.data(),
                             N, E_, topk_, s.aux_tokens, moe_.aux_loss_coeff, s.aux_grad_scale,
                             score());
  }
  if (moe_.z_loss_coeff > 0) {
    k_.moe_z_loss_backward(d_logits, s.logits.data(), s.lse.data(), N, E_, z_coeff(),
                           s.aux_grad_scale);
  }
  if (N > 0) {
    linear_backward_products(k_.gemm, dx, nullptr, d_logits, x, params_.value(weight_), N, C_, E_,
                       WeightLayout::OutIn);
  }
}

void TopKRouter::backward_weight(Saved& s, const float* x) const {
  if (s.N == 0) return;
  linear_backward_products(k_.gemm, nullptr, params_.grad(weight_), s.d_logits.data(), x,
                     params_.value(weight_), s.N, C_, E_, WeightLayout::OutIn);
}

}  // namespace tessel
