#include "tessel/data/tokenizers/byte_level.h"

#include <array>
#include <cstdint>

namespace tessel {

namespace {

struct ByteLevelTable {
  std::array<uint32_t, 256> code_point{};  // byte -> character
  std::array<int16_t, 324> byte_of{};      // character (< 324) -> byte, or -1

  ByteLevelTable() {
    byte_of.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      code_point[b] = printable ? b : next++;
      byte_of[code_point[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTable& table() {
  static const ByteLevelTable t;
  return t;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {  // the alphabet stays below U+0800: two bytes
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, table().code_point[b]);
  return out;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < text.size() &&
               (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return std::nullopt;  // three- and four-byte characters are outside the alphabet
    }
    if (cp >= table().byte_of.size() || table().byte_of[cp] < 0) return std::nullopt;
    out += static_cast<char>(table().byte_of[cp]);
  }
  return out;
}

}  // namespace tessel
