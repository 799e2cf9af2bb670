// The Unicode-heavy text the tokenizer reference tests encode beside the bundled corpus:
// contractions, digits of several scripts, emoji with modifiers and joiners, CJK, white space
// runs (tabs, CR LF, no-break and ideographic spaces), combining marks, right-to-left scripts,
// punctuation runs, code, special-token text and long runs. (No U+0085 or U+FEFF: JavaScript's
// \s and Unicode's White_Space disagree on them, and two of the references are JavaScript.)
#pragma once

#include <string>

namespace tessel::testing {

inline std::string unicode_reference_text() {
  return "I'm you're they'll we've she'd it's DON'T He'S O'Neil's rock'n'roll ’curly’ apostrophes\n"
         "Numbers: 1234567 3.14159 2026-12-01 0x1F \u0661\u0662\u0663\u0664 \uFF18\uFF19\uFF10 \u00B2\u00B3 \u216B 10,000,000\n"
         "Emoji: \U0001F44D\U0001F3FD \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F389\U0001F389\U0001F389 \u2764\uFE0F \U0001F1EB\U0001F1F7\n"
         "CJK: \u4E2D\u6587\u5B57\u7B26\u6D4B\u8BD5 \u65E5\u672C\u8A9E\u306E\u30C6\u30AD\u30B9\u30C8\u3001\u30AB\u30BF\u30AB\u30CA "
         "\uD55C\uAD6D\uC5B4 \uD14D\uC2A4\uD2B8\n"
         "Whitespace:   three  \t\ttabs\t \n\n\n   \r\n\r\n  trailing   \n"
         "Accents: caf\u00E9 na\u00EFve \u00C6r\u00F8sk\u00F8bing e\u0301 \u00C5ngstr\u00F6m \uFB01 ligature\n"
         "Scripts: \u041F\u0440\u0438\u0432\u0435\u0442 \u043C\u0438\u0440 \u0393\u03B5\u03B9\u03AC \u03C3\u03BF\u03C5 "
         "\u0645\u0631\u062D\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u0928\u092E\u0938\u094D\u0924\u0947 "
         "\u05E9\u05DC\u05D5\u05DD\n"
         "Punct: !!! ??? ... --- ((( ))) \u00ABquotes\u00BB \u201Csmart\u201D \u2014 \u2013 \u2022 \u2026 \u00A9\u00AE\u2122 "
         "\\ / | @#$%^&*_+=~`\n"
         "Code: def f(x):\n    return x**2  # comment\n\tif (a && b) { c[i] = d->e; }\n"
         "MiXeD CaSe HELLO hello HeLLo\u00A0nbsp\u2003emspace\u3000ideographic\n"
         "<|endoftext|> special text stays text\n"
         "Long: " + std::string(300, 'a') + " " + std::string(200, '7') + " " + std::string(40, ' ') + "end\n";
}

}  // namespace tessel::testing
