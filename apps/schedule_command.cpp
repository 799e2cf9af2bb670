#include "schedule_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "parallel_flags.h"
#include "tessel/core/error.h"
#include "tessel/core/writable.h"
#include "tessel/pipeline/schedule_svg.h"

namespace tessel {

namespace {

// Characters on screen: every non-ASCII character used here ("·", "−") is one column wide.
size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) n++;
  return n;
}

std::string pad(const std::string& s, size_t width) {
  return s + std::string(width > display_width(s) ? width - display_width(s) : 0, ' ');
}

// One cell per time unit: the label of the compute running in [t − 1, t), or "·" when idle.
std::vector<std::vector<std::string>> time_cells(const Simulation& sim, const ScheduleConfig& config) {
  const int slots = static_cast<int>(std::lround(sim.makespan));
  std::vector<std::vector<std::string>> cells(sim.ranks.size(), std::vector<std::string>(slots, "·"));
  for (size_t r = 0; r < sim.ranks.size(); ++r)
    for (const TimedAction& ta : sim.ranks[r].compute)
      for (long t = std::lround(ta.start); t < std::lround(ta.end); ++t)
        cells[r][t] = action_label(ta.action, config.virtual_stages);
  return cells;
}

// Rows are ranks, columns T1, T2, … (one per time unit), in blocks of `columns` so that a long
// schedule wraps instead of running off the screen.
void print_table(const Simulation& sim, const ScheduleConfig& config, int columns) {
  const std::vector<std::vector<std::string>> cells = time_cells(sim, config);
  const int slots = cells.empty() ? 0 : static_cast<int>(cells[0].size());
  size_t width = display_width(fmt::format("T{}", slots));
  for (const auto& row : cells)
    for (const std::string& c : row) width = std::max(width, display_width(c));
  width += 2;
  const size_t label_width = display_width(fmt::format("rank {}", cells.size() - 1)) + 2;
  for (int first = 0; first < slots; first += columns) {
    const int end = std::min(slots, first + columns);
    std::string line = pad("", label_width);
    for (int t = first; t < end; ++t) line += pad(fmt::format("T{}", t + 1), width);
    fmt::print("{}\n", line.substr(0, line.find_last_not_of(' ') + 1));
    for (size_t r = 0; r < cells.size(); ++r) {
      line = pad(fmt::format("rank {}", r), label_width);
      for (int t = first; t < end; ++t) line += pad(cells[r][t], width);
      fmt::print("{}\n", line.substr(0, line.find_last_not_of(' ') + 1));
    }
    if (end < slots) fmt::print("\n");
  }
}

std::string number(double x) { return fmt::format("{:.4g}", x); }

constexpr int64_t kMaxTableCells = int64_t{1} << 24;

void print_rank_stats(const Simulation& sim, const ScheduleConfig& config, bool forward_only) {
  fmt::print("\n{:<6}{:>9}{:>7}{:>13}", "rank", "compute", "idle", "idle share");
  if (!forward_only) fmt::print("{:>17}", "peak in flight");
  fmt::print("\n");
  for (size_t r = 0; r < sim.ranks.size(); ++r) {
    const RankTimeline& t = sim.ranks[r];
    fmt::print("{:<6}{:>9}{:>7}{:>13}", r, number(t.busy), number(t.idle_time), number(t.idle_share()));
    if (!forward_only) fmt::print("{:>17}", t.peak_in_flight);
    fmt::print("\n");
  }
  fmt::print("idle share: the rank's idle time ÷ the iteration (makespan {})\n", number(sim.makespan));
  if (forward_only) return;
  if (config.virtual_stages > 1)
    fmt::print("peak in flight: (microbatch, chunk) forwards whose backward has not run; each holds 1/{} "
               "of a rank's activations for one microbatch\n", config.virtual_stages);
  else
    fmt::print("peak in flight: microbatches whose forward has run and backward not yet\n");
}

// The bubble, the seed's: the ranks' idle share of the iteration, beside its formula. Megatron's
// paper states the same idle over the compute time; the zero-bubble papers' count (iterations back
// to back) is named as what it is.
void print_bubble(const Simulation& sim, const ScheduleConfig& config, const SimulationCosts& costs) {
  const int p = config.pipeline_size, m = config.microbatches, v = config.virtual_stages;
  const char* without_communication = costs.communication > 0 ? " (without communication time)" : "";
  double idle = 0;
  for (const RankTimeline& t : sim.ranks) idle += t.idle_time;
  fmt::print("\nbubble = the ranks' idle share of the iteration: the table's · cells over all its cells\n");
  fmt::print("  measured: idle ÷ (ranks × makespan) = {} ÷ ({} × {}) = {}\n", number(idle), p, number(sim.makespan),
             number(sim.bubble()));
  const PublishedBubble formula = published_bubble(config, costs);
  if (!formula.back_to_back) {
    fmt::print("  formula:  {}{}\n", formula.text, without_communication);
    const bool interleaved = config.kind == ScheduleKind::Interleaved;
    fmt::print("  (Megatron's paper divides the same idle time by the compute time instead: {} = {})\n",
               interleaved ? "(p − 1)/(v·m)" : "(p − 1)/m", number((p - 1.0) / ((interleaved ? v : 1) * m)));
    return;
  }
  size_t worst = 0;
  for (size_t r = 1; r < sim.ranks.size(); ++r)
    if (sim.ranks[r].span_idle() > sim.ranks[worst].span_idle()) worst = r;
  fmt::print("\nwith iterations back to back (optimizer post-validation), the zero-bubble papers' count: the most "
             "a rank idles\nbetween its first and last action ÷ the longest such span (warm-up and cool-down overlap "
             "the neighbouring iterations)\n");
  fmt::print("  measured: {} (rank {} idles {} of span {})\n", number(sim.back_to_back_bubble()), worst,
             number(sim.ranks[worst].span_idle()), number(sim.longest_span()));
  fmt::print("  formula:  {}{}\n", formula.text, without_communication);
}

