// Pipeline schedules as data (DESIGN invariant 3): for every pipeline rank, an ordered list of
// actions. One generator per schedule (GPipe, 1F1B, interleaved 1F1B) emits the compute actions;
// lower() inserts the sends and receives; the same lists drive the executor (pipeline/executor),
// the simulator behind `tessel schedule`, and the planner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel {

enum class ActionKind : uint8_t {
  Forward,         // F: forward of (microbatch, chunk)
  Backward,        // B: backward of (microbatch, chunk), input and weight gradients together
  BackwardInput,   // I: input gradient only (zero-bubble schedules split B into I + W)
  BackwardWeight,  // W: weight gradient only
  SendForward,     // send F's output activation to the next stage
  RecvForward,     // receive the input activation from the previous stage
  SendBackward,    // send B's input gradient to the previous stage
  RecvBackward,    // receive the output gradient from the next stage
};

struct Action {
  ActionKind kind;
  int microbatch = 0;
  int chunk = 0;  // virtual stage index on this rank, 0..v-1 (model chunk = chunk · p + rank)
  int peer = -1;  // pipeline rank to talk to, for sends and receives
};

enum class ScheduleKind : uint8_t { GPipe, OneFOneB, Interleaved };
ScheduleKind parse_schedule_kind(const std::string& name);  // "gpipe" | "1f1b" | "interleaved"
std::string schedule_kind_name(ScheduleKind kind);

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int pipeline_size = 1;   // p
  int microbatches = 1;    // m
  int virtual_stages = 1;  // v (chunks per rank), > 1 only for Interleaved
  int microbatch_group = 0;  // --microbatch-group-size-per-virtual-pipeline-stage; 0 means p
};

using RankSchedule = std::vector<Action>;

// Every rule the config breaks (p ≥ 1, m ≥ 1, interleaved: v ≥ 2, p ≥ 2, p ≤ g ≤ m, m mod g == 0
// or ≥ p, as Megatron), one message each naming the flags; empty when valid.
std::vector<std::string> schedule_violations(const ScheduleConfig& config);

// Compute actions only (F and B), per pipeline rank. Throws tessel::Error listing violations.
std::vector<RankSchedule> generate_schedule(const ScheduleConfig& config);

// The forwards alone of a schedule's compute lists, in their order: Megatron's forward_only
// (evaluation) pass.
std::vector<RankSchedule> forward_only_schedule(std::vector<RankSchedule> compute);

// Adds the sends and receives every F and B needs: a receive right before the compute that
// consumes it, a send right after the compute that produces it.
std::vector<RankSchedule> lower(const std::vector<RankSchedule>& compute, const ScheduleConfig& config);

// Megatron's VPP assignment: local chunk c on pipeline rank r holds model chunk c · p + r, so a
// microbatch visits ranks 0, 1, …, p−1 with chunk 0, then again with chunk 1, and so on.
int model_chunk_index(int rank, int chunk, int pipeline_size);

// The point-to-point tag of a send or receive action on `rank`. Every message of an iteration has
// its own tag, so a send matches exactly one receive on its peer whatever the posting order:
// tag = 2 · (microbatch · (K − 1) + b) + d, where K = p · v model chunks, b is the boundary the
// message crosses (between model chunks b and b + 1) and d = 0 for an activation going forward,
// 1 for a gradient going back. Tags run from 0 to 2 · m · (K − 1) − 1.
int p2p_tag(const Action& action, int rank, const ScheduleConfig& config);

}  // namespace tessel
