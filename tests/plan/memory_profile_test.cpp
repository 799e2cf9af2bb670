// tessel's own memory as the planner counts it, checked black-box against what `tessel train
// --profile-report` reports for rank 0 (the parameters, gradients and Adam moments; one microbatch's
// saved activations of its first chunk; that chunk's scratch), for several architectures and
// layouts: the run prints the numbers, this test parses them, so a change of the model's
// internals that the planner does not follow fails here.
#include <gtest/gtest.h>

#include <regex>

#include "support/run_command.h"
#include "tessel/plan/memory.h"
#include "tessel/plan/shape.h"
#include "tessel/train/planned_run.h"

namespace tessel {
namespace {

using testing::run_command;

constexpr double kMiB = 1024.0 * 1024.0;

struct Profile {
  double state_mib = 0, saved_mib = 0, scratch_mib = 0;
};

Profile run_profile(int ranks, const std::string& args) {
  const std::string launcher = ranks > 1 ? "timeout 120 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -n " +
                                               std::to_string(ranks) + " "
                                         : "timeout 120 ";
  const testing::CommandResult r = run_command(launcher + TESSEL_BINARY + " train --train-iters 2 --eval-iters 0 --profile-report " + args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  const std::regex line(R"(Adam m and v ([0-9.]+) \+ saved activations ([0-9.]+) \+ scratch ([0-9.]+))");
  EXPECT_TRUE(std::regex_search(r.output, m, line)) << r.output;
  if (m.size() < 4) return {};
  return {std::stod(m[1]), std::stod(m[2]), std::stod(m[3])};
}

// The same run as the planner sees it (tessel's CPU layout).
void expect_planned(const ModelConfig& cfg, const ParallelConfig& p, int64_t micro, int64_t global, const Profile& got) {
  PlanModel model;
  model.cfg = cfg;
  PlanRun run;
  run.parallel = p;
  run.micro_batch = micro, run.global_batch = global;
  run.precision = PlannedPrecision::FP32;
  run.attention = AttentionBackend::Tessel;
  const Cluster cpu = cluster_preset("cpu");
  ASSERT_TRUE(run_violations(model, run, cpu, planned_run_violations).empty()) << run_violations(model, run, cpu, planned_run_violations).front();
  const RunShape x(model, run, cpu);
  const StageParams params = stage_params(x, 0);
  const ChunkSpec first = x.stage_chunks(0).front();
  // --profile-report prints MiB with one decimal.
  EXPECT_NEAR((params.dense + params.experts) * 16.0 / kMiB, got.state_mib, 0.051);
  EXPECT_NEAR(tessel_chunk_activations(x, first).saved / kMiB, got.saved_mib, 0.051);
  // The first chunk's scratch: its own, and its MoE layers' (the terms before the next chunk's).
  double scratch = 0;
  const std::vector<Term> buffers = tessel_rank_buffers(x, 0);
  for (size_t i = 0; i < buffers.size() && (i == 0 || buffers[i].name.rfind("chunk ", 0) != 0); ++i)
    if (buffers[i].name.rfind("context-parallel", 0) != 0) scratch += buffers[i].value;
  EXPECT_NEAR(scratch / kMiB, got.scratch_mib, 0.051);
}

ModelConfig llama(int layers, int hidden, int heads, int groups) {
  ModelConfig c;
  c.arch = Arch::Llama;
  c.num_layers = layers, c.hidden_size = hidden, c.num_attention_heads = heads, c.num_query_groups = groups;
  c.seq_length = 64;
  return c;
}

TEST(PlanMemoryCli, Gpt2OneProcess) {
  const Profile got = run_profile(1, "--micro-batch-size 4 --global-batch-size 8");
  ParallelConfig p;
  expect_planned(ModelConfig{}, p, 4, 8, got);
}

TEST(PlanMemoryCli, LlamaTensorParallelWithSequenceParallel) {
  const std::string args = "--arch llama --num-layers 2 --hidden-size 128 --num-attention-heads 4 --group-query-attention --num-query-groups 2 "
                           "--seq-length 64 --qk-layernorm --add-qkv-bias --tp 2 --sequence-parallel "
                           "--micro-batch-size 2 --global-batch-size 4";
  const Profile got = run_profile(2, args);
  ModelConfig c = llama(2, 128, 4, 2);
  c.qk_layernorm = c.add_qkv_bias = true;
  ParallelConfig p;
  p.world = 2, p.tp = 2, p.sequence_parallel = true;
  expect_planned(c, p, 2, 4, got);
}

TEST(PlanMemoryCli, MoeExpertParallelPipelineAndContextParallel) {
  const std::string moe = "--arch llama --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 "
                          "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 96 "
                          "--moe-shared-expert-intermediate-size 32 --moe-aux-loss-coeff 0.01 "
                          // padded to the capacity: the routed rows, and so the buffers, do not
                          // depend on how the router happens to balance two iterations
                          "--moe-expert-capacity-factor 1 --moe-pad-expert-input-to-capacity ";
  ModelConfig c = llama(4, 64, 4, 0);
  c.moe.num_experts = 4, c.moe.topk = 2, c.moe.ffn_hidden_size = 96, c.moe.shared_expert_size = 32;
  c.moe.aux_loss_coeff = 0.01f;
  c.moe.capacity_factor = 1, c.moe.pad_to_capacity = true;
  {
    const Profile got = run_profile(2, moe + "--ep 2 --micro-batch-size 2 --global-batch-size 4");
    ParallelConfig p;
    p.world = 2, p.ep = 2;
    expect_planned(c, p, 2, 4, got);
  }
  {
    const Profile got = run_profile(2, moe + "--pp 2 --vpp 2 --micro-batch-size 1 --global-batch-size 4");
    ParallelConfig p;
    p.world = 2, p.pp = 2, p.vpp = 2;
    expect_planned(c, p, 1, 4, got);
  }
  {
    const Profile got = run_profile(2, "--arch llama --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                                       "--seq-length 64 --cp 2 --micro-batch-size 2 --global-batch-size 2");
    ParallelConfig p;
    p.world = 2, p.cp = 2;
    expect_planned(llama(2, 64, 4, 0), p, 2, 2, got);
  }
}

// The Qwen3-Next hybrid (Gated DeltaNet and gated attention layers, a gated shared expert) under
// TP 2 with SP, and PP 2: its GDN layers' tensors as the planner reads them from the model.
TEST(PlanMemoryCli, QwenNextHybrid) {
  const std::string hybrid = "--arch llama --num-layers 4 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2 "
                             "--kv-channels 32 --seq-length 64 --experimental-attention-variant gdn --linear-attention-freq 2 "
                             "--linear-num-key-heads 2 --linear-num-value-heads 4 --linear-key-head-dim 16 "
                             "--linear-value-head-dim 16 --attention-output-gate --qk-layernorm --apply-layernorm-1p "
                             "--rotary-percent 0.5 --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 96 "
                             "--moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate "
                             "--moe-expert-capacity-factor 1 --moe-pad-expert-input-to-capacity ";
  ModelConfig c = llama(4, 64, 4, 2);
  c.kv_channels = 32, c.attention_output_gate = c.qk_layernorm = c.layernorm_1p = true, c.rotary_percent = 0.5f;
  c.linear.layer_pattern = parse_linear_attention_freq("2", 4);
  c.linear.num_key_heads = 2, c.linear.num_value_heads = 4, c.linear.key_head_dim = c.linear.value_head_dim = 16;
  c.moe.num_experts = 4, c.moe.topk = 2, c.moe.ffn_hidden_size = 96, c.moe.shared_expert_size = 32;
  c.moe.shared_expert_gate = true, c.moe.capacity_factor = 1, c.moe.pad_to_capacity = true;
  {
    const Profile got = run_profile(2, hybrid + "--tp 2 --sequence-parallel --micro-batch-size 2 --global-batch-size 4");
    ParallelConfig p;
    p.world = 2, p.tp = 2, p.sequence_parallel = true;
    expect_planned(c, p, 2, 4, got);
  }
  {
    const Profile got = run_profile(2, hybrid + "--pp 2 --micro-batch-size 1 --global-batch-size 4");
    ParallelConfig p;
    p.world = 2, p.pp = 2;
    expect_planned(c, p, 1, 4, got);
  }
}

// Recompute: the executor's peak activations of one microbatch in flight (its kept tensors, the
// chunk's recompute arena and, under full recompute, the MoE layers' own buffers) as the planner
// counts them, for none, selective (core attention) and full (uniform, one layer) recompute.
double executor_peak_activations_mib(const std::string& launcher, const std::string& args) {
  const testing::CommandResult r = run_command(launcher + TESSEL_BINARY + " train --train-iters 2 --eval-iters 0 " + args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  const std::regex line(R"(rank 0[^\n]*peak activations ([0-9.]+) MiB)");
  EXPECT_TRUE(std::regex_search(r.output, m, line)) << r.output;
  return m.size() < 2 ? 0 : std::stod(m[1]);
}

TEST(PlanMemoryCli, RecomputeKeepsWhatThePlannerCounts) {
  const std::string flags[] = {"", "--recompute-granularity selective",
                               "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"};
  const Recompute planned[] = {Recompute::None, Recompute::Selective, Recompute::Full};
  const std::string moe = "--arch llama --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 "
                          "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 96 "
                          "--moe-expert-capacity-factor 1 --moe-pad-expert-input-to-capacity --ep 2 ";
  ModelConfig moe_cfg = llama(2, 64, 4, 0);
  moe_cfg.moe.num_experts = 4, moe_cfg.moe.topk = 2, moe_cfg.moe.ffn_hidden_size = 96;
  moe_cfg.moe.capacity_factor = 1, moe_cfg.moe.pad_to_capacity = true;
  for (int i = 0; i < 3; ++i) {
    for (const bool is_moe : {false, true}) {
      const double got = executor_peak_activations_mib(
          is_moe ? "timeout 120 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -n 2 " : "timeout 120 ",
          (is_moe ? moe : std::string()) + "--micro-batch-size 2 --global-batch-size " + (is_moe ? "4 " : "2 ") + flags[i]);
      PlanModel model;
      if (is_moe) model.cfg = moe_cfg;
      PlanRun run;
      run.parallel.world = is_moe ? 2 : 1, run.parallel.ep = is_moe ? 2 : 1;
      run.micro_batch = 2, run.global_batch = is_moe ? 4 : 2, run.recompute = planned_recompute(planned[i]);
      run.precision = PlannedPrecision::FP32;
      run.attention = AttentionBackend::Tessel;
      const RunShape x(model, run, cluster_preset("cpu"));
      const ChunkMemory c = tessel_chunk_activations(x, x.stage_chunks(0).front());
      EXPECT_NEAR((c.saved + c.shared) / kMiB, got, 0.0011) << (is_moe ? "MoE " : "gpt2 ") << flags[i];
    }
  }
}

}  // namespace
}  // namespace tessel
