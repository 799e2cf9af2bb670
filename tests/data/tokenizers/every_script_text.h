// The text the tokenizer.json references (the Hugging Face tokenizers library) are compared on:
// a few characters of every run of letters, digits, marks, punctuation and symbols in Unicode
// 16.0 (so every script, every script's digits, emoji up to Unicode 16, the letters added in 15
// and 16), then piles of combining marks, NFD input, control characters, long white space runs,
// contractions and case, and the special-token texts of the tested models.
#pragma once

#include <string>

#include "tessel/data/tokenizers/unicode_classes.h"

namespace tessel::testing {

inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | cp >> 6);
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | cp >> 12);
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | cp >> 18);
    out += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

inline std::string every_script_text() {
  std::string out;
  // Runs of one category group: a word of up to 6 letters, 10 digits, 3 symbols, 2 marks on a
  // letter, 2 punctuation marks; a line break every 12 runs.
  auto group = [](char32_t cp) -> char {
    const UnicodeCategory c = unicode_category(cp);
    if (is_letter(c)) return 'L';
    if (c == UnicodeCategory::Nd) return 'D';
    if (is_mark(c)) return 'M';
    if (is_punctuation(c)) return 'P';
    if (c >= UnicodeCategory::Sm && c <= UnicodeCategory::So) return 'S';
    return 0;
  };
  int runs = 0;
  for (char32_t cp = 0xA0; cp < 0x32000;) {
    const char g = group(cp);
    char32_t end = cp + 1;
    while (end < 0x32000 && group(end) == g) ++end;
    if (g) {
      const char32_t take = g == 'L' ? 6 : g == 'D' ? 10 : g == 'S' ? 3 : 2;
      if (g == 'M') out += 'a';
      for (char32_t c = cp; c < cp + take && c < end; ++c) append_utf8(out, c);
      out += ++runs % 12 == 0 ? "\n" : " ";
    }
    cp = end;
  }
  out += "\nMarks: Z\u0334\u0321\u031B\u035A\u031C\u0353\u034E\u032C\u0324\u031E\u0333\u031D\u0339\u032F\u0355\u0347 "
         "a\u0301\u0302\u0303\u0304\u0305\u0306\u0307\u0308 \u0915\u094D\u0937 \u0E01\u0E34\u0E48\n"
         "NFD: Cafe\u0301 A\u030Angstro\u0308m \u1100\u1161\u11A8 \u1112\u1161\u11AB\u1100\u1173\u11AF "
         "\u0041\u030A \u212B \u00C5 \uFB01 \u2460 \u00BD \uFF21\uFF22\uFF23\n"
         "Controls: a\x01" "b\x07" "c\x1B[0m d\x7F" "e \u0085 \u200B\u200C\u200D \uFEFF \u2028 \u2029 \u00AD\n"
         "Space:" + std::string(64, ' ') + "x\t\t\t\t\t\ty\n\n\n\n\r\n\r\n \u00A0\u00A0\u3000\u3000\u2003 z   \n"
         "Words: I'm you're they'll we've she'd it's DON'T He'S O'Neil's HELLO hello HeLLo \u0130stanbul \u03A3\u039F\u03A3 "
         "\u1E9E stra\u00DFe\n"
         "Digits: 1234567890 3.14159 \u0661\u0662\u0663 \u0967\u0968\u0969 \uFF11\uFF12\uFF13 \u00B2\u00B3 \u2167 \U0001D7D9\n"
         "New: I love it \U0001FA77 \U0001FAE9\U0001FAC6\U0001FABE\U0001FADC \u1C89\u1C8A \U0001CC00\U0001CC01 "
         "\U00016100\U00016101 \U00016D40\U00016D41 \U00010D50\U00010D51 \U0001E5D0\U0001E5D1 \U00011BC0\U00011BC1\n"
         "Specials: <s>x</s> <unk> <bos>y<eos> <pad> <start_of_turn>user\n<end_of_turn> <|begin_of_text|>a<|end_of_text|> "
         "<|im_start|>b<|im_end|> <|endoftext|> \uFF1Cbegin\u2581of\u2581sentence\uFF1E "
         "<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>c<\uFF5Cend\u2581of\u2581sentence\uFF5C> <0x41> <mask>\n"
         "Long: " + std::string(500, 'a') + " " + std::string(300, '7') + " " + std::string(200, '!') + "end\n";
  return out;
}

}  // namespace tessel::testing
