// Megatron-LM's spelling of a model and its run: the architecture traits (--normalization,
// --swiglu, ...), grouped-query attention, the layers of a virtual pipeline stage and the MoE
// router and dispatcher flags, checked from what a user sees: the exported config.json and the
// messages of the runs refused.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "support/run_command.h"

namespace tessel {
namespace {

const std::string kSizes = "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 ";

// The config.json `tessel export` writes for these model flags.
nlohmann::json exported_config(testing::TestDir& dir, const std::string& flags) {
  const testing::CommandResult r = testing::run_tessel("export " + kSizes + flags + " --out " + dir.path("m"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream config(dir.path("m/config.json"));
  return config ? nlohmann::json::parse(config) : nlohmann::json::object();
}

// examples/llama's model flags (Megatron-LM) come to tessel's llama without --arch.
TEST(MegatronFlagsCli, LlamaExampleFlagsBuildALlama) {
  testing::TestDir dir;
  const nlohmann::json c = exported_config(
      dir, "--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear "
           "--group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --init-method-std 0.01");
  EXPECT_EQ(c.value("model_type", ""), "llama") << c;
  EXPECT_EQ(c.value("num_key_value_heads", 0), 2) << c;
  EXPECT_EQ(c.value("initializer_range", 0.0), 0.01) << c;
}

// examples/gpt3's flags (no architecture flag at all, or LayerNorm and learned positions
// spelled out) are Megatron's GPT: erf GELU unless --openai-gelu asks for the tanh one.
TEST(MegatronFlagsCli, Gpt3ExampleFlagsBuildAGpt2WithErfGelu) {
  testing::TestDir dir;
  const nlohmann::json plain = exported_config(dir, "--normalization LayerNorm --position-embedding-type learned_absolute");
  EXPECT_EQ(plain.value("model_type", ""), "gpt2") << plain;
  EXPECT_EQ(plain.value("activation_function", ""), "gelu") << plain;
  testing::TestDir other;
  const nlohmann::json openai = exported_config(other, "--openai-gelu");
  EXPECT_EQ(openai.value("activation_function", ""), "gelu_new") << openai;
}

// A mixture of traits tessel does not build is refused in one message naming what was asked
// and what is built, never built as the nearest architecture.
TEST(MegatronFlagsCli, TraitsOfNoBuiltArchitectureAreRefusedInOneMessage) {
  testing::TestDir dir;
  const testing::CommandResult r = testing::run_tessel(
      "export " + kSizes + "--normalization RMSNorm --squared-relu --rope-type yarn --out " + dir.path("m"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  for (const char* said : {"the model flags: ", "--rope-type yarn: tessel's attention has RoPE only",
                           "the architecture flags ask for RMSNorm, learned_absolute positions, squared_relu MLP"})
    EXPECT_NE(r.output.find(said), std::string::npos) << said << "\n" << r.output;
}

// Megatron-LM reads --num-query-groups only with --group-query-attention, whose groups default
// to 1: tessel refuses the groups alone rather than ignore them as Megatron-LM does.
TEST(MegatronFlagsCli, QueryGroupsNeedGroupQueryAttention) {
  testing::TestDir dir;
  const testing::CommandResult alone =
      testing::run_tessel("export --arch llama " + kSizes + "--num-query-groups 2 --out " + dir.path("m"));
  EXPECT_EQ(alone.exit_code, 1) << alone.output;
  EXPECT_NE(alone.output.find("--num-query-groups 2 needs --group-query-attention"), std::string::npos)
      << alone.output;
  testing::TestDir other;
  const nlohmann::json one = exported_config(other, "--arch llama --group-query-attention");
  EXPECT_EQ(one.value("num_key_value_heads", 0), 1) << one;
}

// --num-layers-per-virtual-pipeline-stage gives the virtual stages as Megatron derives them
// (layers / PP / this), and its rules are Megatron's.
TEST(MegatronFlagsCli, LayersPerVirtualStageGiveTheVirtualStages) {
  const std::string layout = "layout --world 4 --pipeline-model-parallel-size 2 --num-layers 8 ";
  const testing::CommandResult by_layers = testing::run_tessel(layout + "--num-layers-per-virtual-pipeline-stage 2");
  const testing::CommandResult by_stages = testing::run_tessel(layout + "--num-virtual-stages-per-pipeline-rank 2");
  EXPECT_EQ(by_layers.exit_code, 0) << by_layers.output;
  EXPECT_EQ(by_layers.output, by_stages.output);
  EXPECT_NE(by_layers.output.find("VPP 2"), std::string::npos) << by_layers.output;
  const testing::CommandResult bad = testing::run_tessel(
      layout + "--num-layers-per-virtual-pipeline-stage 3 --num-virtual-stages-per-pipeline-rank 2");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  for (const char* said : {"no more than one of --num-layers-per-virtual-pipeline-stage",
                           "the 4 layers of a pipeline stage are not divisible by "
                           "--num-layers-per-virtual-pipeline-stage 3"})
    EXPECT_NE(bad.output.find(said), std::string::npos) << said << "\n" << bad.output;
}

// The router and dispatcher flags: what tessel has is taken and said, what it has not is
// refused in the one message of the run's rules.
TEST(MegatronFlagsCli, MoeRouterFlagsAreTakenOrRefused) {
  const std::string train = "train --train-iters 1 --eval-iters 0 --micro-batch-size 2 --global-batch-size 2 --threads 1 " + kSizes +
                            "--arch llama --num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 ";
  const testing::CommandResult none =
      testing::run_tessel(train + "--moe-router-load-balancing-type none --moe-token-dispatcher-type flex");
  ASSERT_EQ(none.exit_code, 0) << none.output;
  for (const char* said : {"--moe-router-load-balancing-type none: no load-balancing loss, --moe-aux-loss-coeff 0.01",
                           "--moe-token-dispatcher-type flex: its DeepEP and HybridEP backends are not present here"})
    EXPECT_NE(none.output.find(said), std::string::npos) << said << "\n" << none.output;
  const testing::CommandResult bad = testing::run_tessel(
      train + "--moe-router-load-balancing-type seq_aux_loss --moe-enable-deepep --moe-router-dtype fp64 --num-layers 3 "
              "--pipeline-model-parallel-size 2");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  for (const char* said : {"invalid configuration: --moe-router-load-balancing-type seq_aux_loss is not built",
                           "--moe-router-dtype fp64 is not built", "--moe-enable-deepep needs --moe-token-dispatcher-type flex",
                           "--pipeline-model-parallel-size 2"})
    EXPECT_NE(bad.output.find(said), std::string::npos) << said << "\n" << bad.output;
}

// A setting of a feature tessel does not build, given at its off value in any spelling, changes
// nothing (a note says so); any other value asks for the feature and is refused.
TEST(MegatronFlagsCli, AnUnbuiltFeaturesOffValueIsReadAsANumber) {
  const std::string run = "train " + kSizes + "--micro-batch-size 1 --global-batch-size 1 --train-iters 1 --eval-iters 0 ";
  for (const char* off : {"0", "0.0", "0e0", "-0"}) {
    const testing::CommandResult r = testing::run_tessel(run + "--glu-linear-offset " + off);
    EXPECT_EQ(r.exit_code, 0) << off << "\n" << r.output;
    EXPECT_NE(r.output.find("--glu-linear-offset " + std::string(off) + ": no effect"), std::string::npos) << r.output;
  }
  const testing::CommandResult on = testing::run_tessel(run + "--glu-linear-offset 1.0");
  EXPECT_EQ(on.exit_code, 1) << on.output;
  EXPECT_NE(on.output.find("is not built (--glu-linear-offset 1.0)"), std::string::npos) << on.output;
}

// The global batch of a run that does not give --global-batch-size (Megatron's default, micro
// batch × DP): each logged iteration's samples, under one process and under DP 2.
std::vector<int64_t> logged_global_batches(const std::string& launcher, const std::string& log) {
  const testing::CommandResult r = testing::run_command(
      launcher + TESSEL_BINARY " train " + kSizes + "--micro-batch-size 2 --train-iters 2 --eval-iters 0 "
      "--log-interval 1 --threads 1 --log-json " + log);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<int64_t> batches;
  std::ifstream lines(log);
  for (std::string line; std::getline(lines, line);)
    batches.push_back(nlohmann::json::parse(line)["global_batch_size"].get<int64_t>());
  return batches;
}

TEST(MegatronFlagsCli, GlobalBatchDefaultsToMicroBatchTimesDataParallel) {
  testing::TestDir dir;
  EXPECT_EQ(logged_global_batches("", dir.path("one.jsonl")), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(logged_global_batches("timeout 120 mpirun --allow-run-as-root --oversubscribe -n 2 -x OMP_NUM_THREADS=1 ",
                                  dir.path("dp2.jsonl")),
            (std::vector<int64_t>{4, 4}));
  // Given, it must be positive, as Megatron asserts: 0 is not taken for the default.
  const testing::CommandResult zero = testing::run_tessel(
      "train " + kSizes + "--micro-batch-size 2 --global-batch-size 0 --train-iters 1 --min-lr 1");
  EXPECT_EQ(zero.exit_code, 1) << zero.output;
  for (const char* said : {"invalid configuration: ", "--global-batch-size must be positive (got 0)", "--min-lr 1 is not within"})
    EXPECT_NE(zero.output.find(said), std::string::npos) << said << "\n" << zero.output;
}

// --lr-decay-iters 0 is refused as Megatron's scheduler asserts decay steps > 0, beside the run's
// other broken rules; it is not taken for "not given" (the run's length).
TEST(MegatronFlagsCli, DecayItersOfZeroIsRefused) {
  const testing::CommandResult r = testing::run_tessel(
      "train " + kSizes + "--micro-batch-size 2 --global-batch-size 4 --train-iters 4 --lr-decay-iters 0 --min-lr 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  for (const char* said : {"invalid configuration: ", "--lr-decay-iters 0 must be positive", "--min-lr 1 is not within"})
    EXPECT_NE(r.output.find(said), std::string::npos) << said << "\n" << r.output;
}

// Megatron's OptimizerParamScheduler asserts lr_warmup_steps < lr_decay_steps (the decay the
// run's length when --lr-decay-iters/-samples is not given), for every decay style: a warmup as
// long as the run is refused, in the one message beside the run's other broken rules.
TEST(MegatronFlagsCli, WarmupAtOrPastTheDecayIsRefusedBesideTheOtherRules) {
  const std::string train = "train " + kSizes + "--micro-batch-size 2 --global-batch-size 4 --eval-iters 0 ";
  const auto expect_refused = [](const testing::CommandResult& r, const std::vector<std::string>& said) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    for (const std::string& s : said) EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  };
  expect_refused(testing::run_tessel(train + "--train-iters 2 --lr-warmup-iters 2 --lr-decay-style constant --min-lr 1"),
                 {"invalid configuration: ", "--min-lr 1 is not within",
                  "--lr-warmup-iters 2 is not below the decay's 2 iterations (--train-iters 2, as --lr-decay-iters is "
                  "not given)"});
  expect_refused(testing::run_tessel(train + "--train-iters 8 --lr-decay-iters 3 --lr-warmup-iters 5"),
                 {"--lr-warmup-iters 5 is not below the decay's 3 iterations (--lr-decay-iters 3)"});
  expect_refused(testing::run_tessel(train + "--train-samples 16 --lr-warmup-samples 16"),
                 {"--lr-warmup-samples 16 is not below the decay's 16 samples (--train-samples 16, as "
                  "--lr-decay-samples is not given)"});
  expect_refused(testing::run_tessel(train + "--train-samples 16 --lr-decay-samples 8 --lr-warmup-fraction 1"),
                 {"--lr-warmup-fraction 1 leaves no decay: the warmup must end before the decay's 8 samples "
                  "(--lr-decay-samples 8)"});
}

}  // namespace
}  // namespace tessel
