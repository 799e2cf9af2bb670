// Optimizer post-validation (optim/post_validation.h): a step taken before the gradient norm is
// known and validated once it is ends bit for bit where the plain step (clip, then step, or skip
// for a non-finite norm) ends, whether the step stood, was clipped or had a NaN in it; with the
// distributed optimizer's owned ranges too. Between the eager step and its validation the
// gradients are overwritten, as the next iteration's backward overwrites them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <vector>

#include "support/weight_and_bias.h"
#include "tessel/kernels/kernels.h"
#include "tessel/optim/adamw.h"
#include "tessel/optim/post_validation.h"

namespace tessel {
namespace {

// Gradients of one iteration, scaled so that their norm is about `scale` · 8.
void set_grads(ParamRegistry& reg, int iteration, float scale, bool nan) {
  for (int64_t i = 0; i < reg.numel(); ++i)
    reg.grads()[i] = scale * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(iteration));
  if (nan) reg.grads()[reg.numel() / 2] = std::numeric_limits<float>::quiet_NaN();
}

std::vector<float> copy(const float* x, int64_t n) { return std::vector<float>(x, x + n); }

struct Case {
  float scale;  // gradient size: below the clip, above it
  bool nan;
  bool distributed;  // owned ranges as a distributed optimizer's shard
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "gradients ×" << c.scale << (c.nan ? ", a NaN" : "") << (c.distributed ? ", owned ranges" : "");
}

class PostValidation : public ::testing::TestWithParam<Case> {};

TEST_P(PostValidation, EndsWhereThePlainStepEnds) {
  const Case c = GetParam();
  const Kernels& k = cpu_kernels();
  ParamRegistry plain_reg = testing::weight_and_bias(), eager_reg = testing::weight_and_bias();
  OptimizerConfig cfg;
  cfg.clip_grad = 1.0f;
  std::vector<FlatRange> owned;
  if (c.distributed) owned = {{3, 40}, {50, plain_reg.numel() - 2}};
  AdamW plain(k, plain_reg, cfg, owned), eager(k, eager_reg, cfg, owned);
  EagerStep post(k, eager, eager_reg);
  // Three iterations, the second the one under test; the others plain, below the clip.
  for (int it = 1; it <= 3; ++it) {
    const float scale = it == 2 ? c.scale : 0.01f;
    const bool nan = it == 2 && c.nan;
    set_grads(plain_reg, it, scale, nan);
    set_grads(eager_reg, it, scale, nan);
    const double norm = std::sqrt(plain.grad_sq_sum());
    const float lr = 1e-2f * static_cast<float>(it);
    const StepVerdict want = checked_step(plain, norm, lr);
    post.step(lr);
    set_grads(eager_reg, it + 10, 3.0f, false);  // the next iteration's backward
    const StepVerdict got = post.validate(norm);
    EXPECT_EQ(got, want) << "iteration " << it;
    if (it == 2) {
      EXPECT_EQ(want, c.nan ? StepVerdict::Skipped : c.scale > 0.5f ? StepVerdict::Clipped : StepVerdict::Plain);
    }
    const int64_t n = plain_reg.numel();
    EXPECT_EQ(copy(eager_reg.values(), n), copy(plain_reg.values(), n)) << "iteration " << it;
    EXPECT_EQ(eager.step_count(), plain.step_count());
    EXPECT_EQ(copy(eager.exp_avg(), plain.numel()), copy(plain.exp_avg(), plain.numel()));
    EXPECT_EQ(copy(eager.exp_avg_sq(), plain.numel()), copy(plain.exp_avg_sq(), plain.numel()));
    if (got != StepVerdict::Plain)  // redone: the step's own (clipped) gradients are back
      for (const FlatRange& r : eager.owned())
        for (int64_t i = r.begin; i < r.end; ++i)
          if (!std::isnan(plain_reg.grads()[i])) {
            ASSERT_EQ(eager_reg.grads()[i], plain_reg.grads()[i]) << i;
          }
  }
}

INSTANTIATE_TEST_SUITE_P(Verdicts, PostValidation,
                         ::testing::Values(Case{0.01f, false, false}, Case{2.0f, false, false},
                                           Case{0.01f, true, false}, Case{2.0f, false, true},
                                           Case{0.01f, true, true}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return std::string(c.nan ? "nan" : c.scale > 0.5f ? "clipped" : "plain") +
                                  (c.distributed ? "_owned_ranges" : "");
                         });

}  // namespace
}  // namespace tessel
