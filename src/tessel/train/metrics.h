// Megatron's scalars of a training run, with Megatron's tags and cadence (training_log and
// evaluate_and_print_results in megatron/training/training.py), into TensorBoard's event files at
// --tensorboard-dir — written by the last rank, as Megatron's writer lives there — and the figures
// behind them into the iteration's statistics, which --log-json records.
//
// Every --tensorboard-log-interval iterations, at step = the iteration and (" vs samples") at
// step = the samples consumed: learning-rate, batch-size, lm loss, loss-scale (unless
// --no-log-loss-scale-to-tensorboard; always 1), world-size (--log-world-size-to-tensorboard),
// grad-norm, num-zeros (--log-num-zeros-in-grad), params-norm (--log-params-norm); and, at the
// iteration alone, mem-reserved-bytes and mem-max-allocated-bytes (--log-memory-to-tensorboard).
// Every iteration, a MoE model's load_balancing_loss and z_loss (with --moe-z-loss-coeff) and each
// MTP depth's "mtp_<d> loss" (the step terms' figures, model/step_terms.h; Megatron's acceptance
// rates are not written). Every --log-interval iterations (and the
// run's first, which does not write iteration-time), with --log-timers-to-tensorboard:
// iteration-time (seconds) and, with --log-throughput, throughput (TFLOP/s per rank). After each
// evaluation: lm loss validation (+ vs samples), and lm loss validation ppl (+ vs samples) with
// --log-validation-ppl-to-tensorboard; the test split's at the end under the same tags, as Megatron.
#pragma once

#include <cstdint>
#include <memory>

#include "tessel/kernels/kernels.h"
#include "tessel/parallel/grad_sync.h"
#include "tessel/parallel/groups.h"
#include "tessel/train/log.h"
#include "tessel/train/plan.h"
#include "tessel/train/tensorboard.h"

namespace tessel {

class RunMetrics {
 public:
  // `first_iteration`: the run's first (after a resumed save). Opens the event file on the last
  // rank; everything must outlive the object.
  RunMetrics(const TrainPlan& plan, ProcessGroups& groups, const GradSync& sync, int64_t first_iteration);

  // Adds s's Megatron figures that its iteration needs (after its step). Collective over the world.
  void complete(IterationStats& s);
  // The scalars of a completed iteration, and of evaluation `loss` after iteration `it`.
  void write(const IterationStats& s);
  void evaluation(int64_t it, double loss);
  // Writes what waits (the end of the run). Throws tessel::Error when the file cannot be written.
  void flush();

 private:
  void scalar(const char* tag, double value, int64_t iteration, int64_t samples);  // both steps

  const TrainPlan& plan_;
  ProcessGroups& groups_;
  const GradSync& sync_;
  int64_t first_iteration_;
  double model_flops_ = 0;                 // per iteration, for --log-throughput
  double interval_ms_ = 0;                 // this rank's iteration time since the last log line
  int64_t interval_iterations_ = 0;
  std::unique_ptr<EventFileWriter> writer_;  // on the last rank with --tensorboard-dir
};

}  // namespace tessel
