// Schedule generators with Megatron-LM's semantics (megatron/core/pipeline_parallel/schedules.py):
//   GPipe        all forwards, then all backwards, both in microbatch order;
//   1F1B         forward_backward_pipelining_without_interleaving;
//   interleaved  forward_backward_pipelining_with_interleaving (get_schedule_table, microbatch
//                groups of g per virtual stage);
// the zero-bubble ones in zero_bubble.cpp; and the lowering pass that adds the point-to-point
// sends and receives.
#include "tessel/pipeline/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "tessel/core/error.h"
#include "tessel/pipeline/zero_bubble.h"

namespace tessel {

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::GPipe;
  if (name == "1f1b") return ScheduleKind::OneFOneB;
  if (name == "interleaved") return ScheduleKind::Interleaved;
  if (name == "zb-h1") return ScheduleKind::ZeroBubbleH1;
  if (name == "zb-v") return ScheduleKind::ZeroBubbleV;
  if (name == "dualpipev") return ScheduleKind::DualPipeV;
  throw ConfigError(
      fmt::format("unknown --schedule '{}' (gpipe | 1f1b | interleaved | zb-h1 | zb-v | dualpipev)", name));
}

std::string schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::Interleaved: return "interleaved";
    case ScheduleKind::ZeroBubbleH1: return "zb-h1";
    case ScheduleKind::ZeroBubbleV: return "zb-v";
    case ScheduleKind::DualPipeV: return "dualpipev";
  }
  return "";
}

Placement schedule_placement(ScheduleKind kind) {
  return kind == ScheduleKind::ZeroBubbleV || kind == ScheduleKind::DualPipeV ? Placement::V
                                                                              : Placement::Looped;
}

int chunks_per_rank(ScheduleKind kind, int vpp) {
  return schedule_placement(kind) == Placement::V && vpp == 1 ? 2 : vpp;
}

ScheduleKind chosen_schedule_kind(const std::string& name, int vpp) {
  if (!name.empty()) return parse_schedule_kind(name);
  return vpp > 1 ? ScheduleKind::Interleaved : ScheduleKind::OneFOneB;
}

ScheduleConfig chosen_schedule(const std::string& name, int pp, int microbatches, int vpp, int microbatch_group) {
  const ScheduleKind kind = chosen_schedule_kind(name, vpp);
  return {kind, pp, microbatches, chunks_per_rank(kind, vpp), microbatch_group};
}

std::vector<std::string> schedule_violations(const ScheduleConfig& c, const std::string& microbatches_named) {
  std::vector<std::string> v;
  const int p = c.pipeline_size, m = c.microbatches, vpp = c.virtual_stages;
  const std::string& named = microbatches_named;
  if (p < 1) v.push_back(fmt::format("--pp must be at least 1 (got {})", p));
  if (m < 1) v.push_back(fmt::format("{} must be at least 1", named));
  if (vpp < 1) v.push_back(fmt::format("--vpp must be at least 1 (got {})", vpp));
  if (c.microbatch_group < 0)
    v.push_back(fmt::format("--microbatch-group-size-per-virtual-pipeline-stage must be positive (got {})",
                            c.microbatch_group));
  // The ranks' lists hold a forward and a backward per (microbatch, chunk): a count far past any
  // run's would take minutes and gigabytes to generate and simulate before failing.
  const int64_t pairs = int64_t{std::max(p, 0)} * std::max(m, 0) * std::max(vpp, 0);
  if (pairs > kMaxSchedulePairs)
    v.push_back(fmt::format("--pp {} × {} × --vpp {} = {} (microbatch, chunk) pairs, past the bound of {}", p,
                            named, vpp, pairs, kMaxSchedulePairs));
  if (schedule_placement(c.kind) == Placement::V) {
    const std::string name = schedule_kind_name(c.kind);
    if (vpp != 2)
      v.push_back(fmt::format("--schedule {} holds two model chunks per rank (a V): --vpp must be 2 or left "
                              "out (got {})", name, vpp));
    if (p == 1) v.push_back(fmt::format("--schedule {} needs --pp 2 or more (got 1)", name));
    // DeepSeek's DualPipeV needs its steady phase: at least 2 · p microbatches.
    if (c.kind == ScheduleKind::DualPipeV && p >= 1 && m < 2 * p)
      v.push_back(fmt::format("--schedule dualpipev needs at least 2 × --pp = {} microbatches (got {})", 2 * p,
                              named));
    return v;
  }
  if (c.kind != ScheduleKind::Interleaved) {
    if (vpp > 1)
      v.push_back(fmt::format("--vpp {} needs --schedule interleaved ({} runs one model chunk per rank)", vpp,
                              schedule_kind_name(c.kind)));
    return v;
  }
  if (vpp == 1) v.push_back("--schedule interleaved needs --vpp 2 or more (got 1)");
  // Megatron asks p > 2 unless --overlap-p2p-comm: its batched p2p calls could pair two sends
  // between the same two ranks. Every message here has its own tag (p2p_tag), as with Megatron's
  // overlapped communication, so p = 2 is safe and only p > 1 is required.
  if (p == 1) v.push_back("--schedule interleaved needs --pp 2 or more (got 1)");
  if (p < 1 || m < 1 || c.microbatch_group < 0) return v;

  // Microbatch groups: each virtual stage runs g contiguous microbatches before the rank moves to
  // its next chunk (Megatron: "should range in [PP, M]"; a short final group would leave
  // dependency bubbles, so M mod g must be 0 or at least PP).
  const bool defaulted = c.microbatch_group == 0;
  const int g = defaulted ? p : c.microbatch_group;
  if (g < p) {
    v.push_back(fmt::format("--microbatch-group-size-per-virtual-pipeline-stage {} is below --pp {} "
                            "(interleaved: pp ≤ group ≤ microbatches)", g, p));
  } else if (g > m) {
    if (defaulted)
      v.push_back(fmt::format("{} is below --pp {}, the default microbatch group "
                              "(interleaved: pp ≤ group ≤ microbatches)", named, p));
    else
      v.push_back(fmt::format("--microbatch-group-size-per-virtual-pipeline-stage {} exceeds {} "
                              "(interleaved: pp ≤ group ≤ microbatches)", g, named));
  } else if (m % g != 0 && m % g < p) {
    v.push_back(fmt::format("{} leaves a final group of {} microbatches (the microbatches mod "
                            "--microbatch-group-size-per-virtual-pipeline-stage {}), fewer than --pp {} "
                            "(interleaved: the remainder must be 0 or at least pp)", named, m % g, g, p));
  }
  return v;
}

