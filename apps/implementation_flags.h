// Megatron-LM's implementation switches: how a GPU run computes — which kernels, fusions,
// overlaps, memory tricks and loader processes — not what it computes; and its logging flags
// that have nothing to log here (timers' levels, routing traces). A Megatron script keeps
// them; tessel accepts each (with Megatron's name, form and choices) and says what it means here,
// never ignoring one silently: the run's first lines count those given that change nothing, and
// --explain-flags lists every flag given with what tessel does with it.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace tessel {

class ImplementationFlags {
 public:
  // Adds the switches to `app` (tessel train).
  void add_to(CLI::App& app);
  // A line per kind (implementation, logging) naming the switches given, each of which has no
  // effect here (none when none was given).
  std::vector<std::string> summary() const;
  // Every flag given to `app`, one line each: the switches with what they mean here, tessel's
  // own flags with their help.
  static std::vector<std::string> explain(const CLI::App& app);

 private:
  std::vector<CLI::Option*> options_;
  std::vector<std::string> values_;  // where the value-taking switches parse into
};

}  // namespace tessel
