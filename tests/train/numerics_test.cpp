// train/numerics.h in one process: the fault-injection syntax, the fault options' rules, the
// weights check, and the guard's decisions — a finite step goes on, a non-finite one stops with
// the iteration and the parameter named (reproducible or transient after the recomputation) or,
// without the check, is reported as not to be taken; a spiky loss is recomputed and reported; a
// non-finite evaluation loss stops the run under the check.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/fixtures.h"
#include "tessel/parallel/groups.h"
#include "tessel/train/numerics.h"
#include "tessel/ckpt/finite_weights.h"

namespace tessel {
namespace {

using testing::expect_error;

TEST(FaultInjection, ParsesEveryKind) {
  EXPECT_EQ(parse_fault_injection("").kind, FaultInjection::Kind::None);
  const FaultInjection f = parse_fault_injection("nan-grad:7:3");
  EXPECT_EQ(f.kind, FaultInjection::Kind::NanGrad);
  EXPECT_EQ(f.iteration, 7);
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(parse_fault_injection("transient-nan-grad:2").kind, FaultInjection::Kind::TransientNanGrad);
  EXPECT_EQ(parse_fault_injection("transient-nan-grad:2").rank, 0);
  EXPECT_EQ(parse_fault_injection("loss-spike:104").iteration, 104);
}

TEST(FaultInjection, RefusesMalformedText) {
  expect_error([] { parse_fault_injection("nan-grad"); }, {"--inject-fault nan-grad", "KIND:ITERATION"});
  expect_error([] { parse_fault_injection("bit-flip:3"); }, {"unknown kind 'bit-flip'"});
  expect_error([] { parse_fault_injection("nan-grad:-3"); }, {"'-3' is not a whole non-negative number"});
  expect_error([] { parse_fault_injection("nan-grad:2.5"); }, {"'2.5'"});
}

TEST(FaultOptions, ViolationsNameEachFlag) {
  FaultOptions o;
  EXPECT_TRUE(fault_violations(o).empty());
  o.rerun_mode = "report_stats";
  o.exit_duration_mins = -1;
  o.distributed_timeout_minutes = 0;
  o.distributed_timeout_seconds = std::numeric_limits<double>::infinity();
  o.inject = "nan-grad:x";
  const std::vector<std::string> v = fault_violations(o);
  ASSERT_EQ(v.size(), 5u);
  EXPECT_NE(v[0].find("--rerun-mode report_stats"), std::string::npos);
  EXPECT_NE(v[1].find("--inject-fault"), std::string::npos);
  EXPECT_NE(v[2].find("--exit-duration-in-mins"), std::string::npos);
  EXPECT_NE(v[3].find("--distributed-timeout-seconds"), std::string::npos);
  EXPECT_NE(v[4].find("--distributed-timeout-minutes"), std::string::npos);
}

TEST(FaultOptions, SecondsOverrideMinutes) {
  FaultOptions o;
  EXPECT_EQ(o.distributed_timeout(), 600.0);
  o.distributed_timeout_seconds = 3;
  EXPECT_EQ(o.distributed_timeout(), 3.0);
}

ParamRegistry two_params() {
  ParamRegistry reg;
  reg.add("a.weight", {4, 3}, ParamInit::Normal, 0.5f, true);
  reg.add("b.bias", {5}, ParamInit::Normal, 0.5f, false);
  reg.finalize();
  reg.init_values(3);
  return reg;
}

void poison(ParamRegistry& reg, const std::string& name, int64_t element, float value, bool grad) {
  Param& p = reg.get(name);
  (grad ? p.grad : p.value)[element] = value;
}

TEST(RequireFiniteWeights, NamesTheSourceParameterAndElement) {
  ParamRegistry reg = two_params();
  require_finite_weights(cpu_kernels(), reg, "file.safetensors");  // finite: nothing thrown
  poison(reg, "b.bias", 3, std::numeric_limits<float>::infinity(), false);
  expect_error([&] { require_finite_weights(cpu_kernels(), reg, "file.safetensors"); },
               {"file.safetensors: b.bias holds a non-finite value (inf at element 3 of the 5"});
}

struct Guarded {
  ParamRegistry params = two_params();
  ProcessGroups groups = ProcessGroups::single();
  TrainLog log{10, 1, "", false, true};
  FaultOptions options;
  int recomputed = 0;
};

TEST(NumericsGuard, FiniteStepGoesOn) {
  Guarded g;
  NumericsGuard guard(cpu_kernels(), g.options, g.params, g.groups, g.log);
  NumericsGuard::Result r{2.5, 1.0};
  EXPECT_TRUE(guard.check(3, r, [&] { ++g.recomputed; return r; }));
  EXPECT_EQ(g.recomputed, 0);
}

TEST(NumericsGuard, WithoutTheCheckANonFiniteStepIsNotTaken) {
  Guarded g;
  g.options.check_nan = false;
  NumericsGuard guard(cpu_kernels(), g.options, g.params, g.groups, g.log);
  NumericsGuard::Result r{std::nan(""), 1.0};
  EXPECT_FALSE(guard.check(3, r, [&] { ++g.recomputed; return r; }));
  EXPECT_EQ(g.recomputed, 0);
}

TEST(NumericsGuard, NonFiniteEvaluationLossStopsUnderTheCheck) {
  Guarded g;
  NumericsGuard guard(cpu_kernels(), g.options, g.params, g.groups, g.log);
  guard.check_evaluation(4, "valid", 3.5);  // finite: nothing thrown
  expect_error([&] { guard.check_evaluation(4, "valid", std::nan("")); },
               {"iteration 4: the valid loss nan is not finite (--check-for-nan-in-loss-and-grad)"});
  g.options.check_nan = false;
  guard.check_evaluation(4, "test", std::numeric_limits<double>::infinity());  // a warning only
}

std::string stop_message(Guarded& g, NumericsGuard::Result first, NumericsGuard::Result again) {
  NumericsGuard guard(cpu_kernels(), g.options, g.params, g.groups, g.log);
  try {
    guard.check(12, first, [&] {
      ++g.recomputed;
      return again;
    });
  } catch (const JobError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no JobError";
  return "";
}

TEST(NumericsGuard, ReproducibleFaultStopsNamingTheParameter) {
  Guarded g;
  poison(g.params, "a.weight", 7, std::nan(""), true);
  const std::string msg = stop_message(g, {3.0, std::nan("")}, {3.0, std::nan("")});
  EXPECT_EQ(g.recomputed, 1);
  EXPECT_NE(msg.find("iteration 12: loss 3 and gradient norm nan: not finite"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a.weight (element 7) on rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a reproducible fault"), std::string::npos) << msg;
}

TEST(NumericsGuard, TransientFaultIsToldApart) {
  Guarded g;
  const std::string msg = stop_message(g, {std::numeric_limits<double>::infinity(), 1.0}, {3.0, 1.0});
  EXPECT_EQ(g.recomputed, 1);
  EXPECT_NE(msg.find("a transient fault"), std::string::npos) << msg;
  EXPECT_NE(msg.find("first non-finite gradient: none (only the loss)"), std::string::npos) << msg;
}

TEST(NumericsGuard, RerunDisabledStopsAtOnce) {
  Guarded g;
  g.options.rerun_mode = "disabled";
  const std::string msg = stop_message(g, {std::nan(""), 1.0}, {3.0, 1.0});
  EXPECT_EQ(g.recomputed, 0);
  EXPECT_NE(msg.find("--rerun-mode disabled: not recomputed"), std::string::npos) << msg;
}

TEST(NumericsGuard, SpikyLossIsRecomputedAndTrainingGoesOn) {
  Guarded g;
  g.options.check_spiky_loss = true;
  NumericsGuard guard(cpu_kernels(), g.options, g.params, g.groups, g.log);
  auto again = [&] {
    ++g.recomputed;
    return NumericsGuard::Result{60.0, 1.0};
  };
  for (int it = 1; it <= 100; ++it) {
    NumericsGuard::Result r{5.0 - it * 0.01, 1.0};
    EXPECT_TRUE(guard.check(it, r, again));
  }
  NumericsGuard::Result below{49.0, 1.0};  // under 10 × the largest of the first 100 (4.99)
  EXPECT_TRUE(guard.check(101, below, again));
  EXPECT_EQ(g.recomputed, 0);
  NumericsGuard::Result spike{60.0, 1.0};
  EXPECT_TRUE(guard.check(102, spike, again));
  EXPECT_EQ(g.recomputed, 1);
}

}  // namespace
}  // namespace tessel
