// --fp16 with Megatron's loss scaling, end to end (one process): an overflow of the scaled
// gradients skips the step and backs the scale off as grad_scaler.py says, on the iteration line
// and in --log-json; the scaler's state is in the checkpoint, so a resumed run goes on bit for bit;
// bad settings are refused together with the other rules. The layouts against one process are
// the equivalence suite's Fp16 cases.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
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
    "--micro-batch-size 2 --global-batch-size 4 --threads 1 --log-interval 1 --lr 3e-3 --eval-iters 0 --fp16 ";

bool says(const CommandResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

// Megatron's default initial scale, 2^32, makes the loss gradient's operands overflow fp16's 65504:
// the first iterations skip their steps, the scale kept at the first (hysteresis 2) and halved at
// each after, until it fits.
TEST(Fp16Cli, OverflowSkipsTheStepAndBacksTheScaleOff) {
  testing::TestDir dir;
  const CommandResult r = run_tessel(kTrain + "--train-iters 4 --log-json " + dir.path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<nlohmann::json> log = testing::log_json_records(dir.path("log.jsonl"));
  ASSERT_EQ(log.size(), 4u);
  const double scales[] = {0x1p32, 0x1p31, 0x1p30, 0x1p29};
  const int64_t hysteresis[] = {1, 0, -1, -2};
  for (size_t i = 0; i < log.size(); ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i + 1));
    EXPECT_TRUE(log[i].value("skipped", false));
    EXPECT_EQ(log[i]["loss_scale"].get<double>(), scales[i]);
    EXPECT_EQ(log[i]["growth_tracker"].get<int64_t>(), 0);
    EXPECT_EQ(log[i]["hysteresis_tracker"].get<int64_t>(), hysteresis[i]);
    EXPECT_EQ(log[i]["skipped_iterations"].get<int64_t>(), 1);  // per logged line (--log-interval 1)
    EXPECT_TRUE(std::isfinite(log[i]["loss"].get<double>()));  // the forward stays finite
  }
  EXPECT_TRUE(says(r, "loss scale 4294967296.0")) << r.output;
  EXPECT_TRUE(says(r, "number of skipped iterations   1")) << r.output;
  EXPECT_TRUE(says(r, "--check-for-nan-in-loss-and-grad: off")) << r.output;
}

// A scale that fits trains; --loss-scale-window 2 doubles it every two clean iterations.
TEST(Fp16Cli, ACleanWindowDoublesTheScale) {
  testing::TestDir dir;
  const CommandResult r = run_tessel(kTrain + "--train-iters 4 --initial-loss-scale 8 --loss-scale-window 2 "
                                              "--log-json " + dir.path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<nlohmann::json> log = testing::log_json_records(dir.path("log.jsonl"));
  ASSERT_EQ(log.size(), 4u);
  const double scales[] = {8, 16, 16, 32};
  for (size_t i = 0; i < log.size(); ++i) {
    EXPECT_FALSE(log[i].value("skipped", false)) << i + 1;
    EXPECT_EQ(log[i]["loss_scale"].get<double>(), scales[i]) << i + 1;
  }
  EXPECT_LT(log[3]["loss"].get<double>(), log[0]["loss"].get<double>());
}

// Saved after iteration 3 in the middle of the scaler's backoff and resumed: iterations 4 to 6
// are the straight run's, losses and scaler state bit for bit.
TEST(Fp16Cli, ResumesTheScalerBitwise) {
  testing::TestDir dir;
  const std::string flags = kTrain + "--train-iters 6 --initial-loss-scale 1048576 --hysteresis 1 "
                                     "--loss-scale-window 2 ";
  const CommandResult straight = run_tessel(flags + "--log-json " + dir.path("straight.jsonl"));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const CommandResult first = run_tessel(flags + "--exit-interval 3 --save " + dir.path("ckpt"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const CommandResult resumed =
      run_tessel(flags + "--load " + dir.path("ckpt") + " --log-json " + dir.path("resumed.jsonl"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const std::vector<nlohmann::json> want = testing::log_json_records(dir.path("straight.jsonl")),
                                    got = testing::log_json_records(dir.path("resumed.jsonl"));
  ASSERT_EQ(want.size(), 6u);
  ASSERT_EQ(got.size(), 3u);
  bool scale_moved = false;
  for (size_t i = 3; i < 6; ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i + 1));
    ASSERT_EQ(got[i - 3]["iteration"], i + 1);
    for (const char* key : {"loss", "grad_norm", "loss_scale", "growth_tracker", "hysteresis_tracker"})
      EXPECT_EQ(got[i - 3][key], want[i][key]) << key;
    EXPECT_EQ(got[i - 3].value("skipped", false), want[i].value("skipped", false));
    scale_moved = scale_moved || want[i]["loss_scale"] != want[0]["loss_scale"];
  }
  EXPECT_TRUE(scale_moved) << "the scale never changed: the resume proves nothing about its state";
}

TEST(Fp16Cli, BadSettingsAreRefusedTogether) {
  const CommandResult r = run_tessel(kTrain + "--train-iters 2 --bf16 --min-loss-scale 8 --initial-loss-scale 4 "
                                              "--hysteresis 0 --enable-optimizer-post-validation");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(says(r, "--fp16 and --bf16: give one")) << r.output;
  // Without --bf16 the dynamic scaler's settings are the run's, and so is post-validation's rule.
  const CommandResult dynamic = run_tessel(kTrain + "--train-iters 2 --min-loss-scale 8 --initial-loss-scale 4 "
                                                    "--hysteresis 0 --enable-optimizer-post-validation");
  EXPECT_EQ(dynamic.exit_code, 1) << dynamic.output;
  for (const char* rule : {"--min-loss-scale 8 is above --initial-loss-scale 4", "--hysteresis must be positive",
                           "--enable-optimizer-post-validation with a dynamic loss scale"})
    EXPECT_TRUE(says(dynamic, rule)) << rule << "\n" << dynamic.output;
  EXPECT_EQ(dynamic.output.find("invalid configuration"), dynamic.output.rfind("invalid configuration"))
      << "one message";
}

}  // namespace
}  // namespace tessel
