// Added and special tokens (tokenizer.json's "added_tokens", SentencePiece's <EOD> & co.): text
// equal to one is cut out before normalization and pre-tokenization and becomes its id, the
// longest at the leftmost place where one matches.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessel {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;       // also swallows the white space before it
  bool rstrip = false;       // ... and after it
  bool single_word = false;  // only where no letter, digit or '_' touches it
  bool normalized = false;   // matched on the normalized text (tokenizer.json's "normalized")
};

class AddedTokenSplitter {
 public:
  AddedTokenSplitter() = default;
  explicit AddedTokenSplitter(const std::vector<AddedToken>& tokens);
  bool empty() const { return tokens_.empty(); }

  // Calls on_text(std::string_view) for the text between matches (possibly empty: skipped) and
  // on_token(int32_t id) for each match, in order.
  template <typename Text, typename Token>
  void split(std::string_view text, Text&& on_text, Token&& on_token) const {
    size_t pos = 0;
    Match m;
    while (find(text, pos, m)) {
      if (m.begin > pos) on_text(text.substr(pos, m.begin - pos));
      on_token(m.id);
      pos = m.end;
    }
    if (pos < text.size()) on_text(text.substr(pos));
  }

 private:
  struct Match {
    size_t begin, end;  // with the stripped white space
    int32_t id;
  };
  bool find(std::string_view text, size_t from, Match& m) const;

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, size_t, Hash, std::equal_to<>> by_content_;
  std::vector<size_t> lengths_;                              // distinct content lengths, longest first
  bool first_byte_[256] = {};
};

}  // namespace tessel
