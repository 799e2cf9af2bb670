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

}  // namespace

// A Gated DeltaNet mixer's saved tensors on one TP rank (Megatron's GatedDeltaNet with FLA's
// kernels): the convolution's input (causal_conv1d keeps it and recomputes the SiLU), the gates'
// inputs z, β, α, what FLA's ChunkGatedDeltaRuleFunction saves — q and k l2-normed with their
// statistics, v, the chunk-summed log decay g and β in fp32, Ainv = (I + A)^{-1} one C×C block a
// chunk and head (C floats a token and head) — the rule's output and the gated norm's statistics,
// and out_proj's input. The chunk states are recomputed in the backward, not kept. Under CP a rank
// holds the whole sequence for 1/(t·cp) of the heads: the same bytes as N tokens of 1/t of them.
std::vector<MemoryItem> gdn_mixer_items(const RunShape& x) {
  const LinearAttentionConfig& g = x.model.cfg.linear;
  const double e = x.e, t = x.t, conv = static_cast<double>(g.conv_dim()), value = static_cast<double>(g.value_dim()),
               Hv = g.num_value_heads, Hk = g.num_key_heads;
  return {
      {"GDN convolution input (q, k, v)", e * conv / t, "e·conv_dim/t"},
      {"GDN gate inputs z, β, α", e * (value + 2 * Hv) / t, "e·(v_dim + 2·Hv)/t"},
      {"GDN q, k (l2-normed), v", e * conv / t, "e·conv_dim/t"},
      {"GDN l2norm statistics, g and β (fp32)", 4 * (2 * Hk + 2 * Hv) / t, "4·(2·Hk + 2·Hv)/t"},
      {"GDN Ainv, a 64×64 block per chunk and head", e * kGdnChunk * Hv / t, "e·64·Hv/t"},
      {"GDN delta rule output and gated norm statistics", (e * value + 4 * Hv) / t, "(e·v_dim + 4·Hv)/t"},
      {"GDN out_proj input", e * value / t, "e·v_dim/t"},
  };
}

// What gated attention and QK-norm keep besides Q, K, V and the output: the gate's half of q_proj
// and the output before the gate (flash attention keeps its own output), the norms' inputs and
// statistics (the normed q and k go on through RoPE into the kernel, which keeps them).
std::vector<MemoryItem> attention_extra_items(const RunShape& x) {
  const PlanModel& m = x.model;
  const double e = x.e, t = x.t, q = static_cast<double>(m.q_width()), kv = static_cast<double>(m.kv_width()),
               vw = static_cast<double>(m.v_width());
  std::vector<MemoryItem> items;
  if (m.cfg.attention_output_gate) items.push_back({"output gate and the output before it", e * (q + vw) / t, "e·(q + v)/t"});
  if (m.cfg.qk_layernorm)
    items.push_back({"QK-norm inputs and statistics", (e * (q + kv) + 4.0 * (m.cfg.num_attention_heads + m.cfg.query_groups())) / t,
                     "(e·(q + kv) + 4·(a + g))/t"});
  return items;
}

