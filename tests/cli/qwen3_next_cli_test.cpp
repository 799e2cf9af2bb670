// A Qwen3-Next-style model from Megatron's flags, as a user trains one: three Gated DeltaNet
// layers then a gated full-attention layer, zero-centred norms, partial RoPE, a head dimension of
// its own, 8 experts top-2 with the gated shared expert; its loss falls. And its bad
// configurations: every broken rule in one line, a non-zero exit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "support/run_command.h"

namespace tessel {
namespace {

using testing::run_tessel;

// Without the four settings the bad cases below change (a flag is given once).
const std::string kBase =
    "--arch llama --num-layers 4 --hidden-size 64 --num-attention-heads 4 --num-query-groups 2 "
    "--kv-channels 32 --experimental-attention-variant gdn --linear-num-key-heads 2 "
    "--linear-key-head-dim 16 --linear-value-head-dim 16 --attention-output-gate --qk-layernorm "
    "--apply-layernorm-1p --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 32 "
    "--moe-shared-expert-gate --moe-aux-loss-coeff 0.001 --seq-length 32 --threads 1 ";
const std::string kQwen3Next = kBase +
    "--linear-attention-freq 4 --linear-num-value-heads 4 --rotary-percent 0.25 "
    "--moe-shared-expert-intermediate-size 32 ";

TEST(Qwen3NextCli, TinyModelTrainsAndItsLossFalls) {
  testing::TestDir dir;
  const testing::CommandResult r =
      run_tessel("train " + kQwen3Next +
                 "--micro-batch-size 2 --global-batch-size 4 --train-iters 40 --lr 3e-3 --log-interval 1 "
                 "--log-json " + dir.path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream lines(dir.path("log.jsonl"));
  std::vector<double> losses;
  for (std::string line; std::getline(lines, line);) losses.push_back(nlohmann::json::parse(line)["loss"]);
  ASSERT_EQ(losses.size(), 40u);
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.1);  // the byte vocabulary, untrained
  auto mean = [](auto first, auto last) { return std::accumulate(first, last, 0.0) / (last - first); };
  const double early = mean(losses.begin(), losses.begin() + 5), late = mean(losses.end() - 5, losses.end());
  EXPECT_LT(late, early - 1.0) << "first five " << early << ", last five " << late;
}

// One line naming every rule, exit 1.
void expect_rules(const std::string& args, const std::vector<std::string>& rules) {
  const testing::CommandResult r = run_tessel(args);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  for (const std::string& rule : rules) EXPECT_NE(r.output.find(rule), std::string::npos) << rule << ": " << r.output;
}

TEST(Qwen3NextCli, BadConfigurationsListEveryRule) {
  const std::string train = "train --train-iters 1 --micro-batch-size 2 --global-batch-size 4 ";
  expect_rules(train + kBase + "--linear-attention-freq 4 --linear-num-value-heads 5 --rotary-percent 0.3",
               {"--linear-num-value-heads 5 is not a multiple of --linear-num-key-heads 2",
                "RoPE needs an even rotary dimension: int(head dim 32 × --rotary-percent 0.3) = 9",
                "--moe-shared-expert-gate needs a shared expert"});
  // One process asked for TP 4: the layout and the GDN heads, in one message.
  expect_rules(train + kQwen3Next + "--tp 4 --sequence-parallel",
               {"the GDN heads (--linear-num-key-heads 2, --linear-num-value-heads 4) are not divisible by "
                "--tensor-model-parallel-size 4 × --context-parallel-size 1 = 4",
                "world size 1 is not divisible by TP × CP × PP"});
  // CP splits the heads as TP does (Megatron's head all-to-all): 2 key heads over CP 4.
  expect_rules(train + kQwen3Next + "--cp 4",
               {"the GDN heads (--linear-num-key-heads 2, --linear-num-value-heads 4) are not divisible by "
                "--tensor-model-parallel-size 1 × --context-parallel-size 4 = 4",
                "world size 1 is not divisible by TP × CP × PP"});
  expect_rules(train + kBase + "--linear-attention-freq '[1,1,0]'",
               {"--linear-attention-freq \"[1,1,0]\" has 3 entries for 4 layers"});
  expect_rules(train + "--arch llama --linear-attention-freq 4",
               {"--linear-attention-freq 4 needs --experimental-attention-variant gdn"});
  expect_rules(train + kQwen3Next + "--mtp-num-layers 1",
               {"--mtp-num-layers 1: the multi-token prediction module is not built yet"});
}

// --save-hf writes a GDN model in the family it came from (--init-from's config.json), or in the
// one --save-hf-model-type names; the rule for the flag without a GDN model is one line.
TEST(Qwen3NextCli, SaveHfKeepsTheFamilyOrTakesTheOneAskedFor) {
  testing::TestDir dir;
  const std::string init = dir.path("init");
  // The model's flags without the two of training (export has neither).
  std::string model = kQwen3Next;
  for (const std::string run_flag : {"--moe-aux-loss-coeff 0.001 ", "--threads 1 "})
    model.erase(model.find(run_flag), run_flag.size());
  const testing::CommandResult exported = run_tessel("export " + model + "--hf-model-type qwen3_next --out " + init);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  auto model_type = [&](const std::string& folder) {
    std::ifstream f(folder + "/config.json");
    return nlohmann::json::parse(f).value("model_type", "");
  };
  const std::string train =
      "train " + kQwen3Next + "--micro-batch-size 2 --global-batch-size 2 --train-iters 1 --init-from " + init;
  for (const auto& [flag, want] : std::vector<std::pair<std::string, std::string>>{
           {"", "qwen3_next"}, {"--save-hf-model-type qwen3_5_moe", "qwen3_5_moe"}}) {
    const std::string out = dir.path("out_" + want);
    const testing::CommandResult r = run_tessel(train + " --save-hf " + out + " " + flag);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(model_type(out), want) << flag;
  }
  expect_rules("train --arch llama --num-layers 2 --hidden-size 32 --num-attention-heads 4 --ffn-hidden-size 64 "
               "--seq-length 32 --micro-batch-size 2 --global-batch-size 2 --train-iters 1 --save-hf " +
                   dir.path("x") + " --save-hf-model-type qwen3_next",
               {"--save-hf-model-type qwen3_next needs --save-hf and a model with Gated DeltaNet layers"});
}

}  // namespace
}  // namespace tessel
