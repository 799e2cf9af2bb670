#include "tessel/data/null_tokenizer.h"

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel {

NullTokenizer::NullTokenizer(int32_t vocab_size) : vocab_size_(vocab_size) {
  TESSEL_CHECK(vocab_size >= 1, "--tokenizer-type NullTokenizer needs --vocab-size N (N >= 1), got {}",
               vocab_size);
}

std::vector<int32_t> NullTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> tokens;
  if (text.empty()) return tokens;
  for (size_t begin = 0;;) {
    const size_t end = std::min(text.find(' ', begin), text.size());
    std::string_view word = text.substr(begin, end - begin);
    const size_t first = word.find_first_not_of(" \t\n\r\f\v");
    word = first == std::string_view::npos ? std::string_view() : word.substr(first);
    word = word.substr(0, word.find_last_not_of(" \t\n\r\f\v") + 1);
    if (!word.empty() && word[0] == '+') word.remove_prefix(1);
    int64_t id = 0;
    bool number = !word.empty() && word.size() <= 10;
    for (char c : word) {
      number = number && c >= '0' && c <= '9';
      if (number) id = id * 10 + (c - '0');
    }
    TESSEL_CHECK(number && id < vocab_size_,
                 "NullTokenizer reads token ids in [0, {}) separated by single spaces: {:?} (at "
                 "byte {}) is not one",
                 vocab_size_, text.substr(begin, end - begin), begin);
    tokens.push_back(static_cast<int32_t>(id));
    if (end == text.size()) return tokens;
    begin = end + 1;
  }
}

std::string NullTokenizer::decode(std::span<const int32_t> tokens) const {
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    TESSEL_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size_,
                 "NullTokenizer: token {} at position {} is outside the vocabulary [0, {})",
                 tokens[i], i, vocab_size_);
    if (i > 0) text += ' ';
    text += std::to_string(tokens[i]);
  }
  return text;
}

}  // namespace tessel
