// Megatron-LM's theoretical memory formula, re-expressed from its definition (weights and
// optimizer: the most loaded shard's parameters × 18 B, or 6 + 12/d with the distributed
// optimizer; activations: Korthikanti et al.'s Table 2 per layer in two branches), and the named
// corrections that take it to the planner's first stage.
#include "tessel/plan/megatron_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/plan/memory.h"
#include "tessel/plan/published.h"
#include "tessel/plan/search.h"
#include "tessel/plan/shape.h"

namespace tessel {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// The formula's parameters of one layer (its attention, MLP or routed experts, and norms).
double formula_layer_params(const PlanModel& m, int layer) {
  const ModelConfig& c = m.cfg;
  const double h = c.hidden_size, a = c.num_attention_heads, g = c.query_groups();
  const double gated = m.swiglu() ? 1.5 : 1, norm = m.swiglu() ? 1 : 2;
  double attention = 2 * h * h * (1 + g / a) * (m.head_dim() * a / h);
  if (m.multi_latent_attention) {
    const MlaConfig& x = m.mla;
    const double q = x.q_lora_rank > 0 ? x.q_lora_rank * (h + a * (x.qk_head_dim + x.qk_pos_emb_head_dim) + norm)
                                       : h * a * (x.qk_head_dim + x.qk_pos_emb_head_dim);
    attention = q + x.kv_lora_rank * (h + a * (x.qk_head_dim + x.v_head_dim) + norm) + h * x.qk_pos_emb_head_dim +
                a * x.v_head_dim * h;
  }
  if (!m.is_moe_layer(layer)) return 2 * h * (m.ffn() * gated + norm) + attention;
  const MoeConfig& e = c.moe;
  return 2 * h * (m.expert_ffn() * e.num_experts * gated + e.shared_expert_size * gated + norm) + attention;
}

double formula_block_params(const PlanModel& m) {
  double block = (m.swiglu() ? 1 : 2) * static_cast<double>(m.cfg.hidden_size);  // the final norm
  for (int l = 0; l < m.cfg.num_layers; ++l) block += formula_layer_params(m, l);
  return block;
}

// The schedule factor the formula applies: 1 + (p − 1)/(p·v) interleaved, min(1, m/p) otherwise.
double formula_schedule_factor(const PlanRun& r) {
  const double p = r.parallel.pp, v = r.parallel.vpp;
  if (v > 1) return 1 + (p - 1) / (p * v);
  return p > 1 ? std::min(1.0, r.microbatches() / p) : 1;
}

}  // namespace

MegatronFormula megatron_theoretical_memory(const PlanModel& m, const PlanRun& r) {
  MegatronFormula f;
  const double h = m.cfg.hidden_size, t = r.parallel.tp, p = r.parallel.pp, V = static_cast<double>(m.cfg.padded_vocab(r.parallel.tp));
  const double embedding = h * V;
  double shard = (formula_block_params(m) / p + embedding) / t;
  if (!m.cfg.tied_embeddings() && p == 1) shard += embedding / t;
  const double bytes = r.parallel.distributed_optimizer ? 6 + 12.0 / r.dp() : 18;
  f.weight_and_optimizer = shard * bytes;

  const double s = m.cfg.seq_length, b = static_cast<double>(r.micro_batch), L = m.cfg.num_layers, F = m.ffn();
  const double sbh = s * b * h, factor = formula_schedule_factor(r);
  f.sequence_parallel_branch = r.parallel.sequence_parallel && r.recompute_kind() == Recompute::Selective;
  f.layer_microbatches = L * factor;
  if (f.sequence_parallel_branch) {
    double act = sbh * (18 + 4 * F / h) * L + 8 * s * b * p + sbh * p;
    act *= factor;
    if (p == 1) act += sbh * 4 * (1 + V / h);
    f.activations = act / t;
  } else {
    double act = sbh * (10 + 24 / t) * L + 8 * s * b * p + sbh * p;
    act *= factor;
    if (p == 1) act += (s * b * V / t + sbh) * 2;
    f.activations = act * 1.05;
  }
  return f;
}

double FormulaComparison::explained_state() const {
  double v = formula.weight_and_optimizer;
  for (const Correction& c : state) v += c.bytes;
  return v;
}

double FormulaComparison::explained_activations() const {
  double v = formula.activations;
  for (const Correction& c : activations) v += c.bytes;
  return v;
}

