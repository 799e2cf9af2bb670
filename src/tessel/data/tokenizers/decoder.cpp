#include "tessel/data/tokenizers/decoder.h"

#include "tessel/data/tokenizers/normalizer.h"
#include "tessel/data/utf8.h"

namespace tessel {

namespace {

// The byte of a "<0xNN>" token, or -1.
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Runs of "<0xNN>" tokens become their bytes as one token when those are UTF-8, else one U+FFFD
// per byte.
std::vector<std::string> byte_fallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string bytes;
  size_t count = 0;
  auto flush = [&] {
    if (count == 0) return;
    if (!first_invalid_utf8(bytes)) {
      out.push_back(bytes);
    } else {
      for (size_t i = 0; i < count; ++i) out.push_back("\xEF\xBF\xBD");
    }
    bytes.clear();
    count = 0;
  };
  for (std::string& t : tokens) {
    if (const int b = fallback_byte(t); b >= 0) {
      bytes += static_cast<char>(b);
      ++count;
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  return out;
}

// Up to `start` leading and `stop` trailing copies of the character `c` off `t`.
void strip_token(std::string& t, const std::string& c, int start, int stop) {
  size_t begin = 0, end = t.size();
  for (int i = 0; i < start && t.compare(begin, c.size(), c) == 0 && begin < end; ++i) begin += c.size();
  for (int i = 0; i < stop && end >= begin + c.size() && t.compare(end - c.size(), c.size(), c) == 0; ++i) end -= c.size();
  t = t.substr(begin, end - begin);
}

}  // namespace

std::string Decoder::decode(std::vector<std::string> tokens) const {
  for (const DecoderStep& s : steps) {
    switch (s.kind) {
      case DecoderStep::Kind::ByteLevel:
        break;
      case DecoderStep::Kind::ByteFallback:
        tokens = byte_fallback(std::move(tokens));
        break;
      case DecoderStep::Kind::Fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecoderStep::Kind::Strip:
        for (std::string& t : tokens) strip_token(t, s.content, s.start, s.stop);
        break;
      case DecoderStep::Kind::Replace:
        for (std::string& t : tokens) t = replace_all(t, s.pattern, s.content);
        break;
      case DecoderStep::Kind::Metaspace:
        // The replacement becomes a space, except in the first token, where it goes (the space
        // the pre-tokenizer put first).
        for (size_t i = 0; i < tokens.size(); ++i)
          tokens[i] = replace_all(tokens[i], s.content, i == 0 && s.prepend ? "" : " ");
        break;
    }
  }
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) text += separator;
    text += tokens[i];
  }
  return text;
}

}  // namespace tessel
