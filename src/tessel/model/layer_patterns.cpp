// Megatron's layer-pattern flags (--moe-layer-freq, --linear-attention-freq): an interval or a
// Python list expression of 0/1 (model/config.h).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/model/config.h"

namespace tessel {

namespace {

// Megatron's moe_layer_freq and linear_attention_freq strings: a Python list expression of 0/1
// built from list literals, '+' (concatenation), '* integer' (repetition) and parentheses, e.g.
// "([1]*3+[0]*1)*2". `flag` names the flag in the errors.
class PatternParser {
 public:
  PatternParser(const std::string& text, const char* flag) : text_(text), flag_(flag) {}

  std::vector<int> parse() {
    std::vector<int> v = expr();
    skip_space();
    if (pos_ != text_.size()) error("unexpected '{}'", text_[pos_]);
    return v;
  }

 private:
  std::vector<int> expr() {
    std::vector<int> v = term();
    while (accept('+')) {
      std::vector<int> more = term();
      v.insert(v.end(), more.begin(), more.end());
    }
    return v;
  }
  std::vector<int> term() {
    std::vector<int> v = atom();
    while (accept('*')) {
      const int64_t times = integer();
      // A layer per entry, and layers are fewer: refused before "([1]*999999)*999999" fills memory.
      if (static_cast<int64_t>(v.size()) * times > kMaxEntries)
        error("the list grows past {} entries at position {}", kMaxEntries, pos_);
      std::vector<int> repeated;
      for (int64_t i = 0; i < times; ++i) repeated.insert(repeated.end(), v.begin(), v.end());
      v = std::move(repeated);
    }
    return v;
  }
  std::vector<int> atom() {
    if (accept('(')) {
      // Each parenthesis recurses: bounded before the stack runs out.
      if (++depth_ > kMaxDepth) error("parentheses nested deeper than {}", kMaxDepth);
      std::vector<int> v = expr();
      expect(')');
      --depth_;
      return v;
    }
    expect('[');
    std::vector<int> v;
    if (accept(']')) return v;
    do {
      v.push_back(static_cast<int>(integer()));
    } while (accept(','));
    expect(']');
    return v;
  }
  int64_t integer() {
    skip_space();
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (start == pos_ || pos_ - start > 6) error("expected a small integer at position {}", start);
    return std::stoll(text_.substr(start, pos_ - start));
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) error("expected '{}' at position {}", c, pos_);
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) {
    // A long expression is shown by its start: the message stays one readable line.
    const std::string shown = text_.size() <= 80 ? text_ : text_.substr(0, 60) + "…";
    fail("{} \"{}\": {}", flag_, shown, fmt::format(format, std::forward<Args>(args)...));
  }

  static constexpr int kMaxDepth = 64;
  static constexpr int64_t kMaxEntries = 1 << 16;  // the dropout keys' bound on layers (train/plan.cpp)

  const std::string& text_;
  const char* flag_;
  size_t pos_ = 0;
  int depth_ = 0;
};

bool all_digits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

// A layer pattern given as an interval (`every(i)` says whether layer i is marked by it) or as
// the list expression; the list must have num_layers entries of 0 or 1.
template <typename Every>
std::vector<int> parse_layer_pattern(const std::string& text, int num_layers, const char* flag,
                                     Every every) {
  std::vector<int> pattern;
  if (all_digits(text)) {
    TESSEL_CHECK(text.size() <= 6 && std::stoi(text) >= 1, "{} {}: the interval must be at least 1",
                 flag, text);
    const int interval = std::stoi(text);
    for (int i = 0; i < num_layers; ++i) pattern.push_back(every(i, interval) ? 1 : 0);
    return pattern;
  }
  pattern = PatternParser(text, flag).parse();
  TESSEL_CHECK(static_cast<int>(pattern.size()) == num_layers,
               "{} \"{}\" has {} entries for {} layers", flag, text, pattern.size(), num_layers);
  for (int p : pattern)
    TESSEL_CHECK(p == 0 || p == 1, "{} \"{}\": entries must be 0 or 1, not {}", flag, text, p);
  return pattern;
}

// Megatron's linear_attention_freq interval: layer i is full attention (0) iff (i + 1) % N == 0.
bool linear_layer_of_interval(int layer, int interval) { return (layer + 1) % interval != 0; }

}  // namespace

std::vector<int> parse_moe_layer_freq(const std::string& text, int num_layers) {
  return parse_layer_pattern(text, num_layers, "--moe-layer-freq",
                             [](int layer, int interval) { return layer % interval == 0; });
}

std::vector<int> parse_linear_attention_freq(const std::string& text, int num_layers) {
  return parse_layer_pattern(text, num_layers, "--linear-attention-freq", linear_layer_of_interval);
}

}  // namespace tessel
