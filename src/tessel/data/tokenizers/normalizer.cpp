#include "tessel/data/tokenizers/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/unicode_classes.h"

namespace tessel {

namespace {

// NFC leaves text alone when every character is below U+0300: the combining marks, Hangul jamo
// and the singletons that NFC changes all lie above (lead bytes 0xCC and up).
bool may_change_under_nfc(std::string_view text) {
  for (unsigned char c : text)
    if (c >= 0xCC) return true;
  return false;
}

std::string utf8proc_form(std::string_view text, int options) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | options));
  TESSEL_CHECK(n >= 0, "Unicode normalization failed: {}", utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

// Calls fn(code point, its bytes) for each character of valid UTF-8 `text`.
template <typename F>
void for_each_char(std::string_view text, F&& fn) {
  for (size_t i = 0; i < text.size();) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                                                static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    const size_t len = n > 0 ? static_cast<size_t>(n) : 1;
    fn(static_cast<char32_t>(cp), text.substr(i, len));
    i += len;
  }
}

// Hugging Face's normalization forms: its crate knows Unicode 9.0 only, and keeps a character
// assigned since then as it is, a starter that nothing reorders or composes across. So the text
// between such characters is normalized alone (by utf8proc, at a later version: normalization
// does not change for characters already assigned), and they are kept between the pieces.
std::string library_form(std::string_view text, int options) {
  std::string out;
  size_t piece = 0, at = 0;
  for_each_char(text, [&](char32_t cp, std::string_view bytes) {
    if (unknown_to_normalization(cp)) {
      if (at > piece) out += utf8proc_form(text.substr(piece, at - piece), options);
      out += bytes;
      piece = at + bytes.size();
    }
    at += bytes.size();
  });
  if (piece == 0) return utf8proc_form(text, options);
  if (piece < text.size()) out += utf8proc_form(text.substr(piece), options);
  return out;
}

// The library's Lowercase: Rust's char::to_lowercase on each character (Unicode 17): İ (U+0130)
// becomes "i̇" as SpecialCasing says, the others their simple lowercase mapping. Character by
// character, so without the final-sigma rule of str::to_lowercase: Σ is always σ.
std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for_each_char(text, [&](char32_t cp, std::string_view bytes) {
    if (cp < 0x80) {
      out += static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    } else if (cp == 0x130) {
      out += "i\xCC\x87";
    } else {
      const char32_t lower = unicode_simple_lowercase(cp);
      if (lower == cp) {
        out += bytes;
      } else {
        utf8proc_uint8_t buf[4];
        out.append(reinterpret_cast<const char*>(buf),
                   static_cast<size_t>(utf8proc_encode_char(static_cast<utf8proc_int32_t>(lower), buf)));
      }
    }
  });
  return out;
}

std::string strip(std::string_view text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  if (left) {
    size_t pos = 0;
    bool stop = false;
    for_each_char(text, [&](char32_t cp, std::string_view bytes) {
      if (stop) return;
      if (is_unicode_white_space(cp)) pos += bytes.size();
      else stop = true;
    });
    begin = pos;
  }
  if (right) {
    size_t last_end = begin;  // the end of the last character that is not white space
    size_t pos = 0;
    for_each_char(text, [&](char32_t cp, std::string_view bytes) {
      pos += bytes.size();
      if (pos > begin && !is_unicode_white_space(cp)) last_end = pos;
    });
    end = last_end;
  }
  return std::string(text.substr(begin, end - begin));
}

std::string replace_regex(std::string_view text, const Regex& regex, std::string_view to) {
  std::string out;
  size_t pos = 0, search = 0, b = 0, e = 0;
  MatchBudget budget(text.size());
  while (search <= text.size() && regex.find(text, search, b, e, budget)) {
    out.append(text.substr(pos, b - pos));
    out += to;
    if (e == b) {  // an empty match: step over one character
      if (b >= text.size()) { pos = b; break; }
      size_t next = b + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      out.append(text.substr(b, next - b));
      pos = search = next;
    } else {
      pos = search = e;
    }
  }
  if (pos < text.size()) out.append(text.substr(pos));
  return out;
}

}  // namespace

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t at; (at = text.find(from, pos)) != std::string_view::npos; pos = at + from.size()) {
    out.append(text.substr(pos, at - pos));
    out += to;
  }
  out.append(text.substr(pos));
  return out;
}

std::string Normalizer::apply(std::string_view input) const {
  std::string text(input);
  for (const NormalizerStep& s : steps) {
    switch (s.kind) {
      case NormalizerStep::Kind::Nfc:
        if (may_change_under_nfc(text)) text = library_form(text, UTF8PROC_COMPOSE);
        break;
      case NormalizerStep::Kind::Nfd: text = library_form(text, UTF8PROC_DECOMPOSE); break;
      case NormalizerStep::Kind::Nfkc: text = library_form(text, UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
      case NormalizerStep::Kind::Nfkd: text = library_form(text, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); break;
      case NormalizerStep::Kind::Lowercase: text = lowercase(text); break;
      case NormalizerStep::Kind::Strip: text = strip(text, s.left, s.right); break;
      case NormalizerStep::Kind::Replace:
        text = s.regex ? replace_regex(text, *s.regex, s.content) : replace_all(text, s.text, s.content);
        break;
      case NormalizerStep::Kind::Prepend:
        if (!text.empty()) text.insert(0, s.text);
        break;
    }
  }
  return text;
}

std::string apply_metaspace(const Metaspace& m, std::string_view text, bool starts_input) {
  std::string out = replace_all(text, " ", m.replacement);
  const bool prepend = m.prepend == Metaspace::Prepend::Always || (m.prepend == Metaspace::Prepend::First && starts_input);
  if (prepend && !out.starts_with(m.replacement)) out.insert(0, m.replacement);
  return out;
}

}  // namespace tessel
