#include "tessel/pipeline/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "tessel/core/error.h"

namespace tessel {

const char* action_kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::Forward: return "F";
    case ActionKind::Backward: return "B";
    case ActionKind::BackwardInput: return "I";
    case ActionKind::BackwardWeight: return "W";
    case ActionKind::SendForward: return "sendF";
    case ActionKind::RecvForward: return "recvF";
    case ActionKind::SendBackward: return "sendB";
    case ActionKind::RecvBackward: return "recvB";
  }
  return "?";
}

std::string action_label(const Action& a, int virtual_stages) {
  const char* name = action_kind_name(a.kind);
  if (virtual_stages > 1) return fmt::format("{}{}.{}", name, a.microbatch + 1, a.chunk);
  return fmt::format("{}{}", name, a.microbatch + 1);
}

namespace {

bool is_compute(ActionKind kind) {
  return kind == ActionKind::Forward || kind == ActionKind::Backward || kind == ActionKind::BackwardInput ||
         kind == ActionKind::BackwardWeight;
}

double cost_of(int rank, const Action& a, const SimulationCosts& c) {
  if (c.action_cost) return c.action_cost(rank, a);
  switch (a.kind) {
    case ActionKind::Forward: return c.forward;
    case ActionKind::Backward: return c.backward;
    case ActionKind::BackwardInput: return c.backward_input;
    case ActionKind::BackwardWeight: return c.backward_weight;
    default: return 0;
  }
}

// What one rank has done so far: (kind, microbatch, chunk) of every compute and completed receive.
using Done = std::set<std::tuple<ActionKind, int, int>>;

struct Message {
  int from = 0;
  double ready = 0;  // when the receiver can have it
};

struct RankState {
  size_t next = 0;  // index of the next action in the rank's list
  double clock = 0;
  int in_flight = 0;
  Done done;
};

bool has(const Done& done, ActionKind kind, const Action& a) { return done.count({kind, a.microbatch, a.chunk}) > 0; }

// Why `a` can never run correctly on `rank` at this point of its list (no waiting would help): the
// data it consumes was never received or produced there, or it already ran. Empty when it may run.
std::string rule_broken_by(const Action& a, int rank, const ScheduleConfig& config, const Done& done) {
  const int k = model_chunk_index(rank, a.chunk, config);
  const int last = config.pipeline_size * config.virtual_stages - 1;
  auto complain = [&](const char* what) {
    return fmt::format("rank {} runs {} {}", rank, action_label(a, config.virtual_stages), what);
  };
  if (is_compute(a.kind) && has(done, a.kind, a)) return complain("twice");
  switch (a.kind) {
    case ActionKind::Forward:
      if (k > 0 && !has(done, ActionKind::RecvForward, a)) return complain("before receiving its input");
      break;
    case ActionKind::Backward:
    case ActionKind::BackwardInput:
      if (!has(done, ActionKind::Forward, a)) return complain("before its forward");
      if (k < last && !has(done, ActionKind::RecvBackward, a)) return complain("before receiving its output gradient");
      break;
    case ActionKind::BackwardWeight:
      if (!has(done, ActionKind::BackwardInput, a)) return complain("before its input gradient (I)");
      break;
    case ActionKind::SendForward:
      if (!has(done, ActionKind::Forward, a)) return complain("before its forward");
      break;
    case ActionKind::SendBackward:
      if (!has(done, ActionKind::Backward, a) && !has(done, ActionKind::BackwardInput, a))
        return complain("before its backward");
      break;
    case ActionKind::RecvForward:
    case ActionKind::RecvBackward:
      if (has(done, a.kind, a)) return complain("twice");
      break;
  }
  return "";
}

void fill_idle(RankTimeline& t, double makespan) {
  if (!t.compute.empty()) {
    t.first_start = t.compute.front().start;
    t.last_end = t.compute.back().end;
  }
  double at = 0;
  for (const TimedAction& ta : t.compute) {
    if (ta.start > at) t.idle.push_back({at, ta.start});
    at = std::max(at, ta.end);
    t.busy += ta.end - ta.start;
  }
  if (makespan > at) t.idle.push_back({at, makespan});
  t.idle_time = makespan - t.busy - t.blocked;
}

}  // namespace

double Simulation::longest_span() const {
  double span = 0;
  for (const RankTimeline& t : ranks) span = std::max(span, t.span());
  return span;
}

double Simulation::bubble() const {
  double idle = 0;
  for (const RankTimeline& t : ranks) idle += t.idle_time;
  return makespan > 0 ? idle / (static_cast<double>(ranks.size()) * makespan) : 0;
}

double Simulation::back_to_back_bubble() const {
  double idle = 0;
  for (const RankTimeline& t : ranks) idle = std::max(idle, t.span_idle());
  const double span = longest_span();
  return span > 0 ? idle / span : 0;
}