namespace {

Action fwd(int microbatch, int chunk) { return {ActionKind::Forward, microbatch, chunk, -1}; }
Action bwd(int microbatch, int chunk) { return {ActionKind::Backward, microbatch, chunk, -1}; }

RankSchedule gpipe(int m) {
  RankSchedule s;
  for (int i = 0; i < m; ++i) s.push_back(fwd(i, 0));
  for (int i = 0; i < m; ++i) s.push_back(bwd(i, 0));
  return s;
}

// Rank r runs p − r − 1 forwards ahead (clipped to m), so that the last rank starts backwards at
// once; then one forward and one backward in turn; then the backwards still owed.
RankSchedule one_f_one_b(int p, int m, int rank) {
  const int warmup = std::min(p - rank - 1, m);
  const int steady = m - warmup;
  RankSchedule s;
  for (int i = 0; i < warmup; ++i) s.push_back(fwd(i, 0));  // warm-up
  for (int i = 0; i < steady; ++i) {                              // steady 1F1B
    s.push_back(fwd(warmup + i, 0));
    s.push_back(bwd(i, 0));
  }
  for (int i = steady; i < m; ++i) s.push_back(bwd(i, 0));  // cool-down
  return s;
}

// Megatron's schedule table: the order of (microbatch, chunk) forwards on every rank. Microbatches
// go in groups of g; within a group every chunk runs the whole group before the next chunk, and
// the last group takes whatever microbatches are left. E.g. m 5, v 2, g 3:
//   microbatch 0 1 2 0 1 2 3 4 3 4
//   chunk      0 0 0 1 1 1 0 0 1 1
std::vector<std::pair<int, int>> interleaved_table(int m, int v, int g) {
  std::vector<std::pair<int, int>> table;
  for (int first = 0; first < m; first += g) {
    const int end = first + g >= m ? m : first + g;
    for (int chunk = 0; chunk < v; ++chunk)
      for (int mb = first; mb < end; ++mb) table.emplace_back(mb, chunk);
  }
  return table;
}

// The k-th forward is table[k]; the k-th backward runs the mirrored chunk v − 1 − table[k].chunk
// on the same microbatch (Megatron pops each chunk's oldest saved input, and a chunk's
// microbatches appear in the table in increasing order). Warm-up: 2 (p − r − 1) forwards for the
// rank's distance from the end, plus (v − 1) g so that chunk v − 1 of the first group has started,
// clipped to the v · m forwards there are.
RankSchedule interleaved(int p, int m, int v, int g, int rank) {
  const std::vector<std::pair<int, int>> table = interleaved_table(m, v, g);
  const int total = m * v;
  const int warmup = std::min(2 * (p - rank - 1) + (v - 1) * g, total);
  const int steady = total - warmup;
  auto backward_at = [&](int k) { return bwd(table[k].first, v - 1 - table[k].second); };
  RankSchedule s;
  for (int k = 0; k < warmup; ++k) s.push_back(fwd(table[k].first, table[k].second));  // warm-up
  for (int k = 0; k < steady; ++k) {                                                      // steady
    s.push_back(fwd(table[warmup + k].first, table[warmup + k].second));
    s.push_back(backward_at(k));
  }
  for (int k = steady; k < total; ++k) s.push_back(backward_at(k));  // cool-down
  return s;
}

void check_valid(const ScheduleConfig& config) {
  // The config came from a caller that checked it with its own flags' names: this is the backstop.
  std::vector<std::string> v = schedule_violations(config, fmt::format("{} microbatches", config.microbatches));
  if (v.empty()) return;
  std::string msg = "invalid pipeline schedule: " + v[0];
  for (size_t i = 1; i < v.size(); ++i) msg += "; " + v[i];
  throw ConfigError(msg);
}

}  // namespace

