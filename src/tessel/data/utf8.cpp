#include "tessel/data/utf8.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "tessel/core/error.h"

namespace tessel {

std::optional<size_t> first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // ASCII runs, eight bytes at a time: most text is mostly ASCII.
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, s + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The lead byte fixes the length and the allowed range of the second byte (which rules out
    // overlong forms, surrogates and code points above U+10FFFF).
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if ((s[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return std::nullopt;
}

void check_utf8(std::string_view text, std::string_view what) {
  const std::optional<size_t> bad = first_invalid_utf8(text);
  if (!bad) return;
  std::string bytes;
  for (size_t k = *bad; k < text.size() && k < *bad + 4; ++k)
    bytes += fmt::format("{}0x{:02X}", bytes.empty() ? "" : " ", static_cast<unsigned char>(text[k]));
  fail("{}: invalid UTF-8 at byte offset {} (bytes {})", what, *bad, bytes);
}

}  // namespace tessel
