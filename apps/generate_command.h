// `tessel generate`: samples text from a model folder (config.json + model.safetensors, as
// export and --save-hf write them), with the folder's tokenizer unless tokenizer flags name one.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "tessel/data/tokenizer.h"
#include "tessel/infer/generate.h"

namespace tessel {

class GenerateCommand {
 public:
  // Adds the `generate` subcommand and its flags to `app`; the flags parse into this object, so
  // it must outlive app.parse().
  explicit GenerateCommand(CLI::App& app);
  bool selected() const { return static_cast<bool>(*cmd_); }
  // Writes the prompt and its continuation to stdout as they come; throws one Error listing
  // every bad sampling flag.
  void run();

 private:
  CLI::App* cmd_;
  std::string model_dir_;
  GenerateOptions options_;
  TokenizerOptions tokenizer_;
  int threads_ = 0;
};

}  // namespace tessel
