// Values a user (or a file) gets wrong, refused with one clear error each: integers outside
// their type or with a fraction, from flags and from JSON (tessel's model file and Hugging Face
// config.json), non-finite floats, and `generate`'s sampling flags.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "support/fixtures.h"
#include "support/run_command.h"

namespace tessel {
namespace {

const std::string kTiny =
    "--num-layers 1 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1 "
    "--global-batch-size 1 --train-iters 1 --eval-iters 0 --threads 1 ";

// One line naming the problem, exit 1 or 2, no training.
void expect_refused(const std::string& args, const std::string& expected) {
  const testing::CommandResult r = testing::run_tessel(args);
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << args << " -> " << r.exit_code << ": " << r.output;
  EXPECT_NE(r.output.find("tessel: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(expected), std::string::npos) << args << ": " << r.output;
  EXPECT_EQ(r.output.find("iter "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
}

TEST(ConfigValuesCli, ModelFileIntegersAreWholeAndInRange) {
  testing::TestDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {R"({"num_layers": 4294967298})", "num_layers 4294967298 is not a whole number in [-2147483648, 2147483647]"},
      {R"({"seq_length": -4294967264})", "seq_length -4294967264 is not a whole number"},
      {R"({"seq_length": 2.7})", "seq_length 2.7 is not a whole number"},
      {R"({"norm_epsilon": 1e39})", "norm_epsilon 1e+39 is not a finite number of its type"}};
  for (const auto& [json, expected] : cases) {
    SCOPED_TRACE(json);
    const std::string file = dir.write("model.json", json);
    expect_refused("train " + kTiny + "--model-config " + file, file + ": " + expected);
  }
}

TEST(ConfigValuesCli, HuggingFaceConfigIntegersAreWholeAndInRange) {
  testing::TestDir dir;
  dir.write("config.json", R"({"model_type": "gpt2", "n_layer": 4294967298, "n_embd": 32,
      "n_head": 4, "vocab_size": 256, "n_positions": 16})");
  dir.write("model.safetensors", "");
  expect_refused("train --init-from " + dir.path(), "n_layer 4294967298 is not a whole number");
}

TEST(ConfigValuesCli, IntegerFlagsAreWholeAndInRange) {
  expect_refused("train " + kTiny + "--seed -1", "--seed: -1 is not a whole number in [0, 18446744073709551615]");
  expect_refused("train --save-interval 99999999999999999999", "--save-interval: 99999999999999999999 is not a whole number");
  expect_refused("train --train-iters 1e3", "--train-iters: 1e3 is not a whole number");
  expect_refused("train --global-batch-size 2.5", "--global-batch-size: 2.5 is not a whole number");
  expect_refused("train --num-layers 4294967298", "--num-layers 4294967298 is not a valid value");
  expect_refused("layout --world 8 --tp 3000000000", "--tp 3000000000 is not a valid value");
}

TEST(ConfigValuesCli, FloatFlagsAreFinite) {
  expect_refused("train " + kTiny + "--lr inf", "--lr inf is not a finite number");
  expect_refused("train " + kTiny + "--lr 1e39", "--lr inf is not a finite number");
  expect_refused("train " + kTiny + "--adam-eps nan", "--adam-eps nan is not a finite number");
  expect_refused("train " + kTiny + "--exit-duration-in-mins -1", "--exit-duration-in-mins -1 must be a finite number");
}

TEST(ConfigValuesCli, GenerateSamplingFlagsAreChecked) {
  const testing::CommandResult r =
      testing::run_tessel("generate --model /nonexistent --prompt Hello --top-k -5 --temperature -1 --max-new-tokens -10");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("tessel: error: invalid generate options: ", 0), 0u) << r.output;  // no prompt first
  for (const char* rule : {"--max-new-tokens -10 must not be negative", "--top-k -5 must not be negative",
                           "--temperature -1 must be a finite number ≥ 0"})
    EXPECT_NE(r.output.find(rule), std::string::npos) << r.output;
  expect_refused("generate --model /nonexistent --temperature nan", "--temperature nan must be a finite number");
}

}  // namespace
}  // namespace tessel