// The simulation for tools: per rank its actions, idle time and peak in flight; overall the
// bubble beside the published formula's value (null where none applies).
nlohmann::json schedule_json(const Simulation& sim, const ScheduleConfig& config, const SimulationCosts& costs) {
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t r = 0; r < sim.ranks.size(); ++r) {
    const RankTimeline& t = sim.ranks[r];
    nlohmann::json actions = nlohmann::json::array();
    for (const TimedAction& ta : t.compute)
      actions.push_back({{"kind", action_kind_name(ta.action.kind)}, {"microbatch", ta.action.microbatch},
                         {"chunk", ta.action.chunk}, {"start", ta.start}, {"end", ta.end}});
    ranks.push_back({{"rank", r}, {"compute", t.busy}, {"idle", t.idle_time}, {"idle_share", t.idle_share()},
                     {"idle_in_span", t.span_idle()}, {"first_start", t.first_start}, {"last_end", t.last_end},
                     {"peak_in_flight", t.peak_in_flight}, {"actions", actions}});
  }
  const PublishedBubble formula = published_bubble(config, costs);
  return {{"schedule", schedule_kind_name(config.kind)}, {"pp", config.pipeline_size},
          {"microbatches", config.microbatches}, {"virtual_stages", config.virtual_stages},
          {"costs", {{"forward", costs.forward}, {"backward", costs.backward},
                     {"backward_input", costs.backward_input}, {"backward_weight", costs.backward_weight},
                     {"communication", costs.communication}}},
          {"makespan", sim.makespan}, {"longest_span", sim.longest_span()}, {"bubble", sim.bubble()},
          {"back_to_back_bubble", sim.back_to_back_bubble()},
          {"formula", {{"text", formula.text},
                       {"measures", formula.back_to_back ? "back_to_back_bubble" : "bubble"},
                       {"value", formula.value ? nlohmann::json(*formula.value) : nlohmann::json(nullptr)}}},
          {"ranks", ranks}};
}

}  // namespace

ScheduleCommand::ScheduleCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("schedule", "draw a pipeline schedule: each rank's time line, the bubble, "
                                        "microbatches in flight");
  CLI::App& c = *cmd_;
  add_pipeline_size_flags(c, config_.pipeline_size, config_.virtual_stages).pp->required();
  add_microbatches_flag(c, config_.microbatches)->required();
  add_schedule_flags(c, schedule_, config_.microbatch_group);
  c.add_option("--forward-cost", forward_cost_, "time units of one forward of one chunk")->capture_default_str();
  backward_cost_option_ = c.add_option("--backward-cost", backward_cost_,
                                       "time units of one whole backward of one chunk (default: input + weight)");
  c.add_option("--backward-input-cost", backward_input_cost_, "time units of one input gradient (I) of one chunk")
      ->capture_default_str();
  c.add_option("--backward-weight-cost", backward_weight_cost_, "time units of one weight gradient (W) of one chunk")
      ->capture_default_str();
  c.add_option("--communication-cost", communication_cost_, "time units from a send to its receive")
      ->capture_default_str();
  c.add_flag("--forward-only", forward_only_, "forwards only, as Megatron's forward_only (evaluation) runs them");
  c.add_option("--columns", columns_, "time units per block of the table")->capture_default_str();
  c.add_option("--svg", svg_path_, "also draw the picture into this SVG file");
  c.add_flag("--json", json_, "print the simulation as JSON (per rank: actions, idle time, peak in flight; the "
                              "bubble beside its formula) instead of the table");
}

