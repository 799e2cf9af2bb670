// libFuzzer harness for the Unigram model (unigram.h): the input is its pieces and a text,
// "piece lines\0text"; each line's first byte gives the piece's score, the rest is the piece. The
// model gets <unk> first and, in one of two models, the 256 <0xNN> pieces with byte_fallback.
// Every id must be in the vocabulary; with byte fallback every byte has a piece, so the tokens'
// text must be the text itself; without it, unknown characters fuse, so <unk> never comes twice
// in a row.
#include <fmt/format.h>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/unigram.h"
#include "tessel/data/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  if (split == std::string_view::npos) return 0;
  const std::string_view text = input.substr(split + 1);
  if (tessel::first_invalid_utf8(text)) return 0;
  std::vector<tessel::UnigramPiece> pieces;
  for (size_t at = 0; at < split;) {
    size_t end = input.find('\n', at);
    if (end == std::string_view::npos || end > split) end = split;
    const std::string_view line = input.substr(at, end - at);
    at = end + 1;
    if (line.size() < 2) continue;
    const std::string piece(line.substr(1));
    // (A piece spelled "<0x..>" would take a byte's id: the tokens' text is then not the text.)
    if (tessel::first_invalid_utf8(piece) || piece.starts_with("<0x")) continue;
    pieces.push_back({piece, -static_cast<double>(static_cast<unsigned char>(line[0]) % 64) / 4.0});
  }
  for (bool byte_fallback : {false, true}) {
    std::vector<tessel::UnigramPiece> all = {{"<unk>", 0.0}};
    if (byte_fallback)
      for (int b = 0; b < 256; ++b) all.push_back({fmt::format("<0x{:02X}>", b), -20.0});
    all.insert(all.end(), pieces.begin(), pieces.end());
    const tessel::UnigramModel model(all, 0, byte_fallback, "fuzz");
    std::vector<int32_t> ids;
    model.encode_piece(text, ids);
    std::string back;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t id = ids[i];
      if (id < 0 || id >= model.vocab().size()) __builtin_trap();
      if (byte_fallback && id == 0) __builtin_trap();  // every byte has its piece
      if (!byte_fallback && id == 0 && i > 0 && ids[i - 1] == 0) __builtin_trap();
      back += byte_fallback && id >= 1 && id <= 256 ? std::string(1, static_cast<char>(id - 1)) : model.vocab().bytes[id];
    }
    if (byte_fallback && back != text) __builtin_trap();
  }
  return 0;
}
