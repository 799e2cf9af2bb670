// Microbatches from the sampler into the model's memory: the host/device boundary of the tokens.
//
// The sampler (data/dataset.h) picks whole sequences of the global batch on the host. They cross
// to the backend's memory once — (micro batch, T) tokens and targets — and there context
// parallelism keeps this CP rank's T/CP rows of every sequence (its two chunks of 2·CP,
// parallel/context_parallel.h) straight into the pipeline slot's buffers: the selection runs as
// a kernel of the table in the memory it reads, on any backend, and the host never indexes
// device memory. Without CP the selection keeps every row.
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/core/tensor.h"
#include "tessel/data/dataset.h"
#include "tessel/kernels/kernels.h"
#include "tessel/parallel/context_parallel.h"

namespace tessel {

class MicrobatchLoader {
 public:
  // Microbatch m of this DP rank is the samples at global-batch positions
  // [first_sample + m·micro_batch, + micro_batch). `sampler` and `cp` must outlive the loader.
  MicrobatchLoader(const Kernels& k, Sampler& sampler, const ContextParallel& cp,
                   int64_t micro_batch, int64_t first_sample);

  // Writes microbatch m of `iteration` (counted from 1, as the log counts) into tokens and
  // targets, (micro_batch, T/CP) each, in k's memory: pipeline/executor.h's FillFn.
  void fill(int64_t iteration, int microbatch, int32_t* tokens, int32_t* targets);
  // Tokens of one microbatch on this rank: micro batch × T/CP.
  int64_t local_tokens() const { return B_ * (T_ / cp_.size()); }

 private:
  const Kernels& k_;
  Sampler& sampler_;
  const ContextParallel& cp_;
  int64_t B_, T_, first_sample_;
  std::vector<int32_t> host_tokens_, host_targets_;  // (B, T) whole sequences, on the host
  Tensor tokens_, targets_;                          // the same in k's memory
};

}  // namespace tessel
