// Tokenizers turn text into token ids and back. The interface is what the data pipeline and
// `tessel generate` need; ByteTokenizer (vocab 256: one token per byte) is the one in use now, a
// sentencepiece model can implement the same interface later.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessel {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual int32_t vocab_size() const = 0;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Throws tessel::Error on a token outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> tokens) const = 0;
};

// Token = the byte's value 0..255; any byte string round-trips exactly.
class ByteTokenizer final : public Tokenizer {
 public:
  int32_t vocab_size() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> tokens) const override;
};

}  // namespace tessel
