// Megatron-Core's MockGPTLowLevelDataset (--mock-data): 100000 generated documents whose lengths
// numpy.random.default_rng(0).integers(1, 4096, size=100000, dtype=int32) draws — the seed is
// fixed, --seed shuffles the GPTDataset over them as over real data. Document d of length L is
// the tokens 1, 2, ..., L - 1 (modulo the vocabulary) and the tokenizer's end-of-document token.
// Nothing is stored but the lengths: a token is computed where it is read.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessel/data/low_level_dataset.h"

namespace tessel {

class MockGptLowLevelDataset final : public LowLevelDataset {
 public:
  // Megatron's hard-coded class attributes.
  static constexpr uint64_t kSeed = 0;
  static constexpr int64_t kSize = 100000;
  static constexpr int32_t kMaxSequenceLength = 4096;  // lengths are drawn below it

  // Throws tessel::Error when vocab_size < 1 or eod is outside [0, vocab_size).
  MockGptLowLevelDataset(int32_t vocab_size, int32_t eod);

  const std::string& prefix() const override { return name_; }
  std::optional<std::string> dataset_path() const override { return std::nullopt; }
  const char* gpt_dataset_class() const override { return "MockGPTDataset"; }
  int64_t num_sequences() const override { return kSize; }
  int32_t sequence_length(int64_t i) const override { return lengths_[static_cast<size_t>(i)]; }
  void read(int64_t sequence, int64_t offset, std::span<int32_t> out) const override;

 private:
  std::string name_ = "mock data";
  int32_t vocab_size_, eod_;
  std::vector<int32_t> lengths_;
};

}  // namespace tessel
