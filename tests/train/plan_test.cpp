// train/plan.h: a run's configuration resolved once (DP, stages, schedule, microbatches, the data
// split), and every rule it breaks — model, options, optimizer, layout, batch, stages, schedule,
// experts, FP8 — listed in one ConfigError.
#include <gtest/gtest.h>

#include <string>

#include "tessel/core/error.h"
#include "tessel/train/plan.h"

namespace tessel {
namespace {

TrainOptions options_for(int world) {
  TrainOptions o;
  o.data.path = {"corpus.txt"};  // not opened by the plan
  o.parallel.layout.world = world;
  return o;
}

std::string violations_of(const ModelConfig& model, const TrainOptions& o) {
  try {
    plan_training(model, o);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainPlan, ResolvesLayoutStagesScheduleAndBatch) {
  ModelConfig model;
  model.num_layers = 8;
  model.seq_length = 16;
  TrainOptions o = options_for(8);
  o.parallel.layout.tp = 2;
  o.parallel.layout.pp = 2;
  o.parallel.layout.vpp = 2;
  o.batch = {.micro_batch_size = 2, .global_batch_size = 16};
  const TrainPlan plan = plan_training(model, o);
  EXPECT_EQ(plan.dp, 2);
  EXPECT_EQ(plan.microbatches, 4);  // 16 / (2 × DP 2)
  EXPECT_EQ(plan.schedule.kind, ScheduleKind::Interleaved);
  EXPECT_EQ(plan.schedule.microbatches, 4);
  EXPECT_EQ(plan.schedule.virtual_stages, 2);
  ASSERT_EQ(plan.chunks.size(), 4u);  // PP × VPP model chunks of 2 layers
  const std::vector<ChunkSpec> last = plan.stage_chunks(1);
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0].first_layer, 2);
  EXPECT_EQ(last[1].first_layer, 6);
  EXPECT_TRUE(last[1].has_head);
  EXPECT_FALSE(last[0].has_embedding);
  // Megatron's sampler: microbatch m of DP rank r is global batch positions m·(B·DP) + r·B + [0, B).
  const BatchShape rank1 = plan.batch_shape(1);
  EXPECT_EQ(rank1.position(0, 0), 2);
  EXPECT_EQ(rank1.position(1, 1), 7);
  EXPECT_EQ(rank1.position(3, 0), 14);
  EXPECT_EQ(rank1.global_batch(), 16);
  EXPECT_EQ(plan.batch_tokens(16), 16.0 * 16);
  EXPECT_EQ(plan.cp_comm, CpCommType::P2P);

