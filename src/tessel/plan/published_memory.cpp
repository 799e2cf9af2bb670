// The activation-memory check of `tessel plan --published`: Korthikanti et al. 2022 §4 (Table 2,
// eq. 5, §4.3's embedding and head terms) against the planner's first stage, and the figures §5
// and Appendix A state.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <tuple>

#include "tessel/plan/memory.h"
#include "tessel/plan/published.h"
#include "tessel/plan/shape.h"

namespace tessel {

namespace {

struct MemoryCheck {
  std::string model, mode;
  double planner_gib, paper_gib;
  double total_gib;  // the planner's whole first stage: weights, gradients, optimizer, activations
};

// Korthikanti et al. §4 (Table 2, eq. 5 and §4.3): the first stage's activations, against the
// planner's (the interleaved factor 1 + (p − 1)/(p·m) and the embedding, head extras included).
std::vector<MemoryCheck> activation_checks(const Cluster& cluster) {
  std::vector<MemoryCheck> out;
  for (const PublishedRun& row : korthikanti_table5()) {
    if (row.run.recompute_kind() != Recompute::Full) continue;
    const PlanModel& m = row.model;
    const double s = m.cfg.seq_length, b = static_cast<double>(row.run.micro_batch), h = m.cfg.hidden_size,
                 a = m.cfg.num_attention_heads, L = m.cfg.num_layers, t = row.run.parallel.tp, p = row.run.parallel.pp,
                 v = row.run.parallel.vpp, V = m.cfg.vocab_size;
    const double sbh = s * b * h, interleave = v > 1 ? 1 + (p - 1) / (p * v) : 1;
    // §4.3: the embedding's dropout mask for p microbatches, and (p = 1) the final norm and LM
    // head inputs and the fp32 logits; the rows outside TP regions are split by SP.
    auto extras = [&](bool sp) {
      const double r = sp ? 1 / t : 1;
      return sbh * p * r + (p == 1 ? 4 * sbh * r + 4 * s * b * V / t : 0);
    };
    const struct {
      const char* mode;
      bool sp;
      Recompute rc;
      double per_layer;
    } modes[] = {{"TP (baseline)", false, Recompute::None, sbh * (10 + 24 / t + 5 * a * s / (h * t))},
                 {"TP + SP", true, Recompute::None, sbh / t * (34 + 5 * a * s / h)},
                 {"TP + selective", false, Recompute::Selective, sbh * (10 + 24 / t)},
                 {"TP + SP + selective", true, Recompute::Selective, sbh * 34 / t}};
    for (const auto& mode : modes) {
      PlanRun r = row.run;
      r.parallel.sequence_parallel = mode.sp;
      r.recompute = planned_recompute(mode.rc);
      const std::vector<StageMemory> stages = estimate_memory(m, r, cluster);
      const double paper = mode.per_layer * L * interleave + extras(mode.sp);
      constexpr double kGiB = 1024.0 * 1024 * 1024;
      out.push_back({m.name, mode.mode, stages[0].activations / kGiB, paper / kGiB,
                     (stages[0].total() - stages[0].runtime) / kGiB});
    }
  }
  return out;
}

// Figures §5 states: selective recomputation saves 70 % (GPT-3) and 65 % (MT-NLG) of the
// activations for 2.7 % and 1.6 % more FLOPs (Appendix A, eq. 8 over eq. 7).
struct StatedFigure {
  std::string what;
  double paper, planner;
};

std::vector<StatedFigure> stated_figures(const Cluster& cluster) {
  std::vector<StatedFigure> out;
  for (auto [preset, saving, overhead] : {std::tuple{"gpt3-175b", 0.70, 0.027}, {"korthikanti-530b", 0.65, 0.016}}) {
    PlanModel m = model_preset(preset);
    PlanRun r = published_megatron_run(8, 1, 1, 8, 1, 1, Recompute::None, true);
    const RunShape x(m, r, cluster);
    const ChunkSpec one_layer{0, 1, false, false};
    const double all = chunk_activations(x, one_layer).saved;
    r.recompute = planned_recompute(Recompute::Selective);
    const double kept = chunk_activations(RunShape(m, r, cluster), one_layer).saved;
    out.push_back({fmt::format("{}: activations saved by selective recomputation", m.name), saving, 1 - kept / all});
    const double s = m.cfg.seq_length;  // the recomputed Q·Kᵀ and scores·V, per token, every layer
    const double recomputed = m.cfg.num_layers * layer_flops(m, 0, m.cfg.seq_length).attention * s;
    // Eq. 8 adds 12·B·s²·h per layer: three times the forward's Q·Kᵀ and scores·V (4·B·s²·h),
    // as if recomputing counted forward and backward; the time model recomputes the forward once.
    const double once = recomputed / model_flops_per_iteration(m, 1);
    out.push_back({fmt::format("{}: extra FLOPs of selective recomputation, eq. 8's count", m.name), overhead, 3 * once});
    out.push_back({fmt::format("{}: the same, the forward recomputed once (the time model)", m.name), -1, once});
  }
  return out;
}

}  // namespace


void print_activation_checks(const Cluster& cluster, bool json, nlohmann::json& out) {
  const std::vector<MemoryCheck> checks = activation_checks(cluster);
  if (json) {
    nlohmann::json memory = nlohmann::json::array();
    for (const MemoryCheck& c : checks)
      memory.push_back({{"model", c.model}, {"mode", c.mode}, {"planner_gib", c.planner_gib}, {"paper_gib", c.paper_gib}});
    out["activation_memory"] = memory;
    return;
  }
  fmt::print("\nKorthikanti et al. §4: first-stage activation memory per GPU (Table 2 per layer × L, × (1 + (p−1)/(p·m)) "
             "when interleaved, + §4.3's embedding and head terms), and the planner's whole first stage (Figure 1's bars: "
             "parameters, optimizer state and activations; the figure prints no values, its text says every baseline "
             "exceeds an A100's 80 GB and the present work fits)\n"
             "| model | configuration | paper's equations | planner | difference | planner's whole stage (fp16) |\n"
             "| --- | --- | --- | --- | --- | --- |\n");
  for (const MemoryCheck& c : checks)
    fmt::print("| {} | {} | {:.2f} GiB | {:.2f} GiB | {:+.2f} % | {:.1f} GiB |\n", c.model, c.mode, c.paper_gib, c.planner_gib,
               100 * (c.planner_gib / c.paper_gib - 1), c.total_gib);
  fmt::print("\n| figure stated in §5 and Appendix A | paper | planner |\n| --- | --- | --- |\n");
  for (const StatedFigure& f : stated_figures(cluster))
    fmt::print("| {} | {} | {:.1f} % |\n", f.what, f.paper < 0 ? "–" : fmt::format("{:.1f} %", 100 * f.paper), 100 * f.planner);
}

}  // namespace tessel