namespace {

// Adds `bytes` under `cause` (merging a cause met again, dropping zeros).
void add(std::vector<Correction>& list, const std::string& cause, double bytes) {
  if (bytes == 0) return;
  for (Correction& c : list)
    if (c.cause == cause) {
      c.bytes += bytes;
      return;
    }
  list.push_back({cause, bytes});
}

// The weights and optimizer state: the parameters the formula leaves out or divides otherwise,
// then the bytes per parameter.
void state_corrections(const RunShape& x, FormulaComparison& out) {
  const PlanModel& m = x.model;
  const ModelConfig& c = m.cfg;
  const double t = x.t, h = c.hidden_size, q = static_cast<double>(m.q_width()), kv = static_cast<double>(m.kv_width());
  const double bytes = x.run.parallel.distributed_optimizer ? 6 + 12.0 / x.dp : 18;
  std::vector<Correction> params;
  double experts = 0, stage_formula = 0;
  for (const ChunkSpec& chunk : x.stage_chunks(0)) {
    if (chunk.has_embedding && c.arch == Arch::GPT2)
      add(params, "learned positions (GPT), not in the formula, whole on every TP rank", static_cast<double>(c.max_positions()) * h);
    if (chunk.has_head) add(params, "the final norm on the last stage, not spread over the stages", (m.swiglu() ? 1 : 2) * h);
    for (int l = chunk.first_layer; l < chunk.first_layer + chunk.num_layers; ++l) {
      stage_formula += formula_layer_params(m, l);
      const double norms = (m.swiglu() ? 2 : 4) * h;
      add(params, "norms whole on every TP rank (the formula divides every parameter by TP)", norms * (1 - 1 / t));
      if (c.arch == Arch::GPT2)
        add(params, "linear biases (GPT), not in the formula", (q + 2 * kv + m.ffn()) / t + 2 * h);
      if (c.add_qkv_bias) add(params, "q, k, v biases, not in the formula", (q + 2 * kv) / t);
      if (c.qk_layernorm) add(params, "QK-norm weights, not in the formula", 2.0 * m.head_dim());
      if (m.multi_latent_attention) {
        const MlaConfig& a = m.mla;
        const double down = (a.q_lora_rank > 0 ? h * a.q_lora_rank + a.q_lora_rank : 0) + h * (a.kv_lora_rank + a.qk_pos_emb_head_dim) + a.kv_lora_rank;
        const double formula_down = (a.q_lora_rank > 0 ? a.q_lora_rank * (h + 1) : 0) + a.kv_lora_rank * (h + 1) + h * a.qk_pos_emb_head_dim;
        add(params, "MLA's down projections whole on every TP rank", down - formula_down / t);
      }
      if (m.is_moe_layer(l)) {
        const MoeConfig& e = c.moe;
        add(params, "the MoE router (and shared-expert gate), not in the formula",
            e.num_experts * h + (e.shared_expert_size > 0 ? h : 0));
        const double routed = 3.0 * h * m.expert_ffn() * e.num_experts;
        experts += routed / (x.ep * x.etp);
        add(params, "routed experts divided over EP × ETP (the formula divides them by TP)", routed / (x.ep * x.etp) - routed / t);
      }
    }
  }
  int layers = 0;
  for (const ChunkSpec& chunk : x.stage_chunks(0)) layers += chunk.num_layers;
  add(params, fmt::format("the first stage's {} layers (the formula: 1/p of every layer and the final norm, L/p = {:.3g})", layers,
                          static_cast<double>(c.num_layers) / x.pp),
      (stage_formula - formula_block_params(m) / x.pp) / t);
  double total = out.formula.weight_and_optimizer / bytes;
  for (const Correction& k : params) {
    total += k.bytes;
    add(out.state, k.cause, k.bytes * bytes);
  }
  // The bytes per parameter: the precision's weight, gradient and optimizer bytes, the optimizer
  // state divided over DP × CP (experts: expert DP) with the distributed optimizer.
  const StateBytes sb = state_bytes(x.run.precision);
  const bool dist = x.run.parallel.distributed_optimizer;
  const double dense = total - experts;
  const double planner = dense * (sb.weight + sb.grad + sb.optimizer / (dist ? x.dp * x.cp : 1)) +
                         experts * (sb.weight + sb.grad + sb.optimizer / (dist ? x.edp : 1));
  add(out.state,
      fmt::format("bytes per parameter: {} ({} + {} + {}{}), the formula 18 or 6 + 12/d", precision_name(x.run.precision), sb.weight,
                  sb.grad, sb.optimizer, dist ? "/(d·cp), experts /edp" : ""),
      planner - total * bytes);
}

// One layer of one microbatch on one rank: the formula's bytes per layer (per token: 10·h in the
// norm and dropout regions, 1/t of them in its SP branch, and (8·h + 4·F)/t, or 24·h/t in the
// other branch, in the TP regions; 2 B each) plus each assumption of the planner's that differs,
// appended to `causes` when given.
double layer_bytes(const RunShape& x, int layer, Recompute mode, bool sp_branch, std::vector<Correction>* causes) {
  const PlanModel& m = x.model;
  const double sb = static_cast<double>(x.N), h = m.cfg.hidden_size, t = x.t, F = m.ffn(), a = m.cfg.num_attention_heads,
               s = static_cast<double>(x.s);
  const double q = static_cast<double>(m.q_width()), kv = static_cast<double>(m.kv_width()), v = static_cast<double>(m.v_width());
  const double formula = sb * (sp_branch ? (18 * h + 4 * F) / t : 10 * h + 24 * h / t);
  const double rows = x.sp ? 1 / t : 1;  // the planner's rows outside TP regions, per token
  std::vector<Correction> d;
  if (mode == Recompute::Full) {
    d.push_back({"full recompute keeps each layer's input only (the formula counts selective recomputation's tensors)",
                 sb * 2 * h * rows - formula});
  } else {
    if (!sp_branch && x.sp) d.push_back({"sequence parallelism splits the norm and dropout regions (the formula's other branch does not)", sb * 10 * h * (rows - 1)});
    if (!m.is_moe_layer(layer)) {
      if (!sp_branch) d.push_back({"an MLP of F, where the formula's other branch takes 4·h", sb * 4 * (F - 4 * h) / t});
      if (m.swiglu()) d.push_back({"SwiGLU keeps gate, up and their product (3·F, the formula 2·F)", sb * 2 * F / t});
    } else {
      const MoeConfig& e = m.cfg.moe;
      const double load = x.moe_load(), k = e.topk;
      const bool gated_shared = e.shared_expert_size > 0 && e.shared_expert_gate;
      d.push_back({"MoE layers: router, routed rows and experts instead of the formula's dense MLP",
                   sb * (-(sp_branch ? 4 * F : 16 * h) / t +
                         rows * (4.0 * e.num_experts + (x.etp + 1) * k * 2 * h * load + 3 * k * 2 * m.expert_ffn() * load +
                                 (gated_shared ? 2 * (h + 1) : 0)) +
                         6.0 * e.shared_expert_size / t)});
    }
    auto per_token = [](const std::vector<MemoryItem>& items) {
      double bytes = 0;
      for (const MemoryItem& i : items) bytes += i.per_token;
      return bytes;
    };
    if (m.is_linear_layer(layer)) {
      d.push_back({"Gated DeltaNet layers: the mixer's tensors (FLA's saved set) instead of the formula's Q, K, V and output",
                   sb * (per_token(gdn_mixer_items(x)) - 8 * h / t)});
    } else {
      d.push_back({"attention widths (grouped KV heads, head dimension, MLA): Q, K, V and the output at their own widths",
                   sb * 2 / t * ((q - h) + 2 * (kv - h) + (v - h))});
      d.push_back({"the output gate and QK-norm's inputs, not in the formula", sb * per_token(attention_extra_items(x))});
      if (x.run.attention != AttentionBackend::Unfused) d.push_back({"flash attention's log-sum-exp (fp32)", sb * 4 * a / t});
      if (mode == Recompute::None && x.run.attention == AttentionBackend::Unfused)
        d.push_back({"no recompute keeps the attention scores (softmax, and dropout mask and output; the formula drops them)",
                     sb * (2 * a * s + (m.cfg.attention_dropout > 0 ? 3 * a * s : 0)) / t});
    }
    if (m.cfg.hidden_dropout == 0) d.push_back({"no dropout: none of the formula's two 1-byte masks a layer", -sb * 2 * h * rows});
  }
  double bytes = formula;
  for (const Correction& c : d) {
    bytes += c.bytes;
    if (causes != nullptr) add(*causes, c.cause, c.bytes);
  }
  return bytes;
}

// The activations: the schedule's in-flight layers at the first stage's peak (walked as the
// planner walks it: a forward adds its chunk, a backward or weight-gradient step frees it), each
// layer's differences, the embedding, the head and the recomputed layer, the formula's 5 %.
void activation_corrections(const RunShape& x, FormulaComparison& out) {
  const PlanModel& m = x.model;
  const bool branch = out.formula.sequence_parallel_branch;
  const double sb = static_cast<double>(x.N), h = m.cfg.hidden_size, t = x.t, p = x.pp, V = static_cast<double>(x.V_l) * t;
  const double factor = formula_schedule_factor(x.run), rows = x.sp ? 1 / t : 1;
  if (x.cp > 1) {  // every term below counts the rank's b·s/cp tokens
    PlanModel share = m;
    share.cfg.seq_length = static_cast<int>(x.s / x.cp);
    add(out.activations, "context parallelism: a rank holds s/cp of each sequence (the formula counts all s)",
        megatron_theoretical_memory(share, x.run).activations - out.formula.activations);
  }
  const std::vector<ChunkSpec> chunks = x.stage_chunks(0);
  std::vector<double> chunk_bytes;
  for (const ChunkSpec& c : chunks) {
    double bytes = c.has_embedding && m.cfg.hidden_dropout > 0 ? sb * h * rows : 0;
    for (int l = c.first_layer; l < c.first_layer + c.num_layers; ++l) bytes += layer_bytes(x, l, x.run.recompute_kind(), branch, nullptr);
    chunk_bytes.push_back(bytes);
  }
  std::vector<int> now(chunks.size(), 0), at_peak(chunks.size(), 0);
  double bytes = 0, peak = -1;
  const std::vector<RankSchedule> schedule = generate_schedule(x.schedule);
  for (const Action& a : schedule[0]) {
    if (a.kind == ActionKind::Forward) now[a.chunk]++, bytes += chunk_bytes[a.chunk];
    else if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardWeight) now[a.chunk]--, bytes -= chunk_bytes[a.chunk];
    else continue;
    if (bytes > peak) peak = bytes, at_peak = now;
  }
  const double per_layer = sb * (branch ? (18 * h + 4 * m.ffn()) / t : 10 * h + 24 * h / t);
  double layers_in_flight = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    layers_in_flight += at_peak[c] * chunks[c].num_layers;
    for (int l = chunks[c].first_layer; l < chunks[c].first_layer + chunks[c].num_layers; ++l) {
      std::vector<Correction> causes;
      layer_bytes(x, l, x.run.recompute_kind(), branch, &causes);
      for (const Correction& k : causes) add(out.activations, k.cause, k.bytes * at_peak[c]);
    }
  }
  out.schedule_layer_microbatches = layers_in_flight;
  add(out.activations,
      fmt::format("the schedule holds {:.0f} layer-microbatches at the first stage's peak, the formula counts L × {:.4g} = {:.1f}",
                  layers_in_flight, factor, m.cfg.num_layers * factor),
      per_layer * (layers_in_flight - m.cfg.num_layers * factor));
  const double embedding_formula = (8 * sb * p + sb * h * p) * factor / (branch ? t : 1);
  const double embedding_planner = m.cfg.hidden_dropout > 0 ? sb * h * rows * at_peak[0] : 0;
  add(out.activations, "the embedding: its dropout mask per microbatch in flight (the formula: p × (8 B token ids + the mask))",
      embedding_planner - embedding_formula);
  double transient = 0;
  for (const ChunkSpec& c : chunks) {
    double chunk = 0;
    if (x.run.recompute_kind() == Recompute::Full)
      for (int l = c.first_layer; l < c.first_layer + c.num_layers; ++l)
        chunk = std::max(chunk, layer_bytes(x, l, Recompute::None, false, nullptr));
    if (c.has_head) chunk += sb * (4 * h * rows + 4 * V / t);
    transient = std::max(transient, chunk);
  }
  const double head_formula = p == 1 ? (branch ? sb * 4 * (h + V) / t : (sb * V / t + sb * h) * 2) : 0;
  add(out.activations, "one layer recomputed at a time (full recompute) and the head's inputs with fp32 logits", transient - head_formula);
  if (!branch) {
    PlanModel share = m;
    share.cfg.seq_length = static_cast<int>(x.s / x.cp);
    add(out.activations, "the formula's 5 % allowance (its other branch × 1.05)",
        -megatron_theoretical_memory(share, x.run).activations * 0.05 / 1.05);
  }
}

}  // namespace

