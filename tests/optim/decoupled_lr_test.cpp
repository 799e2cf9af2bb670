// --decoupled-lr and --decoupled-min-lr (Megatron's param group of the input embedding and the
// output layer): the group's schedule against OptimizerParamScheduler.get_lr's formula with the
// group's max_lr and min_lr, hand-computed; AdamW stepping the group at its own rate and the
// others at theirs; the model's group is Megatron's is_embedding_or_output_parameter; the rules.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "tessel/core/params.h"
#include "tessel/kernels/kernels.h"
#include "tessel/model/config.h"
#include "tessel/model/param_groups.h"
#include "tessel/optim/adamw.h"
#include "tessel/optim/lr_schedule.h"

namespace tessel {
namespace {

// Warmup 10 iterations from 1e-5 (G 4: 40 samples), cosine to iteration 110 (440 samples).
LrScheduleConfig main_schedule() {
  return {.lr = 1e-3f, .min_lr = 1e-4f, .warmup_init = 1e-5f, .warmup_iters = 10, .train_iters = 110,
          .style = LrDecayStyle::Cosine, .global_batch = 4};
}

TEST(DecoupledLr, FollowsTheMainScheduleWithItsOwnPeakAndFloor) {
  const LrSchedule group(decoupled_schedule(main_schedule(), 5e-3f, 2e-4f));
  // Warmup: init + (max_lr − init) · steps / warmup, from the same init.
  EXPECT_FLOAT_EQ(group.for_step(0), 1e-5f);
  EXPECT_FLOAT_EQ(group.for_step(5), 1e-5f + (5e-3f - 1e-5f) * 0.5f);
  EXPECT_FLOAT_EQ(group.for_step(10), 5e-3f);
  // Cosine: min_lr + ½(cos(π·ratio) + 1)(max_lr − min_lr); halfway the mean of the two.
  EXPECT_FLOAT_EQ(group.for_step(60), 2e-4f + 0.5f * (5e-3f - 2e-4f));
  EXPECT_FLOAT_EQ(group.for_step(35),
                  static_cast<float>(2e-4 + 0.5 * (std::cos(std::numbers::pi * 0.25) + 1) * (5e-3 - 2e-4)));
  EXPECT_FLOAT_EQ(group.for_step(111), 2e-4f);  // past the decay: the group's min_lr
  // Without --decoupled-min-lr the floor is --min-lr (the group's min_lr is the scheduler's).
  EXPECT_FLOAT_EQ(LrSchedule(decoupled_schedule(main_schedule(), 5e-3f, std::nullopt)).for_step(200), 1e-4f);
}

TEST(DecoupledLr, RulesNameTheFlags) {
  EXPECT_TRUE(decoupled_lr_violations(main_schedule(), std::nullopt, 5.0f).empty());  // ignored, as Megatron
  EXPECT_TRUE(decoupled_lr_violations(main_schedule(), 5e-3f, 2e-4f).empty());
  const std::vector<std::string> v = decoupled_lr_violations(main_schedule(), 1e-6f, std::nullopt);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], "--min-lr (the decoupled group's floor) 0.0001 is not within [0, --decoupled-lr 1e-06]");
  EXPECT_EQ(v[1], "--lr-warmup-init 1e-05 is above --decoupled-lr 1e-06: the decoupled group's warmup starts there too");
  EXPECT_EQ(decoupled_lr_violations(main_schedule(), NAN, std::nullopt).front(),
            "--decoupled-lr nan must be a finite number ≥ 0");
  EXPECT_EQ(decoupled_lr_violations(main_schedule(), 1e-3f, 2e-3f).front(),
            "--decoupled-min-lr 0.002 is not within [0, --decoupled-lr 0.001]");
}

// Each parameter steps as a one-rate AdamW at its group's rate would step it.
TEST(DecoupledLr, AdamWStepsTheGroupAtItsRate) {
  const auto registry = [] {
    ParamRegistry reg;
    reg.add("model.embed_tokens.weight", {4, 3}, ParamInit::Normal, 0.5f, true);
    reg.add("model.layers.0.mlp.up_proj.weight", {3, 5}, ParamInit::Normal, 0.5f, true);
    reg.add("lm_head.weight", {4, 3}, ParamInit::Normal, 0.5f, true);
    reg.finalize();
    reg.init_values(3);
    for (int64_t i = 0; i < reg.numel(); ++i) reg.grads()[i] = 0.01f * static_cast<float>(i % 7) - 0.03f;
    return reg;
  };
  ModelConfig cfg;
  cfg.arch = Arch::Llama;
  ParamRegistry grouped = registry(), at_lr = registry(), at_decoupled = registry();
  const OptimizerConfig adam{.weight_decay = 0.1f};
  AdamW both(cpu_kernels(), grouped, adam), plain(cpu_kernels(), at_lr, adam), fast(cpu_kernels(), at_decoupled, adam);
  both.set_decoupled_group([&](const Param& p) { return is_embedding_or_output_param(p, cfg); });
  for (int t = 0; t < 3; ++t) {
    both.step({1e-2f, 5e-2f});
    plain.step(1e-2f);
    fast.step(5e-2f);
  }
  for (const Param& p : grouped.params()) {
    const bool decoupled = p.name != "model.layers.0.mlp.up_proj.weight";
    const Param& want = (decoupled ? at_decoupled : at_lr).get(p.name);
    for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(p.value[i], want.value[i]) << p.name << " " << i;
  }
}

// Megatron's is_embedding_or_output_parameter: the word embeddings and the output layer, not
// GPT-2's position embeddings nor a layer's weights.
TEST(DecoupledLr, TheGroupIsTheEmbeddingAndTheOutputLayer) {
  ModelConfig gpt2;
  gpt2.arch = Arch::GPT2;
  const auto named = [](const char* name) {
    Param p;
    p.name = name;
    return p;
  };
  EXPECT_TRUE(is_embedding_or_output_param(named("transformer.wte.weight"), gpt2));
  EXPECT_FALSE(is_embedding_or_output_param(named("transformer.wpe.weight"), gpt2));
  EXPECT_FALSE(is_embedding_or_output_param(named("transformer.h.0.mlp.c_fc.weight"), gpt2));
  ModelConfig llama;
  llama.arch = Arch::Llama;
  EXPECT_TRUE(is_embedding_or_output_param(named("model.embed_tokens.weight"), llama));
  EXPECT_TRUE(is_embedding_or_output_param(named("lm_head.weight"), llama));
  EXPECT_FALSE(is_embedding_or_output_param(named("model.norm.weight"), llama));
}

}  // namespace
}  // namespace tessel
