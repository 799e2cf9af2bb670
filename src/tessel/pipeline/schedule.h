// Pipeline schedules as data (DESIGN invariant 3): for every pipeline rank, an ordered list of
// actions. One generator per schedule (GPipe, 1F1B, interleaved 1F1B, and the zero-bubble ZB-H1,
// ZB-V and DualPipeV) emits the compute actions; lower() inserts the sends and receives; the
// same lists drive the executor (pipeline/executor), the simulator behind `tessel schedule`, and
// the planner.
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

enum class ScheduleKind : uint8_t { GPipe, OneFOneB, Interleaved, ZeroBubbleH1, ZeroBubbleV, DualPipeV };
// "gpipe" | "1f1b" | "interleaved" | "zb-h1" | "zb-v" | "dualpipev"
ScheduleKind parse_schedule_kind(const std::string& name);
std::string schedule_kind_name(ScheduleKind kind);

// Where the p · v model chunks live. Looped (Megatron's interleaving): model chunk k on rank
// k mod p as its chunk k / p, so a microbatch loops over the ranks v times. V (ZB-V and
// DualPipeV, v = 2): rank r holds model chunks r (its chunk 0) and 2p − 1 − r (its chunk 1), so a
// microbatch goes down the ranks and back up, and the first rank holds both the embedding and
// the head.
enum class Placement : uint8_t { Looped, V };
Placement schedule_placement(ScheduleKind kind);
// Model chunks per rank for --vpp `vpp`: as given, but a V schedule's two when left at 1.
int chunks_per_rank(ScheduleKind kind, int vpp);

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int pipeline_size = 1;   // p
  int microbatches = 1;    // m
  int virtual_stages = 1;  // v (chunks per rank): > 1 for Interleaved, 2 for ZB-V and DualPipeV
  int microbatch_group = 0;  // --microbatch-group-size-per-virtual-pipeline-stage; 0 means p
};

// The schedule --schedule `name` names, or when empty Megatron's choice: interleaved 1F1B with
// --vpp > 1, else 1F1B. Throws tessel::Error for an unknown name.
ScheduleKind chosen_schedule_kind(const std::string& name, int vpp);
// That schedule on p ranks for m microbatches, --vpp and the interleaved group as given.
ScheduleConfig chosen_schedule(const std::string& name, int pp, int microbatches, int vpp, int microbatch_group);

using RankSchedule = std::vector<Action>;

// Every rule the config breaks (p ≥ 1, m ≥ 1, p·m·v ≤ kMaxSchedulePairs; interleaved: v ≥ 2,
// p ≥ 2, p ≤ g ≤ m, m mod g == 0 or ≥ p, as Megatron; ZB-V and DualPipeV: v = 2, p ≥ 2;
// DualPipeV: m ≥ 2p, as DeepSeek's), one message each naming the flags; empty when valid. The
// microbatch count comes from the caller's flags (`tessel schedule`'s --microbatches, `train`'s
// batch flags), so the caller names it with its value: `microbatches_named` stands for m in the
// messages ("--microbatches 6", "3 microbatches of --global-batch-size 12 / ...").
inline constexpr int64_t kMaxSchedulePairs = int64_t{1} << 22;
std::vector<std::string> schedule_violations(const ScheduleConfig& config, const std::string& microbatches_named);

// Compute actions only (F and B, or I and W where the schedule splits a backward), per pipeline
// rank. Throws tessel::Error listing violations.
std::vector<RankSchedule> generate_schedule(const ScheduleConfig& config);

// The forwards alone of a schedule's compute lists, in their order: Megatron's forward_only
// (evaluation) pass.
std::vector<RankSchedule> forward_only_schedule(std::vector<RankSchedule> compute);

// Adds the sends and receives every F and B needs: a receive right before the compute that
// consumes it, a send right after the compute that produces it.
std::vector<RankSchedule> lower(const std::vector<RankSchedule>& compute, const ScheduleConfig& config);

// The model chunk that local chunk `chunk` of pipeline rank `rank` holds, by the schedule's
// placement: c · p + r looped (Megatron's VPP), r or 2p − 1 − r in a V.
int model_chunk_index(int rank, int chunk, int pipeline_size, Placement placement);
int model_chunk_index(int rank, int chunk, const ScheduleConfig& config);
// The pipeline rank that holds model chunk k.
int model_chunk_rank(int model_chunk, int pipeline_size, Placement placement);

// The point-to-point tag of a send or receive action on `rank`. Every message of an iteration has
// its own tag, so a send matches exactly one receive on its peer whatever the posting order:
// tag = 2 · (microbatch · (K − 1) + b) + d, where K = p · v model chunks, b is the boundary the
// message crosses (between model chunks b and b + 1) and d = 0 for an activation going forward,
// 1 for a gradient going back. Tags run from 0 to 2 · m · (K − 1) − 1.
int p2p_tag(const Action& action, int rank, const ScheduleConfig& config);

}  // namespace tessel
