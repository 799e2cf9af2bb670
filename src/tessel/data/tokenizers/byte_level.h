// GPT-2's byte-level alphabet: every byte is shown as one printable Unicode character, so that a
// vocabulary of byte strings can be written as JSON text (vocab.json, tokenizer.json): bytes
// '!'..'~', '¡'..'¬' and '®'..'ÿ' are their own code points, the other 68 bytes (controls,
// space, DEL, NBSP, soft hyphen) become U+0100.. in byte order (space is 'Ġ', newline 'Ċ').
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tessel {

// The token's byte-level text: each byte as its character, in UTF-8.
std::string byte_level_encode(std::string_view bytes);

// The bytes behind a byte-level text; nullopt when a character is outside the alphabet (or the
// text is not UTF-8).
std::optional<std::string> byte_level_decode(std::string_view text);

}  // namespace tessel
