// `tessel train --mock-data --tokenizer-type NullTokenizer --vocab-size N`, as Megatron's
// examples run it: it trains, under DP 2 and TP 2 as in one process; the model folder it saves
// carries its NullTokenizer to `tessel generate`, whose ids come out separated as the prompt's;
// and the data rules that mock data brings are named together.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "support/log_json.h"
#include "support/run_command.h"

namespace tessel {
namespace {

using testing::CommandResult;
using testing::run_command;
using testing::log_json_losses;
using testing::run_tessel;

const std::string kMock =
    "train --mock-data --tokenizer-type NullTokenizer --vocab-size 512 --arch gpt2 --num-layers 2 "
    "--hidden-size 32 --num-attention-heads 4 --seq-length 64 --micro-batch-size 2 "
    "--global-batch-size 4 --train-iters 3 --eval-iters 0 --log-interval 1 --lr 1e-2 --lr-warmup-iters 0 --threads 1 ";

TEST(MockDataCli, TrainsAlikeUnderDpAndTp) {
  testing::TestDir dir;
  const CommandResult one = run_tessel(kMock + "--log-json " + dir.path("one.jsonl"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::vector<double> reference = log_json_losses(dir.path("one.jsonl"));
  ASSERT_EQ(reference.size(), 3u);
  for (const std::string layout : {"--tp 1", "--tp 2 --sequence-parallel"}) {
    const std::string log = dir.path("two.jsonl");
    const CommandResult two = run_command(
        "timeout 120 mpirun --allow-run-as-root --oversubscribe -n 2 -x OMP_NUM_THREADS=1 " TESSEL_BINARY " " +
        kMock + layout + " --log-json " + log + " 2>&1");
    ASSERT_EQ(two.exit_code, 0) << layout << "\n" << two.output;
    const std::vector<double> got = log_json_losses(log);
    ASSERT_EQ(got.size(), reference.size()) << layout;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], reference[i], 1e-4) << layout << ", iteration " << i + 1;
  }
  // The untrained model's first loss is that of 512 equally likely tokens.
  EXPECT_NEAR(reference[0], std::log(512.0), 0.2);
}

// The folder written by --save-hf names its NullTokenizer; generate continues the prompt's ids
// with more, each after a single space (decoded with the prompt, not on their own).
TEST(MockDataCli, GeneratedIdsFollowThePromptsSpacing) {
  testing::TestDir dir;
  const CommandResult trained = run_tessel(kMock + "--save-hf " + dir.path("hf"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const CommandResult sampled = run_tessel("generate --model " + dir.path("hf") +
                                           " --prompt '1 2 3' --max-new-tokens 6 --ignore-eos --threads 1");
  ASSERT_EQ(sampled.exit_code, 0) << sampled.output;
  EXPECT_TRUE(std::regex_search(sampled.output, std::regex("^1 2 3( [0-9]+){6}\n"))) << sampled.output;
}

// Megatron's single data source and what mock data needs, named in one message; a NullTokenizer
// needs the vocabulary size.
TEST(MockDataCli, RulesAreNamedTogether) {
  const std::string model = "--arch gpt2 --num-layers 2 --hidden-size 32 --num-attention-heads 4 "
                            "--seq-length 64 --train-iters 1 --threads 1 ";
  const CommandResult both = run_tessel("train --mock-data --data-path " TESSEL_SOURCE_DIR
                                        "/data/kjv-genesis-esther.txt " + model);
  EXPECT_EQ(both.exit_code, 1) << both.output;
  EXPECT_NE(both.output.find("--mock-data generates the data: it excludes --data-path"), std::string::npos)
      << both.output;
  EXPECT_NE(both.output.find("which the ByteTokenizer has none of"), std::string::npos) << both.output;
  const CommandResult no_vocab = run_tessel("train --mock-data --tokenizer-type NullTokenizer " + model);
  EXPECT_EQ(no_vocab.exit_code, 1) << no_vocab.output;
  EXPECT_NE(no_vocab.output.find("NullTokenizer needs --vocab-size"), std::string::npos) << no_vocab.output;
}

// Mock data takes no --split (Megatron forces an even one): resuming with another is not other data.
TEST(MockDataCli, ASplitIsNotOtherDataOnResume) {
  testing::TestDir dir;
  const std::string save = " --lr-decay-iters 10 --save " + dir.path("ckpt") + " --load " + dir.path("ckpt");
  ASSERT_EQ(run_tessel(kMock + save).exit_code, 0);
  const CommandResult resumed = run_tessel(kMock + "--train-iters 4 --split 90,9,1" + save);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(resumed.output.find("other data"), std::string::npos) << resumed.output;
}

}  // namespace
}  // namespace tessel
