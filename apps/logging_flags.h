// Megatron-LM's logging flags (its LoggerConfig group, and the profiler window of its
// ProfilingConfig) with Megatron's names, forms and defaults: TensorBoard's event files and their
// tags (train/metrics.h), the figures behind them, the --profile window mapped onto tessel's Chrome
// trace; tessel's own end-of-run report is --profile-report. The flags about machinery tessel does
// not have (W&B, per-operation timers, energy, Python's logging) are accepted and said at the start.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "tessel/train/options.h"

namespace tessel {

class LoggingFlags {
 public:
  // Adds the flags to `app` (tessel train), parsing into `log`, which must outlive the parse.
  void add_to(CLI::App& app, LogOptions& log);
  // After the parse: --profile's trace goes to --pipeline-timeline's file when both are given.
  // Returns what the start of the run says about the flags: one line when a --wandb-* flag was
  // given (W&B is not reachable: where the metrics go instead), one naming the flags given that
  // change nothing here.
  std::vector<std::string> resolve(LogOptions& log) const;

 private:
  std::vector<CLI::Option*> wandb_, no_effect_;
  std::vector<std::string> values_;  // where the accepted-only flags' values parse into
};

}  // namespace tessel
