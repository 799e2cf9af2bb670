// What a training run tells its user: a line per logged iteration on stdout, a live progress
// line when stdout is a terminal, and --log-json's one JSON object per logged iteration.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessel/model/step_terms.h"
#include "tessel/optim/loss_scaler.h"

namespace tessel {

struct IterationStats {
  int64_t iteration = 0;  // 1-based
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  int64_t global_batch = 0;  // the iteration's samples (Megatron's 'global batch size')
  double tokens_per_s = 0;
  double iteration_time_ms = 0;
  double data_wait_ms = 0;  // of which waiting for the data loader's batch
  // No optimizer step was taken: the loss or the gradient norm was not finite and
  // --no-check-for-nan-in-loss-and-grad let the run go on (Megatron's skipped_iter), as a dynamic
  // loss scale's overflow does.
  bool skipped = false;
  // With a loss scaler (optim/loss_scaler.h): its state after this iteration's update.
  std::optional<LossScaler::State> loss_scale;
  // The figures of the step's terms besides `loss` (model/step_terms.h), in their order.
  std::vector<StepFigure> figures;
  // Megatron's figures of the iteration (train/metrics.h), as TensorBoard gets them.
  int64_t consumed_samples = 0;  // the train split's samples read, this iteration's included
  int world_size = 1;
  std::optional<double> params_norm;  // --log-params-norm
  std::optional<double> num_zeros;    // --log-num-zeros-in-grad
  // At --log-interval's iterations with --log-timers-to-tensorboard or --log-throughput: the
  // slowest rank's mean iteration time since the last such iteration (seconds), and the model
  // TFLOP/s per rank it gives (--log-throughput).
  std::optional<double> interval_time_s, throughput;
  // --log-memory-to-tensorboard: the largest rank's resident memory now and its peak (bytes).
  std::optional<double> memory_bytes, peak_memory_bytes;
  // This rank's communication in the iteration (comm.h's counters), one entry per group kind and
  // kind of call that had any calls.
  struct Comm {
    std::string group, op;
    int64_t calls = 0;
    double bytes = 0, seconds = 0;
  };
  std::vector<Comm> comm;
  // Who talks to whom (--log-json, --profile-report): every rank's communication in the iteration
  // by group kind and kind of call, gathered to the first rank (empty on the others). An entry
  // with peer -1 is the rank's counter (Comm above); the others are its calls with one peer
  // each: a send's or receive's, or every other member of a collective's group.
  struct PeerComm {
    int rank = 0, peer = -1;
    std::string group, op;
    int64_t calls = 0;
    double bytes = 0, seconds = 0;
  };
  std::vector<PeerComm> traffic;
};

class TrainLog {
 public:
  // json_path may be empty; progress draws a live line between logged iterations; a quiet log
  // (every rank but the first) prints nothing. A run resumed after iteration `resumed_after`
  // keeps the records of json_path up to that iteration, so that it ends up holding the whole
  // run however often it was restarted: the file is rewritten through a temporary one, so that a
  // rewrite that fails (throwing Error) loses nothing.
  TrainLog(int64_t train_iters, int64_t log_interval, const std::string& json_path, bool progress,
           bool quiet = false, int64_t resumed_after = 0);
  ~TrainLog();
  TrainLog(const TrainLog&) = delete;
  TrainLog& operator=(const TrainLog&) = delete;

  void iteration(const IterationStats& s);
  // Whether iteration `it` is logged whatever its figures: the --log-interval's, the first and the
  // last (a skipped step is logged as well).
  bool at_interval(int64_t it) const { return it % log_interval_ == 0 || it == train_iters_ || it == 1; }
  void message(const std::string& line);  // a plain line that does not break the progress line
  // An evaluation's loss on `split` after iteration `it`: a line with its perplexity and, in
  // --log-json, {"iteration", "split", "loss", "ppl"}.
  void evaluation(int64_t it, const std::string& split, double loss);
  // Throws tessel::Error naming --log-json's file and the error when a record could not be
  // written (a full disk); the writes stop at the first failure. The trainer calls it on every
  // rank together, so that the run stops at the iteration whose record was lost.
  void check() const;

 private:
  void draw_progress(const IterationStats& s);
  void write_json(const nlohmann::json& record);

  int64_t train_iters_, log_interval_;
  bool progress_;
  bool quiet_;
  std::string json_path_;
  std::FILE* json_ = nullptr;
  int64_t json_bytes_ = 0, json_records_ = 0;  // the whole records in the file
  std::optional<std::string> write_error_;
  double elapsed_s_ = 0;
  bool progress_drawn_ = false;
  int64_t skipped_since_logged_ = 0;  // Megatron's 'number of skipped iterations' of the interval
};

}  // namespace tessel
