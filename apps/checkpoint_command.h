// `tessel checkpoint inspect DIR` (what a save holds: iteration, configuration, tensors, files)
// and `tessel checkpoint verify DIR` (every file's CRC-32 against metadata.json).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
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
  CLI::App* cmd_;
  CLI::App* inspect_;
  CLI::App* verify_;
  std::string dir_;
  int64_t iteration_ = -1;
};

}  // namespace tessel
