// Pre-tokenization: the text cut into pieces by regular expressions before BPE runs on each
// piece, as a tokenizer.json's pre_tokenizer (a Sequence of Split rules and ByteLevel) or
// GPT-2's and tiktoken's single pattern do. Each rule splits every piece the previous rule made,
// so lookarounds never see across a piece's edge (Hugging Face's semantics).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessel/data/tokenizers/regex.h"

namespace tessel {

// What a Split does with the text its pattern matches (tokenizer.json's "behavior").
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct SplitRule {
  Regex regex;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;  // the matches are the pieces and the text between them the delimiters
};

// The named patterns: gpt2 (also r50k, p50k), cl100k (also Llama-3's), o200k, qwen2, and
// Megatron's TikTokenizer v1 and v2. Throws tessel::Error naming the known ones.
std::string named_pattern(std::string_view name);

class PreTokenizer {
 public:
  std::vector<SplitRule> rules;

  // Calls piece(std::string_view) for every non-empty piece of `text`, in order; with no rules
  // the whole text is one piece. Every rule's searches share the text's budget (regex.h).
  template <typename F>
  void for_each_piece(std::string_view text, F&& piece) const {
    MatchBudget budget(text.size());
    split(0, text, piece, budget);
  }

 private:
  template <typename F>
  void split(size_t r, std::string_view text, F& piece, MatchBudget& budget) const;
};

// ---- implementation ----

// One pass of rule r over `text`: segments alternate between delimiters (what the rule cuts on)
// and the text between them; the behaviour decides which become pieces and what they join.
template <typename F>
void PreTokenizer::split(size_t r, std::string_view text, F& piece, MatchBudget& budget) const {
  if (text.empty()) return;
  if (r == rules.size()) {
    piece(text);
    return;
  }
  const SplitRule& rule = rules[r];
  auto emit = [&](size_t b, size_t e) {
    if (e > b) split(r + 1, text.substr(b, e - b), piece, budget);
  };
  size_t run_begin = 0, run_end = 0;  // the pending piece (MergedWith*, Contiguous)
  bool run_is_delim = false;
  auto segment = [&](size_t b, size_t e, bool delim) {
    if (e <= b) return;
    switch (rule.behavior) {
      case SplitBehavior::Removed:
        if (!delim) emit(b, e);
        break;
      case SplitBehavior::Isolated:
        emit(b, e);
        break;
      case SplitBehavior::MergedWithPrevious:  // "a-b--c" -> "a-" "b-" "-" "c"
        if (delim) {
          emit(run_begin, e);
          run_begin = e;
        }
        break;
      case SplitBehavior::MergedWithNext:  // "a-b--c" -> "a" "-b" "-" "-c"
        if (delim) {
          emit(run_begin, b);
          run_begin = b;
        }
        break;
      case SplitBehavior::Contiguous:  // "a-b--c" -> "a" "-" "b" "--" "c"
        if (!(delim && run_is_delim && run_end == b)) {
          emit(run_begin, run_end);
          run_begin = b;
        }
        run_end = e;
        run_is_delim = delim;
        break;
    }
  };
  size_t pos = 0, search = 0, mb = 0, me = 0;
  while (search <= text.size() && rule.regex.find(text, search, mb, me, budget)) {
    if (me == mb) {  // an empty match cuts nothing: look again one character further
      search = mb + 1;
      while (search < text.size() && (static_cast<unsigned char>(text[search]) & 0xC0) == 0x80) ++search;
      continue;
    }
    segment(pos, mb, rule.invert);
    segment(mb, me, !rule.invert);
    pos = search = me;
  }
  segment(pos, text.size(), rule.invert);
  switch (rule.behavior) {
    case SplitBehavior::MergedWithPrevious:
    case SplitBehavior::MergedWithNext:
      emit(run_begin, text.size());
      break;
    case SplitBehavior::Contiguous:
      emit(run_begin, run_end);
      break;
    default:
      break;
  }
}

}  // namespace tessel
