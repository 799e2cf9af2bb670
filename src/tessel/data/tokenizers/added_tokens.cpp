#include "tessel/data/tokenizers/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>

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

AddedTokenSplitter::AddedTokenSplitter(const std::vector<AddedToken>& tokens) {
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    if (by_content_.emplace(t.content, tokens_.size()).second) tokens_.push_back(t);
  }
  for (const AddedToken& t : tokens_) {
    first_byte_[static_cast<unsigned char>(t.content[0])] = true;
    if (std::find(lengths_.begin(), lengths_.end(), t.content.size()) == lengths_.end())
      lengths_.push_back(t.content.size());
  }
  std::sort(lengths_.rbegin(), lengths_.rend());
}

bool AddedTokenSplitter::find(std::string_view text, size_t from, Match& m) const {
  for (size_t p = from; p < text.size(); ++p) {
    if (!first_byte_[static_cast<unsigned char>(text[p])]) continue;
    for (size_t len : lengths_) {
      if (p + len > text.size()) continue;
      const auto it = by_content_.find(text.substr(p, len));
      if (it == by_content_.end()) continue;
      const AddedToken& t = tokens_[it->second];
      size_t n = 0;
      if (t.single_word && ((p > 0 && is_word_char(code_point_at(text, previous_start(text, p), &n))) ||
                            (p + len < text.size() && is_word_char(code_point_at(text, p + len, &n)))))
        continue;
      m = {p, p + len, t.id};
      while (t.lstrip && m.begin > from) {
        const size_t prev = previous_start(text, m.begin);
        if (!is_white_space(code_point_at(text, prev, &n))) break;
        m.begin = prev;
      }
      while (t.rstrip && m.end < text.size() && is_white_space(code_point_at(text, m.end, &n))) m.end += n;
      return true;
    }
  }
  return false;
}

}  // namespace tessel
