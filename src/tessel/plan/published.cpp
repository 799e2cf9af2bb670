// Published runs predicted (published_runs.cpp has the rows and their sources), the efficiency
// model fitted on them, and the leave-one-out check of how it generalises.
#include "tessel/plan/published.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/plan/report.h"

namespace tessel {

Efficiency efficiency_of(const Cluster& c) { return {c.gemm_efficiency, c.memory_efficiency, c.network_efficiency}; }

Cluster with_efficiency(const std::string& cluster, const Efficiency& e) {
  Cluster c = cluster_preset(cluster);
  c.gemm_efficiency = e.gemm, c.memory_efficiency = e.memory, c.network_efficiency = e.network;
  return c;
}

double ptdp_tflops_per_gpu(const PlanModel& m, const PlanRun& run, double step) {
  const double B = static_cast<double>(run.global_batch), s = m.cfg.seq_length, l = m.cfg.num_layers,
               h = m.cfg.hidden_size, V = m.cfg.vocab_size;
  const double F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  return F / step / run.parallel.world / 1e12;
}

namespace {

double figure_of(const PublishedRun& row, const PlanRun& run, const Estimate& e) {
  switch (row.figure) {
    case PublishedFigure::Seconds: return e.time.step;
    case PublishedFigure::PtdpTflops: return ptdp_tflops_per_gpu(row.model, run, e.time.step);
    case PublishedFigure::ModelTflops: return e.tflops_per_gpu;
  }
  return 0;
}

// The layouts a row may be: the published one, or for a tuned row every micro batch and
// interleaving it may pick that keeps tessel's rules.
std::vector<PlanRun> options(const PublishedRun& row, const Cluster& cluster, const TrainRules& rules) {
  if (!row.tune) {
    const std::vector<std::string> broken = run_violations(row.model, row.run, cluster, rules);
    TESSEL_CHECK(broken.empty(), "{}: {}", row.name, broken.empty() ? "" : broken.front());
    return {row.run};
  }
  std::vector<PlanRun> out;
  const int L = row.model.cfg.num_layers, pp = row.run.parallel.pp;
  for (int64_t mb : row.micro_batches)
    for (int vpp : row.vpps) {
      if (vpp > 1 && pp == 1) continue;
      PlanRun r = row.run;
      r.micro_batch = mb;
      r.parallel.vpp = vpp;
      if (row.lighter_ends) {
        r.pipeline_layout = lighter_ends_layout(L, pp * vpp, 1, row.model.mtp_layers());
        if (r.pipeline_layout.empty()) continue;
      } else if (L % (pp * vpp) != 0) {
        continue;
      }
      if (run_violations(row.model, r, cluster, rules).empty()) out.push_back(r);
    }
  return out;
}

bool better(const PublishedRun& row, double a, double b) { return row.figure == PublishedFigure::Seconds ? a < b : a > b; }

// The row's prediction on one fixed layout.
double value_on(const PublishedRun& row, const PlanRun& run, const Efficiency& e) {
  return figure_of(row, run, estimate(row.model, run, with_efficiency(row.cluster, e)));
}

using Vec3 = std::array<double, 3>;  // inverse efficiencies: GEMM, memory, network

Efficiency from_inverse(const Vec3& x) { return {1 / x[0], 1 / x[1], 1 / x[2]}; }
Vec3 to_inverse(const Efficiency& e) { return {1 / e.gemm, 1 / e.memory, 1 / e.network}; }

// The rows' relative errors at x, and their derivatives in x (forward differences).
struct Linearised {
  std::vector<double> residual;
  std::vector<Vec3> gradient;
};

Linearised linearise(const std::vector<PublishedRun>& rows, const std::vector<PlanRun>& layouts, const Vec3& x) {
  Linearised l;
  for (size_t i = 0; i < rows.size(); ++i) {
    const double at = value_on(rows[i], layouts[i], from_inverse(x));
    Vec3 g{};
    for (int k = 0; k < 3; ++k) {
      Vec3 y = x;
      y[k] *= 1.01;
      g[k] = (value_on(rows[i], layouts[i], from_inverse(y)) - at) / (0.01 * x[k]) / rows[i].measured;
    }
    l.residual.push_back(at / rows[i].measured - 1);
    l.gradient.push_back(g);
  }
  return l;
}

// One Gauss–Newton step of the rows not `skip`ped: the least-squares x of the linearised
// errors, with every inverse efficiency at least 1 (an efficiency above 1 means faster than the
// peak): a coordinate that would go below 1 is held at 1 and the rest solved again.
Vec3 gauss_newton_step(const Linearised& l, const Vec3& x, size_t skip) {
  std::array<bool, 3> held{};
  for (int attempt = 0; attempt < 4; ++attempt) {
    // Normal equations over the free coordinates: Σ g gᵀ d = −Σ g r.
    std::array<std::array<double, 3>, 3> A{};
    Vec3 b{};
    for (size_t i = 0; i < l.residual.size(); ++i) {
      if (i == skip) continue;
      for (int j = 0; j < 3; ++j) {
        b[j] -= l.gradient[i][j] * l.residual[i];
        for (int k = 0; k < 3; ++k) A[j][k] += l.gradient[i][j] * l.gradient[i][k];
      }
    }
    for (int j = 0; j < 3; ++j)
      if (held[j]) {  // the step that puts it at 1, moved to the right-hand side
        const double d = 1 - x[j];
        for (int k = 0; k < 3; ++k) {
          if (k != j) b[k] -= A[k][j] * d;
          A[j][k] = A[k][j] = 0;
        }
        A[j][j] = 1, b[j] = d;
      }
    // Gaussian elimination with partial pivoting on the 3 × 3 system.
    for (int c = 0; c < 3; ++c) {
      int p = c;
      for (int r = c + 1; r < 3; ++r)
        if (std::fabs(A[r][c]) > std::fabs(A[p][c])) p = r;
      std::swap(A[c], A[p]), std::swap(b[c], b[p]);
      TESSEL_CHECK(std::fabs(A[c][c]) > 1e-30, "fitting the efficiencies: the rows do not determine them");
      for (int r = c + 1; r < 3; ++r) {
        const double f = A[r][c] / A[c][c];
        for (int k = c; k < 3; ++k) A[r][k] -= f * A[c][k];
        b[r] -= f * b[c];
      }
    }
    Vec3 d{};
    for (int c = 2; c >= 0; --c) {
      double v = b[c];
      for (int k = c + 1; k < 3; ++k) v -= A[c][k] * d[k];
      d[c] = v / A[c][c];
    }
    Vec3 next{};
    bool again = false;
    for (int k = 0; k < 3; ++k) {
      next[k] = x[k] + d[k];
      if (next[k] < 1 - 1e-12 && !held[k]) held[k] = true, again = true;
    }
    if (!again) return next;
  }
  return x;
}

// Each row's layout at `e` (a tuned row's pick), for fitting with the layouts held.
std::vector<PlanRun> picked_layouts(const std::vector<PublishedRun>& rows, const Efficiency& e, const TrainRules& rules) {
  std::vector<PlanRun> out;
  for (const PublishedRun& r : rows) out.push_back(predict(r, e, rules).estimate.run);
  return out;
}

}  // namespace

PublishedPrediction predict(const PublishedRun& row, const Efficiency& e, const TrainRules& rules, double margin) {
  const Cluster cluster = with_efficiency(row.cluster, e);
  PublishedPrediction p;
  p.row = row;
  bool found = false;
  const double limit = memory_limit_gib(row.run, cluster);
  // A tuned row's options in the order of their step's lower bound: once the bound reaches the
  // fastest step found, no later option can be faster (every figure falls as the step grows).
  std::vector<std::pair<double, PlanRun>> ordered;
  for (const PlanRun& r : options(row, cluster, rules)) ordered.push_back({row.tune ? step_lower_bound(row.model, r, cluster) : 0, r});
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [bound, r] : ordered) {
    if (found && bound >= p.estimate.time.step) break;
    if (row.tune && memory_verdict(estimate_memory(row.model, r, cluster), limit).over_fraction() > margin) continue;
    Estimate est = estimate(row.model, r, cluster);
    const double value = figure_of(row, r, est);
    if (!found || better(row, value, p.predicted)) p.predicted = value, p.estimate = std::move(est), found = true;
  }
  TESSEL_CHECK(found, "{}: no layout of the published sizes fits or misses by at most {:.0f} %", row.name, 100 * margin);
  if (!p.estimate.fits()) p.fixes = memory_fixes(row.model, p.estimate.run, cluster, rules, false);
  return p;
}

