#include "tessel/model/moe/moe.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "tessel/core/error.h"

namespace tessel {

namespace {

// Every rule the layer's settings break, in one error, before anything is declared.
int64_t checked_hidden_size(const LayerContext& ctx, int layer, int64_t max_tokens) {
  const ModelConfig& model = ctx.cfg;
  const MoeConfig& moe = model.moe;
  const int ep = ctx.moe.ep.size(), etp = ctx.moe.etp.size(), tp = ctx.tp.size();
  const std::vector<std::string> problems = moe.violations(ep, model.num_layers);
  TESSEL_CHECK(problems.empty(), "MoE layer {}: {}", layer, fmt::join(problems, "; "));
  TESSEL_CHECK(max_tokens >= 0, "MoE layer {}: max_tokens {} is negative", layer, max_tokens);
  TESSEL_CHECK(tp == 1 || ctx.tp.sequence_parallel,
               "MoE layer {}: tensor parallelism ({}) needs sequence parallel", layer, tp);
  const int64_t F = model.expert_ffn_size();
  TESSEL_CHECK(F % etp == 0, "MoE layer {}: expert size {} does not split over ETP {}", layer, F,
               etp);
  TESSEL_CHECK(moe.shared_expert_size % tp == 0,
               "MoE layer {}: shared expert size {} does not split over TP {}", layer,
               moe.shared_expert_size, tp);
  return model.hidden_size;
}

// The rows this rank routes out as the buffers are first sized (moe_first_routed_rows).
int64_t routed_rows(int64_t max_tokens, const LayerContext& ctx) {
  return moe_first_routed_rows(std::max<int64_t>(max_tokens, 1), ctx.cfg.moe, ctx.moe.token_group.size());
}

// The dispatcher ctx.moe.dispatcher names, built in place (its scratch is declared by address).
std::variant<TokenDispatcher, AllGatherDispatcher> make_dispatcher(const LayerContext& ctx, int64_t max_tokens) {
  using Dispatcher = std::variant<TokenDispatcher, AllGatherDispatcher>;
  if (ctx.moe.dispatcher == MoeDispatcherType::AllGather)
    return Dispatcher(std::in_place_type<AllGatherDispatcher>, ctx, max_tokens);
  return Dispatcher(std::in_place_type<TokenDispatcher>, ctx, max_tokens, routed_rows(max_tokens, ctx));
}

// The rows the experts compute, and per local expert, as the dispatch planned them.
int64_t rows_in(const MoeLayer::Saved& s) {
  return std::visit([](const auto& d) { return d.rows_in; }, s.dispatch);
}
const std::vector<int64_t>& expert_rows(const MoeLayer::Saved& s) {
  return std::visit([](const auto& d) -> const std::vector<int64_t>& { return d.expert_rows; }, s.dispatch);
}
}  // namespace

void RouterTotals::add(const RouterTotals& other) {
  tokens_per_expert.resize(std::max(tokens_per_expert.size(), other.tokens_per_expert.size()), 0.0);
  for (size_t e = 0; e < other.tokens_per_expert.size(); ++e)
    tokens_per_expert[e] += other.tokens_per_expert[e];
  dropped += other.dropped;
  aux_loss += other.aux_loss;
  z_loss += other.z_loss;
  forwards += other.forwards;
}

// Hugging Face order: router, experts, shared expert, its gate.
MoeLayer::MoeLayer(const LayerContext& ctx, int layer, int64_t max_tokens, LayerRecompute recompute)
    : k_(ctx.k),
      registry_(ctx.registry),
      params_(ctx.registry),
      C_(checked_hidden_size(ctx, layer, max_tokens)),
      E_(ctx.cfg.moe.num_experts),
      F_s_(ctx.cfg.moe.shared_expert_size),
      F_sl_(0),
      topk_(ctx.cfg.moe.topk),
      etp_size_(ctx.moe.etp.size()),
      max_tokens_(max_tokens),
      tp_(ctx.tp),
      router_(ctx, layer, max_tokens),
      dispatcher_(make_dispatcher(ctx, max_tokens)),
      // Every ETP rank's routed rows reach each ETP rank (N·k of them at a balanced load).
      experts_(ctx, ctx.cfg.layer_prefix(layer) + "mlp.",
               {routed_rows(max_tokens, ctx) * etp_size_, std::max<int64_t>(max_tokens, 1) * topk_ * etp_size_},
               recompute.moe_act && !(recompute.full || recompute.moe)),
      recompute_(recompute),
      whole_(recompute.full || recompute.moe) {
  const ModelConfig& model = ctx.cfg;
  const MoeConfig& moe = model.moe;
  ParamRegistry& registry = ctx.registry;
  const LayerBuffers& buffers = ctx.buffers;
  const int T = tp_.size();
  F_sl_ = F_s_ / T;
  const int64_t N = std::max<int64_t>(max_tokens_, 1), Q = etp_size_;
  if (F_s_ > 0) {
    const std::string p = model.layer_prefix(layer) + "mlp.";
    const Mlp::Split split = [&](int dim) {
      return T > 1 ? ShardSpec{.dim = dim, .group = ShardGroup::TP, .index = tp_.rank(), .count = T}
                   : ShardSpec{};
    };
    shared_.emplace(k_, registry,
                    Mlp::Spec{.prefix = p + "shared_expert.", .activation = Activation::SwiGlu, .C = C_,
                              .F = F_s_, .F_l = F_sl_, .split = split, .in_std = model.init_method_std,
                              .out_std = output_init_std(model)});
    if (moe.shared_expert_gate)
      shared_gate_ = registry.add(p + "shared_expert_gate.weight", {1, C_}, ParamInit::Normal,
                                  model.init_method_std, true);
    if (T > 1) {
      buffers.scratch.add(shared_full_, {N * T, C_}, "shared expert partial sums");
      buffers.scratch.add(shared_local_, {N, C_}, "shared expert reduced rows");
    }
  }
  const int64_t R = routed_rows(N, ctx) * Q, balanced = N * topk_ * Q;  // the experts' rows
  buffers.scratch.add_growing(expert_out_, {R, C_}, "experts' output rows", {RoutedRows::Received, balanced});
  buffers.scratch.add_growing(d_act_, {std::max(R, N * T), std::max(experts_.ffn_local(), F_sl_)},
                              "experts' activation gradient", {RoutedRows::Received, balanced, N * T});
  buffers.scratch.add(d_probs_, {N, topk_}, "routing probabilities' gradient");
  if (whole_) {
    const int64_t before = buffers.shared.bytes();
    SavedLists lists{buffers.shared, buffers.shared};
    lists.set_part("MoE layers (recomputed whole)");
    list_all(shared_saved_, lists);
    shared_saved_bytes_ = buffers.shared.bytes() - before;
  }
}

void MoeLayer::bind(const ParamRegistry& registry) const {
  TESSEL_CHECK(&registry == &registry_ && registry.finalized(),
               "MoE layer: bind() needs the finalized registry the layer declared into");
}

std::vector<int> MoeLayer::param_indices() const {
  std::vector<int> ids = {router_.weight()};
  for (int p : experts_.param_indices()) ids.push_back(p);
  if (shared_) {
    for (int p : shared_->param_indices()) ids.push_back(p);
    if (shared_gate_ >= 0) ids.push_back(shared_gate_);
  }
  return ids;
}

void MoeLayer::list_saved(Saved& s, SavedLists& lists) const {
  s.stats.tokens_per_expert.assign(E_, 0.0);
  if (!whole_) list_all(s, lists);
}

void MoeLayer::list_all(Saved& s, SavedLists& lists) const {
  const int64_t N = std::max<int64_t>(max_tokens_, 1), N_g = N * tp_.size();
  TensorList& kept = lists.kept;
  TensorList& grads = lists.pick(recompute_.weights_in_input_pass());
  router_.list_saved(s.routing, kept);
  std::visit(
      [&](const auto& d) { d.list_saved(s.dispatch.template emplace<typename std::decay_t<decltype(d)>::Saved>(), kept); },
      dispatcher_);
  experts_.list_saved(s.experts, kept);
  if (shared_) {
    if (tp_.size() > 1) kept.add(s.shared_in, {N_g, C_}, "shared expert input (gathered)");
    shared_->list_saved(s.shared, lists.pick(recompute_.shared_experts), grads, N_g, "shared expert");
    kept.add(s.shared_out, {N, C_}, "shared expert output");
    if (shared_gate_ >= 0) {
      kept.add(s.shared_scale, {N}, "shared expert output scale");
      grads.add(s.d_shared_logit, {N}, "shared expert output scale's gradient");
    }
  }
  s.stats.tokens_per_expert.assign(E_, 0.0);
}

MoeLayer::Saved MoeLayer::make_saved() const {
  Saved s;
  TensorList buffers;
  SavedLists lists{buffers, buffers};
  list_saved(s, lists);
  buffers.allocate(k_);
  return s;
}

int64_t MoeLayer::shared_activation_bytes() const {
  return whole_ ? shared_saved_bytes_ + shared_saved_.growing_bytes() : experts_.shared_bytes();
}

int64_t MoeLayer::Saved::growing_bytes() const {
  int64_t n = std::visit([](const auto& d) { return held_bytes(d.combined); }, dispatch);
  for (const Tensor* t : {&experts.in, &experts.gate, &experts.up, &experts.act, &experts.d_gate,
                          &experts.d_up, &experts.d_out})
    n += held_bytes(*t);
  return n;
}

RouterTotals MoeLayer::take_router_totals() {
  RouterTotals t = std::move(totals_);
  totals_ = {};
  return t;
}

// ---- forward ---------------------------------------------------------------------------------

double MoeLayer::forward(Saved& slot, float* out, const float* x, int64_t N, float grad_scale,
                         const int32_t* sample_ids) {
  TESSEL_CHECK(N >= 0 && N <= max_tokens_, "MoE forward: {} rows for a layer sized for {}", N,
               max_tokens_);
  slot.N = N;
  slot.grad_scale = grad_scale;
  slot.sample_ids = sample_ids;
  Saved& s = state(slot);
  const double losses = run_forward(s, out, x, N, grad_scale, sample_ids);
  totals_.add({.tokens_per_expert = s.stats.tokens_per_expert, .dropped = s.stats.dropped,
               .aux_loss = s.stats.aux_loss, .z_loss = s.stats.z_loss, .forwards = 1});
  return losses;
}

void MoeLayer::recompute(Saved& slot, float* out, const float* x) {
  Saved& s = state(slot);
  if (whole_) {
    run_forward(s, out, x, slot.N, slot.grad_scale, slot.sample_ids);
    return;
  }
  if (recompute_.moe_act) experts_.recompute_act(s.experts, rows_in(s));
  if (recompute_.shared_experts && shared_ && s.N > 0)
    shared_->hidden_forward(s.shared.rows(), shared_input(s, x), s.N * tp_.size());
}

double MoeLayer::run_forward(Saved& s, float* out, const float* x, int64_t N, float grad_scale,
                             const int32_t* sample_ids) {
  s.N = N;
  const int64_t tokens = router_.forward(s.routing, x, N, grad_scale, sample_ids);
  s.stats.aux_loss = s.routing.aux_loss;
  s.stats.z_loss = s.routing.z_loss;
  with_dispatcher(s, [&](auto& dispatcher, auto& d) {
    dispatcher.plan(d, s.routing, router_.keep(), N, s.stats);
    const int64_t R = d.rows_in;
    dispatcher.dispatch(d, k_.reserve(s.experts.in, R, C_), x, N);
    float* y = k_.reserve(expert_out_, R, C_);
    experts_.forward(s.experts, y, d.expert_rows, R);
    dispatcher.combine(d, out, y, s.routing.probs.data(), N);
  });
  if (shared_) shared_forward(s, out, x);
  return static_cast<double>(tokens) * (s.stats.aux_loss + s.stats.z_loss);
}

// Megatron's SharedExpertMLP under sequence parallel: out += sigmoid(x · gateᵀ) · MLP(x) (out +=
// MLP(x) without --moe-shared-expert-gate), the MLP over all TP ranks' rows with this rank's F_s/TP
// neurons, its partial sums reduce-scattered back to this rank's rows; the gate on this rank's
// rows. Without TP the same with one rank.
void MoeLayer::shared_forward(Saved& s, float* out, const float* x) {
  const int64_t N = s.N, N_g = N * tp_.size();
  if (N == 0) return;
  if (tp_.size() > 1) tp_.gather_rows(x, s.shared_in.data(), N_g, C_);
  shared_->forward(s.shared, s.shared_out.data(), shared_input(s, x), N_g, tp_,
                   shared_full_.data());
  if (shared_gate_ < 0) {
    k_.residual_forward(out, out, s.shared_out.data(), N * C_);
    return;
  }
  float* scale = s.shared_scale.data();
  // The table's GEMM: the shared expert's gate stays out of FP8 (--fp8-format), as in Megatron.
  linear_forward_products(k_.gemm, scale, x, params_.value(shared_gate_), N, C_, 1, WeightLayout::OutIn);
  k_.sigmoid_gate_forward(out, scale, s.shared_out.data(), N, C_);
}

// ---- backward --------------------------------------------------------------------------------

void MoeLayer::backward(Saved& s, float* dx, const float* dout, const float* x,
                        const GradReady& ready) {
  backward_input(s, dx, dout, x);
  backward_weight(s, x, ready);
}

void MoeLayer::backward_input(Saved& slot, float* dx, const float* dout, const float* x) {
  Saved& s = state(slot);
  const int64_t N = s.N, R = rows_in(s);
  float* d_probs = k_.reserve(d_probs_, N, topk_);
  with_dispatcher(s, [&](auto& dispatcher, auto& d) {
    float* d_y = k_.reserve(s.experts.d_out, R, C_);
    dispatcher.combine_backward(d, d_probs, d_y, dout, s.routing.probs.data(), N);
    float* d_in = k_.reserve(expert_out_, R, C_);
    float* d_act = k_.reserve(d_act_, std::max(R, N * tp_.size()), std::max(experts_.ffn_local(), F_sl_));
    experts_.backward_input(s.experts, d_in, d.expert_rows, R, d_act);
    dispatcher.dispatch_backward(d, dx, d_in, N);
  });
  if (shared_) shared_backward_input(s, dx, dout, x);
  router_.backward_input(s.routing, dx, d_probs, x);
}

// The shared expert's backward, mirroring shared_forward: this rank's rows of d(output) gathered
// over TP, the column- and row-parallel linears' input gradients reduce-scattered back.
void MoeLayer::shared_backward_input(Saved& s, float* dx, const float* dout, const float* x) {
  const int64_t N = s.N, N_g = N * tp_.size();
  if (N == 0) return;
  const bool split = tp_.size() > 1;
  float* d_out = split ? shared_local_.data() : s.shared.d_out.data();  // (N, C)
  if (shared_gate_ >= 0)
    k_.sigmoid_gate_backward(d_out, s.d_shared_logit.data(), dout, s.shared_out.data(),
                             s.shared_scale.data(), N, C_);
  else
    k_.copy(d_out, dout, N * C_);
  float* d_in = split ? shared_full_.data() : dx;  // (N_g, C): partial sums over TP
  if (split) k_.zero(d_in, N_g * C_);
  shared_->backward_input(s.shared, d_in, d_out, shared_input(s, x), N_g, tp_, d_act_.data());
  if (split) {
    tp_.reduce_rows(d_in, shared_local_.data(), N_g, C_);
    k_.residual_forward(dx, dx, shared_local_.data(), N * C_);
  }
  if (shared_gate_ >= 0)
    linear_backward_products(k_.gemm, dx, nullptr, s.d_shared_logit.data(), x, params_.value(shared_gate_), N, C_,
                       1, WeightLayout::OutIn);
}

void MoeLayer::backward_weight(Saved& slot, const float* x, const GradReady& ready) {
  Saved& s = state(slot);
  const int64_t N = s.N;
  router_.backward_weight(s.routing, x);
  experts_.backward_weight(s.experts, expert_rows(s));
  if (shared_ && N > 0) {
    shared_->backward_weight_rows(s.shared.rows(), shared_input(s, x), N * tp_.size());
    if (shared_gate_ >= 0)
      linear_backward_products(k_.gemm, nullptr, params_.grad(shared_gate_), s.d_shared_logit.data(), x,
                         params_.value(shared_gate_), N, C_, 1, WeightLayout::OutIn);
  }
  if (ready) {
    const std::vector<int> ids = param_indices();
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) ready(*it);
  }
}

}  // namespace tessel
