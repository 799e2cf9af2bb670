#include "tessel/plan/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "tessel/plan/memory.h"

namespace tessel {

const char* const kFlopConvention =
    "model FLOPs: 3 x the forward pass's matrix multiplies (projections, MLP or the top-k experts, "
    "LM head; attention Q.K^T and scores.V over the whole sequence, the causal mask not discounted), "
    "without recomputation: Korthikanti et al. 2022 eq. 7 (72·B·L·s·h²·(1 + s/6h + V/(12hL)) for GPT)";

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double gib(double bytes) { return bytes / kGiB; }

std::string billions(double n) { return n >= 1e9 ? fmt::format("{:.1f}B", n / 1e9) : fmt::format("{:.2f}M", n / 1e6); }

void print_header(const PlanModel& model, const Cluster& c) {
  const ModelConfig& m = model.cfg;
  fmt::print("model: {} | {} parameters ({} active) | {} layers, hidden {}, {} heads ({} KV), seq {}, vocab {}{}\n",
             model.name, billions(static_cast<double>(total_params(model))), billions(static_cast<double>(active_params(model))),
             m.num_layers, m.hidden_size, m.num_attention_heads, m.query_groups(), m.seq_length, m.vocab_size,
             m.moe.num_experts > 0 ? fmt::format(", {} experts top-{}", m.moe.num_experts, m.moe.topk) : "");
  fmt::print("cluster: {} | {} {}s per node, {:.0f} GiB, {:.4g} TFLOP/s | efficiency: GEMM {:.2f}, memory {:.2f}, "
             "network {:.2f}\n",
             c.name, c.devices_per_node, c.cpu() ? "core" : "GPU", c.memory_gib, c.peak_flops / 1e12, c.gemm_efficiency,
             c.memory_efficiency, c.network_efficiency);
}

// Each stage against the limit: "3.8 spare" or "over 2.78 (3.5 %)".
std::string against_limit(double total_gib, double limit_gib) {
  if (total_gib <= limit_gib) return fmt::format("{:.2f} spare", limit_gib - total_gib);
  return fmt::format("over {:.2f} ({:.1f} %)", total_gib - limit_gib, 100 * (total_gib / limit_gib - 1));
}

void print_memory_table(const Estimate& est, const Cluster& cluster) {
  fmt::print("memory per rank (GiB)\n  {:>5} {:>9} {:>8} {:>8} {:>9} {:>11} {:>8} {:>8} {:>8} {:>9}  {}\n", "stage",
             "params", "weights", "grads", "optimizer", "activations", "buffers", "runtime", "total", "in flight",
             "against the limit");
  for (const StageMemory& s : est.stages)
    fmt::print("  {:>5} {:>9} {:>8.2f} {:>8.2f} {:>9.2f} {:>11.2f} {:>8.2f} {:>8.2f} {:>8.2f} {:>9}  {}\n", s.stage,
               billions(static_cast<double>(s.params)), gib(s.weights), gib(s.grads), gib(s.optimizer), gib(s.activations),
               gib(s.buffers), gib(s.runtime), gib(s.total()), s.peak_in_flight, against_limit(gib(s.total()), est.memory_limit_gib));
  const MemoryVerdict v = est.verdict();
  fmt::print("  limit {:.1f} GiB per rank, a runtime allowance of {:.2f} GiB included ({}; --runtime-memory-gib): "
             "fullest stage {} {}\n",
             est.memory_limit_gib, v.runtime_gib,
             cluster.cpu() ? "the process's baseline resident memory: MPI, the libraries, the program itself"
                           : "CUDA context, workspaces, NCCL buffers",
             v.stage, v.fits() ? v.text() : "does NOT fit: " + v.text());
}

void print_time(const Estimate& est) {
  const StepTime& t = est.time;
  fmt::print("step time {:.4g} s = pipeline {:.4g} s (busiest stage {}: compute {:.4g}, TP {:.4g}, CP {:.4g}, EP {:.4g}, "
             "PP {:.4g}, idle {:.4g}) + DP {:.4g} + embedding {:.4g} + optimizer {:.4g}\n",
             t.step, t.makespan, t.stage, t.compute, t.tp_comm, t.cp_comm, t.ep_comm, t.pp_comm, t.idle, t.dp_comm,
             t.embedding_sync, t.optimizer);
  if (est.run.parallel.pp > 1)
    fmt::print("pipeline bubble {:.1f} % = the stages' idle share of the simulated pipeline\n", 100 * t.bubble);
  fmt::print("throughput {:.1f} tokens/s/GPU | {:.2f} TFLOP/s/GPU | MFU {:.1f} % (model FLOPs {:.4g} per step)\n",
             est.tokens_per_s_per_gpu, est.tflops_per_gpu, 100 * est.mfu, est.model_flops);
}

// The layout, and with an uneven split the stages' layers: "… [6|8|…|8|6]".
std::string layout_label(const Estimate& e) {
  std::string s = e.run.describe();
  if (e.run.pipeline_layout.empty() && e.run.first_stage_layers < 0 && e.run.last_stage_layers < 0) return s;
  std::string layers;
  for (size_t i = 0; i < e.stages.size(); ++i) {
    if (e.stages.size() > 4 && i == 2) layers += "|…";
    if (e.stages.size() > 4 && i >= 2 && i + 2 < e.stages.size()) continue;
    layers += (i ? "|" : "") + std::to_string(e.stages[i].layers);
  }
  return s + " [" + layers + "]";
}

std::string layout_line(const Estimate& est) {
  const PlanRun& r = est.run;
  return fmt::format("layout: {} | world {} | global batch {} = micro batch {} × DP {} × {} microbatches | {} | {}{}",
                     layout_label(est), r.parallel.world, r.global_batch, r.micro_batch, r.dp(), r.microbatches(),
                     schedule_kind_name(r.schedule_config().kind), precision_name(r.precision),
                     r.pipeline_layout.empty() ? "" : " | layout " + r.pipeline_layout);
}

// A rejection's rule with its numbers masked, to count alike reasons together.
std::string rule_key(const std::string& reason) {
  std::string key;
  for (char c : reason) {
    const bool digit = (c >= '0' && c <= '9') || c == '.';
    if (!digit) key += c;
    else if (key.empty() || key.back() != '#') key += '#';
  }
  return key;
}

void print_fixes(const std::vector<MemoryFix>& fixes, double step) {
  if (fixes.empty()) fmt::print("        no single change (recompute, distributed optimizer, micro batch) makes it fit\n");
  for (const MemoryFix& f : fixes)
    fmt::print("        fits with {}{}\n", f.change,
               f.step > 0 ? fmt::format(": peak {:.2f} GiB, step {:.4g} s ({:+.1f} %)", f.peak_gib, f.step, 100 * (f.step / step - 1))
                          : "");
}

// The layouts over the limit by at most the margin: their step time, by how much they miss, and
// what makes them fit.
void print_near_misses(const SearchResult& r) {
  fmt::print("\nnear misses (over the memory limit by at most {:.1f} %, --memory-margin):{}\n", 100 * r.memory_margin,
             r.near_misses.empty() ? " none" : "");
  const double best = r.ranked.empty() ? 0 : r.ranked.front().time.step;
  for (size_t i = 0; i < r.near_misses.size(); ++i) {
    const Estimate& e = r.near_misses[i].estimate;
    fmt::print("  {:>2}  {:<52} {:>9.4g} s{}  {}\n", i + 1, layout_label(e), e.time.step,
               best > 0 ? fmt::format(" ({:+.1f} % against #1)", 100 * (e.time.step / best - 1)) : "",
               e.verdict().text());
    print_fixes(r.near_misses[i].fixes, e.time.step);
  }
}

}  // namespace

