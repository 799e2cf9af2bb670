// Megatron-Core's BlendedMegatronDatasetBuilder for GPT data: from --data-path (with --split) or
// --train-data-path / --valid-data-path / --test-data-path, the train, valid and test datasets
// the trainer reads, each a GptDataset or a BlendedDataset.
//
// A path P names Megatron's P.bin/P.idx when either exists; otherwise a text file P (JSONL when
// it ends in .jsonl or .json, key "text"; plain text otherwise: text_documents.h), tokenized at
// start-up into an in-memory dataset that goes through the same split, indices and blending.
// --mock-data instead: Megatron's MockGPTDataset splits over generated documents (mock_dataset.h),
// under the split "1,1,1" that Megatron forces for mock data.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/data/blended_dataset.h"
#include "tessel/data/gpt_dataset.h"
#include "tessel/data/indexed_dataset.h"
#include "tessel/data/tokenizer.h"

namespace tessel {

// A blend as Megatron's get_blend_from_list reads it: "P1 P2 ..." (no weights) or
// "W1 P1 W2 P2 ..." (the list starts with a number). Throws ConfigError naming `flag` for an odd
// weight/path list, a weight that is not a number > 0, or an empty list.
struct DataBlend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // empty: none given
};
DataBlend parse_data_blend(const std::vector<std::string>& words, const std::string& flag);

// Megatron's parse_and_normalize_split and convert_split_vector_to_split_matrix: "949,50,1"
// (up to three non-negative numbers, missing ones 0) normalised into [begin, end) bookends.
SplitMatrix parse_split(const std::string& split);

// The samples each split must deliver, as Megatron's get_train_valid_test_num_samples:
// train_iters·G, (train_iters / eval_interval + 1)·eval_iters·G, eval_iters·G.
std::array<int64_t, kNumSplits> megatron_num_samples(int64_t train_iters, int64_t global_batch,
                                                     int64_t eval_interval, int64_t eval_iters);

struct GptDataOptions {
  std::vector<std::string> data_path;  // --data-path: a blend for all three splits under --split
  std::vector<std::string> train_data_path, valid_data_path, test_data_path;  // or one per split
  std::string split = "969, 30, 1";                                            // --split
  bool mock_data = false;                                                      // --mock-data
  std::string data_cache_path;                                                 // --data-cache-path
  int64_t seq_length = 0;                                                      // --seq-length
  uint32_t seed = 1234;                                                        // --seed
  std::array<int64_t, kNumSplits> num_samples{};  // megatron_num_samples(...)
  // Tokenizes text inputs; its vocabulary bounds every token id read; its type is part of the
  // cache description. Must outlive the call.
  const Tokenizer* tokenizer = nullptr;
  // Text inputs get the tokenizer's end-of-document token after each document, when it has one.
  bool append_eod = true;
};

// Who builds the index caches. Megatron's pattern: the builders (global rank 0, or one rank per
// node when nodes do not share a file system) build and write every missing index first; then
// everyone else finds the cache and loads it, and a rank that still misses a file builds its own
// copy. Each rank runs both phases through `together`, which returns once every rank has run
// the phase and throws on every rank when it threw on any (comm.h's check_together), so no rank
// waits for one that failed; empty: a single process.
struct DataBuildCoordination {
  bool builds_first = true;
  std::function<void(const std::function<void()>& phase)> together;
};

struct GptDataSplits {
  // Null where a split has no data (weight 0 in --split, or no --{split}-data-path).
  std::array<std::shared_ptr<const SampleDataset>, kNumSplits> splits;
  const SampleDataset* get(Split s) const { return splits[static_cast<int>(s)].get(); }
};

// Megatron's rule of a single data source (--mock-data, --data-path, or the per-split paths):
// each rule broken, a sentence.
std::vector<std::string> data_source_violations(bool data_path, bool per_split, bool mock_data);
// What mock data needs of the tokenizer (null: none): an end-of-document token. Apart from the
// sources' rules, which hold whether or not the tokenizer could be made.
std::vector<std::string> mock_data_tokenizer_violations(bool mock_data, const Tokenizer* tokenizer);

// Throws ConfigError for bad flags (both --data-path and a per-split path, --mock-data with
// either, or with a tokenizer that has no end-of-document token, an odd blend, weights <= 0, a
// bad --split), Error naming the file for bad data (see IndexedDataset::open, an empty
// dataset, a split that must deliver samples but has no tokens).
GptDataSplits build_gpt_datasets(const GptDataOptions& options,
                                 const DataBuildCoordination& coordination = {});

// A text file as an in-memory IndexedDataset (one sequence per document; dtype by vocabulary).
IndexedDataset tokenize_text_file(const std::string& path, const Tokenizer& tokenizer,
                                  bool append_eod);

}  // namespace tessel
