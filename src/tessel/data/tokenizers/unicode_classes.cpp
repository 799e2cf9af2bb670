#include "tessel/data/tokenizers/unicode_classes.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace tessel {

namespace {

struct CategoryRun {
  char32_t first;
  uint8_t category;
};
struct CategoryChange {
  char32_t first, last;
  uint8_t then, now;  // the category at the base version, at this one
};
struct CaseMapping {
  char32_t from, to;
};

#include "tessel/data/tokenizers/unicode_tables.inc"

constexpr char32_t kMaxCodePoint = 0x10FFFF;

// The categories' names: short, long, and the groups they make.
struct CategoryName {
  const char* short_name;
  const char* long_name;
};
constexpr std::array<CategoryName, 30> kNames = {{
    {"Lu", "Uppercase_Letter"}, {"Ll", "Lowercase_Letter"}, {"Lt", "Titlecase_Letter"}, {"Lm", "Modifier_Letter"},
    {"Lo", "Other_Letter"}, {"Mn", "Nonspacing_Mark"}, {"Mc", "Spacing_Mark"}, {"Me", "Enclosing_Mark"},
    {"Nd", "Decimal_Number"}, {"Nl", "Letter_Number"}, {"No", "Other_Number"}, {"Pc", "Connector_Punctuation"},
    {"Pd", "Dash_Punctuation"}, {"Ps", "Open_Punctuation"}, {"Pe", "Close_Punctuation"}, {"Pi", "Initial_Punctuation"},
    {"Pf", "Final_Punctuation"}, {"Po", "Other_Punctuation"}, {"Sm", "Math_Symbol"}, {"Sc", "Currency_Symbol"},
    {"Sk", "Modifier_Symbol"}, {"So", "Other_Symbol"}, {"Zs", "Space_Separator"}, {"Zl", "Line_Separator"},
    {"Zp", "Paragraph_Separator"}, {"Cc", "Control"}, {"Cf", "Format"}, {"Cs", "Surrogate"}, {"Co", "Private_Use"},
    {"Cn", "Unassigned"},
}};
struct GroupName {
  const char* short_name;
  const char* long_name;
};
constexpr std::array<GroupName, 7> kGroups = {{
    {"l", "letter"}, {"m", "mark"}, {"n", "number"}, {"p", "punctuation"}, {"s", "symbol"}, {"z", "separator"}, {"c", "other"},
}};

// Lower case without ' ', '-' and '_' (Unicode's loose matching of property names).
std::string loose(std::string_view name) {
  std::string out;
  for (char c : name)
    if (c != ' ' && c != '-' && c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string_view unicode_version() { return kUnicodeVersion; }

UnicodeCategory unicode_category(char32_t cp) {
  if (cp > kMaxCodePoint) return UnicodeCategory::Cn;
  const auto* end = std::end(kCategoryRuns);
  const auto* run = std::upper_bound(std::begin(kCategoryRuns), end, cp,
                                     [](char32_t c, const CategoryRun& r) { return c < r.first; });
  return static_cast<UnicodeCategory>((run - 1)->category);
}

bool is_unicode_white_space(char32_t cp) {
  for (const CodePointRange& r : kWhiteSpace)
    if (cp >= r.first && cp <= r.last) return true;
  return false;
}

std::string_view case_unicode_version() { return kCaseUnicodeVersion; }

char32_t unicode_simple_lowercase(char32_t cp) {
  const auto* end = std::end(kLowercase);
  const auto* m = std::lower_bound(std::begin(kLowercase), end, cp, [](const CaseMapping& m, char32_t c) { return m.from < c; });
  return m != end && m->from == cp ? m->to : cp;
}

std::string_view normalization_unicode_version() { return kNormalizationUnicodeVersion; }

bool unknown_to_normalization(char32_t cp) {
  if (cp < std::begin(kUnknownToNormalization)->first) return false;
  const auto* end = std::end(kUnknownToNormalization);
  const auto* r = std::upper_bound(std::begin(kUnknownToNormalization), end, cp,
                                   [](char32_t c, const CodePointRange& r) { return c < r.first; });
  return cp <= (r - 1)->last;
}

std::optional<uint32_t> unicode_property_mask(std::string_view name) {
  const std::string key = loose(name);
  if (key == "whitespace" || key == "space" || key == "wspace") return kWhiteSpaceMask;
  if (key == "l&" || key == "lc" || key == "casedletter") return 0b111;  // Lu Ll Lt
  for (size_t i = 0; i < kNames.size(); ++i)
    if (key == loose(kNames[i].short_name) || key == loose(kNames[i].long_name)) return 1u << i;
  for (const GroupName& g : kGroups) {
    if (key != g.short_name && key != g.long_name) continue;
    uint32_t mask = 0;
    for (size_t i = 0; i < kNames.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(kNames[i].short_name[0])) == g.short_name[0]) mask |= 1u << i;
    return mask;
  }
  return std::nullopt;
}

std::vector<CodePointRange> property_ranges(uint32_t mask) {
  if (mask == kWhiteSpaceMask) return std::vector<CodePointRange>(std::begin(kWhiteSpace), std::end(kWhiteSpace));
  std::vector<CodePointRange> out;
  const size_t n = std::size(kCategoryRuns);
  for (size_t i = 0; i < n; ++i) {
    if (!(mask >> kCategoryRuns[i].category & 1)) continue;
    const char32_t first = kCategoryRuns[i].first;
    const char32_t last = i + 1 < n ? kCategoryRuns[i + 1].first - 1 : kMaxCodePoint;
    if (!out.empty() && out.back().last + 1 == first) out.back().last = last;
    else out.push_back({first, last});
  }
  return out;
}

std::vector<std::string> category_names(uint32_t mask) {
  std::vector<std::string> names;
  for (size_t i = 0; i < kNames.size();) {
    const char group = kNames[i].short_name[0];
    size_t end = i;
    uint32_t whole = 0;
    while (end < kNames.size() && kNames[end].short_name[0] == group) whole |= 1u << end++;
    if ((mask & whole) == whole) {
      names.emplace_back(1, group);
    } else {
      for (size_t k = i; k < end; ++k)
        if (mask >> k & 1) names.emplace_back(kNames[k].short_name);
    }
    i = end;
  }
  return names;
}

std::string_view base_unicode_version() { return kBaseUnicodeVersion; }

std::optional<std::vector<CodePointRange>> added_since_base(uint32_t mask) {
  std::vector<CodePointRange> out;
  for (const CategoryChange& c : kChangesSinceBase) {
    const bool then = mask >> c.then & 1, now = mask >> c.now & 1;
    if (then && !now) return std::nullopt;
    if (!now || then) continue;
    if (!out.empty() && out.back().last + 1 == c.first) out.back().last = c.last;
    else out.push_back({c.first, c.last});
  }
  return out;
}

std::optional<std::vector<CodePointRange>> unicode_property_ranges(std::string_view name) {
  const std::optional<uint32_t> mask = unicode_property_mask(name);
  if (!mask) return std::nullopt;
  return property_ranges(*mask);
}

std::vector<CodePointRange> complement(const std::vector<CodePointRange>& ranges) {
  std::vector<CodePointRange> out;
  char32_t next = 0;
  for (const CodePointRange& r : ranges) {
    if (r.first > next) out.push_back({next, r.first - 1});
    next = r.last + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

}  // namespace tessel
