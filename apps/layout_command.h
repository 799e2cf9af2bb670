// `tessel layout`: which ranks form each process group (Megatron-Core's lists for the same sizes
// and order), every rank's coordinates, and — when asked — how the global batch and the model's
// heads and MLP neurons are divided.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "model_flags.h"
#include "tessel/model/config.h"
#include "tessel/parallel/layout.h"
#include "tessel/train/options.h"

namespace tessel {

class LayoutCommand {
 public:
  // Adds the `layout` subcommand and its flags to `app`; the flags parse into this object, so it
  // must outlive app.parse().
  explicit LayoutCommand(CLI::App& app);
  bool selected() const { return static_cast<bool>(*cmd_); }
  // Prints to stdout; throws one tessel::Error listing every violated rule.
  void run() const;

 private:
  bool model_given() const;  // a model flag, or --sequence-parallel: the model's rules apply
  bool batch_given() const;

  CLI::App* cmd_;
  ParallelConfig config_;
  int rank_ = -1;
  bool json_ = false;
  std::string groups_;  // --groups as given: kind names with commas, or "all"
  std::string svg_path_;
  std::string traffic_path_;  // --traffic: a tessel train --log-json file
  int gpus_per_node_ = 0;  // 0: not given
  BatchOptions batch_{.micro_batch_size = 1, .global_batch_size = 0};  // 0: micro batch × DP × microbatches
  int num_microbatches_ = 1;
  ModelFlags model_{ModelConfig{}};
  PipelineOptions pipeline_;
  CLI::Option* rank_opt_ = nullptr;
  CLI::Option* groups_opt_ = nullptr;
  CLI::Option* svg_opt_ = nullptr;
  CLI::Option* gpus_per_node_opt_ = nullptr;
  CLI::Option* traffic_opt_ = nullptr;
  CLI::Option* sequence_parallel_opt_ = nullptr;
  CLI::Option* micro_batch_opt_ = nullptr;
  CLI::Option* num_microbatches_opt_ = nullptr;
  CLI::Option* global_batch_opt_ = nullptr;
};

}  // namespace tessel
