// Megatron-LM's FP8 flags on tessel train's command line (apps/train_command.cpp): their choices
// and Megatron's defaults, and bad FP8 settings refused with the other rules in one message, a
// non-zero exit. The rules themselves: tests/train/fp8_rules_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "support/run_command.h"

namespace tessel {
namespace {

using testing::CommandResult;
using testing::run_tessel;

const std::string kTrain =
    "train --arch gpt2 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
    "--micro-batch-size 2 --global-batch-size 4 --threads 1 --train-iters 2 --eval-iters 0 ";

bool says(const CommandResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

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
