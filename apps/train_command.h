// `tessel train`: trains a model — with no flags the default one on the bundled corpus — on one
// process or under mpirun, with Megatron-LM's flags for the model, data, batch, optimizer,
// parallel layout and schedule, checkpoints, logging and faults.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "implementation_flags.h"
#include "logging_flags.h"
#include "model_flags.h"
#include "moe_flags.h"
#include "parallel_flags.h"
#include "unbuilt_flags.h"
#include "tessel/comm/mpi.h"
#include "tessel/train/options.h"

namespace tessel {

class TrainCommand {
 public:
  // Adds the `train` subcommand and its flags to `app`; the flags parse into this object, so it
  // must outlive app.parse().
  explicit TrainCommand(CLI::App& app);
  bool selected() const { return static_cast<bool>(*cmd_); }
  // Every rank checks the flags together (one ConfigError listing every violated rule), then
  // trains.
  void run(MpiRuntime& runtime);

 private:
  CLI::App* cmd_;
  ModelFlags model_{tokenizer_sized_defaults()};
  TrainOptions options_;
  CLI::Option* data_path_ = nullptr;
  CLI::Option* global_batch_ = nullptr;
  std::vector<int64_t> rampup_batch_size_;  // --rampup-batch-size START INCREMENT SAMPLES: ignored
  ImplementationFlags implementation_;
  MoeFlags moe_;
  UnbuiltFlags unbuilt_;
  ShardingFlags sharding_;
  LoggingFlags logging_;
  bool explain_flags_ = false;
  std::string no_weight_decay_cond_type_;  // Megatron-LM's deprecated spelling of --apply-wd-to-qk-layernorm
  std::string decay_style_;
  std::string device_ = "cpu";
  int threads_ = 0;
  bool force_progress_ = false;
};

}  // namespace tessel
