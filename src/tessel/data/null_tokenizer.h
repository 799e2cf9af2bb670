// Megatron's NullTokenizer (--tokenizer-type NullTokenizer --vocab-size N), which make_tokenizer
// (tokenizer.h) makes; for mock data and benchmarks. The text is the token ids themselves in
// decimal, separated by single spaces. The end-of-document token is N - 1; there are no others.
// In `train` and `export` the model's --vocab-size is its N.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/data/tokenizer.h"

namespace tessel {

class NullTokenizer final : public Tokenizer {
 public:
  // Throws tessel::Error when vocab_size < 1 (--vocab-size not given).
  explicit NullTokenizer(int32_t vocab_size);
  std::string type() const override { return "NullTokenizer"; }
  int32_t vocab_size() const override { return vocab_size_; }
  // Megatron's int(word) for each word between single spaces (surrounding whitespace allowed).
  // Throws tessel::Error naming a word that is not an id in [0, vocab_size); "" is no ids.
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> tokens) const override;
  SpecialIds special_ids() const override { return {.eod = vocab_size_ - 1}; }

 private:
  int32_t vocab_size_;
};

}  // namespace tessel
