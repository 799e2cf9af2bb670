// Megatron-LM's FP8 flags on tessel train's command line (apps/train_command.cpp): each current-
// scaling recipe trains (one process), says it is emulated, changes the losses from bf16's and is
// the same run for the same seed; their choices and Megatron's defaults; bad FP8 settings and what
// is not built refused with the other rules in one message, a non-zero exit. The rules themselves:
// tests/train/plan_test.cpp's Fp8Rules.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "support/log_json.h"
#include "support/run_command.h"

namespace tessel {
namespace {

using testing::CommandResult;
using testing::run_tessel;

const std::string kTrain =
    "train --arch gpt2 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
    "--micro-batch-size 2 --global-batch-size 4 --threads 1 --train-iters 2 --eval-iters 0 ";

bool says(const CommandResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

// --bf16 with --fp8-format hybrid: the linear layers' GEMMs on FP8 operands, the rest bf16's.
std::vector<double> losses_of(testing::TestDir& dir, const std::string& name, const std::string& flags) {
  const CommandResult r = run_tessel(kTrain + "--bf16 --train-iters 3 --log-interval 1 --lr 3e-3 --log-json " +
                                     dir.path(name) + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << flags << "\n" << r.output;
  if (!flags.empty())
    EXPECT_TRUE(says(r, "emulated on the CPU: slower than bf16, numerically the recipe's")) << r.output;
  return testing::log_json_losses(dir.path(name));
}

TEST(Fp8Cli, EachCurrentScalingRecipeTrainsBitForBitAgain) {
  testing::TestDir dir;
  const std::vector<double> bf16 = losses_of(dir, "bf16.jsonl", "");
  ASSERT_EQ(bf16.size(), 3u);
  for (const char* recipe : {"tensorwise", "blockwise", "mxfp8"}) {
    SCOPED_TRACE(recipe);
    const std::string flags = std::string("--fp8-format hybrid --fp8-recipe ") + recipe;
    const std::vector<double> fp8 = losses_of(dir, std::string(recipe) + ".jsonl", flags);
    ASSERT_EQ(fp8.size(), 3u);
    for (double loss : fp8) EXPECT_TRUE(std::isfinite(loss));
    EXPECT_NE(fp8, bf16) << "FP8 operands change the losses";
    EXPECT_EQ(losses_of(dir, std::string(recipe) + "_again.jsonl", flags), fp8) << "the same seed, the same run";
  }
}

TEST(Fp8Cli, DelayedScalingIsNotBuiltYet) {
  const CommandResult r = run_tessel(kTrain + "--fp8-format hybrid");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(says(r, "--fp8-recipe delayed (Megatron-LM's default) is not built yet")) << r.output;
}

TEST(Fp8Cli, BadSettingsAreRefusedInOneMessage) {
  const CommandResult r = run_tessel(kTrain + "--fp8-format hybrid --fp16 --fp8-amax-history-len 0 --lr -1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  for (const char* rule : {"--fp8-format with --fp16", "--fp8-amax-history-len 0 must be at least 1",
                           "--lr -1 must be a finite number"})
    EXPECT_TRUE(says(r, rule)) << rule << "\n" << r.output;
  EXPECT_EQ(r.output.find("invalid configuration"), r.output.rfind("invalid configuration")) << "one message";
}

TEST(Fp8Cli, ChoicesAreMegatrons) {
  for (const char* bad : {"--fp8-format e5m2", "--fp8-format hybrid --fp8-recipe current",
                          "--fp8-format hybrid --fp8-amax-compute-algo mean"}) {
    const CommandResult r = run_tessel(kTrain + bad);
    EXPECT_NE(r.exit_code, 0) << bad << "\n" << r.output;
    EXPECT_TRUE(says(r, "not in {")) << bad << "\n" << r.output;
  }
  const CommandResult help = run_tessel("train --help");
  for (const char* flag : {"--fp8-format TEXT:{e4m3,hybrid}", "--fp8-recipe TEXT:{tensorwise,delayed,mxfp8,blockwise,custom}=delayed",
                           "--fp8-amax-history-len INT=1", "--fp8-amax-compute-algo TEXT:{most_recent,max}=most_recent",
                           "--fp8-margin INT=0", "--num-layers-at-start-in-bf16 INT=1", "--num-layers-at-end-in-bf16 INT=1",
                           "--first-last-layers-bf16", "--fp8-param-gather"})
    EXPECT_TRUE(says(help, flag)) << flag << "\n" << help.output;
}

}  // namespace
}  // namespace tessel
