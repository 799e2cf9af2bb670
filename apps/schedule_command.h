// `tessel schedule`: a pipeline schedule as the generator makes it for the trainer, replayed by the
// simulator — each rank's time line as a table (T1, T2, … like the seed's), the measured bubble
// beside its formula, each rank's peak microbatches in flight, and with --svg a colour drawing.
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
  int backward_cost_ = 2;
  int communication_cost_ = 0;
  bool forward_only_ = false;
  int columns_ = 20;
  std::string svg_path_;
};

}  // namespace tessel
