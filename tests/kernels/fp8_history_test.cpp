// Delayed scaling's amax history (kernels/fp8_history.h) against Transformer Engine's documented
// update: the scale from the newest amax or the history's largest, largest / amax / 2^margin; an
// amax of 0 or inf keeps the scale; the history holds the last `length` steps.
#include "tessel/kernels/fp8_history.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tessel {
namespace {

TEST(Fp8History, MostRecentTakesTheStepJustRecorded) {
  Fp8History h(4);
  EXPECT_EQ(h.scale(), 1.0f);
  h.record(2.0f);
  h.record(7.0f);  // two quantisations in one step: the larger amax
  h.record(3.0f);
  h.update(Fp8Format::E4M3, AmaxCompute::MostRecent, 0);
  EXPECT_EQ(h.scale(), 448.0f / 7.0f);
  h.record(14.0f);
  h.update(Fp8Format::E4M3, AmaxCompute::MostRecent, 1);  // margin 1: half
  EXPECT_EQ(h.scale(), 448.0f / 14.0f / 2.0f);
  EXPECT_EQ(h.amaxes(), (std::vector<float>{0.0f, 14.0f, 7.0f, 0.0f}));
}

TEST(Fp8History, MaxRemembersExactlyTheLastLengthSteps) {
  Fp8History h(3);
  const float amaxes[] = {100.0f, 1.0f, 2.0f, 4.0f};
  const float want[] = {57344.0f / 100.0f, 57344.0f / 100.0f, 57344.0f / 100.0f, 57344.0f / 4.0f};
  for (int step = 0; step < 4; ++step) {
    h.record(amaxes[step]);
    h.update(Fp8Format::E5M2, AmaxCompute::Max, 0);
    EXPECT_EQ(h.scale(), want[step]) << "step " << step;  // 100 leaves the window at the fourth
  }
}

TEST(Fp8History, ZeroOrInfiniteAmaxKeepsTheScale) {
  Fp8History h(1);
  h.record(8.0f);
  h.update(Fp8Format::E4M3, AmaxCompute::Max, 0);
  EXPECT_EQ(h.scale(), 56.0f);
  h.update(Fp8Format::E4M3, AmaxCompute::Max, 0);  // nothing recorded: amax 0
  EXPECT_EQ(h.scale(), 56.0f);
  h.record(INFINITY);
  h.update(Fp8Format::E4M3, AmaxCompute::Max, 0);
  EXPECT_EQ(h.scale(), 56.0f);
  h.record(1e-40f);  // a scale past the largest float: the largest float
  h.update(Fp8Format::E4M3, AmaxCompute::Max, 0);
  EXPECT_EQ(h.scale(), 3.4028234663852886e38f);
}

TEST(Fp8History, RestoreGivesBackASavedState) {
  Fp8History h(2), resumed(2);
  h.record(5.0f);
  h.update(Fp8Format::E4M3, AmaxCompute::Max, 0);
  h.record(3.0f);
  resumed.restore(h.amaxes(), h.scale());
  h.update(Fp8Format::E4M3, AmaxCompute::Max, 0);
  resumed.update(Fp8Format::E4M3, AmaxCompute::Max, 0);
  EXPECT_EQ(resumed.scale(), h.scale());
  EXPECT_EQ(resumed.amaxes(), h.amaxes());
}

}  // namespace
}  // namespace tessel
