// The global batch of every iteration: constant (--global-batch-size), or Megatron-LM's step
// schedule (--step-batch-size-schedule, its StepBatchsizeNumMicroBatchesCalculator).
//
// A schedule is "THRESHOLD:BATCH THRESHOLD:BATCH ..." (spaces or commas between entries); each
// number a decimal with an optional K, M, B or T (10^3 … 10^12, either case), truncated to a whole
// number after the multiplication, as Python's int(float(x) · multiplier). Megatron's training
// passes --seq-length, so the thresholds are tokens, turned into samples by floor division by
// the sequence length. The entries are sorted by threshold; the first must be 0, the thresholds
// strictly increasing, the batches positive. An iteration takes the batch of the last threshold
// at or below the samples consumed before it, so a batch that crosses a threshold is finished
// at the old size (the consumed samples then overshoot the threshold).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessel {

struct BatchStep {
  int64_t from_sample = 0;  // the threshold, in samples consumed
  int64_t global_batch = 1;
};

class BatchSchedule {
 public:
  // One step: `global_batch` from sample 0 on.
  static BatchSchedule constant(int64_t global_batch);
  // The schedule `text` describes, its thresholds tokens of `seq_length` each (0: samples).
  // Every rule it breaks goes to `violations`, naming the flag; the schedule returned is then
  // the constant one of batch 1.
  static BatchSchedule parse(std::string_view text, int64_t seq_length, std::vector<std::string>& violations);

  const std::vector<BatchStep>& steps() const { return steps_; }
  bool is_constant() const { return steps_.size() == 1; }
  // The global batch of an iteration that starts after `consumed` samples.
  int64_t batch_at(int64_t consumed) const;
  // Samples consumed by iterations 1 .. iteration − 1: where iteration `iteration`'s batch starts.
  int64_t consumed_before(int64_t iteration) const { return walk(iteration - 1).consumed; }
  // Iteration `iteration`'s global batch.
  int64_t batch_of(int64_t iteration) const { return batch_at(consumed_before(iteration)); }
  // Iterations until `samples` are consumed, the last one whole (Megatron's update_train_iters).
  int64_t iterations_for(int64_t samples) const;
  // The steps that iterations 1 .. iterations take their batch from, in order.
  std::vector<BatchStep> steps_reached(int64_t iterations) const { return walk(iterations).reached; }
  // One line for the start of the run: each step's batch from its threshold on.
  std::string describe(int64_t seq_length) const;
  // This schedule for a run resumed from the save of iteration `iteration`, which had consumed
  // `consumed` samples (Megatron's consumed_train_samples): the iterations after it start there,
  // whatever batches the saved run took; the ones up to it are walked as before.
  BatchSchedule resumed_after(int64_t iteration, int64_t consumed) const;

 private:
  // Iterations 1 .. iterations: the samples they consume and the steps they take batches from.
  struct Walk {
    int64_t consumed = 0;
    std::vector<BatchStep> reached;
  };
  Walk walk(int64_t iterations) const;

  std::vector<BatchStep> steps_;
  int64_t resumed_iteration_ = 0, resumed_consumed_ = 0;  // where the walk starts (0, 0: the first)
};

}  // namespace tessel