FormulaComparison compare_with_megatron(const PlanModel& model, const PlanRun& run, const Cluster& cluster) {
  TESSEL_CHECK(run.engine_on(cluster) == PlannedEngine::Megatron && !cluster.cpu() && run.precision != PlannedPrecision::FP32, "Megatron's formula is for its GPU runs (2-byte activations)");
  const RunShape x(model, run, cluster);
  FormulaComparison out;
  out.model = model.name;
  out.layout = run.describe() + (run.pipeline_layout.empty() ? "" : " uneven") + fmt::format(" · m {}", run.microbatches()) +
               (run.parallel.sequence_parallel ? " · SP" : "") + (run.precision == PlannedPrecision::FP16 ? " · fp16" : "") +
               (run.attention == AttentionBackend::Unfused ? " · unfused" : "");
  out.formula = megatron_theoretical_memory(model, run);
  const StageMemory first = estimate_memory(model, run, cluster).front();
  out.planner_state = first.weights + first.grads + first.optimizer;
  out.planner_activations = first.activations;
  state_corrections(x, out);
  activation_corrections(x, out);
  return out;
}

namespace {

PlanRun gpu_run(int gpus, int tp, int pp, int vpp, int64_t batch, int64_t micro, Recompute rc, bool sp, bool dist) {
  PlanRun r;
  r.parallel.world = gpus;
  r.parallel.tp = tp, r.parallel.pp = pp, r.parallel.vpp = vpp;
  r.parallel.sequence_parallel = sp;
  r.parallel.distributed_optimizer = dist;
  r.global_batch = batch, r.micro_batch = micro;
  r.recompute = planned_recompute(rc);
  return r;
}

}  // namespace

