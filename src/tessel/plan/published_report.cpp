// `tessel plan --published`: every published row predicted with the efficiencies fitted on the
// other rows (leave-one-out), its memory verdict, the distribution of the errors and how they go
// with each part of the step; then the memory checks.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tessel/plan/megatron_memory.h"
#include "tessel/plan/published.h"
#include "tessel/plan/report.h"

namespace tessel {

namespace {

const char* unit_of(PublishedFigure f) { return f == PublishedFigure::Seconds ? "s" : "TFLOP/s"; }

std::string verdict_of(const PublishedPrediction& p) {
  const MemoryVerdict v = p.estimate.verdict();
  if (v.fits()) return v.text();
  std::string fixes;
  for (const MemoryFix& f : p.fixes) fixes += (fixes.empty() ? "; fits with " : " or ") + f.change;
  return "near miss: " + v.text() + (fixes.empty() ? "; no single change makes it fit" : fixes);
}

// The parts of the predicted step, as fractions of it: what the errors are set against.
struct Shares {
  double compute, tp, pp, idle, tail;  // idle: the busiest stage's, waiting for the others
};
Shares shares_of(const Estimate& e) {
  const StepTime& t = e.time;
  return {t.compute / t.step, (t.tp_comm + t.cp_comm + t.ep_comm) / t.step, t.pp_comm / t.step, t.idle / t.step,
          (t.dp_comm + t.embedding_sync + t.optimizer) / t.step};
}

double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  const double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += a[i] / n, mb += b[i] / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) sab += (a[i] - ma) * (b[i] - mb), saa += (a[i] - ma) * (a[i] - ma), sbb += (b[i] - mb) * (b[i] - mb);
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0;
}

void print_row(const PublishedPrediction& p, bool calibration_marked) {
  const PublishedRun& row = p.row;
  const PlanRun& r = p.estimate.run;
  fmt::print("| {}{} | {} | {} | {}{} | {} | {} | {}{} | {} | {} | {} | {:.2f} {} | {:.2f} {} | {:+.1f} % |\n", row.name,
             calibration_marked && row.calibration ? " (preset calibration)" : "", r.parallel.tp, r.parallel.pp,
             r.parallel.vpp, row.tune && row.vpps.size() > 1 ? " (picked)" : "", r.parallel.world, r.global_batch,
             r.micro_batch, row.tune && row.micro_batches.size() > 1 ? " (picked)" : "", recompute_name(r.recompute_kind()),
             r.parallel.sequence_parallel ? "yes" : "no", verdict_of(p), row.measured, unit_of(row.figure), p.predicted,
             unit_of(row.figure), 100 * p.error());
}

}  // namespace

