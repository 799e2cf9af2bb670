// What a GptDataset cuts its samples from (Megatron-Core's LowLevelDataset): numbered sequences
// of tokens. An IndexedDataset's come from its .bin/.idx (or a text file tokenized at start-up);
// MockGptLowLevelDataset's are generated (mock_dataset.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace tessel {

class LowLevelDataset {
 public:
  virtual ~LowLevelDataset() = default;
  // What messages call it: the prefix or file of the data, or the generator's name.
  virtual const std::string& prefix() const = 0;
  // Megatron's dataset_path in the cache description: the files, or nullopt for generated data.
  virtual std::optional<std::string> dataset_path() const { return prefix(); }
  // The GPTDataset class Megatron builds over it, which names the description and cache files.
  virtual const char* gpt_dataset_class() const { return "GPTDataset"; }
  virtual int64_t num_sequences() const = 0;
  virtual int32_t sequence_length(int64_t i) const = 0;
  // Copies tokens [offset, offset + out.size()) of sequence `sequence` into `out`; throws
  // tessel::Error on a token outside the vocabulary.
  virtual void read(int64_t sequence, int64_t offset, std::span<int32_t> out) const = 0;
};

}  // namespace tessel
