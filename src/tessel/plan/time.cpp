#include "tessel/plan/time.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "tessel/plan/memory.h"

namespace tessel {

namespace {

struct Link {
  double bandwidth, latency;
};

// A CPU rank computes on its threads' cores (the measured rates are one core's); more rank
// threads than cores are accounted for over the whole step (oversubscription(), estimate.cpp).
double cpu_share(const RunShape& x) {
  return x.cluster.cpu() ? std::min<double>(x.run.threads, x.cluster.devices_per_node) : 1;
}

Link link(const RunShape& x, bool inter) {
  const Cluster& c = x.cluster;
  return inter ? Link{c.inter_bandwidth * c.network_efficiency, c.inter_latency}
               : Link{c.intra_bandwidth * c.network_efficiency, c.intra_latency};
}

// Collectives over a group placed as `g`: inside a node a ring over its k ranks (NVLink or
// shared memory), between the N nodes a ring per rank over the NICs carrying 1/k of the data —
// NCCL's hierarchical algorithms. `bytes` is the whole tensor (an all-reduce's buffer, an
// all-gather's output, a reduce-scatter's input); `rounds` is 2 for an all-reduce (a
// reduce-scatter then an all-gather), 1 for either half.
double collective(const RunShape& x, double bytes, const RunShape::Placement& g, int rounds) {
  if (g.ranks <= 1) return 0;
  const Link intra = link(x, false), inter = link(x, true);
  const double k = g.per_node, n = g.nodes;
  double t = 0;
  if (k > 1) t += rounds * ((k - 1) / k * bytes / intra.bandwidth + (k - 1) * intra.latency);
  if (n > 1) t += rounds * ((n - 1) / n * bytes / k / inter.bandwidth + (n - 1) * inter.latency);
  return t;
}
double all_reduce(const RunShape& x, double bytes, const RunShape::Placement& g) { return collective(x, bytes, g, 2); }
double gather_or_scatter(const RunShape& x, double bytes, const RunShape::Placement& g) { return collective(x, bytes, g, 1); }
// Each rank sends `bytes` spread evenly over the group: the part for other nodes goes over the
// NICs while the part for this node's ranks goes over NVLink.
double all_to_all(const RunShape& x, double bytes, const RunShape::Placement& g) {
  if (g.ranks <= 1) return 0;
  const Link intra = link(x, false), inter = link(x, true);
  const double n = g.ranks, k = g.per_node;
  const double inside = (k - 1) / n * bytes / intra.bandwidth, outside = (n - k) / n * bytes / inter.bandwidth;
  return std::max(inside, outside) + (n - 1) * (g.nodes > 1 ? inter.latency : intra.latency);
}

// Bytes the memory-bound kernels of one layer's forward move, per row of `norm_rows` (the rows
// of the norms and residual adds, outside TP regions) and per token of N: norms (read + write),
// residual adds with dropout (two reads, a write, a 1-byte mask), the activation, RoPE, softmax
// and dropout over the attention scores (unfused), the output gate and QK-norm, a Gated DeltaNet
// mixer's convolution, l2norms, gates and gated norm, the MoE router and permutation on this
// rank's rows.
double layer_traffic(const RunShape& x, int layer, bool linear, double norm_rows) {
  const PlanModel& m = x.model;
  const double e = x.e, h = m.cfg.hidden_size, t = x.t, N = static_cast<double>(x.N);
  const double q = static_cast<double>(m.q_width()), kv = static_cast<double>(m.kv_width()),
               vw = static_cast<double>(m.v_width()), a = m.cfg.num_attention_heads, s = static_cast<double>(x.s);
  double per_row = 2 * 2 * e * h + 2 * (3 * e * h + (m.cfg.hidden_dropout > 0 ? h : 0));
  double per_token = 0;
  if (linear) {  // conv read + write, q and k l2-normed in place, gated norm reads o and z and writes
    const LinearAttentionConfig& g = m.cfg.linear;
    per_token += (e * (2 * g.conv_dim() + 4 * g.key_dim() + 3 * g.value_dim()) + 4.0 * 4 * g.num_value_heads) / t;
  } else {
    if (m.swiglu() && !m.multi_latent_attention) per_token += 2 * e * (q + kv) / t;  // RoPE
    if (x.run.attention == AttentionBackend::Unfused)
      per_token += a * s / t * (4 * e + (m.cfg.attention_dropout > 0 ? 2 * e + 1 : 0));
    else
      per_token += e * (q + 2 * kv + vw) / t;
    if (m.cfg.attention_output_gate) per_token += 3 * e * vw / t;
    if (m.cfg.qk_layernorm) per_token += 2 * e * (q + kv) / t;
  }
  if (!m.is_moe_layer(layer)) {
    per_token += (m.swiglu() ? 3 : 2) * e * m.ffn() / t;
  } else {
    const MoeConfig& moe = m.cfg.moe;
    // the router and the routed rows: always this rank's rows (N/t under sequence parallel)
    // (the routed rows permuted out and back, the arrivals gathered over ETP; each ETP rank's
    // SwiGLU over all of them with 1/ETP of the neurons)
    per_token += (2 * 4.0 * moe.num_experts + 2 * e * moe.topk * h * (1 + x.etp) * x.moe_compute_load() +
                  3 * e * moe.topk * m.expert_ffn() * x.moe_compute_load()) * static_cast<double>(x.rows) / N;
    per_token += 3 * e * moe.shared_expert_size / t;
  }
  return norm_rows * per_row + N * per_token;
}

struct LayerCost {
  Seconds forward, backward;
  double weight_gradients = 0;  // of the backward's GEMMs
};

// One layer of FLOPs `f` (layer_flops, or mtp_flops for an MTP layer), its MLP the one of
// `layer`, its mixer Gated DeltaNet (`linear`) or attention.
LayerCost layer_cost(const RunShape& x, const LayerFlops& f, int layer, bool linear) {
  const PlanModel& m = x.model;
  const bool megatron = !x.plans_tessel();
  const double N = static_cast<double>(x.N), rows = static_cast<double>(x.rows), t = x.t, e = x.e,
               h = m.cfg.hidden_size;
  const double flops_rate = gemm_rate(x), bytes_rate = memory_rate(x);
  const bool moe = m.is_moe_layer(layer);
  const double router = moe ? 2.0 * h * m.cfg.moe.num_experts : 0;
  // Projections over TP; the router on this rank's rows; MLA's down projections on all N rows;
  // routed experts on the rows that arrive (balanced: as many as leave), gathered over ETP, each
  // ETP rank with 1/ETP of every expert: rows × the experts' FLOPs.
  const double matmul = N * f.dense / t + rows * router + N * (f.replicated - router) + rows * f.experts * x.moe_compute_load();
  const bool causal_kernel = x.run.attention != AttentionBackend::Unfused;
  const double attention = N * f.attention / t * (causal_kernel ? 0.5 : 1);
  // The delta rule on this rank's heads (under CP: the whole sequence of 1/(t·cp) of them, as
  // many FLOPs as N tokens of 1/t); its backward recomputes the chunk states (FLA).
  const double rule = N * f.delta_rule / t;
  const double rule_recompute = linear ? N * m.cfg.linear.num_value_heads * gdn_delta_rule_recompute_flops(m) / t : 0;
  LayerCost c;
  c.forward.gemm = (matmul + attention + rule) / flops_rate;
  c.forward.memory = layer_traffic(x, layer, linear, rows) / bytes_rate;
  // Tensor parallel: an all-reduce (or all-gather + reduce-scatter) of N·h after attention and
  // after the MLP or shared expert; an MoE layer without a shared expert has the first only.
  const RunShape::Placement tp_group = x.placement(GroupKind::TP);
  const double tp_collectives = moe && m.cfg.moe.shared_expert_size == 0 ? 1 : 2;
  c.forward.tp = tp_collectives * all_reduce(x, N * h * e, tp_group);
  if (moe && x.etp > 1)  // routed rows gathered over ETP, expert outputs reduce-scattered back
    c.forward.tp += 2 * gather_or_scatter(x, m.cfg.moe.topk * rows * h * e * x.etp, x.placement(GroupKind::ETP));
  if (moe && x.ep > 1)  // dispatch and combine: each row's k copies leave for their experts and return
    c.forward.ep = 2 * all_to_all(x, m.cfg.moe.topk * rows * h * e, x.placement(GroupKind::EP));
  const double attention_forward = attention / flops_rate;
  double ring = 0;
  if (x.cp > 1 && linear) {
    // Megatron's GDN under CP: in_proj's output (q, k, v, z, β, α of this rank's heads) all-to-all'ed
    // from sequence to head shards before the convolution, the gated norm's output back after it,
    // and their gradients likewise in the backward; nothing overlaps them.
    const LinearAttentionConfig& g = m.cfg.linear;
    const RunShape::Placement cp_group = x.placement(GroupKind::CP);
    c.forward.cp = all_to_all(x, N * (g.conv_dim() + g.value_dim() + 2 * g.num_value_heads) / t * e, cp_group) +
                   all_to_all(x, N * g.value_dim() / t * e, cp_group);
  } else if (x.cp > 1) {  // K/V blocks around the ring, overlapped with the attention of the block held
    const Link cp_link = link(x, x.placement(GroupKind::CP).nodes > 1);
    ring = (x.cp - 1) * (2 * N * m.kv_width() / t * e / cp_link.bandwidth + cp_link.latency);
    c.forward.cp = std::max(0.0, ring - attention_forward);
  }
  const double backward_attention = causal_kernel ? 2.5 : 2;  // flash kernels recompute P
  c.backward.gemm = (2 * matmul + backward_attention * attention + 2 * rule + rule_recompute) / flops_rate;
  c.backward.memory = 2 * layer_traffic(x, layer, linear, N) / bytes_rate;  // SP saves no backward traffic
  // Megatron overlaps the backward's TP collectives with the weight-gradient GEMMs; tessel's
  // ranks wait for them.
  const double weight_gradients = matmul / flops_rate;
  c.weight_gradients = megatron || x.run.recompute_kind() != Recompute::Full ? weight_gradients : 0;
  c.backward.tp = megatron && x.run.async_tp_allreduce ? std::max(0.0, c.forward.tp - weight_gradients) : c.forward.tp;
  c.backward.ep = c.forward.ep;
  if (x.cp > 1) c.backward.cp = linear ? c.forward.cp : std::max(0.0, 2 * ring - backward_attention * attention_forward);
  if (x.run.recompute_kind() == Recompute::Full) {
    c.backward += c.forward;
  } else if (x.run.recompute_kind() == Recompute::Selective && !linear) {  // core attention again: scores, softmax, ·V
    c.backward.gemm += attention_forward;
    if (!causal_kernel) c.backward.memory += N * m.cfg.num_attention_heads * x.s / t * 4 * e / bytes_rate;
  }
  return c;
}

}  // namespace

double oversubscription(const RunShape& x) {
  if (!x.cluster.cpu()) return 1;
  return std::max(1.0, static_cast<double>(x.run.parallel.world) * x.run.threads / x.cluster.devices_per_node);
}

double gemm_rate(const RunShape& x) {
  return x.cluster.peak_flops * x.cluster.gemm_efficiency * cpu_share(x);
}

double memory_rate(const RunShape& x) {
  return x.cluster.memory_bandwidth * x.cluster.memory_efficiency * cpu_share(x);
}

ChunkCost chunk_cost(const RunShape& x, const ChunkSpec& chunk) {
  const PlanModel& m = x.model;
  ChunkCost c;
  auto add = [&](const LayerCost& one, double count) {
    for (auto [into, from] : {std::pair{&c.forward, &one.forward}, {&c.backward, &one.backward}}) {
      into->gemm += count * from->gemm, into->memory += count * from->memory, into->tp += count * from->tp;
      into->cp += count * from->cp, into->ep += count * from->ep;
    }
    c.weight_gradients += count * one.weight_gradients;
  };
  // Layers of one kind (dense or MoE, attention or Gated DeltaNet) each cost the same.
  std::map<std::pair<bool, bool>, std::pair<int, int>> kinds;  // kind → (an example, count)
  for (int l = chunk.first_layer; l < chunk.first_layer + chunk.num_layers; ++l) {
    auto [it, added] = kinds.try_emplace({m.is_moe_layer(l), m.is_linear_layer(l)}, l, 0);
    it->second.second++;
  }
  for (const auto& [kind, example] : kinds)
    add(layer_cost(x, layer_flops(m, example.first, x.s), example.first, kind.second), example.second);
  const double N = static_cast<double>(x.N), rows = static_cast<double>(x.rows), h = m.cfg.hidden_size, e = x.e;
  const double bytes_rate = memory_rate(x), flops_rate = gemm_rate(x);
  if (chunk.has_embedding) {  // a row gathered per token, scattered back into the gradient
    c.forward.memory += rows * 2 * e * h / bytes_rate;
    c.backward.memory += N * 3 * e * h / bytes_rate;
  }
  if (chunk.has_head) {
    // MTP on the last stage: its layers (fc and a full-attention layer built as the last one),
    // its embedding of the next tokens, and the head once more for each.
    const int mtp = m.mtp_layers();
    if (mtp > 0) {
      add(layer_cost(x, mtp_flops(m, x.s), m.cfg.num_layers - 1, false), mtp);
      c.forward.memory += mtp * rows * 2 * e * h / bytes_rate;
      c.backward.memory += mtp * N * 3 * e * h / bytes_rate;
    }
    const double V_l = static_cast<double>(x.V_l), heads = 1 + mtp;
    Seconds forward, backward;
    forward.gemm = heads * 2 * N * h * V_l / flops_rate;
    forward.memory = heads * (rows * 2 * e * h + N * V_l * 4 * 3) / bytes_rate;  // final norm; fp32 logits, max, exp-sum
    backward.gemm = heads * 4 * N * h * V_l / flops_rate;
    backward.memory = heads * N * V_l * 4 * 2 / bytes_rate;
    if (x.sp) forward.tp = backward.tp = heads * gather_or_scatter(x, N * h * e, x.placement(GroupKind::TP));
    c.forward += forward;
    // tessel's last chunk computes the head's gradient with its loss, in the forward.
    (x.plans_tessel() ? c.forward : c.backward) += backward;
  }
  return c;
}

double p2p_seconds(const RunShape& x, int stage, int peer) {
  const double h = x.model.cfg.hidden_size, e = x.e;
  const Link l = link(x, x.pp_link_spans_nodes(stage, peer));
  if (x.plans_tessel()) return static_cast<double>(x.rows) * h * e / l.bandwidth + l.latency;
  // Megatron sends 1/t of the activation per TP rank (sequence parallel, or its scatter/gather
  // optimisation, which all-gathers the rest over NVLink).
  const double slice = static_cast<double>(x.N) / x.t * h * e;
  double seconds = slice / l.bandwidth + l.latency;
  if (!x.sp && x.t > 1) seconds += gather_or_scatter(x, static_cast<double>(x.N) * h * e, x.placement(GroupKind::TP));
  return seconds;
}

IterationTail iteration_tail(const RunShape& x, int64_t dense_params, int64_t expert_params,
                             double last_backward_seconds) {
  IterationTail tail;
  const bool distributed = x.run.parallel.distributed_optimizer;
  const double dense = static_cast<double>(dense_params), experts = static_cast<double>(expert_params);
  const int dp_cp = x.dp * x.cp;
  auto reduce = [&](double params, GroupKind kind) {
    if (params == 0) return 0.0;
    const RunShape::Placement g = x.placement(kind);
    if (!distributed) return all_reduce(x, params * x.g_bytes, g);
    return gather_or_scatter(x, params * x.g_bytes, g) + gather_or_scatter(x, params * x.w_bytes, g);
  };
  const double dp = reduce(dense, GroupKind::DP_CP) + reduce(experts, GroupKind::EDP);
  tail.dp = x.run.overlap_grad_reduce ? std::max(0.0, dp - last_backward_seconds) : dp;
  tail.terms.push_back({"data-parallel gradient reduction", tail.dp,
                        distributed ? "reduce-scatter of gradients + all-gather of weights over DP·CP (experts: EDP)"
                                    : "ring all-reduce 2·(d−1)/d · params·grad bytes / bandwidth",
                        fmt::format("{:.0f} dense params over {} ranks, {:.0f} expert params over {}{}", dense, dp_cp,
                                    experts, x.edp, x.run.overlap_grad_reduce ? ", overlapped with the last backward" : "")});
  // The embedding's copy on the last stage (a tied head's, or MTP's) is all-reduced with the first's.
  if ((x.model.cfg.tied_embeddings() || x.model.mtp_layers() > 0) && x.pp > 1) {
    const double bytes = static_cast<double>(x.model.cfg.padded_vocab(x.t)) / x.t * x.model.cfg.hidden_size * x.g_bytes;
    const bool across = x.pp_link_spans_nodes(0, x.pp - 1);
    tail.embedding = all_reduce(x, bytes, {2, across ? 2 : 1, across ? 1 : 2});
    tail.terms.push_back({"embedding all-reduce (first and last stage: a tied head's or MTP's copy)", tail.embedding,
                          "all-reduce of V/t·h gradients over 2 ranks", bytes_str(bytes)});
  }
  // Adam: read the gradient, read and write the master weight (tessel: the weight), m and v; mixed
  // precision writes the model's weight too (fp16 first copies the gradients to fp32); the
  // gradient norm reads the gradients again and zeroing writes them.
  const bool mixed = x.run.precision != PlannedPrecision::FP32;
  const double fp32_copy = x.run.precision == PlannedPrecision::FP16 ? 6 : 0;
  const double update = 24 + x.g_bytes + (mixed ? x.w_bytes : 0) + fp32_copy;
  const double bytes = distributed ? dense * update / dp_cp + experts * update / x.edp + (dense + experts) * 2 * x.g_bytes
                                   : (dense + experts) * (update + 2 * x.g_bytes);
  tail.optimizer = bytes / memory_rate(x);
  tail.terms.push_back({"optimizer step", tail.optimizer,
                        fmt::format("params·({} B update{} + 2·{} B norm and zeroing) / memory rate", update,
                                    distributed ? " on this rank's slice" : "", x.g_bytes),
                        fmt::format("{} / {:.3g} B/s", bytes_str(bytes), memory_rate(x))});
  return tail;
}

}  // namespace tessel
