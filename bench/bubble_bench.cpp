// Pipeline bubble of 1F1B and interleaved 1F1B on PP4 with 8 microbatches (the issue's
// configuration), measured by replaying the generated schedules in the simulator, against the
// formulas (p − 1)/(m + p − 1) and (p − 1)/(v·m + p − 1). Bubble = the ranks' idle share of the
// iteration (Simulation::bubble), as `tessel schedule`, `train` and `plan` report it.
//
// Costs are per chunk; a rank's work per microbatch is the same in every row (a stage's forward
// is v chunk forwards), so makespans compare directly. The measured figures from real runs (the
// executor's idle time per rank under mpirun) belong beside these once `tessel train` runs PP.
//
//   build/bench/bubble_bench [--pp 4] [--microbatches 8] [--communication-cost 0]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>

#include "tessel/pipeline/schedule.h"
#include "tessel/pipeline/simulate.h"

int main(int argc, char** argv) {
  CLI::App app{"simulated pipeline bubble against the formula"};
  int p = 4, m = 8;
  double communication = 0;
  app.add_option("--pp", p, "pipeline stages")->capture_default_str();
  app.add_option("--microbatches", m, "microbatches per iteration")->capture_default_str();
  app.add_option("--communication-cost", communication, "time from a send to its receive (a stage forward = 2)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // A stage's forward costs 2 and its backward 4 (or 2 with equal costs); with v chunks each chunk
  // costs 1/v of that.
  struct Row {
    tessel::ScheduleKind kind;
    int vpp;
  };
  const Row rows[] = {{tessel::ScheduleKind::GPipe, 1}, {tessel::ScheduleKind::OneFOneB, 1},
                      {tessel::ScheduleKind::Interleaved, 2}, {tessel::ScheduleKind::Interleaved, 4}};
  fmt::print("pp {}, {} microbatches, communication {}; a stage's forward = 2 time units\n\n", p, m, communication);
  fmt::print("{:<12}{:>5}{:>8}{:>11}{:>12}{:>17}{:>10}{:>16}\n", "schedule", "vpp", "F:B", "makespan", "bubble",
             "rank idle share", "formula", "peak in flight");
  for (const Row& row : rows) {
    for (double backward_ratio : {1.0, 2.0}) {
      tessel::ScheduleConfig c;
      c.kind = row.kind;
      c.pipeline_size = p;
      c.microbatches = m;
      c.virtual_stages = row.vpp;
      const std::vector<std::string> broken = tessel::schedule_violations(c, fmt::format("{} microbatches", m));
      if (!broken.empty()) {
        fmt::print("{:<12}{:>5}  skipped: {}\n", tessel::schedule_kind_name(c.kind), row.vpp, broken[0]);
        continue;
      }
      tessel::SimulationCosts costs;
      costs.forward = 2.0 / row.vpp;
      costs.backward = costs.forward * backward_ratio;
      costs.communication = communication;
      const tessel::Simulation sim = tessel::simulate(tessel::lower(tessel::generate_schedule(c), c), c, costs);
      if (!sim.ok()) {
        fmt::print(stderr, "{}: {}\n", tessel::schedule_kind_name(c.kind), sim.error);
        return 1;
      }
      double low = 1e300, high = 0;
      for (const tessel::RankTimeline& t : sim.ranks) {
        low = std::min(low, t.idle_share());
        high = std::max(high, t.idle_share());
      }
      const double formula = (p - 1.0) / (row.vpp * m + p - 1.0);
      fmt::print("{:<12}{:>5}{:>8}{:>11.4g}{:>12.4f}{:>17}{:>10.4f}{:>16}\n", tessel::schedule_kind_name(c.kind),
                 row.vpp, fmt::format("1:{:g}", backward_ratio), sim.makespan, sim.bubble(),
                 high - low < 1e-12 ? "alike" : fmt::format("{:.4f}–{:.4f}", low, high), formula,
                 sim.ranks[0].peak_in_flight);
    }
  }
  fmt::print("\nbubble: the ranks' idle share of the iteration; peak in flight: rank 0's, in (microbatch, chunk) "
             "units\n");
  return 0;
}
