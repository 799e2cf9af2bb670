// tessel's own memory, on any device, as the model declares it: each model chunk's declare-only
// build (TransformerChunk::declare, model/transformer.h) at the place of the first rank of each
// group of the stage holding it, its MoE buffers grown to the run's routing load by the rule the
// kernels' reserve follows (reserved_rows); the executor's slot buffers (pipeline/executor.h) and
// the context-parallel workspace (parallel/context_parallel.h). Checked against `tessel train
// --profile-report` and the executor's peak activations (tests/plan/memory_profile_test.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "tessel/pipeline/executor.h"
#include "tessel/plan/memory.h"

namespace tessel {

namespace {

ChunkPlace first_rank(const RunShape& x) {
  ChunkPlace p;
  p.tp = x.t, p.sequence_parallel = x.sp, p.cp = x.cp, p.ep = x.ep, p.etp = x.etp;
  return p;
}

ChunkTensors declared_tensors(const RunShape& x, const ChunkSpec& chunk) {
  ParamRegistry params;  // counted by stage_params, over the stage's chunks together
  return TransformerChunk::declare(x.model.cfg, {.spec = chunk, .micro_batch = x.b, .recompute = x.run.recompute},
                                   first_rank(x), params);
}

// The rows an MoE buffer's first dimension holds in this run, and so its bytes: the balanced
// rows times the run's load (what a rank sends, or what its experts receive), at least the rows
// it holds regardless, grown from its declared rows as Kernels::reserve grows it.
double load(const RunShape& x, RoutedRows rows) {
  return rows == RoutedRows::Sent ? x.moe_send_load() : x.moe_load();
}
double run_rows(const RunShape& x, const DeclaredTensor& t) {
  const double declared = static_cast<double>(t.shape[0]);
  if (!t.growth) return declared;
  const double needed = std::max(static_cast<double>(t.growth->balanced) * load(x, t.growth->rows),
                                 static_cast<double>(t.growth->floor));
  return reserved_rows(declared, needed);
}
double run_bytes(const RunShape& x, const DeclaredTensor& t) {
  return static_cast<double>(t.bytes) / static_cast<double>(t.shape[0]) * run_rows(x, t);
}

// One term per kind of tensor ("layers: attention q"), summed over the layers that declare it, in
// the order of their first declaration; returns the total.
double add_terms(std::vector<Term>& terms, const RunShape& x, const std::vector<DeclaredTensor>& tensors) {
  struct Kind {
    Term term;
    int count = 0;
    const DeclaredTensor* first;
  };
  std::vector<Kind> kinds;
  std::map<std::string, size_t> index;
  double total = 0;
  for (const DeclaredTensor& t : tensors) {
    const std::string name = t.part + ": " + t.name;
    auto [it, added] = index.emplace(name + " " + shape_str(t.shape), kinds.size());
    if (added) kinds.push_back({{name, 0, "", ""}, 0, &t});
    Kind& k = kinds[it->second];
    k.term.value += run_bytes(x, t);
    k.count += 1;
    total += run_bytes(x, t);
  }
  for (Kind& k : kinds) {
    const DeclaredTensor& t = *k.first;
    const std::string times = k.count > 1 ? fmt::format("{} × ", k.count) : "";
    k.term.formula = fmt::format("{}{} {}", times, shape_str(t.shape), dtype_name(t.dtype));
    if (t.growth)
      k.term.formula += fmt::format(", rows {} × {} load, grown as Kernels::reserve grows them",
                                    t.growth->rows == RoutedRows::Sent ? "sent" : "received",
                                    t.growth->rows == RoutedRows::Sent ? "send" : "routing");
    k.term.numbers = fmt::format("{}{:.0f} B", times, run_bytes(x, t));
    terms.push_back(k.term);
  }
  return total;
}

}  // namespace

ChunkMemory tessel_chunk_activations(const RunShape& x, const ChunkSpec& chunk) {
  ChunkMemory m;
  const ChunkTensors t = declared_tensors(x, chunk);
  m.saved = add_terms(m.terms, x, t.slot);
  m.shared = add_terms(m.shared_terms, x, t.shared);
  const int model_chunk = [&] {
    for (size_t i = 0; i < x.chunks.size(); ++i)
      if (x.chunks[i].first_layer == chunk.first_layer && x.chunks[i].num_layers == chunk.num_layers)
        return static_cast<int>(i);
    return 0;
  }();
  // The slot's microbatch rows as the plan counts them: without packed documents' and multi-token
  // prediction's (a few i32 rows).
  ModelConfig rows_cfg = x.model.cfg;
  rows_cfg.mtp_num_layers = 0;
  const PipelineExecutor::SlotTensors slot = PipelineExecutor::slot_tensors(
      TransformerChunk::microbatch_inputs(rows_cfg, chunk, {.tokens = x.b * (x.s / x.cp)}), x.rows,
      x.model.cfg.hidden_size, model_chunk, static_cast<int>(x.chunks.size()));
  m.slot = add_terms(m.terms, x, slot.tensors);
  m.gradient = static_cast<double>(slot.leaving_bytes);
  return m;
}

std::vector<Term> tessel_rank_buffers(const RunShape& x, int stage) {
  std::vector<Term> terms;
  for (const ChunkSpec& chunk : x.stage_chunks(stage)) {
    // One term per chunk (its tensors in the formula, each part's sum in the numbers).
    const std::vector<DeclaredTensor> scratch = declared_tensors(x, chunk).scratch;
    std::vector<Term> kinds;
    const double bytes = add_terms(kinds, x, scratch);
    std::vector<std::pair<std::string, double>> parts;  // the bytes of each part, in order
    for (const DeclaredTensor& t : scratch) {
      if (parts.empty() || parts.back().first != t.part) parts.push_back({t.part, 0});
      parts.back().second += run_bytes(x, t);
    }
    std::string formula, numbers;
    for (const Term& k : kinds)
      formula += fmt::format("{}{} ({})", formula.empty() ? "" : " + ", k.name, k.formula);
    for (const auto& [part, part_bytes] : parts)
      numbers += fmt::format("{}{} {}", numbers.empty() ? "" : " + ", part, bytes_str(part_bytes));
    terms.push_back(
        {fmt::format("chunk {}-{} scratch", chunk.first_layer, chunk.first_layer + chunk.num_layers - 1),
         bytes, formula, numbers});
  }
  if (x.cp > 1) {  // the ring (--cp-comm-type p2p) tessel train runs by default
    const ModelConfig& c = x.model.cfg;
    const double bytes = static_cast<double>(
        context_parallel_workspace_bytes(CpCommType::P2P, x.cp, x.b, x.s / x.cp, c.num_attention_heads / x.t,
                                         c.query_groups_per_rank(x.t), c.head_dim()));
    terms.push_back({"context-parallel ring workspace", bytes,
                     "context_parallel_workspace_bytes (parallel/context_parallel.h)",
                     fmt::format("{:.0f} B", bytes)});
  }
  if (x.cp > 1 && x.model.cfg.linear.enabled()) {  // the GDN layers' head all-to-all, its widest exchange
    const LinearAttentionConfig& la = x.model.cfg.linear;
    const int64_t width = 2 * (la.key_dim() + la.value_dim() + la.num_value_heads) / (x.t * x.cp);
    const double bytes = static_cast<double>(context_parallel_heads_workspace_bytes(x.cp, x.b, x.s / x.cp, width));
    terms.push_back({"context-parallel heads all-to-all workspace", bytes,
                     "context_parallel_heads_workspace_bytes (parallel/context_parallel.h)",
                     fmt::format("{:.0f} B", bytes)});
  }
  return terms;
}

StageParams tessel_stage_params(const RunShape& x, int stage) {
  ParamRegistry params;  // the stage's chunks declare into one registry, as the trainer's do
  for (const ChunkSpec& chunk : x.stage_chunks(stage))
    TransformerChunk::declare(x.model.cfg, {.spec = chunk, .micro_batch = x.b, .recompute = x.run.recompute},
                              first_rank(x), params);
  StageParams p;
  for (const Param& param : params.params()) (is_expert_param(param) ? p.experts : p.dense) += param.numel();
  return p;
}

}  // namespace tessel
