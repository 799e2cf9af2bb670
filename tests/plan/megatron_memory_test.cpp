// Megatron-LM's theoretical memory formula beside the planner: the formula as its source defines
// it (checked on numbers worked by hand), every difference on every layout of the table named and
// summing to the planner's figure, and where the two disagree on what a schedule holds in flight,
// the generated schedule decides.
#include <gtest/gtest.h>

#include <cmath>

#include "tessel/plan/megatron_memory.h"
#include "tessel/plan/shape.h"
#include "tessel/train/planned_run.h"

namespace tessel {
namespace {

PlanRun gpt3_run(int vpp, int64_t batch, Recompute rc, bool sp) {
  PlanRun r;
  r.parallel.world = 64;
  r.parallel.tp = 8, r.parallel.pp = 8, r.parallel.vpp = vpp;
  r.parallel.sequence_parallel = sp;
  r.global_batch = batch, r.micro_batch = 1;
  r.recompute = planned_recompute(rc);
  r.precision = PlannedPrecision::FP16, r.attention = AttentionBackend::Unfused;
  return r;
}

// GPT-3 175B, TP 8, PP 8, VPP 3, SP + selective, 64 microbatches, worked by hand from the
// formula's definition: parameters 96·(2h·(4h + 2) + 4h²) + 2h in the block, h·V in the
// embedding (V = 51200), the first stage (block/8 + h·V)/8 at 18 B; activations
// s·b·h·(18 + 16)·96 + 8·s·8 + s·h·8, × (1 + 7/24), / 8.
TEST(MegatronFormula, MatchesItsDefinitionWorkedByHand) {
  const PlanModel m = model_preset("gpt3-175b");
  const MegatronFormula f = megatron_theoretical_memory(m, gpt3_run(3, 64, Recompute::Selective, true));
  const double h = 12288, s = 2048, V = 51200;
  const double block = 96 * (2 * h * (4 * h + 2) + 4 * h * h) + 2 * h;
  EXPECT_NEAR(f.weight_and_optimizer, (block / 8 + h * V) / 8 * 18, 1.0);
  const double act = (s * h * 34 * 96 + 8 * s * 8 + s * h * 8) * (1 + 7.0 / 24) / 8;
  EXPECT_NEAR(f.activations, act, 1.0);
  EXPECT_TRUE(f.sequence_parallel_branch);
  EXPECT_NEAR(f.layer_microbatches, 96 * (1 + 7.0 / 24), 1e-9);
  // The other branch: 10 + 24/t per layer, bf16 logits at p = 1, × 1.05; the distributed optimizer 6 + 12/d.
  PlanRun full = gpt3_run(1, 64, Recompute::Full, false);
  full.parallel.world = 128;
  full.parallel.distributed_optimizer = true;
  const MegatronFormula g = megatron_theoretical_memory(m, full);
  EXPECT_FALSE(g.sequence_parallel_branch);
  EXPECT_NEAR(g.weight_and_optimizer, (block / 8 + h * V) / 8 * (6 + 12.0 / 2), 1.0);
  EXPECT_NEAR(g.activations, (s * h * (10 + 3) * 96 + 8 * s * 8 + s * h * 8) * 1.05, 1.0);  // m = 32 ≥ p: factor 1
}

// Every layout of the table: the formula plus the named differences is the planner's figure
// (to 0.5 %), and a difference of more than 2 % always has its causes listed.
TEST(MegatronFormula, EveryDifferenceIsExplained) {
  const std::vector<FormulaComparison> table = megatron_comparisons(planned_run_violations);
  ASSERT_GE(table.size(), 20u);
  int dense = 0, moe = 0, interleaved = 0, distributed = 0, full = 0, large_differences = 0;
  for (const FormulaComparison& c : table) {
    SCOPED_TRACE(c.model + " " + c.layout);
    EXPECT_NEAR(c.explained_state() / c.planner_state, 1, 0.005);
    EXPECT_NEAR(c.explained_activations() / c.planner_activations, 1, 0.005);
    for (auto [planner, formula, causes] : {std::tuple{c.planner_state, c.formula.weight_and_optimizer, &c.state},
                                            {c.planner_activations, c.formula.activations, &c.activations}})
      if (std::fabs(planner / formula - 1) > 0.02) {
        large_differences++;
        EXPECT_FALSE(causes->empty());
      }
    (c.layout.find("EP") != std::string::npos ? moe : dense)++;
    interleaved += c.layout.find("VPP") != std::string::npos;
    distributed += c.layout.find("dist-opt") != std::string::npos;
    full += c.layout.find("full") != std::string::npos;
  }
  EXPECT_GT(large_differences, 0);
  EXPECT_GE(dense, 10);
  EXPECT_GE(moe, 4);
  EXPECT_GE(interleaved, 5);
  EXPECT_GE(distributed, 8);
  EXPECT_GE(full, 3);
}

// The formula counts L·(1 + (p−1)/(p·v)) layers in flight on an interleaved first stage whatever
// the microbatches; with m = p = 8 and v = 3 Megatron's warm-up (2·(p−1) + (v−1)·p = 30 chunk
// forwards) covers all 24 (microbatch, chunk) pairs, so the schedule holds 24 chunks of 4 layers:
// 96, not 124. In 1F1B with m < p both count m microbatches.
TEST(MegatronFormula, TheScheduleDecidesWhatIsInFlight) {
  const PlanModel m = model_preset("gpt3-175b");
  const Cluster a100 = cluster_preset("a100-80gb");
  const PlanRun interleaved = gpt3_run(3, 8, Recompute::Selective, true);
  const RunShape x(m, interleaved, a100);
  const std::vector<RankSchedule> schedule = generate_schedule(x.schedule);
  int forwards_before_first_backward = 0;
  for (const Action& a : schedule[0]) {
    if (a.kind == ActionKind::Backward) break;
    forwards_before_first_backward += a.kind == ActionKind::Forward;
  }
  EXPECT_EQ(forwards_before_first_backward, 24);
  const FormulaComparison c = compare_with_megatron(m, interleaved, a100);
  EXPECT_NEAR(c.formula.layer_microbatches, 96 * (1 + 7.0 / 24), 1e-9);
  EXPECT_EQ(c.schedule_layer_microbatches, 96);
  EXPECT_LT(c.planner_activations, 0.85 * c.formula.activations);
  const FormulaComparison few = compare_with_megatron(m, gpt3_run(1, 4, Recompute::Selective, true), a100);
  EXPECT_NEAR(few.formula.layer_microbatches, 96 * 4 / 8.0, 1e-9);
  EXPECT_EQ(few.schedule_layer_microbatches, 48);
}

}  // namespace
}  // namespace tessel
