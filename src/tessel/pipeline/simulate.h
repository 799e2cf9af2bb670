// Replays lowered pipeline schedules with costs: each rank runs its list in order, a receive waits
// for its matching send (plus the communication cost), sends never block. Gives every rank's time
// line, the makespan, each rank's idle time, the bubble (their share of the iteration) and each
// rank's peak number of microbatches in flight; finds deadlocks and broken schedules instead of
// hanging. Behind `tessel schedule` and the planner.
#pragma once

#include <optional>
#include <functional>
#include <string>
#include <vector>

#include "tessel/pipeline/schedule.h"

namespace tessel {

// Time of one action of one chunk (a chunk is 1/v of a rank's layers, so with VPP each costs 1/v
// of a non-interleaved stage's; the bubble fractions are ratios and do not depend on the unit).
struct SimulationCosts {
  double forward = 1;
  double backward = 2;         // B: input and weight gradients together
  double backward_input = 1;   // I
  double backward_weight = 1;  // W
  double communication = 0;    // from a send until its receive can complete
  // Optional, for costs that differ by rank and action (the planner: uneven stages, a first
  // stage's embedding, a last stage's head, links inside or between nodes). When set it gives
  // the time every action keeps its rank busy — a compute, or a blocking send or receive — and
  // replaces the constants above, except `communication`, still added to each message's flight.
  std::function<double(int rank, const Action& action)> action_cost;
};

struct TimedAction {
  Action action;
  double start = 0;
  double end = 0;
};

struct Interval {
  double start = 0;
  double end = 0;
};

struct RankTimeline {
  std::vector<TimedAction> compute;  // the rank's F / B / I / W in the order it ran them
  std::vector<Interval> idle;        // the gaps in [0, makespan) with no compute (blocking sends in them)
  double busy = 0;                   // useful time: the sum of compute costs (the ideal time)
  double blocked = 0;                // in blocking sends and receives: their own costs, not the waits
  double idle_time = 0;              // makespan − busy − blocked: the rank's part of the bubble
  double first_start = 0, last_end = 0;  // its first compute's start, its last one's end
  // The most (microbatch, chunk) forwards whose backward (or weight gradient, when split) had not
  // yet run: the activations the rank holds at its fullest. With v = 1, microbatches.
  int peak_in_flight = 0;
  // Idle time / the iteration (makespan): the share of the iteration the rank waits.
  double idle_share() const { return busy + blocked + idle_time > 0 ? idle_time / (busy + blocked + idle_time) : 0; }
  // From the rank's first compute to its last, and how much of that it waits.
  double span() const { return last_end - first_start; }
  double span_idle() const { return span() - busy; }
};

struct Simulation {
  std::vector<RankTimeline> ranks;
  double makespan = 0;
  // Empty when every rank ran its list to the end. Otherwise why not: "deadlock: ..." naming each
  // stuck rank and the receive it waits at, or the first broken rule (a compute without its
  // input, a send nobody receives, an action run twice).
  std::string error;
  bool ok() const { return error.empty(); }
  // The bubble, as the seed counts it in its T1…T5 table: the ranks' idle share of the iteration,
  // idle time over all ranks ÷ (ranks × makespan). GPipe and 1F1B: (p − 1)/(m + p − 1) for any
  // T_F, T_B; interleaved: (p − 1)/(v·m + p − 1).
  double bubble() const;
  // With iterations back to back (optimizer post-validation) a rank's warm-up and cool-down overlap
  // the neighbouring iterations' (the ranks' spans stack like a parallelogram's rows), and an
  // iteration costs the longest span: the most a rank idles inside its span ÷ that span is what the
  // zero-bubble papers publish (ZB-V with m ≥ 2p and T_F = T_I = T_W: 0). Equal to bubble() for
  // whole GPipe and 1F1B iterations; 0 for a forward-only pass, whose ranks idle only outside
  // their spans.
  double back_to_back_bubble() const;
  double longest_span() const;
};

// `lowered`: one list per pipeline rank, as lower() makes them (compute lists alone have no
// receives, so a rank would run a chunk before its input exists: that is reported as an error).
Simulation simulate(const std::vector<RankSchedule>& lowered, const ScheduleConfig& config,
                    const SimulationCosts& costs = {});

// The published bubble of a schedule where one holds for these costs, and which measure it is:
// bubble() for GPipe and 1F1B, (p − 1)/(m + p − 1), and interleaved, (p − 1)/(v·m + p − 1), for
// any T_F, T_B; back_to_back_bubble() for the zero-bubble schedules with T_F = T_I = T_W: ZB-H1
// (p − 1)/(3m + p − 1) once m ≥ p (its idle time a third of 1F1B's 3(p − 1)), ZB-V 0 once m ≥ 2p,
// and DualPipeV (p − 1)/(6m + p − 1) (DeepSeek's idle time (PP − 1)(F&B + B − 3W) with
// F&B = F + B + W: its pairs run one after the other here).
struct PublishedBubble {
  std::string text;             // the formula with the numbers in, or why none applies
  std::optional<double> value;  // empty when none applies
  bool back_to_back = false;    // of back_to_back_bubble(), not bubble()
};
PublishedBubble published_bubble(const ScheduleConfig& config, const SimulationCosts& costs);

// "F", "B", "I", "W", "sendF", "recvF", "sendB", "recvB".
const char* action_kind_name(ActionKind kind);
// "F3", "B1", or with VPP "F3.1" (microbatch 3, chunk 1): microbatches counted from 1 as the seed
// counts them, chunks from 0 as Megatron does. Sends and receives: "sendF3", "recvB3.1", ….
std::string action_label(const Action& action, int virtual_stages);

}  // namespace tessel
