// `tessel tokenizer train`: SentencePiece BPE or unigram models through libsentencepiece's
// trainer (DIR/tokenizer.model), or a byte-level BPE written by tessel as a Hugging Face folder
// (DIR/tokenizer.json + tokenizer_config.json) that HuggingFaceTokenizer reads back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessel/data/tokenizer.h"

namespace tessel {

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;  // UTF-8 text files
  int32_t vocab_size = 0;           // with the special tokens
  std::string model_type = "bpe";   // bpe | unigram (SentencePiece) | byte-bpe (tokenizer.json)
  std::string output_dir;
  // Each trainer's own settings, unset when not given: one given to the other trainer is refused.
  // SentencePiece (Llama-2's choices by default: pieces for unknown bytes, digits split).
  std::optional<double> character_coverage;  // default 0.9995; libsentencepiece takes [0.98, 1]
  std::optional<bool> byte_fallback;         // default on
  int threads = 0;                           // 0: all cores
  // byte-bpe: a pair seen fewer times than this is never merged.
  std::optional<int64_t> min_frequency;  // default 2
};

// Trains, writes the files and returns the flags that load the result. Throws tessel::Error
// naming the file or option that is wrong.
TokenizerOptions train_tokenizer(const TokenizerTrainOptions& options);

// The byte-level BPE trainer on text already read: GPT-2's pattern cuts it into words; every
// byte is a token (ids 0..255 = the byte), then merges of the most frequent adjacent pair
// (ties: the smaller pair of ids) until vocab_size - 1 tokens; <|endoftext|> is the last id.
// Returns tokenizer.json's text.
std::string train_byte_bpe_json(const std::vector<std::string_view>& texts, int32_t vocab_size,
                                int64_t min_frequency);

}  // namespace tessel