std::vector<RankSchedule> generate_schedule(const ScheduleConfig& config) {
  check_valid(config);
  const int p = config.pipeline_size, m = config.microbatches;
  const int g = config.microbatch_group == 0 ? p : config.microbatch_group;
  std::vector<RankSchedule> ranks(p);
  for (int r = 0; r < p; ++r) {
    switch (config.kind) {
      case ScheduleKind::GPipe: ranks[r] = gpipe(m); break;
      case ScheduleKind::OneFOneB: ranks[r] = one_f_one_b(p, m, r); break;
      case ScheduleKind::Interleaved: ranks[r] = interleaved(p, m, config.virtual_stages, g, r); break;
      case ScheduleKind::ZeroBubbleH1: ranks[r] = zero_bubble_h1(p, m, r); break;
      case ScheduleKind::ZeroBubbleV: ranks[r] = zero_bubble_v(p, m, r); break;
      case ScheduleKind::DualPipeV: ranks[r] = dualpipe_v(p, m, r); break;
    }
  }
  return ranks;
}

int model_chunk_index(int rank, int chunk, int pipeline_size, Placement placement) {
  if (placement == Placement::V) return chunk == 0 ? rank : 2 * pipeline_size - 1 - rank;
  return chunk * pipeline_size + rank;
}

int model_chunk_index(int rank, int chunk, const ScheduleConfig& config) {
  return model_chunk_index(rank, chunk, config.pipeline_size, schedule_placement(config.kind));
}

int model_chunk_rank(int model_chunk, int pipeline_size, Placement placement) {
  if (placement == Placement::V && model_chunk >= pipeline_size) return 2 * pipeline_size - 1 - model_chunk;
  return model_chunk % pipeline_size;
}

int p2p_tag(const Action& a, int rank, const ScheduleConfig& config) {
  const int k = model_chunk_index(rank, a.chunk, config);
  const int boundaries = config.pipeline_size * config.virtual_stages - 1;
  int boundary = 0, direction = 0;
  switch (a.kind) {
    case ActionKind::SendForward: boundary = k; break;
    case ActionKind::RecvForward: boundary = k - 1; break;
    case ActionKind::SendBackward: boundary = k - 1; direction = 1; break;
    case ActionKind::RecvBackward: boundary = k; direction = 1; break;
    default: fail("p2p_tag: action {} is not a send or receive", static_cast<int>(a.kind));
  }
  return 2 * (a.microbatch * boundaries + boundary) + direction;
}

// A chunk's neighbours are the ranks of the model chunks before and after it. Looped, those are
// the ranks beside it in the ring (with VPP the last rank's chunk c feeds rank 0's chunk c + 1);
// in a V, the last rank's chunk 0 feeds its own chunk 1: a message to itself, through the same
// point-to-point calls.
std::vector<RankSchedule> lower(const std::vector<RankSchedule>& compute, const ScheduleConfig& config) {
  const int p = config.pipeline_size;
  const Placement placement = schedule_placement(config.kind);
  const int last = p * config.virtual_stages - 1;  // the last model chunk
  TESSEL_CHECK(static_cast<int>(compute.size()) == p, "lower: {} rank schedules for --pp {}", compute.size(), p);
  std::vector<RankSchedule> lowered(p);
  for (int r = 0; r < p; ++r) {
    for (const Action& a : compute[r]) {
      const int k = model_chunk_index(r, a.chunk, config);
      const int next = k < last ? model_chunk_rank(k + 1, p, placement) : -1;
      const int prev = k > 0 ? model_chunk_rank(k - 1, p, placement) : -1;
      auto comm = [&](ActionKind kind, int peer) { lowered[r].push_back({kind, a.microbatch, a.chunk, peer}); };
      switch (a.kind) {
        case ActionKind::Forward:
          if (k > 0) comm(ActionKind::RecvForward, prev);
          lowered[r].push_back(a);
          if (k < last) comm(ActionKind::SendForward, next);
          break;
        case ActionKind::Backward:
        case ActionKind::BackwardInput:
          if (k < last) comm(ActionKind::RecvBackward, next);
          lowered[r].push_back(a);
          if (k > 0) comm(ActionKind::SendBackward, prev);
          break;
        case ActionKind::BackwardWeight:  // local: needs only what its BackwardInput left
          lowered[r].push_back(a);
          break;
        default: fail("lower: rank {} already has a send or receive; pass compute actions only", r);
      }
    }
  }
  return lowered;
}

std::vector<RankSchedule> forward_only_schedule(std::vector<RankSchedule> compute) {
  for (RankSchedule& s : compute)
    std::erase_if(s, [](const Action& a) { return a.kind != ActionKind::Forward; });
  return compute;
}

}  // namespace tessel
