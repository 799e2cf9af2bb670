#include "tessel/data/tokenizers/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/unicode_classes.h"

namespace tessel {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Per-thread match state: the match data (one pair of offsets), and a JIT stack that grows when
// a pattern backtracks deeper than the default 32 KiB machine stack allows.
// `counted`: the counted search's, its callout charging the budget.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_match_context* counted = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = nullptr;
  size_t stack_size = 0;
  ~ThreadMatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_match_context_free(counted);
    if (stack) pcre2_jit_stack_free(stack);
  }
  bool grow_stack() {
    const size_t next = stack_size == 0 ? (size_t{1} << 20) : stack_size * 8;
    if (next > (size_t{1} << 30)) return false;
    if (stack) pcre2_jit_stack_free(stack);
    stack = pcre2_jit_stack_create(32 * 1024, next, nullptr);
    if (!stack) return false;
    stack_size = next;
    pcre2_jit_stack_assign(context, nullptr, stack);
    return true;
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

// Called before every item of the counted pattern: one step of the budget; a negative return
// ends the search with that code.
int charge_step(pcre2_callout_block*, void* budget) {
  return --static_cast<MatchBudget*>(budget)->left < 0 ? PCRE2_ERROR_CALLOUT : 0;
}

pcre2_code* compile(const std::string& translated, uint32_t options, int& error, PCRE2_SIZE& offset) {
  return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                       PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C | options, &error, &offset, nullptr);
}

}  // namespace

namespace {

void append_ranges(std::string& out, const std::vector<CodePointRange>& ranges) {
  auto item = [&](char32_t a, char32_t b) {
    out += fmt::format("\\x{{{:x}}}", static_cast<uint32_t>(a));
    if (b != a) out += fmt::format("-\\x{{{:x}}}", static_cast<uint32_t>(b));
  };
  for (const CodePointRange& r : ranges) {  // UTF-8 has no surrogates, and PCRE2 refuses them in a class
    if (r.first < 0xD800 && r.last > 0xDFFF) {
      item(r.first, 0xD7FF);
      item(0xE000, r.last);
    } else if (r.last < 0xD800 || r.first > 0xDFFF) {
      item(r.first, r.last);
    } else if (r.first < 0xD800) {
      item(r.first, 0xD7FF);
    } else if (r.last > 0xDFFF) {
      item(0xE000, r.last);
    }
  }
}

// A property escape (after the backslash: "s", "p{L}", "PL", "p{^L}", ...): its property and
// whether it is negated, with the escape's length; nullopt for escapes left to PCRE2.
struct PropertyEscape {
  uint32_t mask;
  bool negated;
};
std::optional<PropertyEscape> parse_property_escape(std::string_view rest, size_t& length) {
  const char c = rest[0];
  length = 1;
  const bool upper = std::isupper(static_cast<unsigned char>(c)) != 0;
  switch (std::tolower(static_cast<unsigned char>(c))) {
    case 's': return PropertyEscape{kWhiteSpaceMask, upper};
    case 'd': return PropertyEscape{*unicode_property_mask("Nd"), upper};
    case 'p': break;
    default: return std::nullopt;
  }
  if (rest.size() < 2) return std::nullopt;
  std::string_view name;
  if (rest[1] == '{') {
    const size_t close = rest.find('}');
    if (close == std::string_view::npos) return std::nullopt;
    name = rest.substr(2, close - 2);
    length = close + 1;
  } else {
    name = rest.substr(1, 1);
    length = 2;
  }
  bool negated = upper;
  if (!name.empty() && name[0] == '^') {
    negated = !negated;
    name.remove_prefix(1);
  }
  const std::optional<uint32_t> mask = unicode_property_mask(name);
  if (!mask) return std::nullopt;
  return PropertyEscape{*mask, negated};
}

// The Unicode version of the PCRE2 linked in.
const std::string& pcre2_unicode_version() {
  static const std::string version = [] {
    PCRE2_UCHAR buf[64] = {};
    pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, buf);
    return std::string(reinterpret_cast<const char*>(buf));
  }();
  return version;
}

