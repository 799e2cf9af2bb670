// `tessel data inspect PREFIX [--doc K] [--decode]`: a Megatron .bin/.idx pair's header, counts
// and one document (its token ids, or its text through the tokenizer).
// `tessel data index --data-path ... --seq-length S --train-samples N ...`: builds (or loads) the
// GPT datasets' indices exactly as training will, into the cache, and reports each split; with
// --dump-samples DIR it also writes every sample of each split (the first --dump-limit N) as
// DIR/{split}_samples.npy. --mock-data builds Megatron's MockGPTDataset splits instead.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "tessel/data/dataset_builder.h"
#include "tessel/data/tokenizer.h"

namespace tessel {

class DataCommand {
 public:
  // Adds `data` with its `inspect` and `index` subcommands to `app`; must outlive app.parse().
  explicit DataCommand(CLI::App& app);
  bool selected() const { return static_cast<bool>(*cmd_); }
  // Prints to stdout; throws tessel::Error naming the bad file.
  void run();

 private:
  void inspect() const;
  void index();

  CLI::App* cmd_;
  CLI::App* inspect_;
  CLI::App* index_;
  TokenizerOptions tokenizer_;
  std::string prefix_;
  int64_t doc_ = 0;
  bool decode_ = false;
  GptDataOptions data_;
  std::string dump_dir_;
  int64_t dump_limit_ = 0;
};

}  // namespace tessel
