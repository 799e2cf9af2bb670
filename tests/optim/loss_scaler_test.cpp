// The loss scaler (optim/loss_scaler.h) step by step against the rules of Megatron-LM's
// megatron/core/optimizer/grad_scaler.py (DynamicGradScaler.update, ConstantGradScaler) and the
// choice of get_megatron_optimizer, each expected state written out by hand from those rules.
#include "tessel/optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tessel/core/error.h"

namespace tessel {
namespace {

using State = LossScaler::State;

TEST(LossScaler, ChosenAsMegatronChoosesItsGradScaler) {
  LossScaleOptions dynamic, given, zero;
  given.loss_scale = 128.0f;
  zero.loss_scale = 0.0f;  // `if config.loss_scale`: 0 is not given
  EXPECT_EQ(loss_scaling(dynamic, Precision::FP16, false), LossScaling::Dynamic);
  EXPECT_EQ(loss_scaling(zero, Precision::FP16, false), LossScaling::Dynamic);
  EXPECT_EQ(loss_scaling(given, Precision::FP16, false), LossScaling::Constant);
  EXPECT_EQ(loss_scaling(given, Precision::BF16, false), LossScaling::Constant);
  EXPECT_EQ(loss_scaling(given, Precision::FP32, true), LossScaling::Constant);  // the distributed optimizer
  EXPECT_EQ(loss_scaling(given, Precision::FP32, false), LossScaling::None);     // FP32Optimizer: none
  EXPECT_EQ(loss_scaling(dynamic, Precision::BF16, true), LossScaling::None);
  EXPECT_EQ(loss_scaling(dynamic, Precision::FP32, false), LossScaling::None);
}

TEST(LossScaler, DynamicFollowsGradScalerPy) {
  LossScaleOptions o;  // Megatron's defaults: 2^32, min 1, window 1000, hysteresis 2
  o.loss_scale_window = 3;
  LossScaler s(LossScaling::Dynamic, o);
  EXPECT_EQ(s.state(), (State{0x1p32f, 0, 2}));
  s.update(true);  // an overflow: the growth tracker zeroed, one hysteresis used, the scale kept
  EXPECT_EQ(s.state(), (State{0x1p32f, 0, 1}));
  s.update(true);  // the hysteresis runs out: backoff 0.5
  EXPECT_EQ(s.state(), (State{0x1p31f, 0, 0}));
  s.update(true);  // and from then on every overflow backs off (the tracker refills only on growth)
  EXPECT_EQ(s.state(), (State{0x1p30f, 0, -1}));
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.state(), (State{0x1p30f, 2, -1}));
  s.update(true);  // an overflow inside the window starts it again
  EXPECT_EQ(s.state(), (State{0x1p29f, 0, -2}));
  s.update(false);
  s.update(false);
  s.update(false);  // the window's third clean iteration: growth 2, the trackers reset
  EXPECT_EQ(s.state(), (State{0x1p30f, 0, 2}));
  s.update(true);  // hysteresis again: kept once
  EXPECT_EQ(s.state(), (State{0x1p30f, 0, 1}));
  EXPECT_EQ(s.inv_scale(), 0x1p-30f);
}

TEST(LossScaler, DynamicStopsAtTheMinimum) {
  LossScaleOptions o;
  o.initial_loss_scale = 8.0f;
  o.min_loss_scale = 3.0f;
  o.hysteresis = 1;
  LossScaler s(LossScaling::Dynamic, o);
  s.update(true);
  EXPECT_EQ(s.scale(), 4.0f);
  s.update(true);  // max(2, 3)
  EXPECT_EQ(s.scale(), 3.0f);
  s.update(true);
  EXPECT_EQ(s.scale(), 3.0f);
  EXPECT_EQ(s.inv_scale(), static_cast<float>(1.0 / 3.0));  // 1/scale in double, then fp32
}

TEST(LossScaler, AFractionalWindowNeverGrows) {
  LossScaleOptions o;  // Megatron compares its int tracker with the float window
  o.initial_loss_scale = 4.0f;
  o.loss_scale_window = 2.5;
  LossScaler s(LossScaling::Dynamic, o);
  for (int i = 0; i < 10; ++i) s.update(false);
  EXPECT_EQ(s.state(), (State{4.0f, 10, 2}));
}

TEST(LossScaler, ConstantAndNoneIgnoreOverflows) {
  LossScaleOptions o;
  o.loss_scale = 1024.0f;
  LossScaler constant(LossScaling::Constant, o), none(LossScaling::None, o);
  for (bool found_inf : {true, true, false, true}) {
    constant.update(found_inf);
    none.update(found_inf);
  }
  EXPECT_EQ(constant.scale(), 1024.0f);
  EXPECT_EQ(none.scale(), 1.0f);
  EXPECT_EQ(none.inv_scale(), 1.0f);
}

TEST(LossScaler, CheckpointRecordRestoresTheStateExactly) {
  LossScaleOptions o;
  o.initial_loss_scale = 0x1.8p20f;
  LossScaler a(LossScaling::Dynamic, o), b(LossScaling::Dynamic, LossScaleOptions{});
  a.update(true);
  a.update(true);
  a.update(false);
  b.restore(nlohmann::json::parse(a.to_json().dump()), "save");
  EXPECT_EQ(b.state(), a.state());
  EXPECT_EQ(a.to_json()["scale"].get<double>(), 0x1.8p19);
  EXPECT_THROW(b.restore(nlohmann::json{{"scale", -1.0}, {"growth_tracker", 0}, {"hysteresis_tracker", 1}}, "save"),
               Error);
  EXPECT_THROW(b.restore(nlohmann::json{{"scale", 2.0}}, "save"), Error);
}

TEST(LossScaler, ViolationsNameEachFlag) {
  LossScaleOptions o;
  o.initial_loss_scale = 2.0f;
  o.min_loss_scale = 4.0f;
  o.loss_scale_window = 0;
  o.hysteresis = 0;
  const std::vector<std::string> v = loss_scale_violations(o, LossScaling::Dynamic);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_NE(v[0].find("--min-loss-scale 4 is above --initial-loss-scale 2"), std::string::npos) << v[0];
  EXPECT_NE(v[1].find("--loss-scale-window"), std::string::npos) << v[1];
  EXPECT_NE(v[2].find("--hysteresis"), std::string::npos) << v[2];
  EXPECT_TRUE(loss_scale_violations(o, LossScaling::None).empty());  // settings of a scaler not used
  o.loss_scale = -8.0f;
  EXPECT_EQ(loss_scale_violations(o, LossScaling::Constant).size(), 1u);
}

}  // namespace
}  // namespace tessel
