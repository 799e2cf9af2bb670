// The global batches a training run reads, on the host: which samples form each microbatch of
// this data-parallel rank (Megatron's pretraining sampler), the packed documents' position ids,
// attention starts and loss mask (Megatron's --reset-position-ids, --reset-attention-mask,
// --eod-mask-loss), and a background thread that reads the next batch from the memory-mapped
// files while the current one trains.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "tessel/data/gpt_dataset.h"

namespace tessel {

// A run's samples are numbered below 2^31: a row's sample id is an int32, and dropout keys its
// masks by it. So no run consumes more than this many.
inline constexpr int64_t kSampleIdLimit = int64_t{1} << 31;

// Megatron's get_ltor_masks_and_position_ids, for one sample. End-of-document tokens (eod) end a
// document: with reset_position_ids the positions start again at 0 after each, with
// reset_attention_mask a token sees only its own document's earlier tokens (the eod belongs to
// the document it ends), with eod_mask_loss the position whose input is an eod (predicting the
// next document's first token) is left out of the loss.
struct Packing {
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  bool eod_mask_loss = false;
  int32_t eod = -1;  // the tokenizer's end-of-document id

  // Whether the rows need more than their tokens and targets.
  bool documents() const { return reset_position_ids || reset_attention_mask; }
};

// One sample's rows from its seq_length + 1 tokens: inputs and targets (S) (a target -1 is left
// out of the loss), and, when packing.documents(), position_ids and key_start (S): each row's
// position in its document and its document's first position in the sequence. Returns the
// targets counted in the loss.
int64_t sample_rows(std::span<const int32_t> tokens, const Packing& packing, int32_t* inputs,
                    int32_t* targets, int32_t* position_ids, int32_t* key_start);

// Where this DP rank's rows come from: global batch position m·(B·DP) + r·B + b is microbatch m's
// row b on DP rank r, as Megatron's MegatronPretrainingSampler deals the samples out. A batch of
// another count of microbatches (a step batch-size schedule's) is dealt out alike.
struct BatchShape {
  int64_t micro_batch = 1;
  int64_t data_parallel = 1;
  int64_t dp_rank = 0;
  int64_t microbatches = 1;  // of a batch at the run's --global-batch-size

  int64_t global_batch() const { return micro_batch * data_parallel * microbatches; }
  int64_t position(int64_t microbatch, int64_t row) const {
    return microbatch * micro_batch * data_parallel + dp_rank * micro_batch + row;
  }
};

// A global batch: its first dataset sample (-1: none) and its microbatches per DP rank.
struct BatchSpan {
  int64_t first = -1;
  int64_t microbatches = 0;
};

// This rank's rows of one global batch: (microbatches, B, S) each; position_ids and key_start
// empty without packed documents; sample_ids each row's sample index in the run (the dropout
// masks' key, kernels/dropout.h).
struct HostBatch {
  int64_t first = -1;  // the dataset sample at global batch position 0
  int64_t microbatches = 0;
  std::vector<int32_t> inputs, targets, position_ids, key_start, sample_ids;
  int64_t counted_targets = 0;  // this rank's targets counted in the loss
};

// Rows (B, T) shifted `k` to the left within each sequence, `fill` past its end.
void shift_rows(const int32_t* rows, int32_t* out, int64_t B, int64_t T, int k, int32_t fill);

// The targets of (B, T) rows at positions `from` and later that are in the loss (≥ 0).
int64_t count_targets_from(const int32_t* targets, int64_t B, int64_t T, int from);

class BatchLoader {
 public:
  // `data` must outlive the loader. One background thread reads batches ahead.
  BatchLoader(const SampleDataset& data, BatchShape shape, Packing packing);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Starts reading the batch of `microbatches` whose position 0 is sample `first`, in the background.
  void prefetch(int64_t first, int64_t microbatches);
  // That batch: the prefetched one (waiting for it if still being read), or read now. Valid until
  // the next get(). Throws what reading it threw (a token outside the vocabulary, ...).
  const HostBatch& get(int64_t first, int64_t microbatches);

  const BatchShape& shape() const { return shape_; }
  int64_t seq_length() const { return data_.seq_length(); }
  // Time spent in get() waiting for a batch, summed; and reading one batch on the thread, on
  // average.
  double wait_seconds() const { return wait_seconds_; }
  double read_seconds_per_batch() const;

 private:
  void read(HostBatch& batch, int64_t first, int64_t microbatches) const;
  void worker();

  const SampleDataset& data_;
  BatchShape shape_;
  Packing packing_;
  HostBatch batches_[2];  // the one handed out and the one being read
  int current_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int64_t wanted_ = -1;        // the sample the thread is asked to read from (-1: nothing)
  int64_t wanted_microbatches_ = 0;
  bool reading_ = false, stop_ = false;
  std::exception_ptr error_;   // what the thread's read threw
  double wait_seconds_ = 0, read_seconds_ = 0;
  int64_t batches_read_ = 0;  // by the thread
  std::thread thread_;
};

}  // namespace tessel
