#include "tessel/plan/shape.h"

#include <algorithm>

namespace tessel {

StateBytes state_bytes(PlannedPrecision p) {
  switch (p) {
    case PlannedPrecision::FP32: return {4, 4, 8};    // tessel: fp32 weights and gradients, Adam m and v
    case PlannedPrecision::BF16: return {2, 4, 12};   // bf16 weights, fp32 main gradients, fp32 master + m + v
    case PlannedPrecision::FP16: return {2, 2, 16};   // fp16 weights and gradients, fp32 gradient copy, master, m, v
  }
  return {4, 4, 8};
}

RunShape::RunShape(const PlanModel& m, const PlanRun& r, const Cluster& c)
    : model(m), run(r), cluster(c), engine(r.engine_on(c)), layout(r.parallel) {
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
  stages = r.stage_options(m.mtp_layers());
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
