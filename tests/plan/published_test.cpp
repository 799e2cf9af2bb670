// The published Megatron-LM runs: the A100 preset's efficiencies are the ones fitted on the
// three calibration rows of Korthikanti et al. Table 5, and with them the planner meets the
// accuracy it claims on every row of Table 5 and of Narayanan et al. Table 1.
#include <gtest/gtest.h>

#include <cmath>

#include "tessel/plan/published.h"
#include "tessel/train/planned_run.h"

namespace tessel {
namespace {

TEST(PlanPublished, PresetEfficienciesAreTheFittedOnes) {
  const Cluster a100 = cluster_preset("a100-80gb");
  std::vector<PublishedRun> calibration;
  for (const PublishedRun& r : korthikanti_table5())
    if (r.calibration) calibration.push_back(r);
  ASSERT_LE(calibration.size(), 3u);
  const Cluster fitted = fit_efficiency(a100, calibration, planned_run_violations);
  EXPECT_NEAR(fitted.gemm_efficiency, a100.gemm_efficiency, 0.006);
  EXPECT_NEAR(fitted.memory_efficiency, a100.memory_efficiency, 0.006);
  EXPECT_NEAR(fitted.network_efficiency, a100.network_efficiency, 0.006);
}

TEST(PlanPublished, KorthikantiTable5) {
  const Cluster a100 = cluster_preset("a100-80gb");
  double sum = 0, worst = 0;
  const std::vector<PublishedRun> rows = korthikanti_table5();
  for (const PublishedRun& r : rows) {
    const double e = std::fabs(predict(r, a100, planned_run_violations).error());
    sum += e, worst = std::max(worst, e);
  }
  EXPECT_LE(sum / rows.size(), 0.035);
  EXPECT_LE(worst, 0.08);
}

TEST(PlanPublished, NarayananTable1) {
  const Cluster a100 = cluster_preset("a100-80gb");
  for (const PublishedRun& r : narayanan_table1()) EXPECT_LE(std::fabs(predict(r, a100, planned_run_violations).error()), 0.10) << r.name;
}

}  // namespace
}  // namespace tessel
