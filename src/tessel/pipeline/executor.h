// Runs one pipeline rank's lowered schedule (pipeline/schedule.h) for one iteration: forwards and
// backwards of its model chunks, with the activations and their gradients moving between
// neighbouring stages by non-blocking point-to-point messages. Receives are posted when the
// schedule reaches them and waited for only by the compute that consumes them; sends never wait,
// so a schedule without a dependency cycle never deadlocks.
//
// Each (chunk, microbatch) in flight holds a slot: its activations and its message buffers, sized
// once and reused: a slot is free again once its backward is done and its output has left; an
// input gradient still on its way to the previous stage then waits aside in its own buffer, so
// that a slow receiver holds back one (N_l, C) buffer rather than a slot of activations.
//
// Backward runs whole (B) or in halves (I then W, as zero-bubble schedules place them): I computes
// the input gradient, which SendBackward can ship at once; W, any time later, the weight
// gradients from what I saved in the slot's activations. The slot is free after both.
//
// In the V placement the last rank's chunk 0 feeds its own chunk 1: that message goes to itself
// through the same point-to-point calls.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/model/transformer.h"
#include "tessel/pipeline/schedule.h"

namespace tessel {

class PipelineExecutor {
 public:
  // Writes microbatch mb's inputs, those the forward reads, by name (model/microbatch_inputs.h;
  // the caller brings them from the host: train/microbatches.h).
  using FillFn = std::function<void(int mb, const std::vector<InputBuffer>& inputs)>;

  // `chunks`: this rank's model chunks in its chunk order (chunk c is model chunk c·p + rank);
  // `schedule` is what the action lists were generated from (their tags and peers).
  // Each slot holds the inputs each chunk declares for a microbatch of `microbatch`'s shape.
  PipelineExecutor(const Kernels& k, std::vector<TransformerChunk*> chunks, Comm& pp,
                   const ScheduleConfig& schedule, const MicrobatchShape& microbatch);

  struct Stats {
    double seconds = 0;       // the whole iteration on this rank
    int peak_in_flight = 0;   // microbatches forwarded whose backward (W included) is not done, at most
    // Saved activations at their fullest: the slots in use (each its one allocation and the MoE
    // buffers that grow with routing) and the chunks' shared recompute buffers.
    int64_t peak_activation_bytes = 0;
    // Compute time and count by action kind, indexed by ActionKind (F, B, I, W): the per-action
    // costs that set a schedule's bubble (Qi et al.'s T_F, T_B, T_W).
    std::array<double, 4> compute_seconds{};
    std::array<int, 4> compute_count{};
    // Each compute action as it ran, in seconds since `started` (tessel train
    // --pipeline-timeline draws them).
    struct TimedAction {
      ActionKind kind;
      int model_chunk, microbatch;  // the model chunk (virtual stage), not the rank's chunk index
      double start, end;
    };
    std::chrono::system_clock::time_point started;  // a clock the ranks on other hosts share
    std::vector<TimedAction> timeline;
  };
  static_assert(static_cast<int>(ActionKind::Forward) == 0 && static_cast<int>(ActionKind::Backward) == 1 &&
                    static_cast<int>(ActionKind::BackwardInput) == 2 && static_cast<int>(ActionKind::BackwardWeight) == 3,
                "Stats' per-kind arrays are indexed F, B, I, W");

