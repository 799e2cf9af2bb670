// The three indices of Megatron-Core's GPTDataset, built as gpt_dataset.py and helpers.cpp build
// them, so that the same seed, data, split and sequence length give the same samples:
//
// - the document index: the split's documents (sequences of the LowLevelDataset) repeated once per
//   epoch and shuffled by numpy's RandomState(seed) — all epochs together, or, when the last epoch
//   is needed for less than 80 % of its samples ("separate final epoch"), the first epochs
//   together and the last one on its own, so the partial epoch still draws across all documents;
// - the sample index: the documents of the document index laid end to end and cut into windows
//   of seq_length + 1 tokens that overlap by one token (the last input's target is the next
//   window's first input). Row k = (position in the document index, token offset) where sample k
//   starts; row k + 1 is where it ends;
// - the shuffle index: a permutation of the samples, drawn from the same RandomState after the
//   document index; with a separate final epoch the samples before the final epoch and those in
//   it are shuffled apart, so that the first epochs' samples come first.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tessel/data/low_level_dataset.h"
#include "tessel/data/numpy_random.h"

namespace tessel {

struct GptEpochPlan {
  int64_t tokens_per_epoch = 0;
  int64_t num_epochs = 1;
  bool separate_final_epoch = false;
  int64_t samples_before_final_epoch = 0;  // when separate_final_epoch
};

// Megatron's _get_num_epochs and the separate-final-epoch rule, for `num_samples` samples of
// seq_length + 1 tokens (one epoch when num_samples is not given). Throws when the epoch holds
// fewer than 2 tokens (no sample can be cut from it).
GptEpochPlan plan_gpt_epochs(int64_t tokens_per_epoch, std::optional<int64_t> num_samples,
                             int64_t seq_length);

// Sequences [first, first + count) of the dataset, num_epochs times, shuffled (int32, as Megatron).
std::vector<int32_t> build_document_index(int64_t first, int64_t count, int64_t num_epochs,
                                          bool separate_final_epoch, NumpyRandomState& rng);

// helpers.cpp's build_sample_idx with drop_last_partial_sequence and the extra token: a row-major
// (samples + 1, 2) array of (document index position, offset).
std::vector<int64_t> build_sample_index(const LowLevelDataset& data,
                                        std::span<const int32_t> document_index,
                                        int64_t seq_length, int64_t num_epochs,
                                        int64_t tokens_per_epoch);

// [0, num_samples) shuffled, then [num_samples, total_size) shuffled, concatenated.
std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size,
                                         NumpyRandomState& rng);

}  // namespace tessel
