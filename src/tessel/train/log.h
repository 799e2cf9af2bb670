// What a training run tells its user: a line per logged iteration on stdout, a live progress
// line when stdout is a terminal, and --log-json's one JSON object per logged iteration.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace tessel {

struct IterationStats {
  int64_t iteration = 0;  // 1-based
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  double tokens_per_s = 0;
  double iteration_time_ms = 0;
  double data_wait_ms = 0;  // of which waiting for the data loader's batch
  // Mixture of Experts: per MoE layer and microbatch, averaged — tokens routed to an expert
  // (min / mean / max over experts), assignments dropped by the capacity, aux + z loss.
  bool moe = false;
  double expert_tokens_min = 0, expert_tokens_mean = 0, expert_tokens_max = 0;
  double dropped_tokens = 0, aux_loss = 0;
  // This rank's communication in the iteration (comm.h's counters), one entry per group kind and
  // kind of call that had any calls.
  struct Comm {
    std::string group, op;
    int64_t calls = 0;
    double bytes = 0, seconds = 0;
  };
  std::vector<Comm> comm;
};

class TrainLog {
 public:
  // json_path may be empty; progress draws a live line between logged iterations; a quiet log
  // (every rank but the first) prints nothing.
  TrainLog(int64_t train_iters, int64_t log_interval, const std::string& json_path, bool progress,
           bool quiet = false);
  ~TrainLog();
  TrainLog(const TrainLog&) = delete;
  TrainLog& operator=(const TrainLog&) = delete;

  void iteration(const IterationStats& s);
  void message(const std::string& line);  // a plain line that does not break the progress line
  // An evaluation's loss on `split` after iteration `it`: a line with its perplexity and, in
  // --log-json, {"iteration", "split", "loss", "ppl"}.
  void evaluation(int64_t it, const std::string& split, double loss);

 private:
  void draw_progress(const IterationStats& s);

  int64_t train_iters_, log_interval_;
  bool progress_;
  bool quiet_;
  std::FILE* json_ = nullptr;
  double elapsed_s_ = 0;
  bool progress_drawn_ = false;
};

}  // namespace tessel
