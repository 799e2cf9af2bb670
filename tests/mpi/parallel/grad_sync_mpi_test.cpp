// GradSync (parallel/grad_sync.h) on real process groups: gradients worked out by hand per rank,
// reduced as Megatron reduces them, and the global norm counting every parameter once.
//   TP2 × DP2 (4 ranks), sequence parallel, distributed optimizer: a TP-replicated parameter
//   summed over TP and DP, a column-split one over DP, an expert split over ETP over expert-DP;
//   the updated slices all-gathered back.
//   PP2 (2 ranks): a tied embedding's two copies summed over the embedding group, counted once.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessel/comm/mpi.h"
#include "support/world_copy.h"
#include "support/parallel_config.h"
#include "tessel/kernels/kernels.h"
#include "tessel/parallel/grad_sync.h"

namespace tessel {
namespace {

bool is_expert(const Param& p) { return p.shard.expert(); }

// The gradient rank (tp, dp) computes for element `global` of parameter `id`.
double grad_of(int id, int64_t global, int tp, int dp) {
  return 0.01 * static_cast<double>(global + 1) + 0.1 * tp + 0.3 * dp + id;
}

// Runs the pipeline's hooks as one backward would: arm, every parameter finished in reverse.
void backward_hooks(GradSync& sync, const ParamRegistry& params) {
  sync.arm();
  for (int i = static_cast<int>(params.params().size()) - 1; i >= 0; --i) sync.grad_ready(i);
  sync.finish();
}

TEST(GradSync, Tp2Dp2SequenceParallelDistributedOptimizer) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  ParallelConfig config = testing::parallel_config(4, 2, 1, 1, 1, 0, "tp-cp-ep-dp-pp");
  config.sequence_parallel = true;
  config.distributed_optimizer = true;
  ProcessGroups groups = ProcessGroups::create(Layout(config), world_rank());
  const RankCoords at = groups.coords();
  ASSERT_EQ(at.etp, at.tp);  // ETP = TP, expert-DP = DP on this grid
  ASSERT_EQ(at.edp, at.dp);

  ParamRegistry params;
  params.add("replicated", {6}, ParamInit::Zeros, 0, false);
  params.add("column", {8}, ParamInit::Zeros, 0, true,
             {.dim = 0, .group = ShardGroup::TP, .index = at.tp, .count = 2});
  params.add("expert", {10}, ParamInit::Zeros, 0, true,
             {.dim = 0, .group = ShardGroup::ETP, .index = at.etp, .count = 2, .expert_rank = 0});
  const Kernels& k = cpu_kernels();
  params.finalize(k.memory);
  for (int id = 0; id < 3; ++id) {
    Param& p = params.params()[id];
    for (int64_t i = 0; i < p.numel(); ++i)
      p.grad[i] = static_cast<float>(grad_of(id, p.global_index(i), at.tp, at.dp));
  }
  GradSync sync(k, params, groups,
                {.sequence_parallel = true, .sharding = ShardingStrategy::Optim, .bucket_floats = 3,
                 .overlap = true, .is_expert = is_expert});
  backward_hooks(sync, params);

  // What every element sums to: the replicated one over all four ranks, the others over DP.
  auto reduced = [](int id, int64_t global, int tp) {
    double sum = 0;
    for (int dp = 0; dp < 2; ++dp) {
      if (id == 0) sum += grad_of(id, global, 0, dp) + grad_of(id, global, 1, dp);
      else sum += grad_of(id, global, tp, dp);
    }
    return sum;
  };
  double expected_sq = 0;
  for (int64_t g = 0; g < 6; ++g) expected_sq += std::pow(reduced(0, g, 0), 2);
  for (int64_t g = 0; g < 8; ++g) expected_sq += std::pow(reduced(1, g, static_cast<int>(g / 4)), 2);
  for (int64_t g = 0; g < 10; ++g) expected_sq += std::pow(reduced(2, g, static_cast<int>(g / 5)), 2);
  EXPECT_NEAR(sync.global_norm(), std::sqrt(expected_sq), 1e-5 * std::sqrt(expected_sq));

  // The owned slices hold the sums; the slices of the DP ranks cover the buffer once.
  int64_t owned = 0;
  for_each_piece(params.params(), sync.owned_ranges(), [&](const Param& p, int64_t first, int64_t n, int64_t) {
    const int id = static_cast<int>(&p - params.params().data());
    for (int64_t i = first; i < first + n; ++i)
      EXPECT_NEAR(p.grad[i], reduced(id, p.global_index(i), at.tp), 1e-5) << p.name << " " << i;
    owned += n;
  });
  double total = static_cast<double>(owned);
  groups.dp().all_reduce(&total, 1);
  EXPECT_EQ(total, static_cast<double>(params.numel()));

  // After the step each rank's slices reach every rank of its DP group.
  for (const FlatRange& r : sync.owned_ranges())
    for (int64_t i = r.begin; i < r.end; ++i) params.values()[i] = static_cast<float>(1000 + i + 100 * at.tp);
  sync.gather_params();
  for (int64_t i = 0; i < params.numel(); ++i)
    EXPECT_EQ(params.values()[i], static_cast<float>(1000 + i + 100 * at.tp)) << i;
}

TEST(GradSync, Pp2TiedEmbeddingSummedAndCountedOnce) {
  if (world_size() != 2) GTEST_SKIP() << "needs 2 ranks";
  const Layout layout(testing::parallel_config(2, 1, 1, 2, 1, 0, "tp-cp-ep-dp-pp"));
  ProcessGroups groups = ProcessGroups::create(layout, world_rank());
  const int stage = groups.coords().pp;

  // Stage 0 holds the embedding and a layer; stage 1 a layer and the head's copy of the embedding.
  ParamRegistry params;
  if (stage == 0) params.add("wte", {4, 3}, ParamInit::Zeros, 0, true);
  params.add(stage == 0 ? "layer0" : "layer1", {5 + stage}, ParamInit::Zeros, 0, true);
  if (stage == 1) params.add("wte", {4, 3}, ParamInit::Zeros, 0, true);
  const Kernels& k = cpu_kernels();
  params.finalize(k.memory);
  for (Param& p : params.params())
    for (int64_t i = 0; i < p.numel(); ++i) p.grad[i] = static_cast<float>((i + 1) * (stage + 1));
  const int wte = params.index("wte");
  GradSync sync(k, params, groups,
                {.is_expert = is_expert, .tied_owner = stage == 0 ? wte : -1,
                 .tied_copy = stage == 1 ? wte : -1});
  backward_hooks(sync, params);

  const Param& tied = params.params()[wte];
  for (int64_t i = 0; i < tied.numel(); ++i) EXPECT_EQ(tied.grad[i], static_cast<float>((i + 1) * 3)) << i;
  double expected_sq = 0;
  for (int64_t i = 0; i < 12; ++i) expected_sq += std::pow((i + 1) * 3.0, 2);
  for (int64_t i = 0; i < 5; ++i) expected_sq += std::pow(i + 1.0, 2);
  for (int64_t i = 0; i < 6; ++i) expected_sq += std::pow((i + 1) * 2.0, 2);
  EXPECT_DOUBLE_EQ(sync.global_norm(), std::sqrt(expected_sq));
}

}  // namespace
}  // namespace tessel
