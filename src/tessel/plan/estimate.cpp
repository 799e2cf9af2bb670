#include "tessel/plan/estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "tessel/core/error.h"
#include "tessel/pipeline/simulate.h"
#include "tessel/plan/memory.h"
#include "tessel/plan/time.h"

namespace tessel {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Walks one pipeline rank's generated schedule: a forward leaves its chunk's activations until
// that microbatch's backward. Megatron frees them there, so its peak is the most bytes in flight
// at once. tessel's executor keeps a slot per microbatch a chunk holds at once, and reuses a
// freed slot at once; only the input gradient a backward sends to the previous stage may still
// be leaving (its receiver has not yet taken it) when the very next compute is a forward, and
// that buffer stays aside (a split backward's gradient leaves with its I, and its W is compute
// enough for it to have gone). Its memory is, per chunk, the most slots ever held times the
// slot, plus such a gradient buffer.
struct InFlight {
  double bytes = 0;
  int peak_pairs = 0;  // (microbatch, chunk) pairs at the fullest
  std::vector<int> peak_per_chunk;
  std::vector<bool> gradient_left_behind;  // per chunk
};

InFlight walk(const RankSchedule& compute, const std::vector<ChunkMemory>& chunks, const std::vector<bool>& sends_back,
              bool slots_kept) {
  InFlight f;
  f.peak_per_chunk.assign(chunks.size(), 0);
  f.gradient_left_behind.assign(chunks.size(), false);
  std::vector<int> now(chunks.size(), 0), leaving(chunks.size(), 0);
  double bytes = 0;
  int pairs = 0;
  for (const Action& a : compute) {
    const bool forward = a.kind == ActionKind::Forward;
    if (!forward && a.kind != ActionKind::Backward && a.kind != ActionKind::BackwardWeight) continue;
    const int c = a.chunk;
    if (forward) {
      now[c]++, pairs++, bytes += chunks[c].saved;
      f.peak_per_chunk[c] = std::max(f.peak_per_chunk[c], now[c]);
      if (leaving[c]) f.gradient_left_behind[c] = true;
    }
    std::fill(leaving.begin(), leaving.end(), 0);  // any other compute: the messages have left
    if (!forward) {  // B or W: the pair is released (an I's gradient left during its W)
      now[c]--, pairs--, bytes -= chunks[c].saved;
      if (sends_back[c] && a.kind == ActionKind::Backward) leaving[c] = 1;
    }
    f.peak_pairs = std::max(f.peak_pairs, pairs);
    f.bytes = std::max(f.bytes, bytes);
  }
  if (slots_kept) {
    f.bytes = 0;
    for (size_t c = 0; c < chunks.size(); ++c)
      f.bytes += f.peak_per_chunk[c] * (chunks[c].saved + chunks[c].slot) + (f.gradient_left_behind[c] ? chunks[c].gradient : 0);
  }
  return f;
}

StageMemory stage_memory(const RunShape& x, int stage, const RankSchedule& compute) {
  StageMemory m;
  m.stage = stage;
  for (int r = 0; r < x.run.parallel.world; ++r)
    if (x.layout.coords(r).pp == stage) m.ranks.push_back(r);
  for (const ChunkSpec& c : x.stage_chunks(stage)) m.layers += c.num_layers;
  const StageParams p = stage_params(x, stage);
  m.params = p.dense + p.experts;
  m.expert_params = p.experts;
  const std::vector<Term> state = state_terms(x, p);
  m.weights = state[0].value, m.grads = state[1].value;
  for (size_t i = 2; i < state.size(); ++i) m.optimizer += state[i].value;  // and post-validation's copy
  m.terms = state;
  std::vector<ChunkMemory> chunks;
  std::vector<bool> sends_back;
  for (const ChunkSpec& c : x.stage_chunks(stage)) {
    chunks.push_back(chunk_activations(x, c));
    sends_back.push_back(!c.has_embedding);  // every model chunk but the first sends its input gradient back
  }
  const InFlight f = walk(compute, chunks, sends_back, x.plans_tessel());
  m.peak_in_flight = f.peak_pairs;
  double transient = 0, shared = 0;
  for (const ChunkMemory& c : chunks) transient = std::max(transient, c.transient), shared += c.shared;
  m.activations = f.bytes + transient + shared;
  std::string per_chunk;
  for (size_t c = 0; c < chunks.size(); ++c)
    per_chunk += fmt::format("{}{} × {}", c ? " + " : "", f.peak_per_chunk[c], bytes_str(chunks[c].saved + (x.plans_tessel() ? chunks[c].slot : 0)));
  m.terms.push_back({"activations", m.activations,
                     x.plans_tessel() ? "Σ chunks: most microbatches in flight × (saved + slot), from the schedule"
                                    : "most bytes in flight over the schedule (Σ in-flight microbatches × chunk bytes) + the largest transient",
                     fmt::format("{} pairs at the peak; {} per chunk at most{}{}", f.peak_pairs, per_chunk,
                                 transient > 0 ? " + " + bytes_str(transient) : "",
                                 shared > 0 ? " + recompute arenas " + bytes_str(shared) : "")});
  for (size_t c = 0; c < chunks.size(); ++c) {
    for (const Term& t : chunks[c].terms)
      m.terms.push_back({fmt::format("  chunk {} per microbatch: {}", c, t.name), t.value, t.formula, t.numbers});
    for (const Term& t : chunks[c].shared_terms)
      m.terms.push_back({fmt::format("  chunk {} once: {}", c, t.name), t.value, t.formula, t.numbers});
  }
  for (const Term& t : rank_buffers(x, stage)) {
    m.buffers += t.value;
    m.terms.push_back(t);
  }
  m.runtime = x.cluster.runtime_memory_gib * kGiB;
  m.terms.push_back({"runtime (outside the model)", m.runtime, "cluster runtime_memory_gib", x.cluster.source});
  return m;
}

// Oversubscribed CPU ranks share the cores: a compute runs slower by how many rank threads are
// busy beside it, over the cores (a rank waiting in MPI yields its core). Found by replaying the
// schedule: each compute's stretch is the busy ranks over its interval in the previous replay,
// damped after the first, a few times over. `replicas` ranks run each pipeline rank's timeline (DP, TP, CP).
Simulation simulate_sharing_cores(const std::vector<RankSchedule>& lowered, const ScheduleConfig& config,
                                  SimulationCosts costs, double replicas, double cores) {
  std::map<std::tuple<int, int, int, int>, double> stretch;
  auto key = [](int r, const Action& a) { return std::tuple{r, static_cast<int>(a.kind), a.microbatch, a.chunk}; };
  const auto alone = costs.action_cost;
  costs.action_cost = [&](int r, const Action& a) {
    auto it = stretch.find(key(r, a));
    return alone(r, a) * (it == stretch.end() ? 1.0 : it->second);
  };
  Simulation sim;
  for (int round = 0; round < 6; ++round) {
    sim = simulate(lowered, config, costs);
    if (!sim.ok()) return sim;
    // Busy pipeline ranks over time, a step function: its integral F at every event.
    std::vector<std::pair<double, int>> events;
    for (const RankTimeline& line : sim.ranks)
      for (const TimedAction& ta : line.compute) events.push_back({ta.start, 1}), events.push_back({ta.end, -1});
    std::sort(events.begin(), events.end());
    std::vector<double> at, integral;
    int busy = 0;
    double area = 0, last = 0;
    for (const auto& [time, change] : events) {
      area += busy * (time - last);
      last = time;
      busy += change;
      at.push_back(time), integral.push_back(area);
    }
    auto F = [&](double t) {  // ∫ busy up to t, t an event time
      const size_t i = std::lower_bound(at.begin(), at.end(), t) - at.begin();
      return integral[std::min(i, integral.size() - 1)];
    };
    for (size_t r = 0; r < sim.ranks.size(); ++r)
      for (const TimedAction& ta : sim.ranks[r].compute) {
        if (ta.end <= ta.start) continue;
        const double concurrent = (F(ta.end) - F(ta.start)) / (ta.end - ta.start) * replicas;
        double& s = stretch.try_emplace(key(static_cast<int>(r), ta.action), 1.0).first->second;
        const double wanted = std::max(1.0, concurrent / cores);
        s = round == 0 ? wanted : 0.5 * (s + wanted);
      }
  }
  return sim;
}

}  // namespace

double Estimate::peak_memory_gib() const {
  double peak = 0;
  for (const StageMemory& s : stages) peak = std::max(peak, s.total());
  return peak / kGiB;
}

MemoryVerdict memory_verdict(const std::vector<StageMemory>& stages, double limit_gib) {
  MemoryVerdict v;
  v.limit_gib = limit_gib;
  for (const StageMemory& s : stages)
    if (s.total() / kGiB > v.peak_gib) v.peak_gib = s.total() / kGiB, v.stage = s.stage, v.runtime_gib = s.runtime / kGiB;
  return v;
}

std::string MemoryVerdict::text() const {
  if (fits()) return fmt::format("fits, {:.2f} GiB spare", spare_gib());
  return fmt::format("over by {:.2f} GiB ({:.1f} % of {:.1f} GiB)", -spare_gib(), 100 * over_fraction(), limit_gib);
}

double memory_limit_gib(const PlanRun& run, const Cluster& cluster) {
  if (!cluster.cpu()) return cluster.memory_gib;
  const int world = std::max(1, run.parallel.world);
  return cluster.memory_gib * cluster.devices_per_node / std::max(world, cluster.devices_per_node);
}

std::vector<StageMemory> estimate_memory(const PlanModel& model, const PlanRun& run, const Cluster& cluster) {
  const RunShape x(model, run, cluster);
  const std::vector<RankSchedule> compute = generate_schedule(x.schedule);
  std::vector<StageMemory> stages;
  for (int r = 0; r < x.pp; ++r) stages.push_back(stage_memory(x, r, compute[r]));
  return stages;
}

Estimate estimate(const PlanModel& model, const PlanRun& run, const Cluster& cluster) {
  const RunShape x(model, run, cluster);
  Estimate est;
  est.run = run;
  est.memory_limit_gib = memory_limit_gib(run, cluster);
  const std::vector<RankSchedule> compute = generate_schedule(x.schedule);
  for (int r = 0; r < x.pp; ++r) est.stages.push_back(stage_memory(x, r, compute[r]));

  // The pipeline: every rank's generated and lowered schedule, replayed with its own costs.
  std::vector<std::vector<ChunkCost>> costs(x.pp);
  for (int r = 0; r < x.pp; ++r)
    for (const ChunkSpec& c : x.stage_chunks(r)) costs[r].push_back(chunk_cost(x, c));
  std::vector<std::vector<double>> p2p(x.pp, std::vector<double>(x.pp, 0));
  for (int r = 0; r < x.pp; ++r)
    for (int peer : {(r + 1) % x.pp, (r + x.pp - 1) % x.pp})
      if (peer != r) p2p[r][peer] = p2p_seconds(x, r, peer);
  SimulationCosts sc;
  const bool blocking_p2p = !x.plans_tessel();  // Megatron waits for each send and receive; tessel's are non-blocking
  sc.action_cost = [&](int r, const Action& a) {
    switch (a.kind) {
      case ActionKind::Forward: return costs[r][a.chunk].forward.total();
      case ActionKind::Backward: return costs[r][a.chunk].backward.total();
      case ActionKind::BackwardInput: return costs[r][a.chunk].backward.total() - costs[r][a.chunk].weight_gradients;
      case ActionKind::BackwardWeight: return costs[r][a.chunk].weight_gradients;
      default: return blocking_p2p ? p2p[r][a.peer] : 0.0;
    }
  };
  if (!blocking_p2p && x.pp > 1) sc.communication = p2p[0][1];
  const std::vector<RankSchedule> lowered = lower(compute, x.schedule);
  const double share = oversubscription(x);
  const Simulation sim = share > 1 ? simulate_sharing_cores(lowered, x.schedule, sc, static_cast<double>(run.parallel.world) / x.pp * run.threads,
                                                            cluster.devices_per_node)
                                   : simulate(lowered, x.schedule, sc);
  TESSEL_CHECK(sim.ok(), "planner: the {} schedule did not run: {}", schedule_kind_name(x.schedule.kind), sim.error);

  StepTime& t = est.time;
  t.makespan = sim.makespan;
  t.bubble = sim.bubble();
  // The parts are the busiest stage's: it sets the pace (lighter stages wait, which would show
  // as their idle time).
  int& b = t.stage;
  double most = -1;
  for (int r = 0; r < x.pp; ++r) {
    double busy = 0;
    for (const Action& a : lowered[r]) busy += sc.action_cost(r, a);
    if (busy > most) most = busy, b = r;
  }
  for (const Action& a : lowered[b]) {
    const double cost = sc.action_cost(b, a);
    if (a.kind != ActionKind::Forward && a.kind != ActionKind::Backward) {
      t.pp_comm += cost;
      continue;
    }
    const Seconds& s = a.kind == ActionKind::Forward ? costs[b][a.chunk].forward : costs[b][a.chunk].backward;
    t.compute += s.gemm + s.memory, t.tp_comm += s.tp, t.cp_comm += s.cp, t.ep_comm += s.ep;
  }
  t.idle = std::max(0.0, sim.makespan - t.compute - t.tp_comm - t.cp_comm - t.ep_comm - t.pp_comm);
  // After the flush every stage reduces and updates its own parameters: the slowest one counts.
  IterationTail slowest;
  for (int r = 0; r < x.pp; ++r) {
    double last_backward = 0;
    for (const ChunkCost& c : costs[r]) last_backward += c.backward.total();
    IterationTail tail = iteration_tail(x, est.stages[r].params - est.stages[r].expert_params,
                                        est.stages[r].expert_params, last_backward);
    if (r == 0 || tail.dp + tail.embedding + tail.optimizer > slowest.dp + slowest.embedding + slowest.optimizer)
      slowest = tail;
  }
  // Oversubscribed CPU ranks: every rank's reduction and update share the cores too.
  t.dp_comm = slowest.dp * share, t.embedding_sync = slowest.embedding, t.optimizer = slowest.optimizer * share;
  t.step = t.makespan + t.dp_comm + t.embedding_sync + t.optimizer;

  for (size_t c = 0; c < costs[b].size(); ++c) {
    const ChunkCost& k = costs[b][c];
    for (auto [name, s] : {std::pair{"forward", &k.forward}, {"backward", &k.backward}})
      t.terms.push_back({fmt::format("stage {} chunk {} {} of one microbatch", b, c, name), s->total(),
                         "GEMM FLOPs / GEMM rate + bytes / memory rate + exposed TP, CP, EP collectives",
                         fmt::format("GEMM {:.4g} s + memory {:.4g} s + TP {:.4g} s + CP {:.4g} s + EP {:.4g} s",
                                     s->gemm, s->memory, s->tp, s->cp, s->ep)});
  }
  if (x.pp > 1)
    t.terms.push_back({"point-to-point message between stages 0 and 1", p2p[0][1],
                       blocking_p2p ? "activation slice / link bandwidth + latency (blocking send and receive)"
                                    : "activation / link bandwidth + latency (non-blocking, in flight)",
                       x.pp_link_spans_nodes(0, 1) ? "across nodes" : "inside a node"});
  if (share > 1)
    t.terms.push_back({"oversubscribed cores", t.makespan, "each compute stretched by the busy rank threads beside it / cores",
                       fmt::format("{} rank threads on {} cores", x.run.parallel.world * x.run.threads,
                                   x.cluster.devices_per_node)});
  t.terms.push_back({"pipeline (simulated schedule)", sim.makespan,
                     fmt::format("{} schedule, p = {}, m = {}, v = {}, every action at its cost",
                                 schedule_kind_name(x.schedule.kind), x.pp, x.microbatches, x.v),
                     fmt::format("stage {} busy {:.4g} s, idle {:.4g} s; bubble {:.3g} (all stages' idle share)", b,
                                 t.makespan - t.idle, t.idle, t.bubble)});
  for (const Term& term : slowest.terms) t.terms.push_back(term);

  const double tokens = static_cast<double>(run.global_batch) * model.cfg.seq_length;
  const double world = run.parallel.world;
  est.model_flops = model_flops_per_iteration(model, run.global_batch);
  est.tokens_per_s_per_gpu = tokens / t.step / world;
  est.tflops_per_gpu = est.model_flops / t.step / world / 1e12;
  est.mfu = est.model_flops / (t.step * world * cluster.peak_flops);
  return est;
}

}  // namespace tessel
