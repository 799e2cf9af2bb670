// Megatron-Core's GPTDataset (and MockGPTDataset, the same over generated data): one split
// (train, valid or test) of one LowLevelDataset, cut into samples of seq_length + 1 tokens
// through the document, sample and shuffle indices (gpt_indices.h), cached on disk as Megatron
// caches them, and the interface the trainer reads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessel/data/low_level_dataset.h"

namespace tessel {

enum class Split : int { Train = 0, Valid = 1, Test = 2 };
constexpr int kNumSplits = 3;
const char* split_name(Split split);  // "train" | "valid" | "test", Megatron's Split names

// What the trainer reads from a split: samples of seq_length + 1 tokens (inputs are tokens
// [0, S), targets [1, S + 1)). Sample i of the train split is what Megatron-Core's dataset returns
// at index i (its sampler takes them in order, so iteration t, batch position k is t·G + k).
// sample() changes nothing: any number of threads (a prefetching loader) may call it at once.
class SampleDataset {
 public:
  virtual ~SampleDataset() = default;
  virtual int64_t size() const = 0;
  virtual int64_t seq_length() const = 0;
  // Writes sample i (0 <= i < size()) into tokens[0 .. seq_length]; when `document_starts` is
  // given it receives every position p > 0 of the sample where a new document begins (the
  // packed-document boundaries, whether or not the data has end-of-document tokens). Throws
  // tessel::Error on a token outside the vocabulary.
  virtual void sample(int64_t i, std::span<int32_t> tokens,
                      std::vector<int32_t>* document_starts = nullptr) const = 0;
};

// The split matrix: [begin, end) fractions per split, absent where the split's weight is 0.
using SplitMatrix = std::vector<std::optional<std::pair<double, double>>>;

struct GptDatasetConfig {
  int64_t seq_length = 0;
  uint32_t seed = 1234;           // --seed: numpy.random.RandomState(seed)
  std::string split = "969, 30, 1";  // --split as given (part of the cache description)
  SplitMatrix split_matrix;       // parsed from it (part of the description too)
  std::string tokenizer;          // what made the tokens, e.g. "ByteTokenizer" (description)
  // Where the index files go: --data-cache-path, or "" for Megatron's default beside the data
  // (PREFIX/cache/GPTDataset_indices). Datasets tokenized in memory or generated are cached
  // only under --data-cache-path.
  std::string cache_path;
};

// A split and its documents: sequences [begin, end) of the data (Megatron's index_split and
// indexed_indices, which are always a contiguous range there too).
struct GptSplitDocuments {
  Split split;
  int64_t begin = 0, end = 0;
};

class GptDataset final : public SampleDataset {
 public:
  // `documents` are the split's sequences of `data`; num_samples is what the split must deliver
  // (nullopt: one epoch). The indices are loaded from the cache when all four files
  // are there, else built (and written to the cache when there is one). Throws tessel::Error
  // naming the file and split when the split has no tokens to draw samples from.
  GptDataset(std::shared_ptr<const LowLevelDataset> data, bool in_memory, GptSplitDocuments documents,
             std::optional<int64_t> num_samples, const GptDatasetConfig& config);

  int64_t size() const override { return static_cast<int64_t>(sample_index_.size() / 2) - 1; }
  int64_t seq_length() const override { return config_.seq_length; }
  void sample(int64_t i, std::span<int32_t> tokens,
              std::vector<int32_t>* document_starts = nullptr) const override;

  Split split() const { return split_; }
  // The samples it was asked for (nullopt: one epoch); size() is at least that.
  std::optional<int64_t> num_samples() const { return num_samples_; }
  // The split's documents: sequences [sequences_begin, sequences_end) of data().
  int64_t sequences_begin() const { return begin_; }
  int64_t sequences_end() const { return end_; }
  const LowLevelDataset& data() const { return *data_; }
  // Megatron's unique_description (a JSON object) and its MD5, which names the cache files.
  const std::string& description() const { return description_; }
  const std::string& description_hash() const { return hash_; }
  // The cache folder, or "" when this dataset is not cached.
  const std::string& cache_dir() const { return cache_dir_; }
  bool loaded_from_cache() const { return loaded_from_cache_; }
  int64_t num_epochs() const { return num_epochs_; }

  const std::vector<int32_t>& document_index() const { return document_index_; }
  const std::vector<int64_t>& sample_index() const { return sample_index_; }  // (size + 1, 2)
  const std::vector<int64_t>& shuffle_index() const { return shuffle_index_; }

 private:
  std::string cache_file(const std::string& affix) const;
  bool load_cache();
  void build();
  void save_cache() const;

  std::shared_ptr<const LowLevelDataset> data_;
  Split split_;
  int64_t begin_, end_;
  std::optional<int64_t> num_samples_;
  GptDatasetConfig config_;
  std::string description_, hash_, cache_dir_;
  bool loaded_from_cache_ = false;
  int64_t num_epochs_ = 0;
  std::vector<int32_t> document_index_;
  std::vector<int64_t> sample_index_;
  std::vector<int64_t> shuffle_index_;
};

// The lowercase hex MD5 of `text` (Megatron names cache files by the MD5 of their description).
std::string md5_hex(const std::string& text);

}  // namespace tessel
