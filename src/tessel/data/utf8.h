// UTF-8 validity: tokenizers, `tessel preprocess` and `tessel tokenizer` refuse text that is not
// UTF-8 and say where it breaks, instead of encoding replacement characters or crashing a regex.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace tessel {

// The byte offset of the first byte that does not start or continue a well-formed UTF-8
// sequence (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF); nullopt when
// all of `text` is valid. A sequence cut off by the end of `text` is invalid at its first byte.
std::optional<size_t> first_invalid_utf8(std::string_view text);

// Throws tessel::Error "WHAT: invalid UTF-8 at byte offset N (bytes 0x.. 0x..)" when `text` is
// not valid UTF-8; `what` names the input (a file, "standard input", "document 12 of x.jsonl").
void check_utf8(std::string_view text, std::string_view what);

}  // namespace tessel
