// tessel's own memory on CPU ranks, tensor by tensor as the code allocates it (fp32, 4 bytes):
// model/transformer.cpp's make_activations (per microbatch slot) and its scratch, model/moe.cpp's
// Saved and scratch, pipeline/executor.cpp's slot buffers, parallel/context_parallel.cpp's ring
// workspace. Checked against `tessel train --profile` (tests/plan/memory_profile_test.cpp).
#include <fmt/format.h>

#include <algorithm>

#include "tessel/plan/memory.h"

namespace tessel {

namespace {

// Sizes as transformer.cpp names them: N rows, N_l local rows, C hidden, HD/GD this rank's query
// and key/value widths, F_l its MLP share, H_l/G_l its heads and groups.
struct TesselSizes {
  double N, N_l, C, HD, GD, F_l, H_l, G_l, D, V_l, T, B;
  explicit TesselSizes(const RunShape& x) {
    const ModelConfig& c = x.model.cfg;
    N = static_cast<double>(x.N), N_l = static_cast<double>(x.rows), C = c.hidden_size;
    D = c.head_dim(), H_l = c.num_attention_heads / x.t, G_l = c.query_groups() / x.t;
    HD = H_l * D, GD = G_l * D, F_l = c.ffn_size() / x.t, V_l = static_cast<double>(x.V_l);
    T = static_cast<double>(x.s / x.cp), B = static_cast<double>(x.b);
  }
};

struct Counter {
  std::vector<Term>& terms;
  double total = 0;
  void add(const std::string& name, double floats, const std::string& shape, double bytes_each = 4) {
    const double bytes = floats * bytes_each;
    if (bytes <= 0) return;
    total += bytes;
    terms.push_back({name, bytes, shape, fmt::format("{:.0f} × {} B", floats, bytes_each)});
  }
};

// Rows of a buffer sized at first for `initial` rows that the run needs `actual` of: the MoE
// layer's buffers grow on need through Kernels::reserve, to half as large again or the need,
// whichever is more, and never shrink.
double grown(double initial, double actual) { return actual <= initial ? initial : std::max(actual, 1.5 * initial); }

// One MoE layer's Saved (moe.cpp list_saved): rows = this rank's N_l, k assignments each, Q the
// ETP size; the routed buffers sized for a balanced load, grown to the run's.
void moe_saved(Counter& c, const RunShape& x, const std::string& p) {
  const MoeConfig& m = x.model.cfg.moe;
  const double N = std::max<double>(static_cast<double>(x.rows), 1), k = m.topk, E = m.num_experts,
               Q = x.etp, F_l = x.model.expert_ffn() / Q, C = x.model.cfg.hidden_size;
  const double N_g = N * x.t, F_sl = static_cast<double>(m.shared_expert_size) / x.t, rows = N * k;
  const double arriving = grown(rows * Q, rows * Q * x.moe_load());  // R: rows this rank's experts take
  c.add(p + "router logits and gradient", 2 * N * E, "2 × (N_l, E)");
  c.add(p + "chosen experts, probabilities", 2 * rows, "2 × (N_l, k)");
  c.add(p + "dispatch rows", rows, "(N_l·k) int32");
  if (m.aux_loss_coeff > 0) c.add(p + "aux-loss scores", N * E + E, "(N_l, E) + E");
  if (m.z_loss_coeff > 0) c.add(p + "z-loss log-sum-exp", N, "(N_l)");
  c.add(p + "combined expert outputs", grown(rows, rows * x.moe_send_load()) * C, "(N_l·k·send load, C)");
  c.add(p + "expert inputs and output gradients", 2 * arriving * C, "2 × (R, C), R = N_l·k·Q·load");
  c.add(p + "experts' gate, up, act and their gradients", 5 * arriving * F_l, "5 × (R, F_e/Q)");
  if (m.shared_expert_size > 0) {
    if (x.t > 1) c.add(p + "shared expert input (gathered)", N_g * C, "(N_l·t, C)");
    c.add(p + "shared expert gate, up, act and gradients", 5 * N_g * F_sl, "5 × (N_l·t, F_s/t)");
    c.add(p + "shared expert output, its gradient, scale", N * C + N_g * C + 2 * N, "(N_l, C) + (N_l·t, C) + 2·N_l");
  }
}

double moe_scratch(const RunShape& x) {  // moe.cpp scratch_bytes, per MoE layer
  const MoeConfig& m = x.model.cfg.moe;
  const double N = std::max<double>(static_cast<double>(x.rows), 1), k = m.topk, Q = x.etp, T = x.t,
               C = x.model.cfg.hidden_size, F_l = x.model.expert_ffn() / Q,
               F_sl = static_cast<double>(m.shared_expert_size) / T;
  const double R0 = N * k * Q, R = R0 * x.moe_load(), S = N * k * x.moe_send_load();  // rows in, out
  double floats = grown(N * k, S) * C + 2 * grown(R0, R) * C + (Q > 1 ? N * k * C : 0) +
                  grown(std::max(R0, N * T), std::max(R, N * T)) * std::max(F_l, F_sl) + N * k;
  if (m.shared_expert_size > 0 && T > 1) floats += N * T * C + N * C;
  return floats * 4 + N * k;  // + the keep flags, one byte each
}

// The tensors `L` layers (`dense` of them dense, `moe_layers` MoE) keep for their backward
// (transformer.cpp's make_activations, layer by layer); the softmax statistics (log-sum-exp)
// only when `lse`, as selective recompute of core attention recomputes them.
void layer_terms(Counter& c, const RunShape& x, const TesselSizes& z, double L, double dense, double moe_layers, bool lse) {
  const ModelConfig& cfg = x.model.cfg;
  const bool gpt2 = cfg.arch == Arch::GPT2;
  c.add("layers: norm outputs (gathered)", L * z.N * z.C + dense * z.N * z.C + moe_layers * z.N_l * z.C,
        "layers × (N, C) + dense layers × (N, C) + MoE layers × (N_l, C)");
  c.add("layers: norm statistics", L * (gpt2 ? 4 : 2) * z.N_l, gpt2 ? "layers × 4 × (N_l)" : "layers × 2 × (N_l)");
  c.add("layers: attention output", L * z.N * z.HD, "layers × (N, HD)");
  if (lse) c.add("layers: attention log-sum-exp", L * z.B * z.H_l * z.T, "layers × (B, H_l, T)");
  c.add("layers: residual after attention", L * z.N_l * z.C, "layers × (N_l, C)");
  c.add("layers: output-projection gradients", L * z.N * z.C + dense * z.N * z.C, "layers × (N, C) + dense layers × (N, C)");
  if (gpt2) {
    c.add("layers: qkv and its gradient", L * 2 * z.N * 3 * z.HD, "layers × 2 × (N, 3·HD)");
    c.add("layers: fc, GELU and fc gradient", L * 3 * z.N * z.F_l, "layers × 3 × (N, F_l)");
  } else {
    c.add("layers: q, k, v and their gradients", L * 2 * z.N * (z.HD + 2 * z.GD), "layers × 2 × (N, HD + 2·GD)");
    if (cfg.qk_layernorm)
      c.add("layers: q, k before QK-norm, their 1/rms", L * (z.N * (z.HD + z.GD) + z.N * (z.H_l + z.G_l)),
            "layers × ((N, HD + GD) + N·(H_l + G_l))");
    c.add("dense layers: gate, up, act and gradients", dense * 5 * z.N * z.F_l, "dense layers × 5 × (N, F_l)");
  }
  if (moe_layers > 0) {
    std::vector<Term> one;
    Counter per_layer{one};
    moe_saved(per_layer, x, "");
    for (const Term& t : one)
      c.add("MoE layers: " + t.name, moe_layers * t.value / 4, fmt::format("MoE layers × {}", t.formula));
  }
}

}  // namespace

ChunkMemory tessel_chunk_activations(const RunShape& x, const ChunkSpec& chunk) {
  ChunkMemory m;
  const TesselSizes z(x);
  const ModelConfig& cfg = x.model.cfg;
  const bool gpt2 = cfg.arch == Arch::GPT2;
  Counter c{m.terms};
  c.add("residual stream", (chunk.num_layers + 1) * z.N_l * z.C, "(layers + 1) × (N_l, C)");
  int moe_layers = 0;
  for (int l = chunk.first_layer; l < chunk.first_layer + chunk.num_layers; ++l) moe_layers += cfg.moe.is_moe_layer(l);
  const double L = chunk.num_layers, dense = L - moe_layers;
  // Full recompute keeps each layer's input alone (the residual stream above); a layer's other
  // tensors live in one arena per chunk that its microbatches borrow in turn, sized for the
  // largest layer, with the recomputed output beside it. Selective recompute of core attention
  // moves only the softmax statistics there.
  const Recompute rc = x.run.recompute;
  if (rc == Recompute::Full) {
    // One layer's tensors of each kind; an MoE layer keeps its whole Saved in buffers of its own
    // instead (moe.cpp: they grow with the routing), one per MoE layer.
    auto layer_bytes = [&](double dense_layers, double moe) {
      std::vector<Term> terms;
      Counter one{terms};
      layer_terms(one, x, z, 1, dense_layers, moe, true);
      return one.total;
    };
    std::vector<Term> moe_terms;
    Counter moe_saved_bytes{moe_terms};
    if (moe_layers > 0) moe_saved(moe_saved_bytes, x, "");
    double largest = dense > 0 ? layer_bytes(1, 0) : 0;
    if (moe_layers > 0) largest = std::max(largest, layer_bytes(0, 1) - moe_saved_bytes.total);
    m.shared = largest + z.N_l * z.C * 4 + moe_layers * moe_saved_bytes.total;
  } else {
    layer_terms(c, x, z, L, dense, moe_layers, rc == Recompute::None);
    if (rc == Recompute::Selective) m.shared = z.B * z.H_l * z.T * 4;  // one layer's log-sum-exp
  }
  if (chunk.has_embedding) c.add("token ids in this vocabulary shard", z.N, "(N) int32");
  if (chunk.has_head) {
    c.add("final norm: output, statistics, gradient", z.N * z.C + (gpt2 ? 2 : 1) * z.N_l + z.N_l * z.C,
          "(N, C) + (N_l) stats + (N_l, C)");
    // The head's weight gradient waits for its W action (zero-bubble schedules defer it).
    c.add("logits' gradient, for the head's weight gradient", z.N * z.V_l, "(N, V_l)");
  }
  m.saved = c.total;
  // pipeline/executor.cpp's slot: the tokens and targets, and the chunk's input, its gradient and
  // the output gradient when neighbours exist.
  const int k = [&] {
    for (size_t i = 0; i < x.chunks.size(); ++i)
      if (x.chunks[i].first_layer == chunk.first_layer && x.chunks[i].num_layers == chunk.num_layers) return static_cast<int>(i);
    return 0;
  }();
  const double neighbours = (k > 0 ? 2 : 0) + (k + 1 < static_cast<int>(x.chunks.size()) ? 1 : 0);
  m.slot = 2 * z.B * z.T * 4 + neighbours * z.N_l * z.C * 4;
  m.gradient = k > 0 ? z.N_l * z.C * 4 : 0;
  m.terms.push_back({"executor slot: tokens, targets, input and gradients", m.slot,
                     "2·(B·T) int32 + (inputs and gradients) × (N_l, C)", fmt::format("{:.0f} B", m.slot)});
  return m;
}

std::vector<Term> tessel_rank_buffers(const RunShape& x, int stage) {
  std::vector<Term> terms;
  const TesselSizes z(x);
  const ModelConfig& cfg = x.model.cfg;
  for (const ChunkSpec& chunk : x.stage_chunks(stage)) {
    Counter c{terms};
    // transformer.cpp scratch_bytes: positions, RoPE tables, row-parallel and gradient scratch,
    // logits on the last chunk.
    double floats = z.N  // positions (int32)
                    + (cfg.arch == Arch::Llama ? cfg.max_positions() * z.D : 0) + z.N * z.C +
                    (x.sp ? z.N_l * z.C + z.N * z.C : 0) + z.N_l * z.C + z.N_l * z.C + z.N * z.C +
                    (x.sp ? z.N_l * z.C : 0) + z.N * z.HD + z.N * z.F_l;
    if (chunk.has_head) floats += z.N * z.V_l + 5 * z.N;
    c.add(fmt::format("chunk {}-{} scratch", chunk.first_layer, chunk.first_layer + chunk.num_layers - 1), floats,
          "positions, RoPE, row-parallel, gradient scratch (+ logits (N, V_l) on the last chunk)");
    int moe_layers = 0;
    for (int l = chunk.first_layer; l < chunk.first_layer + chunk.num_layers; ++l) moe_layers += cfg.moe.is_moe_layer(l);
    if (moe_layers > 0) c.add("MoE layers' dispatch scratch", moe_layers * moe_scratch(x), "MoE layers × moe.cpp scratch_bytes", 1);
  }
  if (x.cp > 1) {
    Counter c{terms};
    const double kv = 2 * z.B * z.T * z.GD;
    c.add("context-parallel ring workspace", 5 * kv + z.B * z.T * z.HD + z.B * z.H_l * z.T,
          "5 × (2, B, T_l, GD) + (B, T_l, HD) + (B, H_l, T_l)");
  }
  return terms;
}

}  // namespace tessel
