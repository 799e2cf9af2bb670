// `tessel export`: a model's initial weights (or --init-from's converted, or a --load save's
// consolidated) as a Hugging Face folder, with the model flags of `tessel train`.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "model_flags.h"
#include "tessel/data/tokenizer.h"
#include "tessel/train/export.h"

namespace tessel {

class ExportCommand {
 public:
  // Adds the `export` subcommand and its flags to `app`; the flags parse into this object, so it
  // must outlive app.parse().
  explicit ExportCommand(CLI::App& app);
  bool selected() const { return static_cast<bool>(*cmd_); }
  // Writes the folder and says so on stdout; throws naming the bad input.
  void run() const;

 private:
  CLI::App* cmd_;
  ModelFlags model_{tokenizer_sized_defaults()};
  std::string out_dir_;
  std::string hf_model_type_;
  std::string max_shard_size_;
  ExportSource source_;
  TokenizerOptions tokenizer_;
};

}  // namespace tessel
