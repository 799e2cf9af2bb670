// Megatron-LM's logging flags (its LoggerConfig group, and the profiler window of its
// ProfilingConfig) with Megatron's names, forms and defaults: TensorBoard's event files and their
// tags (train/metrics.h), the figures behind them, the --profile window mapped onto tessel's Chrome
// trace; tessel's own end-of-run report is --profile-report. W&B's flags are accepted and said at the
// start; the logging flags about other machinery tessel does not have (per-operation timers,
// energy, Python's logging, routing traces) are implementation_flags.h's.
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
  // given (W&B is not reachable: where the metrics go instead).
  std::vector<std::string> resolve(LogOptions& log) const;

 private:
  std::vector<CLI::Option*> wandb_;
  std::vector<std::string> values_;  // where the --wandb-* values parse into
};

}  // namespace tessel
