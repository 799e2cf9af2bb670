// The layout search: valid, fitting, ranked by step time, the bound never drops a faster layout,
// every rejection carries the rule it breaks.
#include <gtest/gtest.h>

#include "tessel/plan/search.h"
#include "tessel/train/planned_run.h"

namespace tessel {
namespace {

PlanRun base(int gpus, int64_t batch) {
  PlanRun r;
  r.parallel.world = gpus;
  r.global_batch = batch;
  return r;
}

TEST(PlanSearch, RanksValidFittingLayouts) {
  const Cluster h100 = cluster_preset("h100");
  const PlanModel m = model_preset("llama3-8b");
  SearchSpace space;
  space.top = 5;
  const SearchResult r = search(m, base(16, 64), space, h100, planned_run_violations);
  ASSERT_EQ(r.ranked.size(), 5u);
  EXPECT_EQ(r.considered, r.valid + static_cast<int>(r.rejected.size()));
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    EXPECT_TRUE(run_violations(m, r.ranked[i].run, h100, planned_run_violations).empty());
    EXPECT_TRUE(r.ranked[i].fits());
    if (i > 0) {
      EXPECT_LE(r.ranked[i - 1].time.step, r.ranked[i].time.step);
    }
  }
  for (const Rejection& j : r.rejected) EXPECT_FALSE(j.reasons.empty());
}

// Bounding by the busiest stage's work must not lose the fastest layout: compare with
// estimating every valid one.
TEST(PlanSearch, BoundKeepsTheFastest) {
  const Cluster a100 = cluster_preset("a100-80gb");
  const PlanModel m = model_preset("ptdp-18.4b");
  SearchSpace space;
  space.top = 1;
  space.recompute = Recompute::Selective;
  const SearchResult bounded = search(m, base(16, 64), space, a100, planned_run_violations);
  ASSERT_EQ(bounded.ranked.size(), 1u);
  EXPECT_LT(bounded.simulated, bounded.valid);
  space.top = 100000;
  const SearchResult all = search(m, base(16, 64), space, a100, planned_run_violations);
  ASSERT_FALSE(all.ranked.empty());
  EXPECT_DOUBLE_EQ(bounded.ranked.front().time.step, all.ranked.front().time.step);
}

TEST(PlanSearch, AModelThatFitsNowhereIsAllRejectedForMemory) {
  const Cluster a100 = cluster_preset("a100-80gb");
  SearchSpace space;
  const SearchResult r = search(model_preset("llama3-405b"), base(8, 8), space, a100, planned_run_violations);
  EXPECT_TRUE(r.ranked.empty());
  ASSERT_FALSE(r.rejected.empty());
  int memory = 0;
  for (const Rejection& j : r.rejected) memory += j.reasons.front().rfind("memory:", 0) == 0;
  EXPECT_GT(memory, 0);
}

// The seed's Qwen run on 64 H100s: the search finds layouts, pipeline stages of 60 layers get
// lighter ends where they do not divide.
TEST(PlanSearch, SeedQwenOn64H100) {
  const Cluster h100 = cluster_preset("h100");
  SearchSpace space;
  space.pp = 8;
  space.tp = 4;
  space.ep = 8;
  const SearchResult r = search(model_preset("qwen3-moe-60l"), base(64, 256), space, h100, planned_run_violations);
  ASSERT_FALSE(r.ranked.empty());
  for (const Estimate& e : r.ranked)
    if (e.run.parallel.vpp == 1) {
      EXPECT_EQ(e.run.pipeline_layout, "Et*6|t*8|t*8|t*8|t*8|t*8|t*8|t*6L");
    }
}


// A layout just over the limit is not silently dropped: it is listed as a near miss with its
// margin and the change that makes it fit; with no margin it is only a rejection.
TEST(PlanSearch, NearMissesCarryTheirMarginAndTheChangeThatFits) {
  Cluster h100 = cluster_preset("h100");
  const PlanModel m = model_preset("llama3-8b");
  PlanRun one = base(8, 64);
  one.micro_batch = 1;
  const double peak = memory_verdict(estimate_memory(m, one, h100), 80).peak_gib;  // TP1 PP1 DP8, no recompute
  h100.memory_gib = peak / 1.03;  // that layout is now 3 % over
  SearchSpace space;
  space.tp = 1, space.pp = 1, space.cp = 1;
  space.micro_batch = 1;
  space.recompute = Recompute::None;
  space.distributed_optimizer = false;
  space.top = 3;
  const SearchResult r = search(m, base(8, 64), space, h100, planned_run_violations);
  EXPECT_TRUE(r.ranked.empty());
  ASSERT_EQ(r.near_misses.size(), 1u);
  const NearMiss& n = r.near_misses.front();
  EXPECT_NEAR(n.estimate.verdict().over_fraction(), 0.03, 0.001);
  EXPECT_NEAR(-n.estimate.verdict().spare_gib(), peak - h100.memory_gib, 1e-9);
  EXPECT_GT(n.estimate.time.step, 0);
  ASSERT_FALSE(n.fixes.empty());
  bool distributed = false;
  for (const MemoryFix& f : n.fixes) {
    EXPECT_LE(f.peak_gib, h100.memory_gib) << f.change;
    distributed |= f.change == "--use-distributed-optimizer";
  }
  EXPECT_TRUE(distributed);
  space.memory_margin = 0.02;
  EXPECT_TRUE(search(m, base(8, 64), space, h100, planned_run_violations).near_misses.empty());
}

TEST(PlanSearch, VerdictSaysHowFarFromTheLimit) {
  StageMemory s;
  s.weights = 70 * 1024.0 * 1024 * 1024;
  s.runtime = 1 * 1024.0 * 1024 * 1024;
  const MemoryVerdict under = memory_verdict({s}, 80);
  EXPECT_TRUE(under.fits());
  EXPECT_EQ(under.text(), "fits, 9.00 GiB spare");
  EXPECT_DOUBLE_EQ(under.runtime_gib, 1);
  s.activations = 12.6 * 1024.0 * 1024 * 1024;
  const MemoryVerdict over = memory_verdict({s}, 80);
  EXPECT_FALSE(over.fits());
  EXPECT_EQ(over.text(), "over by 3.60 GiB (4.5 % of 80.0 GiB)");
  // The allowance under which it would fit: the limit less the 82.6 GiB without it.
  EXPECT_LT(runtime_allowance_to_fit({s}, 80), 0);
  EXPECT_NEAR(runtime_allowance_to_fit({s}, 83), 0.4, 1e-9);
}

}  // namespace
}  // namespace tessel
