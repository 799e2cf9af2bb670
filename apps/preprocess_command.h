// `tessel preprocess`: a JSONL or text corpus into Megatron's .bin/.idx (src/tessel/data/preprocess.h),
// Megatron-LM's tools/preprocess_data.py flags. A progress bar with MB/s and documents/s on a
// terminal (stderr); a summary line on stdout at the end.
#pragma once

#include <CLI/CLI.hpp>

#include "tessel/data/preprocess.h"
#include "tessel/data/tokenizer.h"

namespace tessel {

class PreprocessCommand {
 public:
  // Adds `preprocess` and its flags to `app`; must outlive app.parse().
  explicit PreprocessCommand(CLI::App& app);
  bool selected() const { return static_cast<bool>(*cmd_); }
  // Throws tessel::Error (ConfigError for bad flags) naming the bad input.
  void run();

 private:
  CLI::App* cmd_;
  PreprocessOptions options_;
  TokenizerOptions tokenizer_;
};

}  // namespace tessel
