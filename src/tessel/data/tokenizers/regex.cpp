#include "tessel/data/tokenizers/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "tessel/core/error.h"

namespace tessel {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Per-thread match state: the match data (one pair of offsets), and a JIT stack that grows when
// a pattern backtracks deeper than the default 32 KiB machine stack allows.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = nullptr;
  size_t stack_size = 0;
  ~ThreadMatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
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

}  // namespace

std::string white_space_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[i + 1];
      if (next == 's') out += "\\p{White_Space}";
      else if (next == 'S') out += "\\P{White_Space}";
      else out.append(pattern.substr(i, 2));
      ++i;  // an escaped character is never the start of another escape
    } else {
      out += pattern[i];
    }
  }
  return out;
}

Regex::Regex(std::string_view pattern, std::string_view where) : pattern_(pattern) {
  const std::string translated = white_space_pattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &error, &offset, nullptr);
  if (!code_) {
    // The offset is into the rewritten pattern; give the original beside the reason.
    fail("{}: bad regular expression {:?}: {} (offset {} of the PCRE2 form)", where,
         std::string(pattern), pcre2_message(error), offset);
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  if (code_) pcre2_code_free(code_);
}

Regex::Regex(Regex&& other) noexcept
    : pattern_(std::move(other.pattern_)), code_(other.code_), jit_(other.jit_) {
  other.code_ = nullptr;
}

Regex& Regex::operator=(Regex&& other) noexcept {
  if (this != &other) {
    if (code_) pcre2_code_free(code_);
    pattern_ = std::move(other.pattern_);
    code_ = other.code_;
    jit_ = other.jit_;
    other.code_ = nullptr;
  }
  return *this;
}

bool Regex::find(std::string_view text, size_t start, size_t& begin, size_t& end) const {
  ThreadMatchState& state = thread_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  for (;;) {
    const int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                                          state.data, state.context)
                        : pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                                      state.data, state.context);
    if (rc >= 0) {
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
      begin = ovector[0];
      end = ovector[1];
      return true;
    }
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && state.grow_stack()) continue;
    fail("regular expression {:?} failed at byte {}: {}", pattern_, start, pcre2_message(rc));
  }
}

}  // namespace tessel
