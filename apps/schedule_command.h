// `tessel schedule`: a pipeline schedule as the generator makes it for the trainer, replayed by the
// simulator — each rank's time line as a table (T1, T2, … like the seed's), the measured bubble
// (the ranks' idle share of the iteration: the table's · cells over all its cells) beside its
// formula, each rank's peak microbatches in flight, and with --svg a colour drawing
// (pipeline/schedule_svg.h).
//
// The seed's example 8 (九/十, PP 2, 4 microbatches):
//   tessel schedule --pp 2 --microbatches 4 --schedule gpipe --forward-only
//     the forward table T1..T5 exactly: rank 0 F1 F2 F3 F4 ·, rank 1 · F1 F2 F3 F4 (the bubbles
//     at T1 on stage 1 and T5 on stage 0); without --forward-only and with --backward-cost 1 the
//     same five columns open the whole GPipe iteration (T1..T10);
//   tessel schedule --pp 2 --microbatches 4 --forward-cost 1 --backward-cost 1
//     1F1B's full table: rank 0 F1 F2 · B1 F3 B2 F4 B3 · B4, rank 1 · F1 B1 F2 B2 F3 B3 F4 B4 ·.
// The zero-bubble schedules (--schedule zb-h1 | zb-v | dualpipev) split backwards into I (input
// gradient, --backward-input-cost) and W (weight gradient, --backward-weight-cost); --json writes
// the same simulation for tools instead of the table.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "tessel/pipeline/schedule.h"

namespace tessel {

class ScheduleCommand {
 public:
  // Adds the `schedule` subcommand and its flags to `app`; the flags parse into this object, so it
  // must outlive app.parse().
  explicit ScheduleCommand(CLI::App& app);
  bool selected() const { return static_cast<bool>(*cmd_); }
  // Prints to stdout (and writes --svg); throws one ConfigError listing every violated rule.
  void run() const;

 private:
  CLI::App* cmd_;
  ScheduleConfig config_;
  std::string schedule_;  // empty: interleaved when --vpp > 1, else 1f1b
  int forward_cost_ = 1;
  int backward_cost_ = 2;          // a whole backward; I + W unless --backward-cost is given
  int backward_input_cost_ = 1;
  int backward_weight_cost_ = 1;
  CLI::Option* backward_cost_option_ = nullptr;
  int communication_cost_ = 0;
  bool json_ = false;
  bool forward_only_ = false;
  int columns_ = 20;
  std::string svg_path_;
};

}  // namespace tessel
