// libFuzzer harness for the Megatron .bin/.idx reader and the GPT dataset built on it.
// Input: a 4-byte little-endian length L, then L bytes of .idx, then the .bin bytes. Whatever the
// bytes, the reader must either refuse them with a tessel::Error or yield a dataset every sequence
// and every sample of which can be read (tokens checked against a vocabulary from the input).
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/data/gpt_dataset.h"
#include "tessel/data/indexed_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t idx_len;
  std::memcpy(&idx_len, data, 4);
  const size_t body = size - 4;
  idx_len = static_cast<uint32_t>(idx_len % (body + 1));
  const std::string idx(reinterpret_cast<const char*>(data) + 4, idx_len);
  const std::string bin(reinterpret_cast<const char*>(data) + 4 + idx_len, body - idx_len);
  std::shared_ptr<tessel::IndexedDataset> dataset;
  try {
    dataset = std::make_shared<tessel::IndexedDataset>(tessel::IndexedDataset::from_bytes("fuzz", idx, bin));
  } catch (const tessel::Error&) {
    return 0;
  }
  const int64_t vocab = 1 + (idx.empty() ? 0 : static_cast<uint8_t>(idx.back())) * 300;
  dataset->set_vocab_size(vocab);
  for (int64_t i = 0; i < dataset->num_sequences(); ++i) {
    try {
      (void)dataset->sequence(i);
    } catch (const tessel::Error&) {
    }
  }
  // One epoch of samples over every sequence (bounded by the input's tokens).
  tessel::GptDatasetConfig config;
  config.seq_length = 2 + static_cast<int64_t>(size % 7);
  config.split_matrix = {std::pair<double, double>(0.0, 1.0)};
  try {
    const tessel::GptDataset gpt(dataset, true, tessel::Split::Train, 0, dataset->num_sequences(),
                                 std::nullopt, config);
    std::vector<int32_t> tokens(static_cast<size_t>(config.seq_length + 1));
    std::vector<int32_t> starts;
    for (int64_t k = 0; k < gpt.size(); ++k) {
      try {
        gpt.sample(k, tokens, &starts);
      } catch (const tessel::Error&) {
      }
    }
  } catch (const tessel::Error&) {
  }
  return 0;
}
