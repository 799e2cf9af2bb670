// The regular expressions of pre-tokenizers (GPT-2's, cl100k's, a tokenizer.json's Split), run
// by PCRE2 with its JIT: Unicode properties (\p{L}), lookahead and possessive quantifiers, which
// std::regex lacks. Patterns are written for Rust's regex, Oniguruma or Python's regex module,
// where \s is Unicode's White_Space; PCRE2's \s differs on a few code points (U+0085, U+180E
// under some versions), so \s and \S are rewritten to the White_Space property.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

struct pcre2_real_code_8;

namespace tessel {

class Regex {
 public:
  // Throws tessel::Error "WHERE: bad regular expression at offset N: reason".
  Regex(std::string_view pattern, std::string_view where);
  ~Regex();
  Regex(Regex&& other) noexcept;
  Regex& operator=(Regex&& other) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The leftmost match starting at or after `start` in `text` (valid UTF-8, not checked here):
  // true with [begin, end), or false. Lookbehind may see the text before `start`. Safe to call
  // from several threads at once.
  bool find(std::string_view text, size_t start, size_t& begin, size_t& end) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;  // as given
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

// The pattern with \s and \S replaced by \p{White_Space} and \P{White_Space}.
std::string white_space_pattern(std::string_view pattern);

}  // namespace tessel
