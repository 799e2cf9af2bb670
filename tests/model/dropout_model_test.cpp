// Dropout in the model (--hidden-dropout, --attention-dropout): it changes the training forward,
// its gradient is the dropped model's (against finite differences of the same masks, redrawn
// from the same samples), and a forward without the rows' samples — evaluation and inference,
// whose forwards run without gradients — has none.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/param_gradient_check.h"
#include "support/printers.h"
#include "support/tiny_model.h"
#include "tessel/core/philox.h"

namespace tessel {
namespace {

using testing::TinyModel;

ModelConfig dropout_config(Arch arch, float hidden, float attention) {
  ModelConfig c = testing::tiny_config(arch);
  c.hidden_dropout = hidden;
  c.attention_dropout = attention;
  return c;
}

class ModelDropout : public ::testing::TestWithParam<Arch> {};

// The samples are asked for only by a forward with gradients (the executor leaves them out of
// evaluation's); without them the model is the undropped one, bit for bit; with them each kind
// of dropout changes the loss.
TEST_P(ModelDropout, ChangesTheTrainingLossAndNothingWithoutGradients) {
  TinyModel plain(dropout_config(GetParam(), 0, 0), 2);
  TinyModel dropped(dropout_config(GetParam(), 0.1f, 0.1f), 2);
  bool asks = false;
  for (const MicrobatchInput& input : dropped.chunk.microbatch_inputs({.tokens = 12}))
    if (input.name == "sample_ids") asks = input.read == InputRead::WithGradients;
  EXPECT_TRUE(asks);
  for (const MicrobatchInput& input : plain.chunk.microbatch_inputs({.tokens = 12}))
    EXPECT_NE(input.name, "sample_ids");

  const double want = plain.loss(true);
  EXPECT_EQ(dropped.loss(false), want);
  EXPECT_GT(std::abs(dropped.loss(true) - want), 1e-4 * want);
  for (auto [hidden, attention] : {std::pair{0.1f, 0.0f}, {0.0f, 0.1f}}) {
    TinyModel one(dropout_config(GetParam(), hidden, attention), 2);
    EXPECT_GT(std::abs(one.loss(true) - want), 1e-5 * want) << hidden << " " << attention;
  }
  // The same samples draw the same masks: the training forward again gives the same loss.
  EXPECT_EQ(dropped.loss(true), dropped.loss(true));
  // Other samples, other masks.
  const double before = dropped.loss(true);
  for (int32_t& s : dropped.samples) s += 2;
  EXPECT_NE(dropped.loss(true), before);
}

// Every parameter's gradient with dropout against central differences of the dropped loss (the
// masks are the same at every evaluation: they are keyed by the rows' samples and positions).
TEST_P(ModelDropout, GradientMatchesFiniteDifferences) {
  TinyModel m(dropout_config(GetParam(), 0.2f, 0.2f), 2);
  m.spread_weights();
  m.params.zero_grads();
  m.loss(true, 1.0f / m.tokens.size());
  m.chunk.backward(m.acts, nullptr, nullptr);
  for (const Param& p : m.params.params()) {
    const auto [error, norm] = testing::check_param_gradient(p, [&] { return m.loss(true); }, 3e-3f);
    // 3e-3 where the undropped model's check allows 2e-3: the kept units' 1/(1 − p) sharpens the
    // curvature the central difference's truncation error grows with; a wrong mask is O(1).
    EXPECT_LT(error, 3e-3 * norm + 1e-5) << p.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Arches, ModelDropout, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return arch_name(info.param); });

}  // namespace
}  // namespace tessel
