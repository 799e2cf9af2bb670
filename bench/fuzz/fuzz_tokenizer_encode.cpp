// libFuzzer harness for encoding: any input text through a fixed tokenizer.json (a Llama-3-style
// Split with cl100k's pattern, ByteLevel, ignore_merges, added tokens with lstrip, rstrip and
// single_word), once plain and once with an NFC normalizer. UTF-8 text must encode (and, through
// the plain one, decode back to itself byte for byte, where no <s> strips white space); any other text must be refused.
#include "fuzz_tokenizer_common.h"
#include "tessel/data/tokenizers/loaders.h"

namespace {

std::string tokenizer_json(bool nfc) {
  std::string vocab, merges;
  // The 256 bytes in GPT-2's alphabet, then a few merges over ASCII.
  std::string chars[256];
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const int cp = printable ? b : next++;
    chars[b] = cp < 0x80 ? std::string(1, static_cast<char>(cp))
                         : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    if (chars[b] == "\"" || chars[b] == "\\") chars[b] = "\\" + chars[b];
    vocab += (b ? "," : "") + ("\"" + chars[b] + "\": " + std::to_string(b));
  }
  const char* pairs[][2] = {{"t", "h"}, {"th", "e"}, {"\xC4\xA0", "th"}, {"\xC4\xA0th", "e"}, {"a", "n"}, {"an", "d"}};
  int id = 256;
  for (const auto& p : pairs) {
    vocab += ",\"" + std::string(p[0]) + p[1] + "\": " + std::to_string(id++);
    merges += std::string(merges.empty() ? "" : ",") + "[\"" + p[0] + "\", \"" + p[1] + "\"]";
  }
  return std::string("{\"added_tokens\": [") +
         "{\"id\": 300, \"content\": \"<|endoftext|>\", \"special\": true},"
         "{\"id\": 301, \"content\": \"<s>\", \"lstrip\": true, \"rstrip\": true},"
         "{\"id\": 302, \"content\": \"word\", \"single_word\": true}],"
         "\"normalizer\": " + (nfc ? "{\"type\": \"NFC\"}" : "null") + ","
         "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
         "{\"type\": \"Split\", \"behavior\": \"Isolated\", \"pattern\": {\"Regex\": "
         "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|"
         "\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}},"
         "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]},"
         "\"decoder\": {\"type\": \"ByteLevel\"},"
         "\"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"vocab\": {" + vocab + "}, \"merges\": [" + merges + "]}}";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto plain = tessel::parse_hf_tokenizer(tokenizer_json(false), "plain.json");
  static const auto nfc = tessel::parse_hf_tokenizer(tokenizer_json(true), "nfc.json");
  const std::string text(reinterpret_cast<const char*>(data), size);
  const bool utf8 = !tessel::first_invalid_utf8(text);
  for (const auto* t : {plain.get(), nfc.get()}) {
    try {
      const std::vector<int32_t> ids = t->encode(text);
      if (!utf8) __builtin_trap();  // invalid UTF-8 was accepted
      const std::string back = t->decode(ids);
      // (<s> swallows the white space around it: no round trip there.)
      if (t == plain.get() && text.find("<s>") == std::string::npos && back != text) __builtin_trap();
    } catch (const tessel::Error&) {
      if (utf8) __builtin_trap();  // valid text was refused
    }
  }
  return 0;
}