// The class items (what goes between [ and ]) of a property at kUnicodeVersion. Where PCRE2's
// own tables are that version, or the base version with the set only grown since, its \p{..}
// items plus the code points added since (a few ranges: its two-stage table lookup stays fast);
// otherwise every range.
std::string class_items(uint32_t mask) {
  std::string out;
  std::optional<std::vector<CodePointRange>> added;
  if (mask != kWhiteSpaceMask) {
    if (pcre2_unicode_version() == unicode_version()) added.emplace();
    else if (pcre2_unicode_version() == base_unicode_version()) added = added_since_base(mask);
  }
  if (!added) {
    append_ranges(out, property_ranges(mask));
    return out;
  }
  for (const std::string& name : category_names(mask)) out += "\\p{" + name + "}";
  append_ranges(out, *added);
  return out;
}

}  // namespace

std::string unicode_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() * 4);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      if (pattern[i + 1] == 'Q') {  // \Q...\E: literal text
        const size_t e = pattern.find("\\E", i + 2);
        const size_t stop = e == std::string_view::npos ? pattern.size() : e + 2;
        out.append(pattern.substr(i, stop - i));
        i = stop - 1;
        continue;
      }
      size_t length = 0;
      if (const std::optional<PropertyEscape> e = parse_property_escape(pattern.substr(i + 1), length)) {
        if (!in_class) out += e->negated ? "[^" + class_items(e->mask) + "]" : "[" + class_items(e->mask) + "]";
        else if (!e->negated) out += class_items(e->mask);
        else append_ranges(out, complement(property_ranges(e->mask)));  // a complement inside a class
      } else {
        out.append(pattern.substr(i, 1 + length));
      }
      i += length;
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      // "[]" and "[^]" open with a literal ']'.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
    } else if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t e = pattern.find(":]", i + 2);  // a POSIX class [:alpha:]
      if (e != std::string_view::npos) {
        out.append(pattern.substr(i + 1, e + 2 - (i + 1)));
        i = e + 1;
      }
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

Regex::Regex(std::string_view pattern, std::string_view where) : pattern_(pattern) {
  const std::string translated = unicode_pattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = compile(translated, 0, error, offset);
  if (code_) counted_ = compile(translated, PCRE2_AUTO_CALLOUT, error, offset);
  if (!code_ || !counted_) {
    // The offset is into the rewritten pattern; give the original beside the reason.
    fail("{}: bad regular expression {:?}: {} (offset {} of the PCRE2 form)", where,
         std::string(pattern), pcre2_message(error), offset);
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  pcre2_code_free(code_);  // null: nothing
  pcre2_code_free(counted_);
}

Regex::Regex(Regex&& other) noexcept
    : pattern_(std::move(other.pattern_)), code_(other.code_), counted_(other.counted_), jit_(other.jit_) {
  other.code_ = other.counted_ = nullptr;
}

Regex& Regex::operator=(Regex&& other) noexcept {
  if (this != &other) {
    pcre2_code_free(code_);
    pcre2_code_free(counted_);
    pattern_ = std::move(other.pattern_);
    code_ = other.code_;
    counted_ = other.counted_;
    jit_ = other.jit_;
    other.code_ = other.counted_ = nullptr;
  }
  return *this;
}

bool Regex::find(std::string_view text, size_t start, size_t& begin, size_t& end, MatchBudget& budget) const {
  ThreadMatchState& state = thread_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  pcre2_set_match_limit(state.context, kFastSteps);
  int rc = 0;
  do {
    rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.data, state.context)
              : pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.data, state.context);
  } while (rc == PCRE2_ERROR_JIT_STACKLIMIT && state.grow_stack());
  // A start position needed more than the fast limit: the search again, each step counted.
  if (rc == PCRE2_ERROR_MATCHLIMIT) {
    pcre2_set_callout(state.counted, charge_step, &budget);
    rc = pcre2_match(counted_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.data, state.counted);
  }
  if (rc >= 0) {
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    begin = ovector[0];
    end = ovector[1];
    return true;
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc == PCRE2_ERROR_CALLOUT)
    fail("regular expression {:?} takes more than {} backtracking steps on a text of {} bytes (the budget "
         "of a text: {} + {} a byte): a pattern this slow is refused",
         pattern_, budget.total, budget.bytes, MatchBudget::kBase, MatchBudget::kPerByte);
  fail("regular expression {:?} failed at byte {}: {}", pattern_, start, pcre2_message(rc));
}

}  // namespace tessel
