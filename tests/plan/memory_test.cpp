// The planner's memory model: Megatron's activations per layer are Korthikanti et al.'s Table 2,
// the microbatches in flight come from the generated schedules (and agree with the simulator),
// the optimizer state follows Megatron's bytes per parameter, uneven stages hold their layers.
#include <gtest/gtest.h>

#include <cmath>

#include "tessel/pipeline/simulate.h"
#include "tessel/plan/estimate.h"
#include "tessel/plan/memory.h"
#include "tessel/plan/search.h"
#include "tessel/plan/shape.h"
#include "tessel/train/planned_run.h"

namespace tessel {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

PlanRun gpu_run(int tp, int pp, int vpp, int gpus, int64_t batch, int64_t micro, Recompute rc, bool sp) {
  PlanRun r;
  r.parallel.world = gpus, r.parallel.tp = tp, r.parallel.pp = pp, r.parallel.vpp = vpp;
  r.parallel.sequence_parallel = sp;
  r.global_batch = batch, r.micro_batch = micro, r.recompute = planned_recompute(rc);
  r.precision = PlannedPrecision::FP16;
  r.attention = AttentionBackend::Unfused;
  return r;
}

// On a single stage (p = 1) one microbatch is in flight: activations = Table 2 × L + §4.3.
TEST(PlanMemory, ActivationsAreKorthikantisTable2) {
  const Cluster a100 = cluster_preset("a100-80gb");
  const PlanModel m = model_preset("korthikanti-22b");
  const double s = 2048, b = 4, h = 6144, a = 64, L = 48, t = 8, V = 51200, sbh = s * b * h;
  struct Case {
    bool sp;
    Recompute rc;
    double per_layer;
  } cases[] = {{false, Recompute::None, sbh * (10 + 24 / t + 5 * a * s / (h * t))},
               {true, Recompute::None, sbh / t * (34 + 5 * a * s / h)},
               {false, Recompute::Selective, sbh * (10 + 24 / t)},
               {true, Recompute::Selective, sbh * 34 / t}};
  for (const Case& c : cases) {
    const PlanRun r = gpu_run(8, 1, 1, 8, 4, 4, c.rc, c.sp);
    ASSERT_TRUE(run_violations(m, r, a100, planned_run_violations).empty());
    const double rows = c.sp ? 1 / t : 1;
    const double extras = sbh * rows + 4 * sbh * rows + 4 * s * b * V / t;  // embedding mask; norm, head inputs, logits
    EXPECT_NEAR(estimate_memory(m, r, a100)[0].activations / (c.per_layer * L + extras), 1.0, 1e-9);
  }
}

// In flight: 1F1B keeps p − r microbatches on stage r; the interleaved schedule 1 + (p − 1)/(p·v)
// of the layers' worth on stage 0 (Korthikanti §4.2.3); both as the simulator counts them.
TEST(PlanMemory, InFlightMicrobatchesComeFromTheSchedule) {
  const Cluster a100 = cluster_preset("a100-80gb");
  const PlanModel m = model_preset("gpt3-175b");
  const PlanRun plain = gpu_run(8, 8, 1, 64, 64, 1, Recompute::Selective, true);
  const std::vector<StageMemory> stages = estimate_memory(m, plain, a100);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(stages[r].peak_in_flight, 8 - r);
  const PlanRun interleaved = gpu_run(8, 8, 3, 64, 64, 1, Recompute::Selective, true);
  const std::vector<StageMemory> v3 = estimate_memory(m, interleaved, a100);
  const Simulation sim = simulate(lower(generate_schedule(interleaved.schedule_config()), interleaved.schedule_config()),
                                  interleaved.schedule_config());
  for (int r = 0; r < 8; ++r) EXPECT_EQ(v3[r].peak_in_flight, sim.ranks[r].peak_in_flight);
  EXPECT_EQ(v3[0].peak_in_flight, 31);  // 96 layers × (1 + 7/24) = 124 layers = 31 chunks of 4
}

// Megatron's bytes per parameter: bf16 18 (6 + 12/d distributed), fp16 20 (4 + 16/d).
TEST(PlanMemory, StateBytesFollowMegatronsTable) {
  const Cluster h100 = cluster_preset("h100");
  const PlanModel m = model_preset("llama3-8b");
  PlanRun r;
  r.parallel.world = 8, r.parallel.tp = 1;
  r.global_batch = 64, r.micro_batch = 1;
  r.precision = PlannedPrecision::BF16;
  const StageMemory plain = estimate_memory(m, r, h100)[0];
  EXPECT_NEAR((plain.weights + plain.grads + plain.optimizer) / plain.params, 18.0, 1e-9);
  r.parallel.distributed_optimizer = true;
  const StageMemory dist = estimate_memory(m, r, h100)[0];
  EXPECT_NEAR((dist.weights + dist.grads + dist.optimizer) / dist.params, 6.0 + 12.0 / 8, 1e-9);
  r.precision = PlannedPrecision::FP16;
  const StageMemory fp16 = estimate_memory(m, r, h100)[0];
  EXPECT_NEAR((fp16.weights + fp16.grads + fp16.optimizer) / fp16.params, 4.0 + 16.0 / 8, 1e-9);
}

// Post-validation keeps fp32 values, gradients, m and v of what the optimizer steps
// (optim/post_validation): 16 B per parameter, or per owned parameter with the distributed optimizer.
TEST(PlanMemory, PostValidationKeepsACopyOfTheStep) {
  const Cluster cpu = cluster_preset("cpu");
  const PlanModel m;  // tessel's default model
  PlanRun r;
  r.parallel.world = 4, r.parallel.tp = 1;
  r.global_batch = 8, r.micro_batch = 1;
  r.precision = PlannedPrecision::FP32;
  r.attention = AttentionBackend::Tessel;
  for (bool distributed : {false, true}) {
    r.parallel.distributed_optimizer = distributed;
    r.post_validation = false;
    const StageMemory plain = estimate_memory(m, r, cpu)[0];
    r.post_validation = true;
    const StageMemory eager = estimate_memory(m, r, cpu)[0];
    const double owned = distributed ? plain.params / 4.0 : plain.params;
    EXPECT_NEAR(eager.optimizer - plain.optimizer, 16 * owned, 1e-6);
    EXPECT_NEAR(eager.total() - plain.total(), 16 * owned, 1e-6);
  }
}

// A V schedule holds two chunks per rank whether or not --vpp 2 is given, as tessel train places them.
TEST(PlanMemory, VScheduleHoldsTwoChunksAtVppOne) {
  const Cluster cpu = cluster_preset("cpu");
  const PlanModel m;  // tessel's default model
  PlanRun r;
  r.parallel.world = 2, r.parallel.tp = 1, r.parallel.pp = 2;
  r.global_batch = 8, r.micro_batch = 1;
  r.precision = PlannedPrecision::FP32;
  r.attention = AttentionBackend::Tessel;
  r.schedule = "zb-v";
  const Estimate one = estimate(m, r, cpu);
  r.parallel.vpp = 2;
  const Estimate two = estimate(m, r, cpu);
  ASSERT_EQ(one.stages.size(), 2u);
  EXPECT_EQ(one.stages[0].layers, two.stages[0].layers);
  EXPECT_DOUBLE_EQ(one.stages[0].total(), two.stages[0].total());
  EXPECT_DOUBLE_EQ(one.time.step, two.time.step);
  EXPECT_TRUE(std::isfinite(one.time.step));
}

// The seed's 60 layers over PP 8: 7.5 per stage, so lighter first and last stages (6) and 8 in
// the six middle ones; the stages' parameters follow.
TEST(PlanMemory, SixtyLayersOverEightStages) {
  EXPECT_EQ(lighter_ends_layout(60, 8), "Et*6|t*8|t*8|t*8|t*8|t*8|t*8|t*6L");
  EXPECT_EQ(lighter_ends_layout(60, 16), "Et*2|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*4|t*2L");
  EXPECT_EQ(lighter_ends_layout(64, 8), "");
  const Cluster h100 = cluster_preset("h100");
  const PlanModel m = model_preset("qwen3-moe-60l");
  PlanRun r;
  r.parallel.world = 64, r.parallel.tp = 4, r.parallel.pp = 8, r.parallel.ep = 8, r.parallel.etp = 1;
  r.parallel.sequence_parallel = true;
  r.pipeline_layout = lighter_ends_layout(60, 8);
  r.global_batch = 256, r.micro_batch = 1, r.recompute = planned_recompute(Recompute::Full);
  ASSERT_TRUE(run_violations(m, r, h100, planned_run_violations).empty()) << run_violations(m, r, h100, planned_run_violations).front();
  const std::vector<StageMemory> s = estimate_memory(m, r, h100);
  ASSERT_EQ(s.size(), 8u);
  // Each layer's 512 experts over EP 8: 64 per rank; 8 layers against 6 on the ends.
  const double per_layer_experts = 64.0 * 3 * 2048 * 768;
  EXPECT_NEAR(static_cast<double>(s[1].expert_params), 8 * per_layer_experts, 1);
  EXPECT_NEAR(static_cast<double>(s[0].expert_params), 6 * per_layer_experts, 1);
  EXPECT_GT(s[1].total(), s[0].total() - 2 * kGiB);  // the embedding does not outweigh two layers
}

// The seed's real run: Qwen3.5-397B-A17B at TP 4 × PP 8 × EP 8 (DP 2) on 64 H100s. Layer kinds
// follow the global index, so the lighter end stages (6 layers) and the middle ones (8) hold
// their own GDN and attention layers; MTP and its embedding copy sit on the last stage; a GDN
// layer's saved tensors per token are the ones FLA keeps, worked by hand (e = 2, t = 4).
TEST(PlanMemory, QwenNextStagesCountTheirOwnLayers) {
  const Cluster h100 = cluster_preset("h100");
  const PlanModel m = model_preset("qwen3.5-397b-a17b");
  PlanRun r;
  r.parallel.world = 64, r.parallel.tp = 4, r.parallel.pp = 8, r.parallel.ep = 8, r.parallel.etp = 1;
  r.parallel.sequence_parallel = true, r.parallel.distributed_optimizer = true;
  r.pipeline_layout = lighter_ends_layout(60, 8, -1, m.mtp_layers());  // "Et*6|t*8|…|t*6mL"
  r.global_batch = 512, r.micro_batch = 1, r.recompute = planned_recompute(Recompute::Selective);
  ASSERT_TRUE(run_violations(m, r, h100, planned_run_violations).empty()) << run_violations(m, r, h100, planned_run_violations).front();
  const std::vector<StageMemory> s = estimate_memory(m, r, h100);
  ASSERT_EQ(s.size(), 8u);
  const double experts_per_layer = 64.0 * (2048 * 4096 + 4096 * 1024);
  for (int stage = 0; stage < 8; ++stage)
    EXPECT_NEAR(static_cast<double>(s[stage].expert_params), (stage == 0 || stage == 7 ? 6 : 8) * experts_per_layer +
                                                                  (stage == 7 ? experts_per_layer : 0), 1) << stage;
  // Dense parameters on one rank: layers 6..13 (stage 1) against layers 14..21 (stage 2) hold
  // six GDN and two attention layers each; stage 0's layers 0..5 five and one.
  auto dense = [&](int first, int count) {
    double n = 0;
    for (int l = first; l < first + count; ++l) n += layer_params(m, l).tp / 4.0 + layer_params(m, l).replicated;
    return n;
  };
  const double V = static_cast<double>(m.cfg.padded_vocab(4)) * 4096 / 4;
  EXPECT_NEAR(static_cast<double>(s[0].params - s[0].expert_params), dense(0, 6) + V, 1);
  EXPECT_NEAR(static_cast<double>(s[1].params - s[1].expert_params), dense(6, 8), 1);
  const ParamSplit mtp = mtp_params(m);
  EXPECT_NEAR(static_cast<double>(s[7].params - s[7].expert_params),
              dense(54, 6) + V /* head */ + 4096 /* final norm */ + mtp.tp / 4.0 + mtp.replicated + V /* MTP's embedding */, 1);
  const RunShape x(m, r, h100);
  double gdn = 0;
  for (const MemoryItem& i : gdn_mixer_items(x)) gdn += i.per_token;
  EXPECT_DOUBLE_EQ(gdn, 6144 + 4160 + 6144 + 160 + 2048 + 4160 + 4096);
  // The last chunk keeps the MTP layer's tensors (one attention MoE layer, as layer 59 keeps) and
  // a second head's logits; the first keeps neither.
  const ChunkMemory last = chunk_activations(x, x.stage_chunks(7).back()), first = chunk_activations(x, x.stage_chunks(0).front());
  double mtp_layer = 0, layer_59 = 0;
  for (const Term& t : last.terms) {
    if (t.name.rfind("MTP layer: ", 0) == 0) mtp_layer += t.value;
    if (t.name.rfind("MoE layers: ", 0) == 0) layer_59 += t.value / 2;  // layers 55 and 59
  }
  EXPECT_GT(mtp_layer, 0);
  EXPECT_NEAR(mtp_layer, layer_59, 1);
  EXPECT_EQ(first.transient, 0);
  EXPECT_GT(last.transient, 0);
}

// What tessel trains, the CPU planner takes: --kv-channels (GDN models' attention) and MTP are
// planned on CPU ranks as on GPU clusters.
TEST(PlanMemory, CpuRanksTakeWhatTesselTrains) {
  PlanModel m;
  m.cfg.arch = Arch::Llama;
  m.cfg.num_layers = 4, m.cfg.hidden_size = 64, m.cfg.num_attention_heads = 4, m.cfg.num_query_groups = 2;
  m.cfg.kv_channels = 32, m.cfg.attention_output_gate = m.cfg.qk_layernorm = true;
  m.cfg.linear.layer_pattern = parse_linear_attention_freq("4", 4);
  m.cfg.linear.num_key_heads = 2, m.cfg.linear.num_value_heads = 4, m.cfg.linear.key_head_dim = m.cfg.linear.value_head_dim = 16;
  PlanRun r;
  r.parallel.world = 2, r.parallel.tp = 2, r.parallel.sequence_parallel = true;
  r.global_batch = 2, r.micro_batch = 2;
  r.precision = PlannedPrecision::FP32, r.attention = AttentionBackend::Tessel;
  const Cluster cpu = cluster_preset("cpu");
  const std::vector<std::string> ok = run_violations(m, r, cpu, planned_run_violations);
  EXPECT_TRUE(ok.empty()) << ok.front();
  m.cfg.mtp_num_layers = 1;
  const std::vector<std::string> mtp = run_violations(m, r, cpu, planned_run_violations);
  EXPECT_TRUE(mtp.empty()) << mtp.front();
  PlanRun gpu = r;
  gpu.precision = PlannedPrecision::BF16, gpu.attention = AttentionBackend::Flash;
  EXPECT_TRUE(run_violations(m, gpu, cluster_preset("h100"), planned_run_violations).empty());
}

// The engine is the run's, not the device's: tessel planned on an H100 cluster holds what its
// declare-only build declares, as on CPU ranks (the same parameters, activations and buffers;
// only the device's runtime allowance differs); Megatron-LM is refused on CPU ranks.
TEST(PlanMemory, TesselOnAGpuClusterHoldsWhatItDeclares) {
  const PlanModel m = model_preset("qwen3-next-80b-a3b");
  PlanRun r;
  r.engine = PlannedEngine::Tessel;
  r.parallel.world = 8, r.parallel.tp = 2, r.parallel.pp = 2, r.parallel.ep = 2, r.parallel.sequence_parallel = true;
  r.global_batch = 8, r.micro_batch = 1;
  r.precision = PlannedPrecision::FP32, r.attention = AttentionBackend::Tessel;
  const Cluster h100 = cluster_preset("h100"), cpu = cluster_preset("cpu");
  const std::vector<std::string> ok = run_violations(m, r, h100, planned_run_violations);
  ASSERT_TRUE(ok.empty()) << ok.front();
  const std::vector<StageMemory> gpu = estimate_memory(m, r, h100), ranks = estimate_memory(m, r, cpu);
  ASSERT_EQ(gpu.size(), ranks.size());
  for (size_t s = 0; s < gpu.size(); ++s) {
    EXPECT_EQ(gpu[s].params, ranks[s].params);
    EXPECT_EQ(gpu[s].activations, ranks[s].activations);
    EXPECT_EQ(gpu[s].buffers, ranks[s].buffers);
    EXPECT_EQ(gpu[s].optimizer, ranks[s].optimizer);
  }
  PlanRun megatron = r;
  megatron.engine = PlannedEngine::Megatron;
  const std::vector<std::string> refused = run_violations(m, megatron, cpu, planned_run_violations);
  ASSERT_FALSE(refused.empty());
  EXPECT_NE(refused.front().find("--engine megatron needs a GPU cluster"), std::string::npos) << refused.front();
}

}  // namespace
}  // namespace tessel
