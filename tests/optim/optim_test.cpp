#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <numbers>
#include <initializer_list>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/philox.h"
#include "tessel/kernels/kernels.h"
#include "tessel/core/params.h"
#include "tessel/optim/adamw.h"
#include "tessel/optim/lr_schedule.h"
#include "support/reference.h"

namespace tessel {
namespace {

std::vector<float> normals(uint64_t stream, int64_t n, float scale) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = scale * random_normal(42, stream, i);
  return x;
}

// A registry with a decayed weight, an undecayed bias and a big weight that spans several
// blocks of the deterministic sum.
ParamRegistry small_registry() {
  ParamRegistry reg;
  reg.add("h.weight", {3, 5}, ParamInit::Normal, 0.5f, true);
  reg.add("h.bias", {5}, ParamInit::Normal, 0.5f, false);
  reg.add("big.weight", {300001}, ParamInit::Normal, 0.02f, true);
  reg.finalize();
  reg.init_values(3);
  return reg;
}

TEST(AdamW, StepMatchesReferencePerParameter) {
  ParamRegistry reg = small_registry();
  OptimizerConfig cfg;
  cfg.weight_decay = 0.1f;
  AdamW opt(cpu_kernels(), reg, cfg);
  std::vector<ref::AdamW> refs;
  for (const Param& p : reg.params())
    refs.emplace_back(std::vector<float>(p.value, p.value + p.numel()));
  const float lrs[3] = {1e-3f, 3e-3f, 2e-3f};
  for (int t = 1; t <= 3; ++t) {
    for (size_t k = 0; k < reg.params().size(); ++k) {
      Param& p = reg.params()[k];
      std::vector<float> g = normals(100 * t + k, p.numel(), 0.1f);
      std::copy(g.begin(), g.end(), p.grad);
      const double wd = p.weight_decay ? cfg.weight_decay : 0.0;
      refs[k].step(g, lrs[t - 1], cfg.beta1, cfg.beta2, cfg.eps, wd, t);
    }
    opt.step(lrs[t - 1]);
    EXPECT_EQ(opt.step_count(), t);
    for (size_t k = 0; k < reg.params().size(); ++k) {
      const Param& p = reg.params()[k];
      for (int64_t i = 0; i < p.numel(); ++i)
        ASSERT_NEAR(p.value[i], refs[k].p[i], 2e-6 * std::abs(refs[k].p[i]) + 1e-9)
            << p.name << " step " << t << " i " << i;
      // The moments live at the parameter's offset in the flat buffers.
      EXPECT_NEAR(opt.exp_avg()[p.offset], refs[k].m[0], 1e-6 * std::abs(refs[k].m[0]));
      EXPECT_NEAR(opt.exp_avg_sq()[p.offset + p.numel() - 1], refs[k].v.back(),
                  1e-6 * refs[k].v.back());
    }
  }
}

TEST(AdamW, WeightDecaySkipsNoDecayParameters) {
  ParamRegistry reg = small_registry();
  const Param& w = reg.get("h.weight");
  const Param& b = reg.get("h.bias");
  const std::vector<float> w0(w.value, w.value + w.numel()), b0(b.value, b.value + b.numel());
  OptimizerConfig cfg;
  cfg.weight_decay = 0.5f;
  AdamW opt(cpu_kernels(), reg, cfg);
  // Zero gradients: the Adam part moves nothing (m = 0), only decoupled decay acts.
  opt.step(0.1f);
  for (int64_t i = 0; i < w.numel(); ++i) EXPECT_FLOAT_EQ(w.value[i], w0[i] * (1.0f - 0.1f * 0.5f));
  for (int64_t i = 0; i < b.numel(); ++i) EXPECT_EQ(b.value[i], b0[i]);
}

TEST(AdamW, GradNormAndClipping) {
  ParamRegistry reg = small_registry();
  double expected = 0.0;
  for (int64_t i = 0; i < reg.numel(); ++i) {
    reg.grads()[i] = 0.01f * random_normal(9, 9, i);
    expected += static_cast<double>(reg.grads()[i]) * reg.grads()[i];
  }
  OptimizerConfig cfg;
  cfg.clip_grad = 1.0f;
  AdamW opt(cpu_kernels(), reg, cfg);
  EXPECT_NEAR(opt.grad_sq_sum(), expected, 1e-12 * expected);
  const float norm = opt.grad_norm();
  ASSERT_GT(norm, 2.0f);  // ≈ 0.01·sqrt(300021) ≈ 5.5: clipping must act
  const std::vector<float> before(reg.grads(), reg.grads() + reg.numel());
  const float scale = opt.clip(norm);
  EXPECT_FLOAT_EQ(scale, 1.0f / (norm + 1e-6f));
  EXPECT_NEAR(opt.grad_norm(), 1.0f, 1e-5f);
  EXPECT_EQ(reg.grads()[17], before[17] * scale);
  // Below the threshold, or with clipping off, gradients stay as they are.
  EXPECT_EQ(opt.clip(0.5f), 1.0f);
  EXPECT_EQ(reg.grads()[17], before[17] * scale);
  OptimizerConfig off = cfg;
  off.clip_grad = 0.0f;
  AdamW unclipped(cpu_kernels(), reg, off);
  const float g17 = reg.grads()[17];
  EXPECT_EQ(unclipped.clip(100.0f), 1.0f);
  EXPECT_EQ(reg.grads()[17], g17);
}

TEST(AdamW, GradSqSumIsIndependentOfThreadCount) {
  ParamRegistry reg = small_registry();
  for (int64_t i = 0; i < reg.numel(); ++i) reg.grads()[i] = random_normal(5, 5, i);
  AdamW opt(cpu_kernels(), reg, OptimizerConfig{});
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = opt.grad_sq_sum();
  omp_set_num_threads(3);
  const double three = opt.grad_sq_sum();
  omp_set_num_threads(threads);
  EXPECT_EQ(one, three);
}

TEST(AdamW, RejectsBadConfig) {
  ParamRegistry reg = small_registry();
  OptimizerConfig cfg;
  cfg.beta2 = 1.0f;
  cfg.eps = 0.0f;
  try {
    AdamW opt(cpu_kernels(), reg, cfg);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--adam-beta2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--adam-eps"), std::string::npos) << msg;
  }
}

LrScheduleConfig schedule(LrDecayStyle style) {
  LrScheduleConfig c;
  c.lr = 0.01f;
  c.min_lr = 0.001f;
  c.warmup_iters = 10;
  c.train_iters = 110;
  c.style = style;
  return c;
}

// Figures from OptimizerParamScheduler.get_lr's formula (megatron/core/optimizer_param_scheduler.py)
// at num_steps = samples consumed; with G = 1 a sample is an iteration.
TEST(LrSchedule, WarmupThenCosine) {
  LrSchedule s(schedule(LrDecayStyle::Cosine));
  EXPECT_FLOAT_EQ(s.at_samples(0), 0.0f);       // warmup starts at --lr-warmup-init
  EXPECT_FLOAT_EQ(s.at_samples(1), 0.001f);     // 0.01 · 1/10
  EXPECT_FLOAT_EQ(s.at_samples(5), 0.005f);
  EXPECT_FLOAT_EQ(s.at_samples(10), 0.01f);     // warmup ends at the full lr
  EXPECT_FLOAT_EQ(s.at_samples(60), 0.0055f);   // halfway through decay: (lr + min_lr) / 2
  EXPECT_FLOAT_EQ(s.at_samples(35), 0.001f + 0.009f * 0.5f * (1.0f + std::numbers::sqrt2_v<float> / 2));
  EXPECT_FLOAT_EQ(s.at_samples(110), 0.001f);   // end of decay
  EXPECT_FLOAT_EQ(s.at_samples(500), 0.001f);   // and after it
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule linear(schedule(LrDecayStyle::Linear));
  EXPECT_FLOAT_EQ(linear.at_samples(35), 0.001f + 0.009f * 0.75f);
  EXPECT_FLOAT_EQ(linear.at_samples(85), 0.001f + 0.009f * 0.25f);
  EXPECT_FLOAT_EQ(linear.at_samples(110), 0.001f);
  LrScheduleConfig c = schedule(LrDecayStyle::Linear);
  c.decay_iters = 60;  // overrides train_iters
  EXPECT_FLOAT_EQ(LrSchedule(c).at_samples(35), 0.0055f);
  EXPECT_FLOAT_EQ(LrSchedule(c).at_samples(61), 0.001f);
  c.warmup_iters = 0;
  EXPECT_FLOAT_EQ(LrSchedule(c).at_samples(0), 0.01f);
  EXPECT_FLOAT_EQ(LrSchedule(c).at_samples(1), 0.001f + 0.009f * (59.0f / 60.0f));
  LrSchedule constant(schedule(LrDecayStyle::Constant));
  EXPECT_FLOAT_EQ(constant.at_samples(2), 0.002f);
  EXPECT_FLOAT_EQ(constant.at_samples(11), 0.01f);
  EXPECT_FLOAT_EQ(constant.at_samples(5000), 0.01f);
}

// Megatron's scheduler counts samples and steps after each successful optimizer step: the step
// after k of them runs at k·G samples, so the first runs at the warmup's start. Iteration flags
// are G samples each; --lr-warmup-fraction is a share of the decay; --lr-warmup-init raises the
// start.
TEST(LrSchedule, CountsSamplesAsMegatronsScheduler) {
  LrScheduleConfig iters = schedule(LrDecayStyle::Cosine);
  iters.global_batch = 8;
  const LrSchedule by_iters(iters);
  EXPECT_EQ(iters.decay_steps(), 880);
  EXPECT_EQ(iters.warmup_steps(), 80.0);
  EXPECT_FLOAT_EQ(by_iters.for_step(0), 0.0f);
  EXPECT_FLOAT_EQ(by_iters.for_step(1), 0.001f);  // 8 of 80 samples
  EXPECT_FLOAT_EQ(by_iters.for_step(10), 0.01f);
  EXPECT_FLOAT_EQ(by_iters.for_step(60), 0.0055f);

  LrScheduleConfig samples = iters;
  samples.train_iters = samples.warmup_iters = 0;
  samples.train_samples = 880;
  samples.warmup_samples = 80;
  EXPECT_EQ(samples.iterations(), 110);
  const LrSchedule by_samples(samples);
  for (int64_t k = 0; k <= 120; ++k) EXPECT_EQ(by_samples.for_step(k), by_iters.for_step(k)) << k;
  samples.train_samples = 885;  // Megatron's update_train_iters: whole batches
  EXPECT_EQ(samples.iterations(), 110);

  LrScheduleConfig fraction = iters;
  fraction.warmup_iters = 0;
  fraction.warmup_fraction = 1.0 / 11;  // of 880 samples: 80
  EXPECT_DOUBLE_EQ(fraction.warmup_steps(), 80.0);
  EXPECT_FLOAT_EQ(LrSchedule(fraction).for_step(5), 0.005f);

  LrScheduleConfig init = schedule(LrDecayStyle::Cosine);
  init.warmup_init = 0.002f;
  EXPECT_FLOAT_EQ(LrSchedule(init).at_samples(0), 0.002f);
  EXPECT_FLOAT_EQ(LrSchedule(init).at_samples(5), 0.006f);  // 0.002 + 0.008 · 5/10
}

// Every rule `c` breaks, a line each.
std::string all(const LrScheduleConfig& c) {
  std::string text;
  for (const std::string& m : lr_schedule_violations(c)) text += m + "\n";
  return text;
}

// Each of `rules` among those `c` breaks.
void expect_rules(const LrScheduleConfig& c, std::initializer_list<const char*> rules) {
  const std::string text = all(c);
  for (const char* rule : rules) EXPECT_NE(text.find(rule), std::string::npos) << rule << " missing from:\n" << text;
}

// Megatron's assertions: iteration- and sample-based flags are not mixed; one warmup length.
TEST(LrSchedule, IterationAndSampleFlagsAreNotMixed) {
  LrScheduleConfig c = schedule(LrDecayStyle::Linear);
  c.train_samples = 1000;
  c.warmup_fraction = 0.1;
  c.warmup_samples = 10;
  expect_rules(c, {"--train-iters with --train-samples", "--lr-warmup-iters with --train-samples",
                   "--lr-warmup-fraction and --lr-warmup-samples: give one"});
  c = schedule(LrDecayStyle::Linear);
  c.decay_samples = 100;
  c.warmup_fraction = 0.1;
  c.warmup_init = 0.5f;
  expect_rules(c, {"--lr-decay-samples without --train-samples",
                   "--lr-warmup-fraction and --lr-warmup-iters: give one",
                   "--lr-warmup-init 0.5 is not within [0, --lr 0.01]"});
}

// A given --lr-warmup-fraction outside [0, 1] is a broken flag, not "no warmup": a negative or
// NaN fraction was read as the flag's absence and the run trained without the warmup it asked for
// (Megatron's scheduler asserts on NaN: NaN × decay < decay is false).
TEST(LrSchedule, WarmupFractionBelowZeroOrNanIsRefused) {
  for (double fraction : {-0.5, -1.0, std::nan("")}) {
    LrScheduleConfig c = schedule(LrDecayStyle::Linear);
    c.warmup_iters = 0;
    c.warmup_fraction = fraction;
    expect_rules(c, {"is not within [0, 1]"});
    EXPECT_THROW(LrSchedule{c}, Error) << fraction;
  }
}

// Megatron's OptimizerParamScheduler asserts lr_decay_steps > 0, and get_optimizer_param_scheduler
// takes the run's length only for a decay not given (None): --lr-decay-iters 0 or
// --lr-decay-samples 0 is refused, not read as "decay over the run".
TEST(LrSchedule, DecayOfZeroIsRefusedAsMegatronAsserts) {
  LrScheduleConfig c = schedule(LrDecayStyle::Linear);
  c.warmup_iters = 0;
  c.decay_iters = 0;
  expect_rules(c, {"--lr-decay-iters 0 must be positive"});
  EXPECT_THROW(LrSchedule{c}, Error);
  c.decay_iters = {};  // left out: the run's length
  EXPECT_EQ(all(c), "");
  EXPECT_EQ(c.decay_steps(), c.train_iters);
  c.train_iters = 0;
  c.train_samples = 100;
  c.decay_samples = 0;
  expect_rules(c, {"--lr-decay-samples 0 must be positive"});
  c.decay_iters = 0;  // given under --train-samples: the other kind's flag, whatever its value
  expect_rules(c, {"--lr-decay-iters with --train-samples"});
}

// Megatron's OptimizerParamScheduler asserts 0 <= lr_warmup_steps < lr_decay_steps, the decay
// defaulting to the run's length, whatever the style; each form of the warmup is held to it, in
// the one list beside the other broken rules.
TEST(LrSchedule, WarmupEndsBeforeTheDecay) {
  LrScheduleConfig c = schedule(LrDecayStyle::Constant);
  c.train_iters = 2;
  c.warmup_iters = 2;
  c.min_lr = 0.5f;
  expect_rules(c, {"--lr-warmup-iters 2 is not below the decay's 2 iterations (--train-iters 2, as "
                   "--lr-decay-iters is not given)",
                   "--min-lr 0.5 is not within [0, --lr 0.01]"});
  c = schedule(LrDecayStyle::Cosine);
  c.decay_iters = 10;  // the decay, not the run, is the bound
  expect_rules(c, {"--lr-warmup-iters 10 is not below the decay's 10 iterations (--lr-decay-iters 10)"});
  EXPECT_THROW(LrSchedule{c}, Error);
  c.decay_iters = 11;
  EXPECT_EQ(all(c), "");
  c.warmup_iters = 0;
  c.warmup_fraction = 1;
  expect_rules(c, {"--lr-warmup-fraction 1 leaves no decay: the warmup must end before the decay's 11 "
                   "iterations (--lr-decay-iters 11)"});
  c.warmup_fraction = 0.99;
  EXPECT_EQ(all(c), "");

  c = schedule(LrDecayStyle::Linear);
  c.train_iters = c.warmup_iters = 0;
  c.train_samples = 100;
  c.warmup_samples = 100;
  expect_rules(c, {"--lr-warmup-samples 100 is not below the decay's 100 samples (--train-samples 100, as "
                   "--lr-decay-samples is not given)"});
  c.decay_samples = 200;
  EXPECT_EQ(all(c), "");
  c.warmup_samples = 250;
  expect_rules(c, {"--lr-warmup-samples 250 is not below the decay's 200 samples (--lr-decay-samples 200)"});
  // A resumed save's own lengths stand for the flags' (resume.cpp holds them to the same rule).
  c.saved_decay_steps = 300;
  c.saved_warmup_steps = 10;
  EXPECT_EQ(all(c), "");
}

TEST(LrSchedule, ParsesStylesAndRejectsBadConfig) {
  for (LrDecayStyle style : {LrDecayStyle::Constant, LrDecayStyle::Linear, LrDecayStyle::Cosine})
    EXPECT_EQ(parse_lr_decay_style(lr_decay_style_name(style)), style);
  try {
    parse_lr_decay_style("exponential");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exponential"), std::string::npos);
  }
  LrScheduleConfig c = schedule(LrDecayStyle::Cosine);
  c.min_lr = 0.1f;
  EXPECT_THROW(LrSchedule{c}, Error);
}

}  // namespace
}  // namespace tessel
