#include "tessel/plan/shape.h"

#include <fmt/format.h>

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel {

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

StageOptions PlanRun::stage_options() const {
  const ScheduleConfig schedule = schedule_config();
  return {parallel.pp, schedule.virtual_stages, first_stage_layers, last_stage_layers, pipeline_layout,
          schedule_placement(schedule.kind)};
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
  if (recompute != Recompute::None) s += " " + recompute_name(recompute);
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
  if (cluster.cpu()) {
    if (run.precision != PlannedPrecision::FP32) add("tessel plan models CPU ranks in fp32 (tessel train --bf16 on a CPU only rounds the GEMM operands, to compare with a GPU run; no --fp16)");
    if (model.multi_latent_attention) add("tessel does not train --multi-latent-attention yet (plan it on a GPU cluster)");
    if (run.threads < 1) add("--threads must be positive");
  }
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

StateBytes state_bytes(PlannedPrecision p) {
  switch (p) {
    case PlannedPrecision::FP32: return {4, 4, 8};    // tessel: fp32 weights and gradients, Adam m and v
    case PlannedPrecision::BF16: return {2, 4, 12};   // bf16 weights, fp32 main gradients, fp32 master + m + v
    case PlannedPrecision::FP16: return {2, 2, 16};   // fp16 weights and gradients, fp32 gradient copy, master, m, v
  }
  return {4, 4, 8};
}

RunShape::RunShape(const PlanModel& m, const PlanRun& r, const Cluster& c)
    : model(m), run(r), cluster(c), layout(r.parallel) {
  const ParallelConfig& p = r.parallel;
  t = p.tp, cp = p.cp, pp = p.pp, ep = p.ep, etp = p.expert_tp();
  dp = p.dp(), edp = p.expert_dp();
  sp = p.sequence_parallel && t > 1;
  b = r.micro_batch;
  s = m.cfg.seq_length;
  N = b * s / cp;
  rows = sp ? N / t : N;
  e = r.precision == PlannedPrecision::FP32 ? 4 : 2;
  const StateBytes sb = state_bytes(r.precision);
  w_bytes = sb.weight, g_bytes = sb.grad, o_bytes = sb.optimizer;
  V_l = m.cfg.padded_vocab(t) / t;
  microbatches = r.microbatches();
  stages = r.stage_options();
  v = stages.virtual_stages;  // a V schedule's two chunks per rank at --vpp 1
  chunks = assign_layers(m.cfg.num_layers, stages);
  schedule = r.schedule_config();
}

RunShape::Placement RunShape::placement(GroupKind kind) const {
  Placement widest;
  for (const std::vector<int>& g : layout.groups(kind)) {
    std::vector<int> nodes;
    for (int rank : g) nodes.push_back(node_of(rank));
    std::sort(nodes.begin(), nodes.end());
    const int distinct = static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
    if (distinct >= widest.nodes) widest = {static_cast<int>(g.size()), distinct, static_cast<int>(g.size()) / distinct};
  }
  return widest;
}

bool RunShape::pp_link_spans_nodes(int stage, int next) const {
  for (const std::vector<int>& g : layout.groups(GroupKind::PP))
    if (node_of(g[stage]) != node_of(g[next])) return true;
  return false;
}

}  // namespace tessel
