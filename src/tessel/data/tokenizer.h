// Tokenizers turn text into token ids and back, behind one interface that the data pipeline,
// `tessel preprocess`, `tessel tokenizer` and `tessel generate` share. make_tokenizer picks one
// from Megatron-LM's flags (--tokenizer-type, --vocab-file, --merge-file, --tokenizer-model).
// ByteTokenizer (vocab 256: one token per byte) is the embedded default.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessel {

// The ids a tokenizer reserves for document and sequence boundaries; -1 where it has none.
struct SpecialIds {
  int32_t eod = -1;  // end of document (Megatron's tokenizer.eod): appended by preprocess --append-eod
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t pad = -1;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The --tokenizer-type it was made from, e.g. "ByteTokenizer", "GPT2BPETokenizer".
  virtual std::string type() const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Throws tessel::Error on a token outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> tokens) const = 0;
  virtual SpecialIds special_ids() const { return {}; }
};

// Token = the byte's value 0..255; any byte string round-trips exactly. No special ids.
class ByteTokenizer final : public Tokenizer {
 public:
  std::string type() const override { return "ByteTokenizer"; }
  int32_t vocab_size() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> tokens) const override;
};

// Megatron-LM's tokenizer flags. Empty fields are not given.
struct TokenizerOptions {
  std::string type = "ByteTokenizer";  // --tokenizer-type
  std::string vocab_file;              // --vocab-file
  std::string merge_file;              // --merge-file
  std::string tokenizer_model;         // --tokenizer-model
  std::string tiktoken_pattern;        // --tiktoken-pattern (gpt2 | cl100k | o200k)
};

// Throws tessel::Error naming the flag or file that is wrong.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options);

}  // namespace tessel