  // Runs `actions` for `microbatches` microbatches. Before the first backward (B or I) of the last
  // microbatch `arm` is called, and that microbatch's backwards (B, I and W) report finished
  // gradients to `grad_ready` (data parallelism's hook): so on every chunk the last microbatch's
  // I and W must come after the other microbatches' (checked). Microbatch m's token losses weigh
  // grad_scales[m] in the gradient (train/loss_scales.h). Returns Σ token losses computed on this
  // rank.
  double run(const RankSchedule& actions, int microbatches, const FillFn& fill,
             const std::vector<float>& grad_scales,
             const std::function<void()>& arm, const std::function<void(int)>& grad_ready);
  // Forwards only (evaluation): `actions` holds no backward (forward_only_schedule); a slot is
  // free again once its output has left. Returns Σ token losses computed on this rank.
  double run_forward(const RankSchedule& actions, int microbatches, const FillFn& fill);
  const Stats& stats() const { return stats_; }
  // Called before each forward and backward (B, I or W) with whether its microbatch is the
  // iteration's last (fully sharded data parallelism frees its units and reduces its gradients
  // then, when it keeps them over the microbatches); evaluation's forwards count as last.
  void set_before_compute(std::function<void(bool last_microbatch)> hook) { before_compute_ = std::move(hook); }

  // What each slot of model chunk `model_chunk` (of `model_chunks`) holds besides its activations,
  // as the executor allocates it: the chunk's microbatch inputs, and its input and its gradient
  // (after the first model chunk) and its output's gradient (before the last), `rows` × `hidden`
  // each. `leaving_bytes`: the input gradient's, which may still be leaving when the slot is reused.
  struct SlotTensors {
    std::vector<DeclaredTensor> tensors;
    int64_t leaving_bytes = 0;
  };
  static SlotTensors slot_tensors(const std::vector<MicrobatchInput>& inputs, int64_t rows, int64_t hidden,
                                  int model_chunk, int model_chunks);

 private:
  struct Slot {
    ChunkActivations acts;
    std::vector<Tensor> inputs;  // the chunk's microbatch inputs, as it lists them
    Tensor input, d_output, d_input;  // (N_l, C) each, where the chunk has a neighbour
    Request recv, send_forward, send_backward;
    int microbatch = -1;  // -1: free
    bool input_grad_done = false;  // B or I has run
    bool weights_done = false;     // B or W has run
    bool input_grad_sent = false;  // SendBackward has been posted
  };
  // An input gradient whose send has been posted but not yet taken by the previous stage.
  struct LeavingGradient {
    Tensor buffer;  // (N_l, C)
    Request send;
  };
  Slot& slot(int chunk, int microbatch);  // the slot of (chunk, microbatch), taken if needed
  // Lists s's buffers besides its activations (slot_tensors); returns the input gradient's bytes.
  static int64_t list_buffers(Slot& s, TensorList& list, const std::vector<MicrobatchInput>& inputs,
                              int64_t rows, int64_t hidden, int model_chunk, int model_chunks);
  // Hands the free slot's input gradient, still being sent, to leaving_ and gives the slot
  // another buffer: one whose send has completed, or a new one.
  void let_gradient_leave(Slot& s);
  int model_chunk(int chunk) const { return model_chunk_index(pp_.rank(), chunk, schedule_); }
  // Frees the slot once its backward is complete and its input gradient (if any) has been posted.
  void release_if_done(Slot& s, int model_chunk);
  int64_t activation_bytes() const;  // of the slots in use and the gradients leaving, now
  // Fills the slot's rows and runs the chunk's forward; returns its Σ token losses.
  double forward(Slot& s, int chunk, int microbatch, const FillFn& fill, float grad_scale);

  const Kernels& k_;
  std::vector<TransformerChunk*> chunks_;
  Comm& pp_;
  ScheduleConfig schedule_;
  std::vector<std::vector<MicrobatchInput>> inputs_;  // per chunk
  int num_model_chunks_;
  std::vector<std::vector<Slot>> slots_;  // per chunk
  std::vector<LeavingGradient> leaving_;  // a few (N_l, C) buffers, reused once their sends complete
  // Parameters more than one of this rank's chunks report (a V's shared tied embedding), with how
  // many: reported on to grad_ready when the last of them has.
  std::vector<std::pair<int, int>> shared_params_;
  Stats stats_;
  std::function<void(bool)> before_compute_;
};

}  // namespace tessel
