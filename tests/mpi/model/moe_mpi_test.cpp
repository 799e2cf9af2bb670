// Expert parallelism of MoeLayer across the world (EP 2 under -n 2, EP 4 under -n 4), against a
// one-process MoeLayer holding all 8 experts. As in Megatron, every EP rank routes its own tokens
// (a different number of rows on each rank); the reference runs each rank's tokens as its own
// microbatch, which is what EP computes. Parameters come from ParamRegistry::init_values on both
// sides (a value depends only on seed, name and index), so they agree without being sent.
// Compared, within 1e-5 relative: each rank's outputs and input gradients, the router's and
// shared expert's gradients summed over EP, each rank's experts' gradients, the statistics.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessel/comm/mpi.h"
#include "support/world_copy.h"
#include "tessel/core/philox.h"
#include "tessel/model/moe/moe.h"

namespace tessel {
namespace {

using Floats = std::vector<float>;
constexpr uint64_t kSeed = 4242;
constexpr double kTolerance = 1e-5;
constexpr int64_t kHidden = 8, kFfn = 6;


Floats random_floats(int64_t n, uint64_t stream) {
  Floats x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = random_normal(kSeed, stream, i);
  return x;
}

double relative_error(const float* got, const float* want, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

ModelConfig model_config() {
  ModelConfig m;
  m.arch = Arch::Llama;
  m.hidden_size = kHidden;
  m.num_attention_heads = 1;
  m.ffn_hidden_size = kFfn;
  m.num_layers = 2;
  return m;
}

MoeConfig moe_config() {
  MoeConfig m;
  m.num_experts = 8;
  m.topk = 2;
  m.shared_expert_size = 4;
  m.shared_expert_gate = true;
  m.aux_loss_coeff = 0.1f;
  m.z_loss_coeff = 0.01f;
  return m;
}

// A layer with its registry, parameters from init_values scaled up (decisive routing).
struct Side {
  ParamRegistry registry;
  std::unique_ptr<MoeLayer> layer;

  // tp: dense tensor parallelism (sequence parallel), the shared expert split over it.
  Side(const MoeConfig& moe, int64_t max_tokens, const MoeGroups& groups,
       const TensorParallel& tp = no_tensor_parallel(cpu_kernels())) {
    TensorList scratch, shared;
    ModelConfig model = model_config();
    model.moe = moe;
    LayerContext ctx = one_process_context(cpu_kernels(), registry, model, LayerBuffers{scratch, shared});
    ctx.tp = tp;
    ctx.moe = groups;
    layer = std::make_unique<MoeLayer>(ctx, 1, max_tokens);
    scratch.allocate(cpu_kernels());
    shared.allocate(cpu_kernels());
    registry.finalize();
    registry.init_values(kSeed);
    for (Param& p : registry.params())
      for (int64_t i = 0; i < p.numel(); ++i) p.value[i] *= 20.0f;
    registry.zero_grads();
    layer->bind(registry);
  }
  Param& param(const std::string& name) { return registry.get("model.layers.1.mlp." + name); }
};

struct Rows {
  Floats x, dout;
};

// Rank r's tokens: 5 + 3r rows (each rank a different count), or `fixed` rows when given.
Rows tokens_of(int r, int64_t fixed = 0) {
  const int64_t N = fixed > 0 ? fixed : 5 + 3 * r;
  return {random_floats(N * kHidden, 100 + r), random_floats(N * kHidden, 200 + r)};
}

struct Result {
  Floats out, dx;
  double aux = 0;
  RouterStats stats;
};

Result run(Side& side, const Rows& rows, float grad_scale) {
  const int64_t N = static_cast<int64_t>(rows.x.size()) / kHidden;
  Result r{Floats(N * kHidden), Floats(N * kHidden, 0.0f)};
  MoeLayer::Saved saved = side.layer->make_saved();
  r.aux = side.layer->forward(saved, r.out.data(), rows.x.data(), N, grad_scale);
  side.layer->backward(saved, r.dx.data(), rows.dout.data(), rows.x.data());
  r.stats = saved.stats;
  return r;
}

// EP over the world against the reference; `prepare` may rig every rank's tokens and both sides'
// parameters alike.
void check_expert_parallel(const MoeConfig& moe,
                           const std::function<void(Side&, std::vector<Rows>&)>& prepare = {}) {
  auto world = world_copy();
  const int P = world->size(), me = world->rank();
  std::vector<Rows> rows;
  for (int r = 0; r < P; ++r) rows.push_back(tokens_of(r));
  const int64_t max_tokens = 5 + 3 * (P - 1);
  const float grad_scale = 0.05f;

  Side ep(moe, max_tokens, {.ep = world.get()});
  Side ref(moe, max_tokens, {});
  if (prepare) {
    std::vector<Rows> ref_rows = rows;
    prepare(ep, rows);
    prepare(ref, ref_rows);
  }

  const Result got = run(ep, rows[me], grad_scale);
  Result want;
  std::vector<double> tokens_per_expert(moe.num_experts, 0.0);
  int64_t dropped = 0;
  double aux_sum = 0;
  for (int r = 0; r < P; ++r) {
    Result one = run(ref, rows[r], grad_scale);
    for (int e = 0; e < moe.num_experts; ++e)
      tokens_per_expert[e] += one.stats.tokens_per_expert[e];
    dropped += one.stats.dropped;
    aux_sum += one.aux;
    if (r == me) want = std::move(one);
  }

  const int64_t n = static_cast<int64_t>(got.out.size());
  EXPECT_LT(relative_error(got.out.data(), want.out.data(), n), kTolerance) << "output";
  EXPECT_LT(relative_error(got.dx.data(), want.dx.data(), n), kTolerance) << "d x";
  EXPECT_EQ(got.stats.tokens_per_expert, tokens_per_expert);
  EXPECT_EQ(got.stats.dropped, dropped);
  EXPECT_NEAR(got.stats.aux_loss, want.stats.aux_loss, 1e-6 * want.stats.aux_loss);
  double aux = got.aux;
  world->all_reduce(&aux, 1);
  EXPECT_NEAR(aux, aux_sum, 1e-6 * std::abs(aux_sum));

  // Replicated parameters: local gradients summed over EP. Experts: this rank's, as they are.
  for (Param& p : ep.registry.params()) {
    const Param& q = ref.registry.get(p.name);
    if (!is_expert_param(p)) world->all_reduce(p.grad, p.numel());
    EXPECT_LT(relative_error(p.grad, q.grad, p.numel()), kTolerance) << p.name;
  }
}

TEST(MoeExpertParallel, EachRankDeclaresItsExperts) {
  auto world = world_copy();
  const int P = world->size(), me = world->rank();
  Side ep(moe_config(), 4, {.ep = world.get()});
  const int per_rank = 8 / P;
  EXPECT_EQ(ep.layer->num_local_experts(), per_rank);
  EXPECT_EQ(ep.layer->first_local_expert(), me * per_rank);
  int experts = 0;
  for (const Param& p : ep.registry.params()) {
    if (!is_expert_param(p)) continue;
    ++experts;
    EXPECT_EQ(p.shard.expert_rank, me);
    EXPECT_EQ(p.shard.expert_ranks, P);
    EXPECT_FALSE(p.replicated()) << p.name;
    EXPECT_EQ(p.local_shape, p.global_shape);
  }
  EXPECT_EQ(experts, 3 * per_rank);
  for (int e = 0; e < 8; ++e) {
    const bool mine = e / per_rank == me;
    EXPECT_EQ(ep.registry.has(fmt::format("model.layers.1.mlp.experts.{}.up_proj.weight", e)),
              mine);
  }
  EXPECT_TRUE(ep.registry.has("model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(ep.registry.has("model.layers.1.mlp.shared_expert_gate.weight"));
}

TEST(MoeExpertParallel, DroplessTop2MatchesOneProcess) { check_expert_parallel(moe_config()); }

TEST(MoeExpertParallel, SigmoidWithCapacityMatchesOneProcess) {
  MoeConfig moe = moe_config();
  moe.score_sigmoid = true;
  moe.capacity_factor = 1.0;
  check_expert_parallel(moe);
}

TEST(MoeExpertParallel, PaddedCapacityMatchesOneProcess) {
  MoeConfig moe = moe_config();
  moe.pre_softmax = true;
  moe.capacity_factor = 1.5;
  moe.pad_to_capacity = true;
  check_expert_parallel(moe);
}

// Every token of every rank goes to experts of rank 0 (x's first channel large, the router's
// first column +1.5 for rank 0's experts, -1.5 for the others): the other ranks' experts receive
// zero rows, yet every rank takes part in both all-to-alls.
TEST(MoeExpertParallel, RanksWithoutTokens) {
  auto world = world_copy();
  const int P = world->size();
  const int per_rank = 8 / P;
  check_expert_parallel(moe_config(), [&](Side& side, std::vector<Rows>& rows) {
    for (Rows& r : rows)
      for (size_t i = 0; i < r.x.size(); i += kHidden) r.x[i] = 3.0f + 0.1f * r.x[i];
    float* router = side.param("gate.weight").value;
    for (int e = 0; e < 8; ++e) router[e * kHidden] = e < per_rank ? 1.5f : -1.5f;
  });
  // The routing really is that lopsided: rank 0's experts get everything.
  Side ep(moe_config(), 5 + 3 * (P - 1), {.ep = world.get()});
  Rows mine = tokens_of(world->rank());
  for (size_t i = 0; i < mine.x.size(); i += kHidden) mine.x[i] = 3.0f + 0.1f * mine.x[i];
  float* router = ep.param("gate.weight").value;
  for (int e = 0; e < 8; ++e) router[e * kHidden] = e < per_rank ? 1.5f : -1.5f;
  const Result r = run(ep, mine, 0.05f);
  for (int e = per_rank; e < 8; ++e) EXPECT_EQ(r.stats.tokens_per_expert[e], 0.0) << "expert " << e;
}

// Megatron's sequence split: rank `me` of P runs its N rows of one sequence on `split`, `whole`
// runs all N·P rows; this rank's rows of the output and the input gradient must agree.
std::pair<Result, Result> run_split_sequence(Side& split, Side& whole, int P, int me, int64_t N) {
  Rows all;
  for (int r = 0; r < P; ++r) {
    const Rows part = tokens_of(r, N);
    all.x.insert(all.x.end(), part.x.begin(), part.x.end());
    all.dout.insert(all.dout.end(), part.dout.begin(), part.dout.end());
  }
  Result got = run(split, tokens_of(me, N), 0.01f);
  Result want = run(whole, all, 0.01f);
  const int64_t n = N * kHidden;
  EXPECT_LT(relative_error(got.out.data(), want.out.data() + me * n, n), kTolerance);
  EXPECT_LT(relative_error(got.dx.data(), want.dx.data() + me * n, n), kTolerance);
  return {std::move(got), std::move(want)};
}

// Megatron's sequence split (TP under sequence parallel, × CP): each rank holds an equal part of
// one microbatch's tokens; the load-balancing loss counts over the token group. The ranks' aux
// returns add up to the one-process value on all tokens, and so do the gradients.
TEST(MoeExpertParallel, TokenGroupSumsToTheWholeSequence) {
  auto world = world_copy();
  const int P = world->size(), me = world->rank();
  const int64_t N = 6;
  MoeConfig moe = moe_config();
  moe.score_sigmoid = true;
  Side split(moe, N, {.token_group = world.get()});
  Side whole(moe, N * P, {});
  const auto [got, want] = run_split_sequence(split, whole, P, me, N);
  double aux = got.aux;
  world->all_reduce(&aux, 1);
  EXPECT_NEAR(aux, want.aux, 1e-5 * want.aux);
  for (Param& p : split.registry.params()) {
    world->all_reduce(p.grad, p.numel());
    EXPECT_LT(relative_error(p.grad, whole.registry.get(p.name).grad, p.numel()), kTolerance)
        << p.name;
  }
}

// Tensor parallel (sequence parallel) with the experts split over ETP, both over the world (EP
// 1): each rank routes its N rows of one sequence, the shared expert and every expert are split
// over the ranks. Against one process on all N·P rows: each rank's rows of the output and input
// gradient; replicated gradients summed over TP, every split one equal to its slice of the whole.
TEST(MoeExpertParallel, TensorAndExpertTensorParallelMatchOneProcess) {
  auto world = world_copy();
  const int P = world->size(), me = world->rank();
  const int64_t N = 6;
  MoeConfig moe = moe_config();
  moe.ffn_hidden_size = 8;
  moe.shared_expert_size = 8;
  Side split(moe, N, {.etp = world.get(), .token_group = world.get()},
             TensorParallel{world.get(), true, &cpu_kernels()});
  Side whole(moe, N * P, {});
  run_split_sequence(split, whole, P, me, N);
  for (Param& p : split.registry.params()) {
    const Param& q = whole.registry.get(p.name);
    if (p.replicated()) {
      world->all_reduce(p.grad, p.numel());
      EXPECT_LT(relative_error(p.grad, q.grad, p.numel()), kTolerance) << p.name;
      continue;
    }
    EXPECT_EQ(p.numel() * P, q.numel()) << p.name;
    Floats slice(p.numel());
    for (int64_t i = 0; i < p.numel(); ++i) slice[i] = q.grad[p.global_index(i)];
    EXPECT_LT(relative_error(p.grad, slice.data(), p.numel()), kTolerance) << p.name;
  }
}

}  // namespace
}  // namespace tessel