void print_published(bool json, const TrainRules& rules) {
  const Efficiency presets = efficiency_of(cluster_preset("a100-80gb"));
  const std::vector<PublishedRun> all = published_runs();
  std::vector<PublishedRun> fitted_rows;
  for (const PublishedRun& r : all)
    if (r.in_fit) fitted_rows.push_back(r);
  const LeaveOneOut loo = leave_one_out(all, presets, rules);
  const std::vector<HeldOut>& held_out = loo.rows;
  const Efficiency everything = loo.all_rows;
  nlohmann::json out = nlohmann::json::object(), rows = nlohmann::json::array();
  if (!json)
    fmt::print("efficiency model (one set for every GPU): fitted on all {} rows GEMM {:.3f}, memory {:.3f}, network {:.3f} "
               "of the peaks; the presets ship GEMM {:.3f}, memory {:.3f}, network {:.3f}. Every row below is predicted "
               "with the efficiencies fitted on the other {} rows (leave-one-out).\n",
               fitted_rows.size(), everything.gemm, everything.memory, everything.network, presets.gemm, presets.memory,
               presets.network, fitted_rows.size() - 1);
  std::vector<double> errors, signed_errors;
  std::vector<std::vector<double>> share_columns(5);
  std::string source;
  double table_sum = 0, table_max = 0;
  int table_rows = 0;
  auto close_table = [&] {
    if (table_rows > 0 && !json)
      fmt::print("\nmean |error| {:.2f} %, max {:.2f} % over these {} rows, each left out\n", 100 * table_sum / table_rows,
                 100 * table_max, table_rows);
    table_sum = table_max = 0, table_rows = 0;
  };
  auto report = [&](const PublishedPrediction& p, const Efficiency& used) {
    const PublishedRun& row = p.row;
    if (row.source != source) {
      close_table();
      source = row.source;
      if (!json)
        fmt::print("\n{}{}\n| row | TP | PP | VPP | GPUs | batch | micro batch | recompute | SP | memory (fullest stage) | "
                   "published | predicted | error |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
                   source, row.in_fit ? "" : fmt::format(" — not fitted on: {}; predicted with the efficiencies fitted on all rows", row.note));
    }
    const double err = p.error();
    table_sum += std::fabs(err), table_max = std::max(table_max, std::fabs(err)), table_rows++;
    if (row.in_fit) {
      errors.push_back(std::fabs(err)), signed_errors.push_back(err);
      const Shares s = shares_of(p.estimate);
      for (auto [k, v] : {std::pair{0, s.compute}, {1, s.tp}, {2, s.pp}, {3, s.idle}, {4, s.tail}}) share_columns[k].push_back(v);
    }
    if (json) {
      const PlanRun& r = p.estimate.run;
      nlohmann::json fixes = nlohmann::json::array();
      for (const MemoryFix& f : p.fixes) fixes.push_back(f.change);
      rows.push_back({{"source", row.source}, {"row", row.name}, {"cluster", row.cluster}, {"tp", r.parallel.tp},
                      {"pp", r.parallel.pp}, {"vpp", r.parallel.vpp}, {"gpus", r.parallel.world}, {"global_batch", r.global_batch},
                      {"micro_batch", r.micro_batch}, {"recompute", recompute_name(r.recompute_kind())},
                      {"sequence_parallel", r.parallel.sequence_parallel}, {"published", row.measured},
                      {"predicted", p.predicted}, {"error", err}, {"left_out", row.in_fit},
                      {"efficiency", {{"gemm", used.gemm}, {"memory", used.memory}, {"network", used.network}}},
                      {"peak_memory_gib", p.estimate.peak_memory_gib()}, {"fits", p.estimate.fits()},
                      {"memory_verdict", p.estimate.verdict().text()}, {"fixes", fixes}});
      return;
    }
    print_row(p, true);
  };
  size_t next = 0;
  for (const PublishedRun& row : all) {
    if (row.in_fit) {
      report(held_out[next].prediction, held_out[next].fitted);
      next++;
    } else {
      report(predict(row, everything, rules), everything);
    }
  }
  close_table();
  std::vector<double> sorted = errors;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double e : errors) mean += e / errors.size();
  const double median = sorted[sorted.size() / 2], p90 = sorted[static_cast<size_t>(0.9 * (sorted.size() - 1))];
  const int within6 = static_cast<int>(std::count_if(errors.begin(), errors.end(), [](double e) { return e <= 0.06; }));
  const char* const share_names[] = {"compute", "TP/CP/EP collectives", "pipeline messages", "busiest stage idle", "DP, embedding, optimizer"};
  if (json) {
    nlohmann::json corr = nlohmann::json::object();
    for (int k = 0; k < 5; ++k) corr[share_names[k]] = correlation(signed_errors, share_columns[k]);
    out["efficiency_all_rows"] = {{"gemm", everything.gemm}, {"memory", everything.memory}, {"network", everything.network}};
    out["leave_one_out"] = {{"rows", errors.size()}, {"mean_abs_error", mean}, {"median_abs_error", median},
                            {"p90_abs_error", p90}, {"max_abs_error", sorted.back()}, {"within_6_percent", within6},
                            {"error_correlation_with_share", corr}};
    out["rows"] = rows;
    out["flop_convention"] = kFlopConvention;
    print_activation_checks(with_efficiency("a100-80gb", everything), true, out);
    out["megatron_formula"] = megatron_comparison_json(rules);
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("\nleave-one-out over all {} rows fitted on: mean |error| {:.2f} %, median {:.2f} %, 90th percentile {:.2f} %, "
             "max {:.2f} %; {} of {} within 6 %\n",
             errors.size(), 100 * mean, 100 * median, 100 * p90, 100 * sorted.back(), within6, errors.size());
  fmt::print("the signed errors against each part's share of the predicted step (correlation over the {} rows):", errors.size());
  for (int k = 0; k < 5; ++k) fmt::print("{} {} {:+.2f}", k ? "," : "", share_names[k], correlation(signed_errors, share_columns[k]));
  fmt::print("\n");
  nlohmann::json unused;
  print_activation_checks(with_efficiency("a100-80gb", everything), false, unused);
  print_megatron_comparison(rules);
}

}  // namespace tessel
