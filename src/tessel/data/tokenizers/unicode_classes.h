// Unicode character properties at one pinned version (kUnicodeVersion, the one Hugging Face's
// tokenizers library uses for its classes and case: 16.0), from tables generated out of the Unicode Character Database by
// scripts/gen-unicode-tables.mjs (unicode_tables.inc). The pre-tokenizer patterns' \p{L}, \s, ...
// are rewritten to these ranges (regex.cpp), so that what a pattern matches does not depend on
// the Unicode version of the system's PCRE2 (Debian 12's 10.42 knows Unicode 14).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessel {

// The General_Category values, in the generator's order.
enum class UnicodeCategory : uint8_t {
  Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me, Nd, Nl, No, Pc, Pd, Ps, Pe, Pi, Pf, Po,
  Sm, Sc, Sk, So, Zs, Zl, Zp, Cc, Cf, Cs, Co, Cn,
};

struct CodePointRange {
  char32_t first, last;  // inclusive
};

// "16.0.0".
std::string_view unicode_version();

UnicodeCategory unicode_category(char32_t cp);
bool is_unicode_white_space(char32_t cp);
inline bool is_letter(UnicodeCategory c) { return c <= UnicodeCategory::Lo; }
inline bool is_mark(UnicodeCategory c) { return c >= UnicodeCategory::Mn && c <= UnicodeCategory::Me; }
inline bool is_number(UnicodeCategory c) { return c >= UnicodeCategory::Nd && c <= UnicodeCategory::No; }
inline bool is_punctuation(UnicodeCategory c) { return c >= UnicodeCategory::Pc && c <= UnicodeCategory::Po; }

// A property as regular expressions name it: a General_Category by its short or long name, one
// letter for its group ("L", "Letter"), "L&" / "LC" / "Cased_Letter" (case, spaces, '-' and '_'
// ignored), as the set of its categories (bit i: UnicodeCategory i); or White_Space
// ("White_Space", "space"): kWhiteSpaceMask. nullopt for any other name (scripts, ...).
constexpr uint32_t kWhiteSpaceMask = 1u << 31;
std::optional<uint32_t> unicode_property_mask(std::string_view name);
// The code points of a property mask, sorted ranges.
std::vector<CodePointRange> property_ranges(uint32_t mask);
// The short names of the mask's categories, a whole group as its letter: {"L", "Nd"}.
std::vector<std::string> category_names(uint32_t mask);

// The older Unicode version the table also knows ("14.0.0", Debian 12's PCRE2's), and what the
// mask's set gained since it: nullopt when it also lost a code point (U+1171E went from Mn to Mc),
// so the older version's set plus these is not the current one.
std::string_view base_unicode_version();
std::optional<std::vector<CodePointRange>> added_since_base(uint32_t mask);

// The simple lowercase mapping (UnicodeData.txt's), cp itself where there is none, at the
// Unicode version of the Rust standard library that Hugging Face's Lowercase calls ("17.0.0").
std::string_view case_unicode_version();
char32_t unicode_simple_lowercase(char32_t cp);

// The Unicode version of Hugging Face's normalizers (NFC, NFD, NFKC, NFKD: the Rust crate
// unicode-normalization-alignments, "9.0.0"), and whether it leaves `cp` unassigned: such a
// character has no decomposition and combining class 0 there, so those normalizers keep it as it
// is and nothing reorders or composes across it.
std::string_view normalization_unicode_version();
bool unknown_to_normalization(char32_t cp);

// Shorthand: property_ranges of the name's mask.
std::optional<std::vector<CodePointRange>> unicode_property_ranges(std::string_view name);

// The code points not in `ranges` (sorted, disjoint).
std::vector<CodePointRange> complement(const std::vector<CodePointRange>& ranges);

}  // namespace tessel
