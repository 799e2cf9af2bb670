// `tessel plan`: predicts the memory per rank and the step time of a layout of a model on a
// cluster, or searches every layout for the fastest that fits (src/tessel/plan/). Takes the model
// and parallel flags of `tessel train`, a --model preset or --model-config file, --cluster and
// --num-gpus; --calibrate measures this machine, --published checks the model against the papers.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "model_flags.h"
#include "tessel/comm/mpi.h"
#include "tessel/model/recompute.h"
#include "tessel/plan/estimate.h"
#include "tessel/train/options.h"

namespace tessel {

class PlanCommand {
 public:
  explicit PlanCommand(CLI::App& app);
  bool selected() const { return static_cast<bool>(*cmd_); }
  void run(MpiRuntime& runtime);

 private:
  PlanModel resolve_model() const;
  PlanRun resolve_run(const PlanModel& model, const Cluster& cluster) const;
  bool layout_given() const;
  Cluster resolve_cluster() const;
  void evaluate(const PlanModel& model, const Cluster& cluster, const PlanRun& run) const;
  void search_layouts(const PlanModel& model, const Cluster& cluster, const PlanRun& base) const;
  void write_svgs(const Estimate& est, const Cluster& cluster, const std::string& title) const;

  CLI::App* cmd_;
  // Model: a preset or file, then the model flags given on top, then the planner's own.
  std::string preset_;
  ModelFlags model_{ModelConfig{}};
  std::vector<std::function<void(PlanModel&)>> overrides_;
  // Run.
  std::string engine_;  // empty: the cluster's default (plan/run.h)
  std::string cluster_ = "cpu";
  int num_gpus_ = 0;
  ParallelConfig parallel_;
  BatchOptions batch_;
  RecomputeOptions recompute_;
  PipelineOptions pipeline_;
  std::string attention_;
  int threads_ = 1;
  double moe_load_factor_ = 1.0;
  double memory_margin_ = 0.05;
  CLI::Option* runtime_memory_opt_ = nullptr;  // --runtime-memory-gib: overrides the cluster's allowance
  double runtime_memory_gib_ = 0;
  bool bf16_ = false, fp16_ = false, overlap_grad_reduce_ = false, post_validation_ = false, no_async_tp_ = false;
  std::vector<CLI::Option*> layout_opts_;  // --tp --pp --cp --ep: any of them given, one layout is evaluated
  CLI::Option* etp_opt_ = nullptr;        // --etp and --vpp alone fix that size in the search
  CLI::Option* vpp_opt_ = nullptr;
  CLI::Option *mb_opt_ = nullptr, *recompute_opt_ = nullptr, *dist_opt_ = nullptr, *num_gpus_opt_ = nullptr;
  // Output.
  bool json_ = false, explain_ = false, all_rejected_ = false;
  int top_ = 10;
  std::string svg_memory_, svg_time_;
  // Other modes.
  bool calibrate_ = false, calibrate_comm_ = false, published_ = false;
  std::string calibrate_out_;
};

}  // namespace tessel