void print_memory_fixes(const Estimate& est, const std::vector<MemoryFix>& fixes) {
  fmt::print("what makes it fit, one change at a time:\n");
  print_fixes(fixes, est.time.step);
}

RankKinds rank_kinds(const Estimate& est) {
  RankKinds k;
  if (est.stages.empty()) return k;
  k.first = gib(est.stages.front().total());
  k.last = gib(est.stages.back().total());
  for (size_t i = 1; i + 1 < est.stages.size(); ++i) k.middle = std::max(k.middle, gib(est.stages[i].total()));
  if (est.stages.size() <= 2) k.middle = std::max(k.first, k.last);
  return k;
}

void print_estimate(const PlanModel& model, const Cluster& cluster, const Estimate& est) {
  print_header(model, cluster);
  fmt::print("{}\n", layout_line(est));
  print_memory_table(est, cluster);
  print_time(est);
}

void print_explain(const PlanModel& model, const Cluster& cluster, const Estimate& est) {
  print_estimate(model, cluster, est);
  fmt::print("\nevery figure with its formula (e = {} B per activation element, h = {}, t = {}, b·s/CP = {} tokens, "
             "rows = {} outside TP regions)\n",
             est.run.precision == PlannedPrecision::FP32 ? 4 : 2, model.cfg.hidden_size, est.run.parallel.tp,
             est.run.micro_batch * model.cfg.seq_length / est.run.parallel.cp,
             est.run.parallel.sequence_parallel && est.run.parallel.tp > 1
                 ? est.run.micro_batch * model.cfg.seq_length / est.run.parallel.cp / est.run.parallel.tp
                 : est.run.micro_batch * model.cfg.seq_length / est.run.parallel.cp);
  for (const StageMemory& s : est.stages) {
    fmt::print("\nstage {} memory = {}\n", s.stage, bytes_str(s.total()));
    for (const Term& t : s.terms) fmt::print("  {} = {} = {} = {}\n", t.name, t.formula, t.numbers, bytes_str(t.value));
  }
  fmt::print("\nstep time = {:.6g} s\n", est.time.step);
  for (const Term& t : est.time.terms) fmt::print("  {} = {} = {} = {:.6g} s\n", t.name, t.formula, t.numbers, t.value);
  fmt::print("  tokens/s/GPU = global batch · s / step / GPUs = {}·{} / {:.6g} / {} = {:.6g}\n", est.run.global_batch,
             model.cfg.seq_length, est.time.step, est.run.parallel.world, est.tokens_per_s_per_gpu);
  fmt::print("  MFU = model FLOPs / (step · GPUs · peak) = {:.6g} / ({:.6g} · {} · {:.6g}) = {:.4f}\n  ({})\n",
             est.model_flops, est.time.step, est.run.parallel.world, cluster.peak_flops, est.mfu, kFlopConvention);
}

