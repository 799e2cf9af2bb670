// `tessel layout`: which ranks form each process group (Megatron-Core's lists for the same sizes
// and order), every rank's coordinates, and — when asked — how the global batch and the model's
// heads and MLP neurons are divided.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <vector>

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
  bool model_given() const;
  bool batch_given() const;
  bool seq_given() const;

  CLI::App* cmd_;
  ParallelConfig config_;
  int rank_ = -1;
  bool json_ = false;
  int64_t micro_batch_ = 1;
  int64_t num_microbatches_ = 1;
  int64_t global_batch_ = 0;
  ModelConfig model_;
  std::string arch_ = "gpt2";
  CLI::Option* rank_opt_ = nullptr;
  CLI::Option* heads_opt_ = nullptr;
  CLI::Option* groups_opt_ = nullptr;
  CLI::Option* mlp_opts_[2] = {nullptr, nullptr};  // --hidden-size, --ffn-hidden-size
  std::vector<CLI::Option*> model_opts_;            // every model flag, and --sequence-parallel
  CLI::Option* micro_batch_opt_ = nullptr;
  CLI::Option* num_microbatches_opt_ = nullptr;
  CLI::Option* global_batch_opt_ = nullptr;
  CLI::Option* layers_opt_ = nullptr;  // --num-layers: show the pipeline stages
  CLI::Option* experts_opt_ = nullptr;  // --num-experts: show the experts per EP rank
  int num_experts_ = 0;
  PipelineOptions pipeline_;
};

}  // namespace tessel
