// Added and special tokens (tokenizer.json's "added_tokens", SentencePiece's <EOD> & co.): text
// equal to one is cut out before normalization and pre-tokenization and becomes its id, the
// longest at the leftmost place where one matches (one that single_word refuses stays text).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
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
  // The longest token that text[p..] starts with: its index into tokens_ (-1: none) and length.
  std::pair<int32_t, size_t> longest_at(std::string_view text, size_t p) const;

  // The tokens' contents as a trie of bytes (node 0 the root, its children in root_): finding
  // the longest match at a place is one walk, however many tokens and lengths there are (Gemma 3
  // has 6,415, among them runs of 1 to 31 line breaks, tabs and "▁").
  struct Node {
    int32_t token = -1;                                    // the token spelled up to here, or -1
    std::vector<std::pair<unsigned char, int32_t>> next;  // the child nodes by byte (not the root's)
  };
  int32_t child(int32_t node, unsigned char c) const;
  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  int32_t root_[256] = {};  // the root's children by byte; 0 (the root itself): no token starts with it
};

}  // namespace tessel
