// Megatron-LM's tokenizer flags for the data commands (preprocess, data inspect, data index).
// The shared tokenizer-flag helper of the tokenizer work replaces this file once it lands.
#pragma once

#include <CLI/CLI.hpp>

#include "tessel/data/tokenizer.h"

namespace tessel {

inline void add_data_tokenizer_flags(CLI::App& cmd, TokenizerOptions& t) {
  cmd.add_option("--tokenizer-type", t.type, "tokenizer (Megatron's names)")->capture_default_str();
  cmd.add_option("--vocab-file", t.vocab_file, "vocabulary file");
  cmd.add_option("--merge-file", t.merge_file, "BPE merges file");
  cmd.add_option("--tokenizer-model", t.tokenizer_model, "tokenizer model (SentencePiece, tokenizer.json)");
  cmd.add_option("--tiktoken-pattern", t.tiktoken_pattern, "tiktoken pattern: gpt2 | cl100k | o200k");
}

}  // namespace tessel