void print_search(const PlanModel& model, const Cluster& cluster, const SearchResult& r, bool all_rejected) {
  print_header(model, cluster);
  fmt::print("searched {} layouts: {} valid and fitting ({} simulated, the rest bounded out), {} rejected\n",
             r.considered, r.valid, r.simulated, r.rejected.size());
  if (!r.ranked.empty()) {
    const PlanRun& b = r.ranked.front().run;
    fmt::print("GPUs {} | global batch {} | {}\n\n", b.parallel.world, b.global_batch, precision_name(b.precision));
    fmt::print("  {:>2}  {:<52} {:>9} {:>11} {:>8} {:>6}  {}\n", "#", "layout", "step (s)", "tok/s/GPU", "TFLOP/s", "MFU",
               "memory GiB first / middle / last");
    for (size_t i = 0; i < r.ranked.size(); ++i) {
      const Estimate& e = r.ranked[i];
      const RankKinds k = rank_kinds(e);
      fmt::print("  {:>2}  {:<52} {:>9.4g} {:>11.1f} {:>8.1f} {:>5.1f}%  {:.1f} / {:.1f} / {:.1f}\n", i + 1,
                 layout_label(e), e.time.step, e.tokens_per_s_per_gpu, e.tflops_per_gpu, 100 * e.mfu, k.first,
                 k.middle, k.last);
    }
  }
  print_near_misses(r);
  if (r.rejected.empty()) return;
  fmt::print("\nrejected layouts, by the rule they break{}:\n", all_rejected ? "" : " (one example each; --all-rejected lists every one)");
  if (all_rejected) {
    for (const Rejection& j : r.rejected) {
      std::string reasons;
      for (const std::string& s : j.reasons) reasons += (reasons.empty() ? "" : "; ") + s;
      fmt::print("  {}: {}\n", j.run.describe(), reasons);
    }
    return;
  }
  std::map<std::string, std::pair<int, const Rejection*>> by_rule;
  for (const Rejection& j : r.rejected) {
    auto& slot = by_rule[rule_key(j.reasons.front())];
    if (slot.first++ == 0) slot.second = &j;
  }
  std::vector<std::pair<int, const Rejection*>> rows;
  for (auto& [key, slot] : by_rule) rows.push_back(slot);
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto [count, j] : rows) fmt::print("  {:>6} × {} (e.g. {})\n", count, j->reasons.front(), j->run.describe());
}