namespace {

// Gauss–Newton from `start` with the layouts held, two steps: the step time is close to linear in
// the inverse efficiencies (exactly, while the simulated schedule's critical path stays the same).
Vec3 fit_inverse(const Vec3& start, const std::vector<PublishedRun>& rows, const std::vector<PlanRun>& layouts) {
  Vec3 x = start;
  for (int iteration = 0; iteration < 2; ++iteration) x = gauss_newton_step(linearise(rows, layouts, x), x, rows.size());
  return x;
}

}  // namespace

Efficiency fit_efficiency(const Efficiency& start, const std::vector<PublishedRun>& rows, const TrainRules& rules) {
  return from_inverse(fit_inverse(to_inverse(start), rows, picked_layouts(rows, start, rules)));
}

LeaveOneOut leave_one_out(const std::vector<PublishedRun>& all, const Efficiency& start, const TrainRules& rules) {
  std::vector<PublishedRun> rows;
  for (const PublishedRun& r : all)
    if (r.in_fit) rows.push_back(r);
  // Fitted on every row, then one Gauss–Newton step without each row from there: the least
  // squares of the others' linearised errors (the step time is close to linear in the inverse
  // efficiencies). The row left out is then predicted afresh with those efficiencies.
  const std::vector<PlanRun> layouts = picked_layouts(rows, start, rules);
  const Vec3 x = fit_inverse(to_inverse(start), rows, layouts);
  const Efficiency everything = from_inverse(x);
  const Linearised l = linearise(rows, layouts, x);
  LeaveOneOut out{everything, {}};
  for (size_t i = 0; i < rows.size(); ++i) {
    const Efficiency fold = from_inverse(gauss_newton_step(l, x, i));
    out.rows.push_back({fold, predict(rows[i], fold, rules)});
  }
  return out;
}

}  // namespace tessel
