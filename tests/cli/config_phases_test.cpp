// A bad configuration is refused with every broken rule in one message, whichever phase finds
// them, and without the follow-ons of a value that does not parse.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/run_command.h"

namespace {

namespace fs = std::filesystem;
using tessel::testing::CommandResult;
using tessel::testing::run_tessel;

bool says(const CommandResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

// Refused by the rules: exit 1 and one line.
void expect_refused(const CommandResult& r) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

const std::string kTrain = "train --train-iters 1 --seq-length 16 --micro-batch-size 1 --threads 1 ";

TEST(ConfigPhases, TokenizerFlagRulesJoinTheModelRules) {
  const CommandResult hf =
      run_tessel(kTrain + "--tokenizer-type HuggingFaceTokenizer --hidden-size 30 --num-attention-heads 4");
  expect_refused(hf);
  EXPECT_TRUE(says(hf, "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model")) << hf.output;
  EXPECT_TRUE(says(hf, "--hidden-size 30 is not divisible by --num-attention-heads 4")) << hf.output;
  // The vocabulary left to that tokenizer is unknown, not a broken rule of its own.
  EXPECT_FALSE(says(hf, "--vocab-size")) << hf.output;

  // A file the tokenizer cannot read is named among them.
  const CommandResult missing = run_tessel(kTrain + "--tokenizer-type HuggingFaceTokenizer --tokenizer-model "
                                           "/nonexistent/tokenizer.json --hidden-size 30 --num-attention-heads 4");
  expect_refused(missing);
  EXPECT_TRUE(says(missing, "/nonexistent/tokenizer.json")) << missing.output;
  EXPECT_TRUE(says(missing, "--hidden-size 30 is not divisible by --num-attention-heads 4")) << missing.output;

  const CommandResult bpe = run_tessel(kTrain + "--tokenizer-type GPT2BPETokenizer --num-layers 0");
  expect_refused(bpe);
  for (const char* rule : {"needs --vocab-file", "needs --merge-file", "--num-layers must be positive"})
    EXPECT_TRUE(says(bpe, rule)) << rule << ": " << bpe.output;
}

TEST(ConfigPhases, ConfigJsonNamesEveryMissingKeyAtOnce) {
  const fs::path dir = fs::temp_directory_path() / ("tessel_config_phases_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "llama", "num_attention_heads": 4,
                                            "num_key_value_heads": "four", "max_position_embeddings": 64})";
  const CommandResult r = run_tessel(kTrain + "--init-from " + dir.string());
  fs::remove_all(dir);
  expect_refused(r);
  EXPECT_TRUE(says(r, (dir / "config.json").string())) << r.output;
  for (const char* key : {"hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size"})
    EXPECT_TRUE(says(r, std::string("missing key '") + key + "'")) << key << ": " << r.output;
  EXPECT_TRUE(says(r, "key 'num_key_value_heads' has a value of the wrong type")) << r.output;
}

TEST(ConfigPhases, ALayoutThatDoesNotParseIsReportedWithoutItsFollowOns) {
  const CommandResult train = run_tessel(kTrain + "--num-layers 4 --pipeline-model-parallel-layout x --eval-interval 0");
  expect_refused(train);
  EXPECT_TRUE(says(train, "--pipeline-model-parallel-layout: unknown layer 'x'")) << train.output;
  EXPECT_TRUE(says(train, "--eval-interval 0 must be at least 1")) << train.output;  // the other phases' rules are still there
  for (const char* follow_on : {"embedding 'E'", "loss 'L'", "holds 0 layers"})
    EXPECT_FALSE(says(train, follow_on)) << follow_on << ": " << train.output;

  // Over two stages, neither the stage count nor the split of layers is made up from it.
  const CommandResult layout =
      run_tessel("layout --world 2 --pp 2 --num-layers 4 --pipeline-model-parallel-layout 'x|(tt'");
  expect_refused(layout);
  EXPECT_TRUE(says(layout, "'(' without ')'")) << layout.output;
  EXPECT_TRUE(says(layout, "unknown layer 'x'")) << layout.output;
  for (const char* follow_on : {"stages", "embedding 'E'", "loss 'L'", "holds"})
    EXPECT_FALSE(says(layout, follow_on)) << follow_on << ": " << layout.output;
}

}  // namespace