namespace {

// Megatron's saved activations of one layer and one microbatch on one TP rank (Korthikanti et
// al. §4.1–4.2, Table 2): with b·s = N tokens, the regions outside TP (norms, dropouts, the
// inputs of the QKV and first MLP projections) hold `rows` = N (N/t under sequence parallel),
// the TP regions N tokens of 1/t of the heads and neurons. In bytes for GPT-3 (e = 2,
// dropout 0.1, unfused softmax): sbh·(10 + 24/t + 5·a·s/(h·t)), Table 2's first rows. A Gated
// DeltaNet layer keeps its mixer's tensors (gdn_mixer_items) where attention keeps Q, K, V, the
// output and the kernel's statistics.
std::vector<Saved> layer_items(const RunShape& x, int layer, bool linear, bool core_attention_kept) {
  const PlanModel& m = x.model;
  const double e = x.e, h = m.cfg.hidden_size, t = x.t, N = static_cast<double>(x.N),
               rows = static_cast<double>(x.rows);
  const double q = static_cast<double>(m.q_width()), kv = static_cast<double>(m.kv_width()),
               vw = static_cast<double>(m.v_width()), a = m.cfg.num_attention_heads, s = static_cast<double>(x.s);
  std::vector<Saved> items = {
      {"norm inputs", 2 * e * h, rows, "2·e·h"},
      {"QKV and MLP inputs", 2 * e * h, rows, "2·e·h"},
  };
  if (m.cfg.hidden_dropout > 0) items.push_back({"dropout masks", 2 * h, rows, "2·h (1 B each)"});
  if (linear) {
    for (const MemoryItem& i : gdn_mixer_items(x)) items.push_back({i.name, i.per_token, N, i.formula});
  } else {
    items.push_back({"Q, K, V", e * (q + 2 * kv) / t, N, "e·(q + 2·kv)/t"});
    items.push_back({"attention output", e * vw / t, N, "e·v/t"});
    for (const MemoryItem& i : attention_extra_items(x)) items.push_back({i.name, i.per_token, N, i.formula});
    if (core_attention_kept && x.run.attention == AttentionBackend::Unfused) {
      items.push_back({"softmax output", e * a * s / t, N, "e·a·s/t"});
      if (m.cfg.attention_dropout > 0)
        items.push_back({"attention dropout mask and output", (1 + e) * a * s / t, N, "(1 + e)·a·s/t"});
    } else if (x.run.attention != AttentionBackend::Unfused) {
      items.push_back({"log-sum-exp (fp32)", 4 * a / t, N, "4·a/t"});
    }
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
  if (moe.shared_expert_size > 0 && moe.shared_expert_gate)
    items.push_back({"shared expert's output and its gate", e * (h + 1), rows, "e·(h + 1)"});
  return items;
}

ChunkMemory megatron_chunk(const RunShape& x, const ChunkSpec& c) {
  ChunkMemory m;
  const PlanModel& model = x.model;
  const double e = x.e, h = model.cfg.hidden_size, rows = static_cast<double>(x.rows), N = static_cast<double>(x.N);
  const Recompute rc = x.run.recompute_kind();
  // Layers come in runs of equal kind (dense / MoE, attention / Gated DeltaNet); each run is summed once.
  auto kind_of = [&](int l) { return std::pair{model.is_moe_layer(l), model.is_linear_layer(l)}; };
  double biggest_layer = 0;
  auto add_layers = [&](int layer, bool linear, double n, const std::string& kind) {
    ChunkMemory full;
    add_saved(full, layer_items(x, layer, linear, true), 1, "");
    biggest_layer = std::max(biggest_layer, full.saved);
    if (rc == Recompute::Full) {
      add_saved(m, {{"layer input (full recompute keeps only it)", e * h, rows, "e·h"}}, n, kind);
    } else {
      add_saved(m, layer_items(x, layer, linear, rc == Recompute::None), n, kind);
    }
  };
  for (int first = c.first_layer; first < c.first_layer + c.num_layers;) {
    int last = first;
    while (last + 1 < c.first_layer + c.num_layers && kind_of(last + 1) == kind_of(first)) ++last;
    const std::string kind = std::string(model.is_linear_layer(first) ? "GDN " : "") +
                             (model.is_moe_layer(first) ? "MoE layers: " : "layers: ");
    add_layers(first, model.is_linear_layer(first), last - first + 1, kind);
    first = last + 1;
  }
  // MTP on the head's chunk (Megatron's last stage): its norms' inputs (the next tokens'
  // embedding and the hidden state) and fc's input, then a full-attention layer built as the last
  // layer; its final norm and logits alive with the head's, both until the backward.
  const int mtp = c.has_head ? model.mtp_layers() : 0;
  if (mtp > 0) {
    add_saved(m, {{"embedding and hidden norms' inputs, fc input", 4 * e * h, rows, "4·e·h"}}, mtp, "MTP: ");
    add_layers(model.cfg.num_layers - 1, false, mtp, "MTP layer: ");
  }
  if (c.has_embedding && model.cfg.hidden_dropout > 0)
    add_saved(m, {{"embedding dropout mask", h, rows, "h"}}, 1, "embedding: ");
  // Alive for one microbatch at a time: the layer being recomputed, the head's logits.
  if (rc == Recompute::Full) {
    m.transient += biggest_layer;
    m.terms.push_back({"transient: one layer recomputed", biggest_layer, "one layer's activations", bytes_str(biggest_layer)});
  }
  if (c.has_head) {
    const double heads = 1 + mtp;
    const double head = heads * (rows * 2 * e * h + N * 4.0 * static_cast<double>(x.V_l));
    m.transient += head;
    m.terms.push_back({mtp > 0 ? "transient: final norms and LM head inputs, fp32 logits (the model's and MTP's)"
                               : "transient: final norm and LM head inputs, fp32 logits",
                       head, mtp > 0 ? "(1 + mtp)·(rows·2·e·h + N·4·V/t)" : "rows·2·e·h + N·4·V/t",
                       fmt::format("{}{:.0f}·{:.0f} + {:.0f}·4·{}", mtp > 0 ? fmt::format("{:.0f} × ", heads) : "", rows,
                                   2 * e * h, N, x.V_l)});
  }
  return m;
}

}  // namespace

ChunkMemory chunk_activations(const RunShape& x, const ChunkSpec& c) {
  return x.plans_tessel() ? tessel_chunk_activations(x, c) : megatron_chunk(x, c);
}

std::vector<Term> rank_buffers(const RunShape& x, int stage) {
  if (x.plans_tessel()) return tessel_rank_buffers(x, stage);
  // Megatron's pipeline receive buffers: one input and one output gradient per chunk.
  std::vector<Term> terms;
  if (x.pp > 1) {
    const double bytes = 2.0 * x.v * x.e * x.model.cfg.hidden_size * x.rows;
    terms.push_back({"pipeline receive buffers", bytes, "2·v·e·h·rows", fmt::format("2·{}·{}·{}·{}", x.v, x.e, x.model.cfg.hidden_size, x.rows)});
  }
  return terms;
}

// Megatron's parameter counts (plan/model.cpp) for its engine, whose models may use what tessel
// does not build; for tessel's, the model's declared registry.
StageParams stage_params(const RunShape& x, int stage) {
  if (x.plans_tessel()) return tessel_stage_params(x, stage);
  const PlanModel& m = x.model;
  StageParams p;
  for (const ChunkSpec& c : x.stage_chunks(stage)) {
    ParamSplit sum;
    for (int l = c.first_layer; l < c.first_layer + c.num_layers; ++l) sum += layer_params(m, l);
    if (c.has_embedding) sum += embedding_params(m, x.t);
    if (c.has_head) sum += head_params(m, x.t);
    if (c.has_head) sum += mtp_params(m);
    // A tied head, or MTP (which embeds the next tokens), on a stage without the embedding keeps
    // its own copy (Megatron's embedding group keeps the copies equal).
    if (c.has_head && !c.has_embedding && (m.cfg.tied_embeddings() || m.mtp_layers() > 0))
      sum.tp += m.cfg.padded_vocab(x.t) * m.cfg.hidden_size;
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
  } else if (x.plans_tessel()) {
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