PublishedBubble published_bubble(const ScheduleConfig& c, const SimulationCosts& costs) {
  const int p = c.pipeline_size, m = c.microbatches, v = c.virtual_stages;
  // The zero-bubble papers count an iteration's idle with iterations back to back.
  const bool back_to_back = c.kind != ScheduleKind::GPipe && c.kind != ScheduleKind::OneFOneB &&
                            c.kind != ScheduleKind::Interleaved;
  // form = (p − 1)/(n + p − 1), n written out as `n_text`
  auto fraction = [&](const std::string& form, const std::string& n_text, int n) {
    const double value = (p - 1.0) / (n + p - 1.0);
    return PublishedBubble{fmt::format("{} = ({} − 1)/({} + {} − 1) = {:.4g}", form, p, n_text, p, value), value,
                           back_to_back};
  };
  auto none = [&](const std::string& why) { return PublishedBubble{why, {}, back_to_back}; };
  const bool equal = costs.forward == costs.backward_input && costs.backward_input == costs.backward_weight;
  const std::string unequal = "(the published value assumes T_F = T_I = T_W)";
  switch (c.kind) {
    case ScheduleKind::GPipe:
    case ScheduleKind::OneFOneB: return fraction("(p − 1)/(m + p − 1)", std::to_string(m), m);
    case ScheduleKind::Interleaved:
      return fraction("(p − 1)/(v·m + p − 1)", fmt::format("{}·{}", v, m), v * m);
    case ScheduleKind::ZeroBubbleH1:
      if (!equal) return none("(p − 1)/(3m + p − 1) " + unequal);
      if (m < p) return none("(p − 1)/(3m + p − 1) once m ≥ p");
      return fraction("(p − 1)/(3m + p − 1)", fmt::format("3·{}", m), 3 * m);
    case ScheduleKind::ZeroBubbleV:
      if (!equal) return none("0 " + unequal);
      if (m < 2 * p) return none("0 once m ≥ 2p");
      return {"0 (m ≥ 2p)", 0.0, back_to_back};
    case ScheduleKind::DualPipeV:
      if (!equal) return none("(p − 1)/(6m + p − 1) " + unequal);
      return fraction("(p − 1)/(6m + p − 1)", fmt::format("6·{}", m), 6 * m);
  }
  return none("");
}

// Each pass lets every rank run as far as it can; a receive whose send has not happened yet stops
// its rank until a later pass. Times are dataflow times (a rank's clock only ever waits for its own
// previous action and for message arrivals), so the order in which ranks are visited does not
// change them. A pass in which no rank moves while some are unfinished is a deadlock.
Simulation simulate(const std::vector<RankSchedule>& lowered, const ScheduleConfig& config,
                    const SimulationCosts& costs) {
  const int p = config.pipeline_size;
  TESSEL_CHECK(static_cast<int>(lowered.size()) == p, "simulate: {} rank schedules for --pp {}", lowered.size(), p);
  Simulation sim;
  sim.ranks.resize(p);
  std::vector<RankState> state(p);
  std::map<std::pair<int, int>, Message> in_transit;  // (receiving rank, tag) → message

  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < p; ++r) {
      RankState& s = state[r];
      RankTimeline& line = sim.ranks[r];
      while (s.next < lowered[r].size()) {
        const Action& a = lowered[r][s.next];
        if (a.kind == ActionKind::RecvForward || a.kind == ActionKind::RecvBackward) {
          auto it = in_transit.find({r, p2p_tag(a, r, config)});
          if (it == in_transit.end()) break;  // its send has not run yet: wait
          if (it->second.from != a.peer) {
            sim.error = fmt::format("rank {} receives {} from rank {}, but rank {} sent it", r,
                                    action_label(a, config.virtual_stages), a.peer, it->second.from);
            return sim;
          }
        }
        std::string problem = rule_broken_by(a, r, config, s.done);
        if (!problem.empty()) {
          sim.error = problem;
          return sim;
        }
        switch (a.kind) {
          case ActionKind::RecvForward:
          case ActionKind::RecvBackward: {
            auto it = in_transit.find({r, p2p_tag(a, r, config)});
            s.clock = std::max(s.clock, it->second.ready) + cost_of(r, a, costs);
            line.blocked += cost_of(r, a, costs);
            in_transit.erase(it);
            break;
          }
          case ActionKind::SendForward:
          case ActionKind::SendBackward: {
            if (a.peer < 0 || a.peer >= p) {
              sim.error = fmt::format("rank {} sends {} to rank {}, outside --pp {}", r,
                                      action_label(a, config.virtual_stages), a.peer, p);
              return sim;
            }
            const int tag = p2p_tag(a, r, config);
            if (in_transit.count({a.peer, tag}) > 0) {
              sim.error = fmt::format("rank {} sends {} (tag {}) to rank {} twice", r,
                                      action_label(a, config.virtual_stages), tag, a.peer);
              return sim;
            }
            s.clock += cost_of(r, a, costs);
            line.blocked += cost_of(r, a, costs);
            in_transit[{a.peer, tag}] = {r, s.clock + costs.communication};
            break;
          }
          default: {
            const double start = s.clock;
            s.clock += cost_of(r, a, costs);
            line.compute.push_back({a, start, s.clock});
            if (a.kind == ActionKind::Forward) s.in_flight++;
            if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardWeight) s.in_flight--;
            line.peak_in_flight = std::max(line.peak_in_flight, s.in_flight);
          }
        }
        s.done.insert({a.kind, a.microbatch, a.chunk});
        s.next++;
        moved = true;
      }
    }
  }

  std::vector<std::string> stuck;
  for (int r = 0; r < p; ++r) {
    if (state[r].next == lowered[r].size()) continue;
    const Action& a = lowered[r][state[r].next];
    stuck.push_back(fmt::format("rank {} waits at {} from rank {} (action {} of {})", r,
                                action_label(a, config.virtual_stages), a.peer, state[r].next + 1,
                                lowered[r].size()));
  }
  if (!stuck.empty()) {
    sim.error = "deadlock: " + stuck[0];
    for (size_t i = 1; i < stuck.size(); ++i) sim.error += "; " + stuck[i];
    return sim;
  }
  if (!in_transit.empty()) {
    const auto& [key, msg] = *in_transit.begin();
    sim.error = fmt::format("{} sends are never received (e.g. rank {} to rank {}, tag {})", in_transit.size(),
                            msg.from, key.first, key.second);
    return sim;
  }
  for (const RankState& s : state) sim.makespan = std::max(sim.makespan, s.clock);
  for (RankTimeline& line : sim.ranks) fill_idle(line, sim.makespan);
  return sim;
}

}  // namespace tessel
