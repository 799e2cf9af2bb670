// Megatron-LM's tokenizer flags on a CLI11 (sub)command, shared by `tessel tokenizer`,
// `preprocess`, `train` and `generate`: --tokenizer-type, --vocab-file, --merge-file,
// --tokenizer-model, --tiktoken-pattern, --tiktoken-num-special-tokens, --tokenizer-special-tokens.
// (--vocab-size, which Megatron's TikTokenizer also reads, stays with each command: `train` has
// its own.) Pass the parsed options to make_tokenizer.
#pragma once

#include <CLI/CLI.hpp>

#include "tessel/data/tokenizer.h"

namespace tessel {

// The flags parse into `options`, which must outlive app.parse().
void add_tokenizer_flags(CLI::App& app, TokenizerOptions& options);

}  // namespace tessel
