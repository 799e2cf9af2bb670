// Microbatches from the host into the model's memory: the host/device boundary of the tokens.
//
// The data loader (data/batches.h) reads this DP rank's rows of a global batch on the host,
// ahead of time. They cross to the backend's memory once — (micro batch, T) rows of the inputs a
// chunk asks for by name (model/microbatch_inputs.h: tokens, targets and, with packed documents,
// position ids and attention starts, rows shifted within their sequences, and each row's sample
// index in the run, which keys dropout) — and there context
// parallelism keeps this CP rank's T/CP rows of every sequence (its two chunks of 2·CP,
// parallel/context_parallel.h) straight into the pipeline slot's buffers: the selection runs as
// a kernel of the table in the memory it reads, on any backend, and the host never indexes
// device memory. Without CP the selection keeps every row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/core/tensor.h"
#include "tessel/data/batches.h"
#include "tessel/kernels/kernels.h"
#include "tessel/model/microbatch_inputs.h"
#include "tessel/parallel/context_parallel.h"

namespace tessel {

class MicrobatchLoader {
 public:
  // `batches` and `cp` must outlive the loader.
  MicrobatchLoader(const Kernels& k, BatchLoader& batches, const ContextParallel& cp);

  // The global batch `current` becomes the current one; `next` (if any) starts reading in the
  // background.
  void start_batch(BatchSpan current, BatchSpan next);
  // Writes microbatch m of the current batch into `inputs`, each made by its name
  // (pipeline/executor.h's FillFn).
  void fill(int microbatch, const std::vector<InputBuffer>& inputs);
  // This rank's targets of the current batch that count in the loss.
  int64_t counted_targets() const { return batch_->counted_targets; }
  // Of those, the ones at positions `from` and later of their samples.
  int64_t counted_targets_from(int from) const;
  // Of those, microbatch m's, whole sequences (every CP rank's share).
  int64_t counted_targets_of(int microbatch) const;
  // Seconds start_batch has waited for batches, summed (the loader's get: data/batches.h), and
  // that the loader's thread spends reading one.
  double wait_seconds() const { return batches_.wait_seconds(); }
  double read_seconds_per_batch() const { return batches_.read_seconds_per_batch(); }
  // Tokens of one microbatch on this rank: micro batch × T/CP.
  int64_t local_tokens() const { return B_ * (T_ / cp_.size()); }
  int64_t sequence_tokens() const { return B_ * T_; }  // micro batch × T

 private:
  void copy_rows(const std::vector<int32_t>& host, int microbatch, int32_t* rows);
  // The host rows of the current batch an input named `name` is made from.
  const std::vector<int32_t>& host_rows(const std::string& name) const;

  const Kernels& k_;
  BatchLoader& batches_;
  const ContextParallel& cp_;
  int64_t B_, T_;
  const HostBatch* batch_ = nullptr;
  Tensor staging_;  // (B, T) whole sequences in k's memory
};

}  // namespace tessel
