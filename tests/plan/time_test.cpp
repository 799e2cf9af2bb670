// The planner's time model: the pipeline bubble comes from simulating the generated schedule,
// collectives run on the links the real rank layout gives them, CPU ranks share the cores, and
// the throughput figures follow their stated definitions.
#include <gtest/gtest.h>

#include "tessel/plan/estimate.h"
#include "tessel/plan/shape.h"
#include "tessel/plan/time.h"

namespace tessel {
namespace {

PlanRun run_of(int gpus, int tp, int pp, int64_t batch, int64_t micro) {
  PlanRun r;
  r.parallel.world = gpus, r.parallel.tp = tp, r.parallel.pp = pp;
  r.parallel.sequence_parallel = tp > 1;
  r.global_batch = batch, r.micro_batch = micro;
  return r;
}

// 1F1B's idle time on the first stage is (p − 1) microbatches' worth of the stage's work:
// idle / busy = (p − 1)/m when the stages cost alike (Narayanan et al. §2.2.1), and the bubble,
// the stages' idle share of the pipeline, the seed's (p − 1)/(m + p − 1) — also for PP 2 × 4
// microbatches, where a bubble of 57 % was once printed.
TEST(PlanTime, BubbleIsTheSimulatedSchedules) {
  const Cluster h100 = cluster_preset("h100");
  PlanModel m = model_preset("llama3-70b");
  m.cfg.vocab_size = 256;  // no embedding or head worth speaking of: the stages cost alike
  const Estimate e = estimate(m, run_of(32, 8, 4, 16, 1), h100);
  const double busy = e.time.makespan - e.time.idle;
  EXPECT_NEAR(e.time.idle / busy, 3.0 / 16, 0.01);
  EXPECT_NEAR(e.time.bubble, 3.0 / 19, 0.01);
  PlanRun interleaved = run_of(32, 8, 4, 16, 1);
  interleaved.parallel.vpp = 2;
  const Estimate v = estimate(m, interleaved, h100);
  EXPECT_NEAR(v.time.idle / (v.time.makespan - v.time.idle), 3.0 / 32, 0.02);
  EXPECT_NEAR(v.time.bubble, 3.0 / 35, 0.01);
  const Estimate pp2 = estimate(m, run_of(16, 8, 2, 4, 1), h100);
  EXPECT_NEAR(pp2.time.bubble, 1.0 / 5, 0.01);
}

// The same TP 8 group inside one node (the default order) or spread over two nodes (dp first):
// the rank layout decides which link carries its collectives.
TEST(PlanTime, CollectivesFollowTheRankLayout) {
  const Cluster h100 = cluster_preset("h100");
  const PlanModel m = model_preset("llama3-8b");
  PlanRun inside = run_of(16, 8, 1, 32, 1);
  PlanRun across = inside;
  across.parallel.order = "dp-tp-cp-ep-pp";
  const double t_inside = estimate(m, inside, h100).time.tp_comm, t_across = estimate(m, across, h100).time.tp_comm;
  EXPECT_GT(t_across, 1.8 * t_inside);  // 4 ranks on each node, a quarter of the data over the NICs
  // DP 16 over 2 nodes of 8: reduce-scatter and all-gather inside each node, an all-reduce of
  // 1/8 of the gradients between the nodes (NCCL's hierarchy).
  const Estimate dp = estimate(m, run_of(16, 1, 1, 32, 1), h100);
  const double S = (total_params(m) + (m.cfg.padded_vocab(1) - m.cfg.vocab_size) * 2.0 * m.cfg.hidden_size) * 4.0;
  const double intra = h100.intra_bandwidth * h100.network_efficiency, inter = h100.inter_bandwidth * h100.network_efficiency;
  const double expected = 2 * (7.0 / 8 * S / intra + 7 * h100.intra_latency) + 2 * (0.5 * S / 8 / inter + h100.inter_latency);
  EXPECT_NEAR(dp.time.dp_comm / expected, 1.0, 1e-6);
}

// More CPU ranks than cores share them: the step takes at least the whole job's compute over the
// cores (a waiting rank yields its core to the busy ones).
TEST(PlanTime, CpuRanksShareTheCores) {
  Cluster cpu = cluster_preset("cpu");
  cpu.devices_per_node = 2;
  PlanModel m;
  PlanRun r = run_of(2, 1, 1, 16, 8);
  r.precision = PlannedPrecision::FP32, r.attention = AttentionBackend::Tessel;
  r.parallel.sequence_parallel = false;
  PlanRun four = r;
  four.parallel.world = 4;
  four.global_batch = 32;  // the same work per rank
  const Estimate two_ranks = estimate(m, r, cpu), four_ranks = estimate(m, four, cpu);
  EXPECT_NEAR(four_ranks.time.compute, two_ranks.time.compute, 1e-12);  // a rank alone is as fast
  EXPECT_NEAR(four_ranks.time.makespan / two_ranks.time.makespan, 2.0, 1e-3);
}

TEST(PlanTime, ThroughputFiguresFollowTheirDefinitions) {
  const Cluster a100 = cluster_preset("a100-80gb");
  const PlanModel m = model_preset("gpt3-175b");
  PlanRun r = run_of(64, 8, 8, 64, 1);
  r.recompute = planned_recompute(Recompute::Selective);
  const Estimate e = estimate(m, r, a100);
  EXPECT_NEAR(e.tokens_per_s_per_gpu, 64.0 * 2048 / e.time.step / 64, 1e-9);
  EXPECT_NEAR(e.mfu, model_flops_per_iteration(m, 64) / (e.time.step * 64 * a100.peak_flops), 1e-12);
  EXPECT_NEAR(e.tflops_per_gpu * 1e12 / a100.peak_flops, e.mfu, 1e-12);
  EXPECT_NEAR(e.time.step, e.time.makespan + e.time.dp_comm + e.time.embedding_sync + e.time.optimizer, 1e-12);
}

// A split backward's W is the weight-gradient GEMMs, as many FLOPs as the forward's GEMMs, and
// its I the rest; on tessel's CPU ranks full recompute runs the weight gradients inside I.
TEST(PlanTime, WeightGradientsAreTheWAction) {
  const PlanModel m;  // tessel's default model
  PlanRun r = run_of(2, 1, 2, 8, 1);
  r.precision = PlannedPrecision::FP32;
  r.attention = AttentionBackend::Tessel;
  r.schedule = "zb-h1";
  const Cluster cpu = cluster_preset("cpu");
  const RunShape x(m, r, cpu);
  const ChunkCost plain = chunk_cost(x, x.stage_chunks(0).front());
  EXPECT_GT(plain.weight_gradients, 0);
  EXPECT_LT(plain.weight_gradients, plain.backward.total() / 2);  // I also holds attention, norms, activations
  EXPECT_LE(plain.weight_gradients, plain.forward.gemm);
  r.recompute = planned_recompute(Recompute::Full);
  const RunShape full(m, r, cpu);
  EXPECT_EQ(chunk_cost(full, full.stage_chunks(0).front()).weight_gradients, 0);
}

}  // namespace
}  // namespace tessel
