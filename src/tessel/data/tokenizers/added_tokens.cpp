#include "tessel/data/tokenizers/added_tokens.h"

#include <utf8proc.h>

#include <cstdint>

namespace tessel {

namespace {

// The code point starting at text[i] (valid UTF-8) and its length.
int32_t code_point_at(std::string_view text, size_t i, size_t* len) {
  utf8proc_int32_t cp = 0;
  const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                                              static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
  *len = n > 0 ? static_cast<size_t>(n) : 1;
  return cp;
}

// The start of the code point that ends just before text[i].
size_t previous_start(std::string_view text, size_t i) {
  do --i;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80);
  return i;
}

bool is_white_space(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_word_char(int32_t cp) {
  if (cp == '_') return true;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

}  // namespace

AddedTokenSplitter::AddedTokenSplitter(const std::vector<AddedToken>& tokens) : nodes_(1) {
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    int32_t node = 0;
    for (const char c : t.content) {
      int32_t next = child(node, static_cast<unsigned char>(c));
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        if (node == 0) root_[static_cast<unsigned char>(c)] = next;
        else nodes_[node].next.emplace_back(static_cast<unsigned char>(c), next);
        nodes_.emplace_back();
      }
      node = next;
    }
    if (nodes_[node].token >= 0) continue;  // the same content again: the first one holds
    nodes_[node].token = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(t);
  }
}

int32_t AddedTokenSplitter::child(int32_t node, unsigned char c) const {
  if (node == 0) return root_[c] > 0 ? root_[c] : -1;
  for (const auto& [byte, next] : nodes_[node].next)
    if (byte == c) return next;
  return -1;
}

std::pair<int32_t, size_t> AddedTokenSplitter::longest_at(std::string_view text, size_t p) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = p; i < text.size(); ++i) {
    node = child(node, static_cast<unsigned char>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token >= 0) best = {nodes_[node].token, i - p + 1};
  }
  return best;
}

bool AddedTokenSplitter::find(std::string_view text, size_t from, Match& m) const {
  for (size_t p = from; p < text.size(); ++p) {
    if (root_[static_cast<unsigned char>(text[p])] == 0) continue;
    const auto [index, len] = longest_at(text, p);
    if (index < 0) continue;
    const AddedToken& t = tokens_[index];
    size_t n = 0;
    // Refused by single_word, the match is passed over whole, as the library's search for
    // non-overlapping leftmost-longest matches does: no shorter token here, none inside it.
    if (t.single_word && ((p > 0 && is_word_char(code_point_at(text, previous_start(text, p), &n))) ||
                          (p + len < text.size() && is_word_char(code_point_at(text, p + len, &n))))) {
      p += len - 1;
      continue;
    }
    m = {p, p + len, t.id};
    while (t.lstrip && m.begin > from) {
      const size_t prev = previous_start(text, m.begin);
      if (!is_white_space(code_point_at(text, prev, &n))) break;
      m.begin = prev;
    }
    while (t.rstrip && m.end < text.size() && is_white_space(code_point_at(text, m.end, &n))) m.end += n;
    return true;
  }
  return false;
}

}  // namespace tessel