void ScheduleCommand::run() const {
  if (!svg_path_.empty()) require_writable_file("--svg", svg_path_);  // a folder or none: said first
  ScheduleConfig config = config_;
  std::vector<std::string> v;
  config.kind = config.virtual_stages > 1 ? ScheduleKind::Interleaved : ScheduleKind::OneFOneB;
  if (!schedule_.empty()) {
    try {
      config.kind = parse_schedule_kind(schedule_);
    } catch (const Error& e) {
      v.push_back(e.what());  // and the other rules under the default schedule
    }
  }
  config.virtual_stages = chunks_per_rank(config.kind, config.virtual_stages);
  for (const std::string& rule : schedule_violations(config, fmt::format("--microbatches {}", config.microbatches)))
    v.push_back(rule);
  SimulationCosts costs;
  costs.forward = forward_cost_;
  costs.backward_input = backward_input_cost_;
  costs.backward_weight = backward_weight_cost_;
  // The default whole backward is I + W summed as the simulation's doubles: in int, 2^30 + 2^30
  // wrapped to a negative cost blamed on --backward-cost, which was not given.
  const bool backward_given = backward_cost_option_->count() > 0;
  costs.backward = backward_given ? backward_cost_ : costs.backward_input + costs.backward_weight;
  costs.communication = communication_cost_;
  auto at_least_one = [&](const char* flag, double cost) {
    if (cost < 1) v.push_back(fmt::format("{} must be at least 1 (got {})", flag, cost));
  };
  at_least_one("--forward-cost", costs.forward);
  if (backward_given) at_least_one("--backward-cost", costs.backward);  // else I and W are checked
  at_least_one("--backward-input-cost", costs.backward_input);
  at_least_one("--backward-weight-cost", costs.backward_weight);
  if (communication_cost_ < 0)
    v.push_back(fmt::format("--communication-cost must not be negative (got {})", communication_cost_));
  if (columns_ < 1) v.push_back(fmt::format("--columns must be at least 1 (got {})", columns_));
  if (!v.empty()) {
    std::string msg = "invalid schedule: " + v[0];
    for (size_t i = 1; i < v.size(); ++i) msg += "; " + v[i];
    throw ConfigError(msg);
  }

  std::vector<RankSchedule> compute = generate_schedule(config);
  if (forward_only_) compute = forward_only_schedule(std::move(compute));
  const Simulation sim = simulate(lower(compute, config), config, costs);
  if (!sim.ok()) fail("the {} schedule does not run: {}", schedule_kind_name(config.kind), sim.error);
  if (json_) {
    fmt::print("{}\n", schedule_json(sim, config, costs).dump(2));
    return;
  }

  // The table holds a string per rank and time unit: --forward-cost 1000000000 would fill memory.
  const double cells = static_cast<double>(sim.ranks.size()) * sim.makespan;
  if (cells > static_cast<double>(kMaxTableCells))
    fail("the table would have {} ranks × {} time units = {:.0f} cells, past the bound of {}: --json prints the "
         "schedule without it", sim.ranks.size(), number(sim.makespan), cells, kMaxTableCells);
  const int p = config.pipeline_size, m = config.microbatches, vpp = config.virtual_stages;
  const bool split = std::any_of(compute.begin(), compute.end(), [](const RankSchedule& s) {
    return std::any_of(s.begin(), s.end(), [](const Action& a) { return a.kind == ActionKind::BackwardInput; });
  });
  std::string title = fmt::format("{}{}: pp {}, {} microbatches", schedule_kind_name(config.kind),
                                  forward_only_ ? " (forward only)" : "", p, m);
  if (config.kind == ScheduleKind::Interleaved)
    title += fmt::format(", vpp {}, microbatch group {}", vpp, config.microbatch_group ? config.microbatch_group : p);
  if (forward_only_)
    fmt::print("{}; forward {}, communication {} time units\n", title, forward_cost_, communication_cost_);
  else if (split)
    fmt::print("{}; forward {}, backward {} (input {}, weight {}), communication {} time units\n", title,
               costs.forward, costs.backward, costs.backward_input, costs.backward_weight, communication_cost_);
  else
    fmt::print("{}; forward {}, backward {}, communication {} time units\n", title, costs.forward, costs.backward,
               communication_cost_);
  const std::string kinds = split ? "F / B / I (input gradient) / W (weight gradient)" : "F / B";
  if (schedule_placement(config.kind) == Placement::V)
    fmt::print("cells: {} <microbatch>.<chunk>, microbatches from 1 as the seed counts them; chunk 0 on rank r is "
               "model chunk r, chunk 1 model chunk 2·{} − 1 − r (a V); · = idle\n\n", kinds, p);
  else if (vpp > 1)
    fmt::print("cells: {} <microbatch>.<chunk>, microbatches from 1 as the seed counts them; chunk c on rank r is "
               "model chunk c·{} + r; · = idle\n\n", kinds, p);
  else
    fmt::print("cells: {} <microbatch>, microbatches from 1 as the seed counts them; · = idle\n\n", kinds);
  print_table(sim, config, columns_);
  print_rank_stats(sim, config, forward_only_);
  print_bubble(sim, config, costs);

  if (!svg_path_.empty()) {
    try {
      // A plot: a rerun of the command draws it again, no fsync.
      write_file_atomically(svg_path_, schedule_svg(sim, config, title), Durability::kReplaceable);
    } catch (const Error& e) {
      fail("--svg {}: {}", svg_path_, e.what());
    }
    fmt::print("wrote {}\n", svg_path_);
  }
}

}  // namespace tessel
