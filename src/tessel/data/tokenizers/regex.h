// The regular expressions of pre-tokenizers (GPT-2's, cl100k's, a tokenizer.json's Split), run
// by PCRE2 with its JIT: Unicode properties (\p{L}), lookahead and possessive quantifiers, which
// std::regex lacks. Patterns are written for Oniguruma (Hugging Face's tokenizers), Rust's regex
// or Python's regex module at Unicode 16, where \s is White_Space; the system's PCRE2 knows an
// older Unicode (Debian 12's: 14) and its own \s, so the property escapes (\p{..}, \P{..},
// \s, \d and their negations) are rewritten to explicit ranges from unicode_classes.h.
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

// The pattern with \p{X}, \P{X}, \pX, \s, \S, \d and \D (X a General_Category or White_Space)
// replaced by the code points unicode_classes.h gives them, inside a character class or as one:
// PCRE2's own \p{X} with the code points added since its Unicode version where that is the
// table's base version (or the table's own), else every range. Other escapes (scripts, \w) are
// PCRE2's.
std::string unicode_pattern(std::string_view pattern);

}  // namespace tessel
