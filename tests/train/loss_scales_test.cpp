// How a global batch's token losses make its gradient (train/loss_scales.h), on a tiny batch with
// masked tokens worked by hand: --calculate-per-token-loss weighs every counted token alike, the
// default averages the microbatches' means, an all-masked microbatch adds nothing, and without
// masked tokens the two are the same to the bit.
#include <gtest/gtest.h>

#include <vector>

#include "tessel/train/loss_scales.h"

namespace tessel {
namespace {

// Two DP ranks of two microbatches of one 4-token sample; -1: a token out of the loss.
struct Microbatch {
  std::vector<double> losses;  // the token losses, -1 where masked
  int64_t counted() const {
    int64_t n = 0;
    for (double l : losses) n += l >= 0;
    return n;
  }
  double sum() const {
    double s = 0;
    for (double l : losses) s += l >= 0 ? l : 0;
    return s;
  }
};
const std::vector<std::vector<Microbatch>> kRanks = {
    {{{1, 2, 3, 4}}, {{2, 2, -1, -1}}},     // 4 tokens summing to 10; 2 summing to 4
    {{{4, -1, -1, -1}}, {{-1, -1, -1, -1}}},  // 1 token of loss 4; none
};

// Σ over ranks and microbatches of scale × Σ token losses: the objective whose gradient the
// scales make (each token's loss gradient is its microbatch's scale).
double objective(bool per_token) {
  double batch_tokens = 0;
  for (const auto& rank : kRanks)
    for (const Microbatch& m : rank) batch_tokens += static_cast<double>(m.counted());
  double total = 0;
  for (const auto& rank : kRanks) {
    std::vector<int64_t> tokens;
    for (const Microbatch& m : rank) tokens.push_back(m.counted());
    const std::vector<float> scales = microbatch_loss_scales(per_token, tokens, 4, batch_tokens);
    for (size_t m = 0; m < rank.size(); ++m) total += scales[m] * rank[m].sum();
  }
  return total;
}

TEST(LossScales, PerTokenIsTheMeanOverTheGlobalBatchsCountedTokens) {
  // (10 + 4 + 4 + 0) / 7 counted tokens.
  EXPECT_NEAR(objective(true), 18.0 / 7.0, 1e-6);
}

TEST(LossScales, DefaultIsTheMeanOfTheMicrobatchMeans) {
  // (10/4 + 4/2 + 4/1 + 0) / 4 microbatches: the empty one counts, its tokens clamped to 1.
  EXPECT_NEAR(objective(false), (2.5 + 2.0 + 4.0 + 0.0) / 4.0, 1e-6);
}

TEST(LossScales, WithoutMaskedTokensBothAreTheSameToTheBit) {
  // 8 microbatches of 2 × 32 tokens over the batch, this rank's 4.
  const std::vector<int64_t> full(4, 64);
  EXPECT_EQ(microbatch_loss_scales(true, full, 8, 8 * 64.0), microbatch_loss_scales(false, full, 8, 8 * 64.0));
  EXPECT_EQ(microbatch_loss_scales(true, full, 8, 8 * 64.0).front(), static_cast<float>(1.0 / 512));
}

}  // namespace
}  // namespace tessel
