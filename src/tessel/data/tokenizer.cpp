#include "tessel/data/tokenizer.h"

#include <fmt/format.h>

#include "tessel/core/error.h"

namespace tessel {

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

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options) {
  if (options.type == "ByteTokenizer" || options.type == "byte") return std::make_unique<ByteTokenizer>();
  throw Error(fmt::format("--tokenizer-type {}: unknown (known: ByteTokenizer)", options.type));
}

}  // namespace tessel
