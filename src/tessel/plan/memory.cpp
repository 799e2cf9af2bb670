#include "tessel/plan/memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tessel {

std::string bytes_str(double bytes) {
  const double a = std::fabs(bytes);
  if (a >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024));
  if (a >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024));
  if (a >= 1024.0) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{:.0f} B", bytes);
}

namespace {

// One saved tensor of a microbatch: `per_token` bytes for each of `tokens` rows.
struct Saved {
  std::string name;
  double per_token;
  double tokens;
  std::string formula;  // bytes per row, in symbols
};

void add_saved(ChunkMemory& m, const std::vector<Saved>& items, double layers, const std::string& where) {
  for (const Saved& s : items) {
    const double bytes = s.per_token * s.tokens * layers;
    m.saved += bytes;
    m.terms.push_back({where + s.name, bytes, fmt::format("{}{} × ({})", layers != 1 ? "layers × " : "",
                                                           "rows", s.formula),
                       fmt::format("{}{:.0f} rows × {:.0f} B", layers != 1 ? fmt::format("{:.0f} × ", layers) : "",
                                   s.tokens, s.per_token)});
  }
}

// Megatron's saved activations of one layer and one microbatch on one TP rank (Korthikanti et
// al. §4.1–4.2, Table 2): with b·s = N tokens, the regions outside TP (norms, dropouts, the
// inputs of the QKV and first MLP projections) hold `rows` = N (N/t under sequence parallel),
// the TP regions N tokens of 1/t of the heads and neurons. In bytes for GPT-3 (e = 2,
// dropout 0.1, unfused softmax): sbh·(10 + 24/t + 5·a·s/(h·t)), Table 2's first rows.
std::vector<Saved> layer_items(const RunShape& x, int layer, bool core_attention_kept) {
  const PlanModel& m = x.model;
  const double e = x.e, h = m.cfg.hidden_size, t = x.t, N = static_cast<double>(x.N),
               rows = static_cast<double>(x.rows);
  const double q = static_cast<double>(m.q_width()), kv = static_cast<double>(m.kv_width()),
               vw = static_cast<double>(m.v_width()), a = m.cfg.num_attention_heads, s = static_cast<double>(x.s);
  std::vector<Saved> items = {
      {"norm inputs", 2 * e * h, rows, "2·e·h"},
      {"QKV and MLP inputs", 2 * e * h, rows, "2·e·h"},
  };
  if (m.hidden_dropout > 0) items.push_back({"dropout masks", 2 * h, rows, "2·h (1 B each)"});
  items.push_back({"Q, K, V", e * (q + 2 * kv) / t, N, "e·(q + 2·kv)/t"});
  items.push_back({"attention output", e * vw / t, N, "e·v/t"});
  if (core_attention_kept && x.run.attention == AttentionBackend::Unfused) {
    items.push_back({"softmax output", e * a * s / t, N, "e·a·s/t"});
    if (m.attention_dropout > 0)
      items.push_back({"attention dropout mask and output", (1 + e) * a * s / t, N, "(1 + e)·a·s/t"});
  } else if (x.run.attention != AttentionBackend::Unfused) {
    items.push_back({"log-sum-exp (fp32)", 4 * a / t, N, "4·a/t"});
  }
  if (!m.is_moe_layer(layer)) {
    const double F = m.ffn();
    if (m.swiglu()) items.push_back({"gate, up and down inputs", 3 * e * F / t, N, "3·e·F/t"});
    else items.push_back({"GELU and fc2 inputs", 2 * e * F / t, N, "2·e·F/t"});
    return items;
  }
  const MoeConfig& moe = m.cfg.moe;
  const double k = moe.topk, Fe = m.expert_ffn(), E = moe.num_experts;
  items.push_back({"router probabilities (fp32)", 4 * E, rows, "4·E"});
  const double load = x.moe_load();
  // The rows a rank's experts take are gathered over ETP (etp × its own), each ETP rank with
  // 1/etp of every expert's neurons.
  items.push_back({"routed rows in (gathered over ETP) and out", (x.etp + 1) * k * e * h * load, rows, "(etp + 1)·k·e·h·load"});
  items.push_back({"experts' gate, up and down inputs", 3 * k * e * Fe * load, rows, "3·k·e·F_e·load"});
  if (moe.shared_expert_size > 0)
    items.push_back({"shared expert", 3 * e * moe.shared_expert_size / t, N, "3·e·F_s/t"});
  return items;
}

ChunkMemory megatron_chunk(const RunShape& x, const ChunkSpec& c) {
  ChunkMemory m;
  const PlanModel& model = x.model;
  const double e = x.e, h = model.cfg.hidden_size, rows = static_cast<double>(x.rows), N = static_cast<double>(x.N);
  const Recompute rc = x.run.recompute;
  // Layers come in runs of equal kind (dense / MoE); each run is summed once.
  double biggest_layer = 0;
  for (int first = c.first_layer; first < c.first_layer + c.num_layers;) {
    int last = first;
    while (last + 1 < c.first_layer + c.num_layers && model.is_moe_layer(last + 1) == model.is_moe_layer(first)) ++last;
    const double n = last - first + 1;
    const std::string kind = model.is_moe_layer(first) ? "MoE layers: " : "layers: ";
    ChunkMemory full;
    add_saved(full, layer_items(x, first, true), 1, "");
    biggest_layer = std::max(biggest_layer, full.saved);
    if (rc == Recompute::Full) {
      add_saved(m, {{"layer input (full recompute keeps only it)", e * h, rows, "e·h"}}, n, kind);
    } else {
      add_saved(m, layer_items(x, first, rc == Recompute::None), n, kind);
    }
    first = last + 1;
  }
  if (c.has_embedding && model.hidden_dropout > 0)
    add_saved(m, {{"embedding dropout mask", h, rows, "h"}}, 1, "embedding: ");
  // Alive for one microbatch at a time: the layer being recomputed, the head's logits.
  if (rc == Recompute::Full) {
    m.transient += biggest_layer;
    m.terms.push_back({"transient: one layer recomputed", biggest_layer, "one layer's activations", bytes_str(biggest_layer)});
  }
  if (c.has_head) {
    const double head = rows * 2 * e * h + N * 4.0 * static_cast<double>(x.V_l);
    m.transient += head;
    m.terms.push_back({"transient: final norm and LM head inputs, fp32 logits", head, "rows·2·e·h + N·4·V/t",
                       fmt::format("{:.0f}·{:.0f} + {:.0f}·4·{}", rows, 2 * e * h, N, x.V_l)});
  }
  return m;
}

}  // namespace

