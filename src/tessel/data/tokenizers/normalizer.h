// tokenizer.json's normalizers (NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend, and a
// Sequence of them) and the text half of its Metaspace pre-tokenizer: what is done to each
// segment of the input between added tokens before it is pre-tokenized, as Hugging Face's
// tokenizers library does it. Normalization forms come from utf8proc, at the library's Unicode
// version (unicode_classes.h: normalization_unicode_version).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/data/tokenizers/regex.h"

namespace tessel {

struct NormalizerStep {
  enum class Kind { Nfc, Nfd, Nfkc, Nfkd, Lowercase, Strip, Replace, Prepend };
  Kind kind = Kind::Nfc;
  std::string text;              // Replace: the literal to replace; Prepend: what is put first
  std::string content;           // Replace: what replaces it
  std::shared_ptr<Regex> regex;  // Replace with a {"Regex": ...} pattern (else `text` is literal)
  bool left = false, right = false;  // Strip: white space off the start, the end
};

// Metaspace: ' ' becomes the replacement ("▁"), which is put first (Always; First: only on the
// segment that starts the input; Never) unless the segment starts with it.
struct Metaspace {
  std::string replacement = "\xE2\x96\x81";
  enum class Prepend { Always, First, Never } prepend = Prepend::Always;
};

class Normalizer {
 public:
  std::vector<NormalizerStep> steps;

  bool empty() const { return steps.empty(); }
  std::string apply(std::string_view text) const;
};

// `text` with every occurrence of `from` (non-empty) replaced by `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

std::string apply_metaspace(const Metaspace& m, std::string_view text, bool starts_input);

}  // namespace tessel
