// The regular expressions of pre-tokenizers (GPT-2's, cl100k's, a tokenizer.json's Split), run
// by PCRE2 with its JIT: Unicode properties (\p{L}), lookahead and possessive quantifiers, which
// std::regex lacks. Patterns are written for Oniguruma (Hugging Face's tokenizers), Rust's regex
// or Python's regex module at Unicode 16, where \s is White_Space; the system's PCRE2 knows an
// older Unicode (Debian 12's: 14) and its own \s, so the property escapes (\p{..}, \P{..},
// \s, \d and their negations) are rewritten to explicit ranges from unicode_classes.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

struct pcre2_real_code_8;

namespace tessel {

// The backtracking work the searches over one text may take together, in PCRE2's steps: a search
// tries every start position in turn, and PCRE2's own limit applies to each alone, so a crafted
// pattern 2^20 steps short of it at every position of 46 KB would run for hours. A text gets
// kBase + kPerByte × its bytes; the pre-tokenizer's rules and a normalizer's Replace share one
// budget per text.
struct MatchBudget {
  static constexpr int64_t kBase = 10'000'000;  // PCRE2's default limit for one start position
  static constexpr int64_t kPerByte = 1'000;
  explicit MatchBudget(size_t text_bytes)
      : bytes(static_cast<int64_t>(text_bytes)), total(kBase + kPerByte * bytes), left(total) {}
  int64_t bytes, total;
  int64_t left;  // below 0 once spent
};

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
  // from several threads at once. Each search runs first with a small limit per start position
  // (kFastSteps, ample for every pre-tokenizer pattern in use); one that needs more runs again
  // counted step by step against `budget`, and throws tessel::Error naming the pattern and the
  // budget once the text's is spent.
  bool find(std::string_view text, size_t start, size_t& begin, size_t& end, MatchBudget& budget) const;
  // One search alone, with a budget of its own.
  bool find(std::string_view text, size_t start, size_t& begin, size_t& end) const {
    MatchBudget budget(text.size());
    return find(text, start, begin, end, budget);
  }

  const std::string& pattern() const { return pattern_; }

 private:
  // The fast search's limit per start position. The searches over a text try each position once,
  // so their work is at most this times the text's positions, whatever the pattern.
  static constexpr uint32_t kFastSteps = 10'000;
  std::string pattern_;  // as given
  pcre2_real_code_8* code_ = nullptr;
  pcre2_real_code_8* counted_ = nullptr;  // compiled with a callout before every item: steps counted
  bool jit_ = false;
};

// The pattern with \p{X}, \P{X}, \pX, \s, \S, \d and \D (X a General_Category or White_Space)
// replaced by the code points unicode_classes.h gives them, inside a character class or as one:
// PCRE2's own \p{X} with the code points added since its Unicode version where that is the
// table's base version (or the table's own), else every range. Other escapes (scripts, \w) are
// PCRE2's.
std::string unicode_pattern(std::string_view pattern);

}  // namespace tessel