std::vector<FormulaComparison> megatron_comparisons(const TrainRules& rules) {
  struct Case {
    const char* preset;
    const char* cluster;
    PlanRun run;
  };
  auto fp16 = [](PlanRun r) {  // Megatron-LM as Korthikanti et al. ran it
    r.precision = PlannedPrecision::FP16, r.attention = AttentionBackend::Unfused;
    return r;
  };
  auto uneven = [](PlanRun r, int layers) {
    r.pipeline_layout = lighter_ends_layout(layers, r.parallel.pp * r.parallel.vpp, 1);
    return r;
  };
  auto experts = [](PlanRun r, int ep, int etp) {
    r.parallel.ep = ep, r.parallel.etp = etp;
    return r;
  };
  auto cp = [](PlanRun r, int c) {
    r.parallel.cp = c;
    return r;
  };
  using R = Recompute;
  const std::vector<Case> cases = {
      {"korthikanti-22b", "a100-80gb", fp16(gpu_run(8, 8, 1, 1, 4, 4, R::Selective, true, false))},
      {"korthikanti-22b", "a100-80gb", fp16(gpu_run(8, 8, 1, 1, 4, 4, R::Full, false, false))},
      {"korthikanti-22b", "a100-80gb", fp16(gpu_run(8, 8, 1, 1, 4, 4, R::None, true, false))},
      {"gpt3-175b", "a100-80gb", fp16(gpu_run(64, 8, 8, 3, 64, 1, R::Selective, true, false))},
      {"gpt3-175b", "a100-80gb", fp16(gpu_run(64, 8, 8, 3, 64, 1, R::Full, false, false))},
      {"gpt3-175b", "a100-80gb", fp16(gpu_run(64, 8, 8, 1, 64, 1, R::Selective, true, false))},
      {"gpt3-175b", "a100-80gb", fp16(gpu_run(64, 8, 8, 3, 8, 1, R::Selective, true, false))},  // m = p: all in flight
      {"gpt3-175b", "a100-80gb", fp16(gpu_run(64, 8, 8, 1, 4, 1, R::Selective, true, false))},  // m < p
      {"gpt3-175b", "a100-80gb", fp16(gpu_run(128, 8, 8, 3, 128, 1, R::Selective, true, true))},
      {"korthikanti-530b", "a100-80gb", fp16(gpu_run(280, 8, 35, 3, 280, 1, R::Selective, true, false))},
      {"korthikanti-1t", "a100-80gb", fp16(gpu_run(512, 8, 64, 1, 512, 1, R::Selective, true, false))},
      {"llama3-8b", "h100", gpu_run(8, 1, 1, 1, 64, 1, R::None, false, true)},
      {"llama3-8b", "h100", gpu_run(16, 2, 1, 1, 64, 2, R::Selective, true, true)},
      {"llama3-70b", "h100", gpu_run(64, 4, 4, 5, 128, 1, R::Selective, true, true)},
      {"llama3-70b", "h100", cp(gpu_run(64, 8, 2, 1, 64, 1, R::Full, true, true), 2)},
      {"llama3-405b", "h100", uneven(gpu_run(16384, 8, 16, 2, 2048, 1, R::None, true, true), 126)},
      {"llama3-405b", "h100", uneven(gpu_run(1024, 8, 16, 2, 128, 1, R::Selective, true, true), 126)},  // m = p
      {"llama3-405b", "h100", uneven(gpu_run(2048, 8, 16, 1, 256, 1, R::Full, true, true), 126)},
      {"mixtral-8x7b", "h100", experts(gpu_run(64, 1, 4, 1, 256, 1, R::Selective, false, true), 8, 1)},
      {"mixtral-8x7b", "h100", experts(gpu_run(32, 2, 2, 2, 128, 1, R::Selective, true, true), 4, 1)},
      {"qwen3-moe-60l", "h100", uneven(experts(gpu_run(64, 4, 8, 1, 512, 1, R::Selective, true, false), 8, 1), 60)},
      {"qwen3-moe-60l", "h100", uneven(experts(gpu_run(64, 4, 8, 1, 512, 1, R::Selective, true, true), 8, 1), 60)},
      {"deepseek-v3", "h100", uneven(experts(gpu_run(1024, 2, 16, 1, 1024, 1, R::Selective, true, true), 64, 1), 61)},
  };
  std::vector<FormulaComparison> out;
  for (const Case& c : cases) {
    const PlanModel m = model_preset(c.preset);
    const Cluster cluster = cluster_preset(c.cluster);
    const std::vector<std::string> broken = run_violations(m, c.run, cluster, rules);
    TESSEL_CHECK(broken.empty(), "Megatron formula case {} {}: {}", c.preset, c.run.describe(), broken.empty() ? "" : broken.front());
    out.push_back(compare_with_megatron(m, c.run, cluster));
  }
  return out;
}

