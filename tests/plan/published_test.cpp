// The published runs: the shipped A100 efficiencies are the ones fitted on the three calibration
// rows of Korthikanti et al. Table 5; fitted on every row but one, the efficiency model predicts
// the one left out within the targets (mean |error| ≤ 6 %, max ≤ 12 %); a published layout that
// was run is predicted as published, with its memory verdict and what makes it fit.
#include <gtest/gtest.h>

#include <cmath>

#include "tessel/core/error.h"
#include "tessel/plan/published.h"
#include "tessel/train/planned_run.h"

namespace tessel {
namespace {

const Efficiency& presets() {
  static const Efficiency e = efficiency_of(cluster_preset("a100-80gb"));
  return e;
}

TEST(PlanPublished, PresetEfficienciesAreTheFittedOnes) {
  std::vector<PublishedRun> calibration;
  for (const PublishedRun& r : korthikanti_table5())
    if (r.calibration) calibration.push_back(r);
  ASSERT_EQ(calibration.size(), 3u);
  const Efficiency fitted = fit_efficiency({0.8, 0.8, 0.8}, calibration, planned_run_violations);
  EXPECT_NEAR(fitted.gemm, presets().gemm, 0.006);
  EXPECT_NEAR(fitted.memory, presets().memory, 0.006);
  EXPECT_NEAR(fitted.network, presets().network, 0.006);
}

TEST(PlanPublished, KorthikantiTable5WithThePresets) {
  double sum = 0, worst = 0;
  const std::vector<PublishedRun> rows = korthikanti_table5();
  for (const PublishedRun& r : rows) {
    const double e = std::fabs(predict(r, presets(), planned_run_violations).error());
    sum += e, worst = std::max(worst, e);
  }
  EXPECT_LE(sum / rows.size(), 0.035);
  EXPECT_LE(worst, 0.08);
}

// Every row fitted on is left out once: the efficiencies fitted on the others predict it.
TEST(PlanPublished, LeaveOneOutMeetsItsTargets) {
  const std::vector<PublishedRun> all = published_runs();
  const LeaveOneOut loo = leave_one_out(all, presets(), planned_run_violations);
  size_t fitted_on = 0;
  for (const PublishedRun& r : all) fitted_on += r.in_fit;
  ASSERT_EQ(loo.rows.size(), fitted_on);
  ASSERT_GE(fitted_on, 26u);
  double sum = 0, worst = 0;
  for (const HeldOut& h : loo.rows) {
    const double e = std::fabs(h.prediction.error());
    sum += e, worst = std::max(worst, e);
    EXPECT_LE(h.fitted.gemm, 1.0);
    EXPECT_LE(h.fitted.network, 1.0);
    // A fold's efficiencies stay near the all-rows fit: one row moves them little.
    EXPECT_NEAR(h.fitted.gemm, loo.all_rows.gemm, 0.03) << h.prediction.row.name;
  }
  EXPECT_LE(sum / loo.rows.size(), 0.06);
  EXPECT_LE(worst, 0.12);
}

// Llama 3 405B on 16384 H100s ran; the planner gives its published TP, PP and DP, and shows how
// far over the limit it is and what makes it fit, instead of a slower layout.
TEST(PlanPublished, ARunLayoutIsANearMissWithItsFixNotReplaced) {
  const std::vector<PublishedRun> rows = llama3_table4();
  ASSERT_EQ(rows.size(), 2u);
  const PublishedPrediction p = predict(rows[1], presets(), planned_run_violations);
  const PlanRun& r = p.estimate.run;
  EXPECT_EQ(r.parallel.tp, 8);
  EXPECT_EQ(r.parallel.pp, 16);
  EXPECT_EQ(r.dp(), 128);
  const MemoryVerdict v = p.estimate.verdict();
  ASSERT_FALSE(v.fits()) << "the planner's Megatron-style state (gradients not sharded) puts it just over 80 GiB";
  EXPECT_GT(v.over_fraction(), 0);
  EXPECT_LE(v.over_fraction(), 0.05);
  EXPECT_NE(v.text().find("over by"), std::string::npos);
  ASSERT_FALSE(p.fixes.empty());
  EXPECT_NE(p.fixes.front().change.find("--recompute-granularity"), std::string::npos);
  EXPECT_LE(p.fixes.front().peak_gib, v.limit_gib);
  // Without the margin, only an interleaving that fits may be picked, and it is a slower one (or
  // none is left and the row is refused): the margin is what keeps the run's own layout.
  try {
    const PublishedPrediction strict = predict(rows[1], presets(), planned_run_violations, 0.0);
    EXPECT_TRUE(strict.estimate.fits());
    EXPECT_LT(strict.predicted, p.predicted);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no layout of the published sizes fits"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessel
