#include "tessel/plan/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "tessel/plan/memory.h"
#include "tessel/plan/time.h"

namespace tessel {

std::string lighter_ends_layout(int layers, int chunks, int first_share, int mtp_layers) {
  if (chunks < 2 || layers % chunks == 0 || layers < chunks) return "";
  const int base = (layers + chunks - 1) / chunks;
  std::vector<int> n(chunks, base);
  int deficit = base * chunks - layers;
  // The first and last chunks give up the missing layers (the first `first_share` of them, by
  // default half; each keeps at least one); what they cannot give comes from the next chunks in.
  for (int k = 0; deficit > 0 && k < chunks / 2; ++k) {
    const int want_first = k == 0 && first_share >= 0 ? std::min(first_share, deficit) : deficit / 2;
    const int first = std::min(base - 1, want_first), last = std::min(base - 1, deficit - first);
    n[k] -= first;
    n[chunks - 1 - k] -= last;
    deficit -= first + last;
  }
  if (deficit > 0) return "";
  std::string s;
  for (int k = 0; k < chunks; ++k) {
    if (k > 0) s += "|";
    if (k == 0) s += "E";
    s += fmt::format("t*{}", n[k]);
    if (k == chunks - 1) s += std::string(mtp_layers, 'm') + "L";
  }
  return s;
}

namespace {

std::vector<int> powers_of_two_up_to(int limit) {
  std::vector<int> v;
  for (int x = 1; x <= limit; x *= 2) v.push_back(x);
  return v;
}

template <typename T>
std::vector<T> fixed_or(const std::optional<T>& fixed, std::vector<T> values) {
  return fixed ? std::vector<T>{*fixed} : values;
}

// PP, VPP and the layers per model chunk: an even split, or when the layers do not divide, every
// way of taking the missing layers from the first and last chunks.
struct Split {
  int pp, vpp;
  std::string layout;
};

std::vector<Split> pipeline_splits(int L, int mtp_layers, int world, const SearchSpace& space) {
  std::vector<Split> splits;
  for (int pp = 1; pp <= std::min(L, world); ++pp) {
    if (world % pp != 0 || (space.pp && pp != *space.pp)) continue;
    std::vector<int> vpps = {1};
    if (pp > 1)
      for (int v : {2, 3, 4, 6, 8})
        if (pp * v <= L) vpps.push_back(v);
    for (int vpp : fixed_or(space.vpp, vpps)) {
      const int chunks = pp * vpp;
      if (L % chunks == 0) {
        splits.push_back({pp, vpp, ""});
        continue;
      }
      std::vector<std::string> seen;
      for (int share = 0; share <= (L + chunks - 1) / chunks * chunks - L; ++share) {
        std::string s = lighter_ends_layout(L, chunks, share, mtp_layers);
        if (s.empty() || std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
        seen.push_back(s);
        splits.push_back({pp, vpp, s});
      }
    }
  }
  return splits;
}

struct Candidate {
  PlanRun run;
  double bound = 0;
};

constexpr double kGiB = 1024.0 * 1024 * 1024;

// The fastest `top` of `candidates` (sorted by bound), simulated in order until no remaining
// bound can beat the slowest kept.
std::vector<Estimate> fastest(const std::vector<Candidate>& candidates, int top, const PlanModel& model,
                              const Cluster& cluster, int& simulated) {
  std::vector<Estimate> kept;
  for (const Candidate& c : candidates) {
    if (static_cast<int>(kept.size()) >= top && c.bound >= kept.back().time.step) break;
    kept.push_back(estimate(model, c.run, cluster));
    simulated++;
    std::sort(kept.begin(), kept.end(), [](const Estimate& a, const Estimate& b) { return a.time.step < b.time.step; });
    if (static_cast<int>(kept.size()) > top) kept.pop_back();
  }
  return kept;
}

}  // namespace

// The busiest stage's work: no schedule runs faster than its busiest rank.
double step_lower_bound(const PlanModel& model, const PlanRun& run, const Cluster& cluster) {
  const RunShape x(model, run, cluster);
  double busiest = 0;
  for (int r = 0; r < x.pp; ++r) {
    double busy = 0;
    for (const ChunkSpec& c : x.stage_chunks(r)) {
      const ChunkCost k = chunk_cost(x, c);
      busy += x.microbatches * (k.forward.total() + k.backward.total());
    }
    busiest = std::max(busiest, busy);
  }
  return busiest;
}

double runtime_allowance_to_fit(const std::vector<StageMemory>& stages, double limit_gib) {
  double allowance = 1e30;
  for (const StageMemory& s : stages) allowance = std::min(allowance, limit_gib - (s.total() - s.runtime) / kGiB);
  return allowance;
}

std::vector<MemoryFix> memory_fixes(const PlanModel& model, const PlanRun& run, const Cluster& cluster,
                                    const TrainRules& rules, bool with_time) {
  std::vector<std::pair<std::string, PlanRun>> tries;
  for (Recompute heavier : {Recompute::Selective, Recompute::Full}) {
    if (heavier <= run.recompute_kind()) continue;
    PlanRun r = run;
    r.recompute = planned_recompute(heavier);
    tries.push_back({"--recompute-granularity " + recompute_name(heavier), r});
  }
  if (!run.parallel.distributed_optimizer) {
    PlanRun r = run;
    r.parallel.distributed_optimizer = true;
    tries.push_back({"--use-distributed-optimizer", r});
  }
  if (run.micro_batch > 1) {
    PlanRun r = run;
    r.micro_batch = run.micro_batch / 2;
    tries.push_back({fmt::format("--micro-batch-size {}", r.micro_batch), r});
  }
  const double limit = memory_limit_gib(run, cluster);
  std::vector<MemoryFix> fixes;
  for (auto& [change, r] : tries) {
    if (!run_violations(model, r, cluster, rules).empty()) continue;
    const MemoryVerdict v = memory_verdict(estimate_memory(model, r, cluster), limit);
    if (!v.fits()) continue;
    // Full recompute only when selective does not do it.
    if (r.recompute_kind() == Recompute::Full && run.recompute_kind() == Recompute::None && !fixes.empty() &&
        fixes.front().run.recompute_kind() == Recompute::Selective)
      continue;
    fixes.push_back({change, r, v.peak_gib, with_time ? estimate(model, r, cluster).time.step : 0});
  }
  const double allowance = runtime_allowance_to_fit(estimate_memory(model, run, cluster), limit);
  if (allowance >= 0 && allowance < cluster.runtime_memory_gib)
    fixes.push_back({fmt::format("--runtime-memory-gib {:.2f} (the runtime allowance it would need, now {:.2f})", allowance,
                                 cluster.runtime_memory_gib),
                     run, limit, 0});
  return fixes;
}

SearchResult search(const PlanModel& model, const PlanRun& base, const SearchSpace& space, const Cluster& cluster,
                    const TrainRules& rules) {
  SearchResult result;
  const int world = base.parallel.world, L = model.cfg.num_layers;
  const int E = model.cfg.moe.num_experts;
  const double limit = memory_limit_gib(base, cluster);
  std::vector<Candidate> fitting, near;
  result.memory_margin = space.memory_margin;
  auto consider = [&](PlanRun run) {
    result.considered++;
    std::vector<std::string> v = run_violations(model, run, cluster, rules);
    if (v.empty()) {
      const MemoryVerdict verdict = memory_verdict(estimate_memory(model, run, cluster), limit);
      if (!verdict.fits()) {
        v.push_back(fmt::format("memory: stage {} needs {:.2f} GiB > {:.1f} GiB, {}", verdict.stage, verdict.peak_gib,
                                limit, verdict.text()));
        if (verdict.over_fraction() <= space.memory_margin) near.push_back({run, step_lower_bound(model, run, cluster)});
      }
    }
    if (!v.empty()) {
      result.rejected.push_back({run, std::move(v)});
      return false;
    }
    fitting.push_back({run, step_lower_bound(model, run, cluster)});
    return true;
  };

  const std::vector<Recompute> recomputes =
      cluster.cpu() ? std::vector<Recompute>{Recompute::None}
                    : fixed_or(space.recompute, {Recompute::None, Recompute::Selective, Recompute::Full});
  const int max_tp = std::min(world, 2 * cluster.devices_per_node);
  const std::vector<Split> splits = pipeline_splits(L, model.mtp_layers(), world, space);
  for (int tp : fixed_or(space.tp, powers_of_two_up_to(max_tp)))
    for (int cp : fixed_or(space.cp, powers_of_two_up_to(8)))
      for (const Split& split : splits) {
        if (world % (tp * cp * split.pp) != 0) continue;
        std::vector<int> eps = {1};
        if (E > 0) {
          eps.clear();
          for (int ep = 1; ep <= std::min(E, world / split.pp); ++ep)
            if (E % ep == 0 && world % (ep * split.pp) == 0) eps.push_back(ep);
        }
        for (int ep : fixed_or(space.ep, eps))
          for (int etp : fixed_or(space.etp, E > 0 && tp > 1 ? std::vector<int>{1, tp} : std::vector<int>{tp})) {
            PlanRun run = base;
            ParallelConfig& p = run.parallel;
            p.tp = tp, p.cp = cp, p.pp = split.pp, p.vpp = split.vpp, p.ep = ep, p.etp = etp;
            p.sequence_parallel = tp > 1;
            run.pipeline_layout = split.layout;
            const int dp = world / (tp * cp * split.pp);
            std::vector<int64_t> mbs;
            for (int64_t mb = 1; mb <= std::max<int64_t>(1, base.global_batch / dp); mb *= 2) mbs.push_back(mb);
            std::vector<bool> distributed = {false};
            if (dp * cp > 1 || (E > 0 && world / (etp * ep * split.pp) > 1)) distributed.push_back(true);
            for (int64_t mb : fixed_or(space.micro_batch, mbs))
              for (bool dist : fixed_or(space.distributed_optimizer, distributed)) {
                run.micro_batch = mb;
                run.parallel.distributed_optimizer = dist;
                for (Recompute rc : recomputes) {
                  run.recompute = planned_recompute(rc);
                  // Recomputing only trades time for memory: once a cheaper choice fits, stop.
                  if (consider(run) && !space.recompute) break;
                }
              }
          }
      }

  result.valid = static_cast<int>(fitting.size());
  const auto by_bound = [](const Candidate& a, const Candidate& b) { return a.bound < b.bound; };
  std::sort(fitting.begin(), fitting.end(), by_bound);
  std::sort(near.begin(), near.end(), by_bound);
  result.ranked = fastest(fitting, space.top, model, cluster, result.simulated);
  for (Estimate& e : fastest(near, space.top, model, cluster, result.simulated)) {
    std::vector<MemoryFix> fixes = memory_fixes(model, e.run, cluster, rules, true);
    result.near_misses.push_back({std::move(e), std::move(fixes)});
  }
  return result;
}

}  // namespace tessel
