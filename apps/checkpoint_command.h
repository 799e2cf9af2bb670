// `tessel checkpoint inspect DIR` (what a save holds: iteration, configuration, tensors, files)
// and `tessel checkpoint verify DIR` (what --load checks: every file's CRC-32 against
// metadata.json, the tensors' shapes and coverage, finite values and moments, the step count).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace tessel {

class CheckpointCommand {
 public:
  // Adds `checkpoint` with its `inspect` and `verify` subcommands to `app`; must outlive parse().
  explicit CheckpointCommand(CLI::App& app);
  bool selected() const { return static_cast<bool>(*cmd_); }
  // Prints to stdout; throws tessel::Error naming the bad file.
  void run() const;

 private:
  void inspect(const nlohmann::json& meta) const;

  CLI::App* cmd_;
  CLI::App* inspect_;
  CLI::App* verify_;
  std::string dir_;
  int64_t iteration_ = -1;
};

}  // namespace tessel
