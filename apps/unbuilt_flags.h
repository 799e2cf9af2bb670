// Megatron-LM's flags for features tessel has not built yet: FP8's MXFP8 buffer reuse, fully
// sharded data parallelism, multi-latent attention and DeepSeek-V3's router, gpt-oss's attention
// and MLP. A Megatron script that uses one is refused in one
// line per feature, naming it and the flags that asked for it, rather than stopped by the parser
// at the first unknown flag or run as something else. A setting of such a feature given while the
// feature is off changes nothing in Megatron-LM either: it is accepted and said.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace tessel {

class UnbuiltFlags {
 public:
  // Adds the flags to `app` (tessel train), with Megatron-LM's forms and choices.
  void add_to(CLI::App& app);
  // One rule broken per feature asked for (into `v`); one note per setting given without its
  // feature (into `notes`).
  void check(std::vector<std::string>& notes, std::vector<std::string>& v) const;

 private:
  std::vector<CLI::Option*> options_;  // one per flag of the table, in its order
  std::vector<std::string> values_;
};

}  // namespace tessel
