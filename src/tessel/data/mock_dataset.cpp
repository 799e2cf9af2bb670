#include "tessel/data/mock_dataset.h"

#include "tessel/core/error.h"
#include "tessel/data/numpy_generator.h"

namespace tessel {

MockGptLowLevelDataset::MockGptLowLevelDataset(int32_t vocab_size, int32_t eod)
    : vocab_size_(vocab_size), eod_(eod) {
  TESSEL_CHECK(vocab_size >= 1 && eod >= 0 && eod < vocab_size,
               "mock data: the end-of-document token {} must lie in the vocabulary [0, {})", eod,
               vocab_size);
  lengths_ = NumpyGenerator(kSeed).integers_int32(1, kMaxSequenceLength, kSize);
}

void MockGptLowLevelDataset::read(int64_t sequence, int64_t offset, std::span<int32_t> out) const {
  TESSEL_CHECK(sequence >= 0 && sequence < kSize, "mock data: no document {} (there are {})",
               sequence, kSize);
  const int64_t length = lengths_[static_cast<size_t>(sequence)];
  TESSEL_CHECK(offset >= 0 && offset + static_cast<int64_t>(out.size()) <= length,
               "mock data: tokens [{}, {}) of document {} are outside its {}", offset,
               offset + static_cast<int64_t>(out.size()), sequence, length);
  // (arange(L - 1) + 1) % vocab_size, then eod: position p holds (p + 1) % vocab_size.
  for (size_t k = 0; k < out.size(); ++k) {
    const int64_t p = offset + static_cast<int64_t>(k);
    out[k] = p + 1 < length ? static_cast<int32_t>((p + 1) % vocab_size_) : eod_;
  }
}

}  // namespace tessel