  o.parallel.pipeline.schedule = "gpipe";
  o.parallel.layout.vpp = 1;
  EXPECT_EQ(plan_training(model, o).schedule.kind, ScheduleKind::GPipe);
}

// As Megatron's argument validation: --sequence-parallel with TP 1 is turned off and said.
TEST(TrainPlan, SequenceParallelWithoutTensorParallelIsTurnedOff) {
  ModelConfig model;
  model.seq_length = 16;
  TrainOptions o = options_for(2);
  o.parallel.layout.sequence_parallel = true;
  o.batch = {.micro_batch_size = 1, .global_batch_size = 2};
  const TrainPlan plan = plan_training(model, o);
  EXPECT_FALSE(plan.layout().sequence_parallel);
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_NE(plan.notes[0].find("--sequence-parallel: disabled"), std::string::npos) << plan.notes[0];
  o.parallel.layout.tp = 2;
  EXPECT_TRUE(plan_training(model, o).notes.empty());
}

TEST(TrainPlan, EveryBrokenRuleInOneMessage) {
  ModelConfig model;
  model.hidden_size = 30;  // not divisible by 4 heads
  model.moe.num_experts = 4;  // needs llama
  TrainOptions o = options_for(6);
  o.data.path.clear();
  o.optim.adamw.beta1 = 1.5f;
  o.optim.lr.min_lr = 1.0f;  // above --lr
  o.parallel.layout.tp = 4;  // 6 ranks do not split into TP 4
  o.parallel.pipeline.layout = "Et|tX";
  o.parallel.cp_comm_type = "ring";
  o.parallel.moe_token_dispatcher_type = "deepep";
  const std::string all = violations_of(model, o);
  EXPECT_EQ(all.rfind("invalid configuration: ", 0), 0u) << all;
  EXPECT_EQ(all.find('\n'), std::string::npos) << all;
  for (const char* rule : {"--hidden-size 30 is not divisible by --num-attention-heads 4",
                           "--data-path (or --train-data-path, or --mock-data) is required", "--adam-beta1 1.5 is not in [0, 1)",
                           "--min-lr 1 is not within [0, --lr 0.001]",
                           "world size 6 is not divisible by TP × CP × PP",
                           "--pipeline-model-parallel-layout", "ring",
                           "--num-experts needs --arch llama",
                           "--moe-token-dispatcher-type deepep: not one of allgather, alltoall, flex"})
    EXPECT_NE(all.find(rule), std::string::npos) << rule << " missing from: " << all;
}

// --moe-token-dispatcher-type: all-to-all unless allgather is asked; flex runs all-to-all, said once.
TEST(TrainPlan, MoeTokenDispatcherType) {
  ModelConfig model;
  model.seq_length = 16;
  TrainOptions o = options_for(1);
  o.batch = {.micro_batch_size = 1, .global_batch_size = 1};
  EXPECT_EQ(plan_training(model, o).moe_dispatcher, MoeDispatcherType::AllToAll);
  o.parallel.moe_token_dispatcher_type = "allgather";
  EXPECT_EQ(plan_training(model, o).moe_dispatcher, MoeDispatcherType::AllGather);
  EXPECT_TRUE(plan_training(model, o).notes.empty());
  o.parallel.moe_token_dispatcher_type = "flex";
  const TrainPlan flex = plan_training(model, o);
  EXPECT_EQ(flex.moe_dispatcher, MoeDispatcherType::AllToAll);
  ASSERT_EQ(flex.notes.size(), 1u);
  EXPECT_NE(flex.notes[0].find("--moe-token-dispatcher-type flex: its DeepEP and HybridEP backends are not present"),
            std::string::npos)
      << flex.notes[0];
}

// The schedule's rules need the microbatch count, which needs a valid layout and batch. train has
// no --microbatches (`tessel schedule` has): its messages name the flags that give the count.
TEST(TrainPlan, ScheduleRulesSeeTheMicrobatches) {
  ModelConfig model;
  TrainOptions o = options_for(2);
  o.parallel.layout.pp = 2;
  o.parallel.layout.vpp = 2;
  o.batch = {.micro_batch_size = 16, .global_batch_size = 16};
  EXPECT_NE(violations_of(model, o).find("--global-batch-size 16 / (--micro-batch-size 16 × DP 1) = 1 microbatch "
                                         "is below --pp 2"),
            std::string::npos) << violations_of(model, o);
  EXPECT_EQ(violations_of(model, o).find("--microbatches"), std::string::npos) << violations_of(model, o);
  // A step schedule's batches, and the evaluation's batch beside them, are named as what they are.
  TrainOptions stepped = o;
  stepped.batch = {.micro_batch_size = 16, .step_schedule = "0:16"};
  stepped.optim.lr.train_iters = 2;
  const std::string v = violations_of(model, stepped);
  for (const char* said : {"--step-batch-size-schedule: global batch 16 / (--micro-batch-size 16 × DP 1) = 1 "
                           "microbatch is below --pp 2",
                           "--eval-iters: the evaluation's batch 16 / (--micro-batch-size 16 × DP 1) = 1 microbatch "
                           "is below --pp 2"})
    EXPECT_NE(v.find(said), std::string::npos) << said << "\n" << v;
  EXPECT_EQ(v.find("--microbatches"), std::string::npos) << v;
  o.batch.global_batch_size = 32;
  EXPECT_EQ(violations_of(model, o), "");
  o.parallel.pipeline.schedule = "zigzag";
  EXPECT_NE(violations_of(model, o).find("zigzag"), std::string::npos) << violations_of(model, o);
}

// As Megatron's argument validation: the layout's entries over PP are the virtual stages, and at
// most one of the three ways of asking for them is given.
TEST(TrainPlan, VirtualStagesComeFromTheLayout) {
  ModelConfig model;
  model.num_layers = 6;
  model.seq_length = 16;
  TrainOptions o = options_for(2);
  o.parallel.layout.pp = 2;
  o.batch = {.micro_batch_size = 1, .global_batch_size = 4};
  o.parallel.pipeline.layout = "Et|(tt|)*2tL";
  const TrainPlan plan = plan_training(model, o);
  EXPECT_EQ(plan.schedule.kind, ScheduleKind::Interleaved);
  EXPECT_EQ(plan.schedule.virtual_stages, 2);
  ASSERT_EQ(plan.chunks.size(), 4u);
  EXPECT_EQ(plan.stage_chunks(1)[0].num_layers, 2);  // model chunk 1
  EXPECT_EQ(plan.stage_chunks(0)[1].first_layer, 3);  // model chunk 2

  o.parallel.pipeline.layout = "Et|t|ttttL";
  EXPECT_NE(violations_of(model, o).find("--pipeline-model-parallel-layout has 3 stages, not divisible by "
                                         "--pipeline-model-parallel-size 2"),
            std::string::npos)
      << violations_of(model, o);
  o.parallel.pipeline.layout = "Et|(tt|)*2tL";
  o.parallel.layout.vpp = 2;
  EXPECT_NE(violations_of(model, o).find("no more than one of"), std::string::npos) << violations_of(model, o);

  // The MTP layers 'm' go with the loss, as many as --mtp-num-layers.
  o.parallel.layout.vpp = 1;
  o.parallel.pipeline.layout = "Ettt|tttmL";
  model.arch = Arch::Llama;
  model.mtp_num_layers = 1;
  EXPECT_EQ(violations_of(model, o), "");
  EXPECT_EQ(plan_training(model, o).schedule.virtual_stages, 1);
  model.mtp_num_layers = 2;
  EXPECT_NE(violations_of(model, o).find("holds 1 MTP layers 'm' but --mtp-num-layers is 2"), std::string::npos)
      << violations_of(model, o);
}

// The FP8 flags' rules (train/mixed_precision.h): Megatron-LM's own (transformer_config.py,
// arguments.py), tessel's (a history of no amax, FP8 with fp16), and the block recipes' blocks
// against the shards — each one line, all of them with the other rules in one ConfigError.
TrainOptions fp8_options(int world, const char* recipe) {
  TrainOptions o = options_for(world);
  o.optim.lr.train_iters = 2;
  o.fp8.format = "hybrid";
  o.fp8.recipe = recipe;
  return o;
}

bool says(const std::string& message, const std::string& rule) { return message.find(rule) != std::string::npos; }

TEST(Fp8Rules, BadSettingsAreListedTogether) {
  ModelConfig model;
  TrainOptions o = fp8_options(1, "delayed");
  o.precision = Precision::FP16;
  o.fp8.amax_history_len = 0;
  o.fp8.param_gather = true;
  o.fp8.first_last_layers_bf16 = true;
  o.fp8.num_layers_at_end_in_bf16 = model.num_layers + 1;
  const std::string v = violations_of(model, o);
  for (const char* rule : {"--fp8-format with --fp16", "--fp8-amax-history-len 0 must be at least 1",
                           "--fp8-param-gather needs --use-distributed-optimizer",
                           "--first-last-layers-bf16 with --fp8-recipe delayed",
                           "--num-layers-at-end-in-bf16 5 must be between 0 and the layers per pipeline stage (4)"})
    EXPECT_TRUE(says(v, rule)) << rule << "\n" << v;
  EXPECT_EQ(v.find("invalid configuration"), v.rfind("invalid configuration")) << "one message";
}

TEST(Fp8Rules, ParamGatherNeedsFp8) {
  TrainOptions o = fp8_options(1, "delayed");
  o.fp8.format.clear();
  o.fp8.param_gather = true;
  o.parallel.layout.distributed_optimizer = true;
  EXPECT_TRUE(says(violations_of(ModelConfig{}, o), "--fp8-param-gather needs --fp8-format")) << violations_of(ModelConfig{}, o);
}

// hidden 256 over 4 heads: each TP 2 shard holds 128 of the heads' width (whole blocks of 128 and
// of 32) and 512 of the MLP's 1024 neurons; a sequence of 128 in CP 2's four chunks holds 32 tokens
// each — whole MXFP8 blocks, a quarter of a blockwise block.
TEST(Fp8Rules, BlockRecipesRefuseShardsThatCutABlock) {
  ModelConfig model;
  TrainOptions tp = fp8_options(2, "blockwise");
  tp.parallel.layout.tp = 2;
  EXPECT_FALSE(says(violations_of(model, tp), "leave a part of a block")) << violations_of(model, tp);

  TrainOptions cp = fp8_options(2, "blockwise");
  cp.parallel.layout.cp = 2;
  const std::string v = violations_of(model, cp);
  EXPECT_TRUE(says(v, "--fp8-recipe blockwise quantises in blocks of 128")) << v;
  EXPECT_TRUE(says(v, "each sequence's tokens 128 over CP chunks (2·CP) 4")) << v;
  cp.fp8.recipe = "mxfp8";
  EXPECT_FALSE(says(violations_of(model, cp), "leave a part of a block")) << violations_of(model, cp);

  model.hidden_size = 160;  // 80 of the heads' width a TP 2 shard: a cut block of 128 and of 32
  model.ffn_hidden_size = 640;  // 320 neurons a shard: whole blocks of 32, not of 128
  for (const char* recipe : {"blockwise", "mxfp8"}) {
    tp.fp8.recipe = recipe;
    const std::string cut = violations_of(model, tp);
    EXPECT_TRUE(says(cut, "the query heads' width 160 over TP 2")) << cut;
    EXPECT_EQ(says(cut, "--ffn-hidden-size 640 over TP 2"), std::string(recipe) == "blockwise") << cut;
  }
  tp.fp8.recipe = "tensorwise";  // one scale per tensor: no blocks to cut
  EXPECT_FALSE(says(violations_of(model, tp), "leave a part of a block"));
}

}  // namespace
}  // namespace tessel
