// libFuzzer harness for encoding: any input text through fixed tokenizer.json files: a
// Llama-3-style Split with cl100k's pattern, ByteLevel, ignore_merges, added tokens with lstrip,
// rstrip and single_word, once plain and once with an NFC normalizer; and a Llama-2-style
// SentencePiece BPE (Prepend and Replace normalizers, byte_fallback, the Replace, ByteFallback,
// Fuse, Strip decoders). UTF-8 text must encode (and, through the plain one and the Llama-2-style
// one, decode back to itself byte for byte, where no added token or literal "▁" is in the way);
// any other text must be refused.
#include "fuzz_tokenizer_common.h"
#include "tessel/data/tokenizers/loaders.h"

#include <fmt/format.h>

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

// Llama 2's layout, small: <unk> <s> </s>, the 256 <0xNN> tokens, a few pieces and merges.
std::string sentencepiece_json() {
  std::string vocab = "\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2";
  for (int b = 0; b < 256; ++b) vocab += fmt::format(", \"<0x{:02X}>\": {}", b, 3 + b);
  vocab += ", \"\u2581\": 259, \"a\": 260, \"b\": 261, \"\u2581a\": 262, \"ab\": 263, \"\u2581ab\": 264, \"\u00e9\": 265";
  return "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
         "{\"id\": 1, \"content\": \"<s>\", \"special\": true}, {\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
         "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\u2581\"},"
         "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\u2581\"}]},"
         "\"pre_tokenizer\": null,"
         "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\u2581\"}, "
         "\"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", "
         "\"start\": 1, \"stop\": 0}]},"
         "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true, \"byte_fallback\": true, "
         "\"vocab\": {" + vocab + "}, \"merges\": [\"\u2581 a\", \"a b\", \"\u2581a b\"]}}";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto plain = tessel::parse_hf_tokenizer(tokenizer_json(false), "plain.json");
  static const auto nfc = tessel::parse_hf_tokenizer(tokenizer_json(true), "nfc.json");
  static const auto sp = tessel::parse_hf_tokenizer(sentencepiece_json(), "sentencepiece.json");
  const std::string text(reinterpret_cast<const char*>(data), size);
  const bool utf8 = !tessel::first_invalid_utf8(text);
  for (const auto* t : {plain.get(), nfc.get(), sp.get()}) {
    try {
      const std::vector<int32_t> ids = t->encode(text);
      if (!utf8) __builtin_trap();  // invalid UTF-8 was accepted
      const std::string back = t->decode(ids);
      // (<s> swallows the white space around it: no round trip there.)
      if (t == plain.get() && text.find("<s>") == std::string::npos && back != text) __builtin_trap();
      if (t == sp.get()) {  // without the template's <s>, the text itself; "▁" decodes as a space
        const std::string bare = t->decode(t->encode_bare(text));
        bool plain_text = text.find("\xE2\x96\x81") == std::string::npos;
        for (const char* added : {"<unk>", "<s>", "</s>"}) plain_text &= text.find(added) == std::string::npos;
        if (plain_text && bare != text) __builtin_trap();
      }
    } catch (const tessel::Error&) {
      if (utf8) __builtin_trap();  // valid text was refused
    }
  }
  return 0;
}
