#include "tessel/plan/run.h"

#include <fmt/format.h>

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel {

PlannedEngine parse_engine(const std::string& name) {
  if (name == "tessel") return PlannedEngine::Tessel;
  if (name == "megatron") return PlannedEngine::Megatron;
  throw ConfigError(fmt::format("unknown --engine '{}' (tessel | megatron)", name));
}

PlannedEngine default_engine(const Cluster& cluster) {
  return cluster.cpu() ? PlannedEngine::Tessel : PlannedEngine::Megatron;
}

std::string recompute_name(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  return "";
}

Recompute parse_recompute(const std::string& name) {
  if (name == "none" || name.empty()) return Recompute::None;
  if (name == "selective") return Recompute::Selective;
  if (name == "full") return Recompute::Full;
  throw ConfigError(fmt::format("unknown --recompute-granularity '{}' (none | selective | full)", name));
}

RecomputeOptions planned_recompute(Recompute kind) {
  if (kind == Recompute::Full) return {.granularity = "full", .method = "uniform", .num_layers = 1};
  if (kind == Recompute::Selective) return {.granularity = "selective"};
  return {};
}

RecomputeOptions parse_planned_recompute(const RecomputeOptions& flags) {
  const Recompute kind = parse_recompute(flags.effective_granularity());
  const bool method_given = !flags.method.empty() || flags.num_layers != 0;
  if (kind != Recompute::Full && method_given)
    throw ConfigError("--recompute-method and --recompute-num-layers need --recompute-granularity full");
  if (kind == Recompute::Full && ((flags.method != "uniform" && !flags.method.empty()) || flags.num_layers > 1 ||
                                  flags.num_layers < 0))
    throw ConfigError(fmt::format(
        "tessel plan models full recompute as --recompute-method uniform --recompute-num-layers 1 "
        "(got --recompute-method '{}' --recompute-num-layers {})",
        flags.method, flags.num_layers));
  return planned_recompute(kind);
}

std::string precision_name(PlannedPrecision p) {
  return p == PlannedPrecision::FP32 ? "fp32" : p == PlannedPrecision::BF16 ? "bf16" : "fp16";
}

std::string attention_backend_name(AttentionBackend a) {
  return a == AttentionBackend::Unfused ? "unfused" : a == AttentionBackend::Flash ? "flash" : "tessel";
}

AttentionBackend parse_attention_backend(const std::string& name) {
  if (name == "unfused") return AttentionBackend::Unfused;
  if (name == "flash") return AttentionBackend::Flash;
  throw ConfigError(fmt::format("unknown --attention-backend '{}' (unfused | flash)", name));
}

StageOptions PlanRun::stage_options(int mtp_layers) const {
  const ScheduleConfig schedule = schedule_config();
  return {parallel.pp, schedule.virtual_stages, first_stage_layers, last_stage_layers, pipeline_layout,
          schedule_placement(schedule.kind), mtp_layers};
}

ScheduleConfig PlanRun::schedule_config() const {
  return chosen_schedule(schedule, parallel.pp, microbatches(), parallel.vpp, microbatch_group);
}

std::string PlanRun::describe() const {
  const ParallelConfig& p = parallel;
  std::string s = fmt::format("TP{} PP{}", p.tp, p.pp);
  if (p.vpp > 1) s += fmt::format(" VPP{}", p.vpp);
  if (first_stage_layers >= 0 || last_stage_layers >= 0 || !pipeline_layout.empty()) s += " uneven";
  if (p.cp > 1) s += fmt::format(" CP{}", p.cp);
  if (p.ep > 1) s += fmt::format(" EP{}", p.ep);
  if (p.ep > 1 && p.expert_tp() != p.tp) s += fmt::format(" ETP{}", p.expert_tp());
  s += fmt::format(" DP{} mb{}", p.tp * p.cp * p.pp > 0 ? p.dp() : 0, micro_batch);  // also for bad sizes
  if (recompute_kind() != Recompute::None) s += " " + recompute_name(recompute_kind());
  if (p.distributed_optimizer) s += " dist-opt";
  return s;
}

std::vector<std::string> gpu_count_violations(int gpus, const Cluster& cluster) {
  std::vector<std::string> v;
  if (gpus < 1) v.push_back(fmt::format("--num-gpus must be positive (got {})", gpus));
  const int per_node = cluster.devices_per_node;
  if (!cluster.cpu() && gpus > per_node && gpus % per_node != 0)
    v.push_back(fmt::format("--num-gpus {} is not a whole number of {}-GPU nodes", gpus, per_node));
  return v;
}

std::vector<std::string> run_violations(const PlanModel& model, const PlanRun& run, const Cluster& cluster,
                                        const TrainRules& rules) {
  std::vector<std::string> v = model.violations();
  auto add = [&](std::string m) {
    if (std::find(v.begin(), v.end(), m) == v.end()) v.push_back(std::move(m));
  };
  const int world = run.parallel.world;
  for (std::string& m : gpu_count_violations(world, cluster)) add(std::move(m));
  const bool tessel = run.engine_on(cluster) == PlannedEngine::Tessel;
  if (!tessel && cluster.cpu()) add("Megatron-LM runs on GPUs: --engine megatron needs a GPU cluster");
  if (tessel && run.precision != PlannedPrecision::FP32)
    add(cluster.cpu() ? "tessel plan models CPU ranks in fp32 (tessel train --bf16 or --fp16 on a CPU only rounds the GEMM operands, to compare with a GPU run)"
                      : "tessel plan models tessel's ranks in fp32 (what its declare-only build declares; not --bf16 or --fp16 on CUDA yet)");
  if (tessel && model.multi_latent_attention) add("tessel does not train --multi-latent-attention yet (plan it on a GPU cluster)");
  if (cluster.cpu() && run.threads < 1) add("--threads must be positive");
  if (world < 1 || !v.empty()) return v;
  ModelConfig sizes = model.cfg;
  if (model.multi_latent_attention) {  // checked as in PlanModel::violations
    sizes.ffn_hidden_size = model.cfg.ffn_size();
    sizes.hidden_size = model.cfg.num_attention_heads * 2;
    sizes.kv_channels = 0;
  }
  for (std::string& m : rules(sizes, run)) add(std::move(m));
  return v;
}

}  // namespace tessel
