// What every tokenizer-reader harness does with a tokenizer that loaded: encode a fixed text
// that touches each pre-tokenizer class (and the input's own bytes where they are UTF-8), decode
// the ids back. Only a tessel::Error may escape a reader or the tokenizer; anything else (another
// exception, a sanitizer report, a crash) is a finding.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessel/core/error.h"
#include "tessel/data/tokenizer.h"
#include "tessel/data/utf8.h"

namespace tessel::fuzz {

inline void exercise(const Tokenizer& t, std::string_view input) {
  static const std::string text =
      "Hello world, it's 2026! \xE4\xB8\xAD\xE6\x96\x87 caf\xC3\xA9  \n\n\t<|endoftext|> x <s> \xF0\x9F\x91\x8D 12345";
  std::string own(input.substr(0, 256));
  if (first_invalid_utf8(own)) own.clear();
  for (const std::string& s : {text, own}) {
    try {
      const std::vector<int32_t> ids = t.encode(s);
      for (int32_t id : ids)
        if (id < 0 || id >= t.vocab_size()) __builtin_trap();  // an id outside the vocabulary
      t.decode(ids);
    } catch (const Error&) {
    }
  }
  try {
    t.id_to_token(0);
    t.token_to_id("a");
  } catch (const Error&) {
  }
}

}  // namespace tessel::fuzz
