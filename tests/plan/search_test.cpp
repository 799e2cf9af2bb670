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
    if (i > 0) EXPECT_LE(r.ranked[i - 1].time.step, r.ranked[i].time.step);
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
    if (e.run.parallel.vpp == 1) EXPECT_EQ(e.run.pipeline_layout, "Et*6|t*8|t*8|t*8|t*8|t*8|t*8|t*6L");
}

}  // namespace
}  // namespace tessel
