// Tokenizers turn text into token ids and back, behind one interface that the data pipeline,
// `tessel preprocess`, `tessel tokenizer` and `tessel generate` share. make_tokenizer picks one
// from Megatron-LM's flags (--tokenizer-type, --vocab-file, --merge-file, --tokenizer-model).
// ByteTokenizer (vocab 256: one token per byte) is the embedded default.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessel {

// The ids a tokenizer reserves for document and sequence boundaries; -1 where it has none.
struct SpecialIds {
  int32_t eod = -1;  // end of document (Megatron's tokenizer.eod): appended by preprocess --append-eod
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t pad = -1;
};

// encode and decode are const and safe to call from several threads at once on one tokenizer.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The --tokenizer-type it was made from, e.g. "ByteTokenizer", "GPT2BPETokenizer".
  virtual std::string type() const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The ids without the special tokens the post-processor puts around them (Hugging Face's
  // encode(text, add_special_tokens=False)); by default encode(text).
  virtual std::vector<int32_t> encode_bare(std::string_view text) const { return encode(text); }
  // Throws tessel::Error on a token outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> tokens) const = 0;
  virtual SpecialIds special_ids() const { return {}; }

  // The vocabulary's own spelling of a token: GPT-2's "Ġthe", SentencePiece's "▁the", tiktoken's
  // raw bytes; by default the token decoded alone. Throws tessel::Error on an id outside the
  // vocabulary.
  virtual std::string id_to_token(int32_t id) const;
  // The id of a token spelled as id_to_token spells it; nullopt when there is none (by default:
  // the text's encoding when that is one token).
  virtual std::optional<int32_t> token_to_id(std::string_view token) const;
  // The special and added tokens (<|endoftext|>, <s>, ...) with their ids, by id.
  virtual std::vector<std::pair<std::string, int32_t>> special_tokens() const { return {}; }
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
  std::string tiktoken_pattern;        // --tiktoken-pattern (gpt2 | cl100k | o200k | qwen2 | v1 | v2)
  // Megatron's TikTokenizer over its JSON vocabulary (a list of {rank, token_bytes, token_str}):
  // the first --tiktoken-num-special-tokens ids are special tokens, --tokenizer-special-tokens
  // first (default <unk> <s> </s>), then <SPECIAL_i> fillers; the vocabulary is cut to
  // vocab_size (Megatron's --vocab-size, 0: its 131072) minus those.
  int32_t tiktoken_num_special_tokens = 1000;  // --tiktoken-num-special-tokens
  std::vector<std::string> special_tokens;     // --tokenizer-special-tokens
  int32_t vocab_size = 0;                      // --vocab-size, where the command has one
};

// The --tokenizer-type names make_tokenizer knows, Megatron's first, with tessel's short ones:
//   ByteTokenizer (byte)                  the embedded default
//   GPT2BPETokenizer (gpt2)               --vocab-file vocab.json|encoder.json --merge-file merges.txt|vocab.bpe
//   HuggingFaceTokenizer (hf)             --tokenizer-model tokenizer.json, or a folder holding it
//   TikTokenizer (tiktoken)               --tokenizer-model FILE.tiktoken --tiktoken-pattern NAME, or
//                                         Megatron's FILE.json vocabulary with pattern v1 | v2
//   SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer (sentencepiece = the GPT one)
//                                         --tokenizer-model FILE.model
// Throws tessel::Error naming the file that is wrong, or every flag rule broken (a known type, the
// files it needs given, no file flag it does not read, NullTokenizer's vocabulary) before any file
// is read.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options);

// Megatron's name for a --tokenizer-type: tessel's short names (byte, gpt2, hf, tiktoken,
// sentencepiece) become theirs; any other name is returned as it is.
std::string canonical_tokenizer_type(const std::string& type);

}  // namespace tessel