namespace {

std::string causes_text(const std::vector<Correction>& list, double base) {
  std::string s;
  for (const Correction& c : list)
    if (std::fabs(c.bytes) >= 0.001 * base) s += fmt::format("{}{} {:+.1f} %", s.empty() ? "" : "; ", c.cause, 100 * c.bytes / base);
  return s.empty() ? "–" : s;
}

}  // namespace

void print_megatron_comparison(const TrainRules& rules) {
  fmt::print("\nMegatron-LM's theoretical memory formula (megatron/training/theoretical_memory_usage.py) beside the planner's "
             "first stage, per rank; formula + the named differences = the planner (each difference in % of the formula's figure)\n"
             "| model | layout | weights + optimizer: formula | planner | difference | explained by | activations: formula | "
             "planner | difference | layer-microbatches: formula / schedule | explained by |\n"
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const FormulaComparison& c : megatron_comparisons(rules)) {
    const double fw = c.formula.weight_and_optimizer, fa = c.formula.activations;
    fmt::print("| {} | {} | {:.2f} GiB | {:.2f} GiB | {:+.1f} % | {} | {:.2f} GiB | {:.2f} GiB | {:+.1f} % | {:.1f} / {:.0f} | {} |\n",
               c.model, c.layout, fw / kGiB, c.planner_state / kGiB, 100 * (c.planner_state / fw - 1), causes_text(c.state, fw),
               fa / kGiB, c.planner_activations / kGiB, 100 * (c.planner_activations / fa - 1), c.formula.layer_microbatches,
               c.schedule_layer_microbatches, causes_text(c.activations, fa));
  }
}

nlohmann::json megatron_comparison_json(const TrainRules& rules) {
  nlohmann::json rows = nlohmann::json::array();
  for (const FormulaComparison& c : megatron_comparisons(rules)) {
    auto list = [](const std::vector<Correction>& l) {
      nlohmann::json j = nlohmann::json::array();
      for (const Correction& k : l) j.push_back({{"cause", k.cause}, {"gib", k.bytes / kGiB}});
      return j;
    };
    rows.push_back({{"model", c.model}, {"layout", c.layout}, {"formula_state_gib", c.formula.weight_and_optimizer / kGiB},
                    {"planner_state_gib", c.planner_state / kGiB}, {"state_differences", list(c.state)},
                    {"formula_activations_gib", c.formula.activations / kGiB}, {"planner_activations_gib", c.planner_activations / kGiB},
                    {"activation_differences", list(c.activations)}, {"formula_layer_microbatches", c.formula.layer_microbatches},
                    {"schedule_layer_microbatches", c.schedule_layer_microbatches}});
  }
  return rows;
}

}  // namespace tessel