nlohmann::json estimate_json(const Estimate& est) {
  const PlanRun& r = est.run;
  const ParallelConfig& p = r.parallel;
  nlohmann::json stages = nlohmann::json::array();
  for (const StageMemory& s : est.stages)
    stages.push_back({{"stage", s.stage}, {"ranks", s.ranks}, {"layers", s.layers}, {"params", s.params}, {"expert_params", s.expert_params},
                      {"weights_gib", gib(s.weights)}, {"grads_gib", gib(s.grads)}, {"optimizer_gib", gib(s.optimizer)},
                      {"activations_gib", gib(s.activations)}, {"buffers_gib", gib(s.buffers)},
                      {"runtime_gib", gib(s.runtime)}, {"total_gib", gib(s.total())}, {"peak_in_flight", s.peak_in_flight}});
  const RankKinds k = rank_kinds(est);
  const StepTime& t = est.time;
  return {{"layout",
           {{"describe", layout_label(est)}, {"world", p.world}, {"tp", p.tp}, {"cp", p.cp}, {"pp", p.pp}, {"vpp", p.vpp},
            {"ep", p.ep}, {"etp", p.expert_tp()}, {"dp", r.dp()}, {"sequence_parallel", p.sequence_parallel},
            {"distributed_optimizer", p.distributed_optimizer}, {"micro_batch_size", r.micro_batch},
            {"global_batch_size", r.global_batch}, {"microbatches", r.microbatches()},
            {"recompute_granularity", recompute_name(r.recompute_kind())}, {"precision", precision_name(r.precision)},
            {"schedule", schedule_kind_name(r.schedule_config().kind)}, {"pipeline_layout", r.pipeline_layout}}},
          {"memory_gib", {{"first", k.first}, {"middle", k.middle}, {"last", k.last}, {"per_stage", stages}}},
          {"memory_limit_gib", est.memory_limit_gib},
          {"fits", est.fits()},
          {"memory_verdict",
           {{"fullest_stage", est.verdict().stage}, {"peak_gib", est.verdict().peak_gib},
            {"spare_gib", est.verdict().spare_gib()}, {"over_fraction", est.verdict().over_fraction()},
            {"runtime_allowance_gib", est.verdict().runtime_gib}}},
          {"step_time_s", t.step},
          {"pipeline_bubble", t.bubble},  // the stages' idle share of the simulated pipeline
          {"time_breakdown_s",
           {{"pipeline", t.makespan}, {"busiest_stage", t.stage}, {"compute", t.compute}, {"tp_comm", t.tp_comm}, {"cp_comm", t.cp_comm},
            {"ep_comm", t.ep_comm}, {"pp_comm", t.pp_comm}, {"idle", t.idle}, {"dp_comm", t.dp_comm},
            {"embedding_sync", t.embedding_sync}, {"optimizer", t.optimizer}}},
          {"tokens_per_s_per_gpu", est.tokens_per_s_per_gpu},
          {"tflops_per_gpu", est.tflops_per_gpu},
          {"mfu", est.mfu},
          {"model_flops_per_step", est.model_flops}};
}

nlohmann::json single_json(const PlanModel& model, const Cluster& cluster, const Estimate& est) {
  return {{"model", plan_model_to_json(model)}, {"cluster", cluster_to_json(cluster)},
          {"flop_convention", kFlopConvention}, {"layouts", {estimate_json(est)}}};
}

nlohmann::json search_json(const PlanModel& model, const Cluster& cluster, const SearchResult& r) {
  nlohmann::json layouts = nlohmann::json::array(), rejected = nlohmann::json::array();
  for (const Estimate& e : r.ranked) layouts.push_back(estimate_json(e));
  for (const Rejection& j : r.rejected) rejected.push_back({{"layout", j.run.describe()}, {"reasons", j.reasons}});
  nlohmann::json near = nlohmann::json::array();
  for (const NearMiss& n : r.near_misses) {
    nlohmann::json fixes = nlohmann::json::array();
    for (const MemoryFix& f : n.fixes) fixes.push_back({{"change", f.change}, {"peak_gib", f.peak_gib}, {"step_time_s", f.step}});
    nlohmann::json layout = estimate_json(n.estimate);
    layout["fixes"] = fixes;
    near.push_back(layout);
  }
  return {{"model", plan_model_to_json(model)},
          {"cluster", cluster_to_json(cluster)},
          {"flop_convention", kFlopConvention},
          {"considered", r.considered},
          {"valid", r.valid},
          {"simulated", r.simulated},
          {"layouts", layouts},
          {"memory_margin", r.memory_margin},
          {"near_misses", near},
          {"rejected", rejected}};
}

}  // namespace tessel