ChunkMemory chunk_activations(const RunShape& x, const ChunkSpec& c) {
  return x.tessel_cpu() ? tessel_chunk_activations(x, c) : megatron_chunk(x, c);
}

std::vector<Term> rank_buffers(const RunShape& x, int stage) {
  if (x.tessel_cpu()) return tessel_rank_buffers(x, stage);
  // Megatron's pipeline receive buffers: one input and one output gradient per chunk.
  std::vector<Term> terms;
  if (x.pp > 1) {
    const double bytes = 2.0 * x.v * x.e * x.model.cfg.hidden_size * x.rows;
    terms.push_back({"pipeline receive buffers", bytes, "2·v·e·h·rows", fmt::format("2·{}·{}·{}·{}", x.v, x.e, x.model.cfg.hidden_size, x.rows)});
  }
  return terms;
}

// Megatron's parameter counts (plan/model.cpp) on GPU clusters, whose models may use what tessel
// does not build; on CPU ranks the model's declared registry.
StageParams stage_params(const RunShape& x, int stage) {
  if (x.tessel_cpu()) return tessel_stage_params(x, stage);
  const PlanModel& m = x.model;
  StageParams p;
  for (const ChunkSpec& c : x.stage_chunks(stage)) {
    ParamSplit sum;
    for (int l = c.first_layer; l < c.first_layer + c.num_layers; ++l) sum += layer_params(m, l);
    if (c.has_embedding) sum += embedding_params(m, x.t);
    if (c.has_head) sum += head_params(m, x.t);
    // A tied head on a stage without the embedding keeps its own copy (Megatron's embedding group).
    if (c.has_head && !c.has_embedding && m.cfg.tied_embeddings()) sum.tp += m.cfg.padded_vocab(x.t) * m.cfg.hidden_size;
    p.dense += sum.tp / x.t + sum.replicated;
    p.experts += sum.experts / (static_cast<int64_t>(x.ep) * x.etp);
  }
  return p;
}

std::vector<Term> state_terms(const RunShape& x, const StageParams& p) {
  const double n = static_cast<double>(p.dense + p.experts);
  const std::string params = fmt::format("{:.0f}", n);
  std::vector<Term> terms = {
      {"weights", n * x.w_bytes, fmt::format("params × {} B", x.w_bytes), fmt::format("{} × {}", params, x.w_bytes)},
      {"gradients", n * x.g_bytes, fmt::format("params × {} B", x.g_bytes), fmt::format("{} × {}", params, x.g_bytes)}};
  const double o = x.o_bytes, dense = static_cast<double>(p.dense), experts = static_cast<double>(p.experts);
  const int dp_cp = x.dp * x.cp;
  if (!x.run.parallel.distributed_optimizer) {
    terms.push_back({"optimizer state", n * o, fmt::format("params × {} B", o), fmt::format("{} × {}", params, o)});
  } else if (x.tessel_cpu()) {
    // tessel's ZeRO-1: Adam's m and v for this rank's slice, plus a reduce-scatter staging copy of
    // the gradients and the slice itself (parallel/data_parallel).
    const double bytes = (dense * (8.0 + 4.0) / dp_cp + dense * 4) + (experts * 12.0 / x.edp + experts * 4);
    terms.push_back({"optimizer state (distributed)", bytes,
                     "dense·(12/(dp·cp) + 4) + experts·(12/edp + 4)",
                     fmt::format("{:.0f}·(12/{} + 4) + {:.0f}·(12/{} + 4)", dense, dp_cp, experts, x.edp)});
  } else {
    const double bytes = dense * o / dp_cp + experts * o / x.edp;
    terms.push_back({"optimizer state (distributed)", bytes, fmt::format("dense·{0}/(dp·cp) + experts·{0}/edp", o),
                     fmt::format("{:.0f}·{}/{} + {:.0f}·{}/{}", dense, o, dp_cp, experts, o, x.edp)});
  }
  if (x.run.post_validation) {  // optim/post_validation: fp32 values, gradients, m and v of the optimizer's share
    const bool sharded = x.run.parallel.distributed_optimizer;
    const double owned = sharded ? dense / dp_cp + experts / x.edp : n;
    terms.push_back({"post-validation's saved step", owned * 16, sharded ? "(dense/(dp·cp) + experts/edp) × 16 B" : "params × 16 B",
                     sharded ? fmt::format("({:.0f}/{} + {:.0f}/{}) × 16", dense, dp_cp, experts, x.edp)
                             : fmt::format("{} × 16", params)});
  }
  return terms;
}

}  // namespace tessel
