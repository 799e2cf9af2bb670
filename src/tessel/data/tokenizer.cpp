#include "tessel/data/tokenizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessel/core/error.h"
#include "tessel/data/null_tokenizer.h"
#include "tessel/data/tokenizers/loaders.h"

namespace tessel {

std::string Tokenizer::id_to_token(int32_t id) const {
  const int32_t one[1] = {id};
  return decode(one);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const std::vector<int32_t> ids = encode(token);
  if (ids.size() == 1) return ids[0];
  return std::nullopt;
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> tokens(text.size());
  // Through unsigned char: bytes >= 0x80 must become 128..255, not negative ids.
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string ByteTokenizer::decode(std::span<const int32_t> tokens) const {
  std::string text(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    TESSEL_CHECK(tokens[i] >= 0 && tokens[i] < 256,
                 "byte tokenizer: token {} at position {} is outside the vocabulary [0, 256)",
                 tokens[i], i);
    text[i] = static_cast<char>(tokens[i]);
  }
  return text;
}

std::string canonical_tokenizer_type(const std::string& type) {
  if (type == "byte") return "ByteTokenizer";
  if (type == "gpt2") return "GPT2BPETokenizer";
  if (type == "hf") return "HuggingFaceTokenizer";
  if (type == "tiktoken") return "TikTokenizer";
  if (type == "sentencepiece") return "GPTSentencePieceTokenizer";
  return type;
}

namespace {

constexpr const char* kKnownTypes =
    "ByteTokenizer, GPT2BPETokenizer, HuggingFaceTokenizer, TikTokenizer, SentencePieceTokenizer, "
    "GPTSentencePieceTokenizer, Llama2Tokenizer, NullTokenizer; short names byte, gpt2, hf, tiktoken, sentencepiece";

bool is_sentencepiece(const std::string& type) {
  return type == "SentencePieceTokenizer" || type == "GPTSentencePieceTokenizer" || type == "Llama2Tokenizer";
}

// The flag rules of a tokenizer, before any file is read: each rule broken, one message.
std::vector<std::string> tokenizer_flag_violations(const TokenizerOptions& options) {
  const std::string type = canonical_tokenizer_type(options.type);
  const bool bpe = type == "GPT2BPETokenizer", tiktoken = type == "TikTokenizer";
  const bool no_files = type == "ByteTokenizer" || type == "NullTokenizer";
  if (!bpe && !tiktoken && !no_files && !is_sentencepiece(type) && type != "HuggingFaceTokenizer")
    return {fmt::format("--tokenizer-type {}: unknown (known: {})", type, kKnownTypes)};
  std::vector<std::string> v;
  // A file flag the tokenizer type does not read is refused, never ignored: --vocab-file and
  // --merge-file without --tokenizer-type would otherwise train the byte tokenizer.
  std::vector<std::string> unread;
  if (!bpe && !options.vocab_file.empty()) unread.push_back("--vocab-file");
  if (!bpe && !options.merge_file.empty()) unread.push_back("--merge-file");
  if ((bpe || no_files) && !options.tokenizer_model.empty()) unread.push_back("--tokenizer-model");
  if (!unread.empty())
    v.push_back(fmt::format("--tokenizer-type {} reads no {}{}", type, fmt::join(unread, " or "),
                            no_files ? " (give the tokenizer's type: GPT2BPETokenizer for --vocab-file and "
                                       "--merge-file, HuggingFaceTokenizer, TikTokenizer or a SentencePiece type "
                                       "for --tokenizer-model)"
                                     : ""));
  if (bpe && options.vocab_file.empty())
    v.push_back("--tokenizer-type GPT2BPETokenizer needs --vocab-file (vocab.json or encoder.json)");
  if (bpe && options.merge_file.empty())
    v.push_back("--tokenizer-type GPT2BPETokenizer needs --merge-file (merges.txt or vocab.bpe)");
  if (!bpe && !no_files && options.tokenizer_model.empty())
    v.push_back(fmt::format("--tokenizer-type {} needs --tokenizer-model ({})", type,
                            tiktoken               ? "a .tiktoken rank file or Megatron's .json"
                            : is_sentencepiece(type) ? "a SentencePiece .model"
                                                     : "tokenizer.json or its folder"));
  if (tiktoken && options.tiktoken_pattern.empty())
    v.push_back("--tokenizer-type TikTokenizer needs --tiktoken-pattern (gpt2, cl100k, o200k, qwen2, or Megatron's "
                "v1, v2)");
  if (type == "NullTokenizer" && options.vocab_size < 1)
    v.push_back(fmt::format("--tokenizer-type NullTokenizer needs --vocab-size N (N >= 1), got {}", options.vocab_size));
  return v;
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options) {
  const std::vector<std::string> broken = tokenizer_flag_violations(options);
  if (!broken.empty()) fail("{}", fmt::join(broken, "; "));
  const std::string type = canonical_tokenizer_type(options.type);
  if (type == "ByteTokenizer") return std::make_unique<ByteTokenizer>();
  if (type == "NullTokenizer") return std::make_unique<NullTokenizer>(options.vocab_size);
  if (type == "GPT2BPETokenizer") return load_gpt2_bpe(options.vocab_file, options.merge_file);
  if (type == "HuggingFaceTokenizer") return load_hf_tokenizer(options.tokenizer_model);
  if (type == "TikTokenizer") return load_tiktoken(options);
  TokenizerOptions named = options;  // a SentencePiece type, under Megatron's name
  named.type = type;
  return load_sentencepiece(named);
}

}  // namespace tessel
