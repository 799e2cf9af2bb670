// train/batch_schedule.h against Megatron-LM's StepBatchsizeNumMicroBatchesCalculator and
// update_train_iters, with figures worked out by hand from their code.
#include "tessel/train/batch_schedule.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessel {
namespace {

BatchSchedule parsed(const std::string& text, int64_t seq_length) {
  std::vector<std::string> violations;
  BatchSchedule s = BatchSchedule::parse(text, seq_length, violations);
  EXPECT_TRUE(violations.empty()) << text << ": " << (violations.empty() ? "" : violations.front());
  return s;
}

std::vector<std::string> violations_of(const std::string& text, int64_t seq_length) {
  std::vector<std::string> violations;
  BatchSchedule::parse(text, seq_length, violations);
  return violations;
}

std::vector<int64_t> thresholds(const BatchSchedule& s) {
  std::vector<int64_t> t;
  for (const BatchStep& step : s.steps()) t.push_back(step.from_sample);
  return t;
}

// Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh, at --seq-length 2048: B is 10^9
// tokens, each threshold tokens // 2048 samples (2.4·10^9 / 2048 = 1171875 exactly).
TEST(BatchSchedule, TheGpt3ExampleInTokens) {
  const BatchSchedule s = parsed("0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536", 2048);
  EXPECT_EQ(thresholds(s), (std::vector<int64_t>{0, 1171875, 2343750, 3515625, 4687500, 5859375}));
  EXPECT_EQ(s.steps()[5].global_batch, 1536);
  // Batches of 16 until 1171875 samples are consumed: ceil(1171875 / 16) = 73243 iterations,
  // the last one from 73242 · 16 = 1171872 (< 1171875) to 1171888, 13 samples past the threshold.
  EXPECT_EQ(s.batch_of(1), 16);
  EXPECT_EQ(s.consumed_before(73243), 1171872);
  EXPECT_EQ(s.batch_of(73243), 16);
  EXPECT_EQ(s.consumed_before(73244), 1171888);
  EXPECT_EQ(s.batch_of(73244), 320);
  // Then batches of 320 until 2343750: ceil((2343750 − 1171888) / 320) = 3663 iterations.
  EXPECT_EQ(s.consumed_before(73244 + 3663), 1171888 + 3663 * 320);
  EXPECT_EQ(s.batch_of(73244 + 3662), 320);
  EXPECT_EQ(s.batch_of(73244 + 3663), 624);
  EXPECT_EQ(s.batch_at(1171874), 16);
  EXPECT_EQ(s.batch_at(1171875), 320);
  EXPECT_EQ(s.batch_at(int64_t{1} << 40), 1536);
}

// Thresholds in tokens of 100: 250 → 2 samples, 1000 → 10. Megatron's loop: 0 < 2 takes 4 (to 4),
// 4 takes 8 (to 12), 12 takes 16 (to 28), ...
TEST(BatchSchedule, ABatchCrossingAThresholdEndsAtTheOldSize) {
  const BatchSchedule s = parsed("0:4 250:8 1000:16", 100);
  EXPECT_EQ(thresholds(s), (std::vector<int64_t>{0, 2, 10}));
  EXPECT_EQ((std::vector<int64_t>{s.batch_of(1), s.batch_of(2), s.batch_of(3), s.batch_of(4)}),
            (std::vector<int64_t>{4, 8, 16, 16}));
  EXPECT_EQ((std::vector<int64_t>{s.consumed_before(1), s.consumed_before(2), s.consumed_before(3),
                                  s.consumed_before(4), s.consumed_before(5)}),
            (std::vector<int64_t>{0, 4, 12, 28, 44}));
  // update_train_iters: iterations while fewer than --train-samples are consumed.
  EXPECT_EQ(s.iterations_for(28), 3);
  EXPECT_EQ(s.iterations_for(29), 4);
  EXPECT_EQ(s.iterations_for(1), 1);
  EXPECT_EQ(s.iterations_for(0), 0);
  // The steps an iteration count reaches: a batch of 4 overshooting past both thresholds skips
  // the middle one.
  const BatchSchedule skipping = parsed("0:4 1:8 2:16", 0);
  const std::vector<BatchStep> reached = skipping.steps_reached(3);
  ASSERT_EQ(reached.size(), 2u);
  EXPECT_EQ(reached[0].global_batch, 4);
  EXPECT_EQ(reached[1].global_batch, 16);
  EXPECT_EQ(skipping.consumed_before(3), 20);
  EXPECT_EQ(parsed("0:4 250:8 1000:16", 100).steps_reached(1).size(), 1u);
}

// Samples (no sequence length), suffixes in either case, commas, unsorted entries, Python's
// int(float(x) · multiplier), as /usr/bin/python3 computes it: 1.005 · 1000 is
// 1004.9999999999999 in doubles, so 1004; 4.1 · 10^9 is 4099999999.9999995, so 4099999999.
TEST(BatchSchedule, NumbersAsMegatronReadsThem) {
  const BatchSchedule s = parsed("1k:16, 0:8  1.005K:32,2M:1K 1_000_000:64", 0);
  EXPECT_EQ(thresholds(s), (std::vector<int64_t>{0, 1000, 1004, 1000000, 2000000}));
  EXPECT_EQ(s.steps()[4].global_batch, 1000);
  EXPECT_EQ(thresholds(parsed("0:1 1e3:2 +2.5e3:4 4.1B:8 3T:16", 0)),
            (std::vector<int64_t>{0, 1000, 2500, 4099999999, 3000000000000}));
  // A threshold below one sequence becomes sample 0; floor division, as Python's //.
  EXPECT_EQ(thresholds(parsed("0:1 4095:2 4096:3", 2048)), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_TRUE(BatchSchedule::constant(32).is_constant());
  EXPECT_EQ(BatchSchedule::constant(32).consumed_before(4), 96);
}

TEST(BatchSchedule, EveryBrokenRuleListed) {
  // Entries that do not read: each named, and the schedule's rules wait until they do.
  EXPECT_EQ(violations_of("0:4 5 x:3 2:4q 1__0:2 inf:2 nan:2", 0),
            (std::vector<std::string>{
                "--step-batch-size-schedule \"0:4 5 x:3 2:4q 1__0:2 inf:2 nan:2\": entry '5' is not THRESHOLD:BATCH_SIZE",
                "--step-batch-size-schedule \"0:4 5 x:3 2:4q 1__0:2 inf:2 nan:2\": 'x' in entry 'x:3' is not a number "
                "with an optional K, M, B or T suffix (within ±9.2e18)",
                "--step-batch-size-schedule \"0:4 5 x:3 2:4q 1__0:2 inf:2 nan:2\": '4q' in entry '2:4q' is not a "
                "number with an optional K, M, B or T suffix (within ±9.2e18)",
                "--step-batch-size-schedule \"0:4 5 x:3 2:4q 1__0:2 inf:2 nan:2\": '1__0' in entry '1__0:2' is not a "
                "number with an optional K, M, B or T suffix (within ±9.2e18)",
                "--step-batch-size-schedule \"0:4 5 x:3 2:4q 1__0:2 inf:2 nan:2\": 'inf' in entry 'inf:2' is not a "
                "number with an optional K, M, B or T suffix (within ±9.2e18)",
                "--step-batch-size-schedule \"0:4 5 x:3 2:4q 1__0:2 inf:2 nan:2\": 'nan' in entry 'nan:2' is not a "
                "number with an optional K, M, B or T suffix (within ±9.2e18)"}));
  // Megatron's _validate_schedule, every rule at once: the first threshold 0, strictly
  // increasing (99 tokens of 100 is sample 0, as 0 is), positive batches.
  EXPECT_EQ(violations_of("500:4 99:8 0:16 1000:0 2000:-2", 100),
            (std::vector<std::string>{
                "--step-batch-size-schedule \"500:4 99:8 0:16 1000:0 2000:-2\": the thresholds must be strictly "
                "increasing, got 0 samples (tokens / --seq-length 100) twice",
                "--step-batch-size-schedule \"500:4 99:8 0:16 1000:0 2000:-2\": batch size 0 is not positive",
                "--step-batch-size-schedule \"500:4 99:8 0:16 1000:0 2000:-2\": batch size -2 is not positive"}));
  EXPECT_EQ(violations_of("5:4 9:8", 0),
            (std::vector<std::string>{"--step-batch-size-schedule \"5:4 9:8\": the first threshold must be 0, got 5 "
                                      "samples"}));
  EXPECT_EQ(violations_of(" , ", 0),
            (std::vector<std::string>{"--step-batch-size-schedule \" , \": no entry"}));
}

}  // namespace
}  // namespace tessel
