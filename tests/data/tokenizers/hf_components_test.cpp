// tokenizer.json's SentencePiece-style BPE (byte_fallback, unk_token, fuse_unk), its normalizers,
// Metaspace and decoders, on a small hand-made file whose ids are worked out in the comments, and
// the Unicode 16 classes of the pre-tokenizer patterns on characters PCRE2 10.42 (Unicode 14)
// does not know.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "tessel/core/error.h"
#include "tessel/data/tokenizer.h"
#include "tessel/data/tokenizers/loaders.h"
#include "tessel/data/tokenizers/normalizer.h"
#include "tessel/data/tokenizers/regex.h"
#include "tessel/data/tokenizers/unicode_classes.h"

namespace tessel {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;

const std::string kSpace = "\xE2\x96\x81";  // ▁

// Llama 2's layout: <unk> <s> </s>, the 256 <0xNN> tokens (ids 3..258), then pieces.
json sentencepiece_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  vocab[kSpace] = 259;
  vocab["a"] = 260;
  vocab["b"] = 261;
  vocab[kSpace + "a"] = 262;
  vocab["ab"] = 263;
  vocab[kSpace + "ab"] = 264;
  const json merges = {kSpace + " a", "a b", kSpace + "a b"};
  auto replace = [](const std::string& from, const std::string& to) {
    return json{{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
  };
  return {{"added_tokens", {{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
                            {{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                            {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}}}},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", kSpace}}, replace(" ", kSpace)}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor", {{"type", "TemplateProcessing"},
                              {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                              {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder", {{"type", "Sequence"}, {"decoders", {replace(kSpace, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true},
                     {"vocab", vocab}, {"merges", merges}}}};
}

std::unique_ptr<Tokenizer> parse(const json& j) { return parse_hf_tokenizer(j.dump(), "sp.json"); }

TEST(SentencePieceStyleBpe, MergesCharactersAndFallsBackToBytes) {
  const auto t = parse(sentencepiece_json());
  // "ab a" -> "▁ab▁a" -> ▁ a b ▁ a; "▁ a" (rank 0) at 0 then at 3, then "▁a b" (rank 2).
  EXPECT_EQ(t->encode("ab a"), (Ids{1, 264, 262}));
  EXPECT_EQ(t->encode_bare("ab a"), (Ids{264, 262}));
  // "é" has no token: its two bytes' tokens; "x" the byte 0x78's.
  EXPECT_EQ(t->encode_bare("\xC3\xA9x"), (Ids{259, 3 + 0xC3, 3 + 0xA9, 3 + 0x78}));
  // Each segment between added tokens is normalized alone, so each gets its own "▁".
  EXPECT_EQ(t->encode_bare("a<s>a"), (Ids{262, 1, 262}));
  EXPECT_EQ(t->decode(Ids{1, 264, 262}), "<s> ab a");
  EXPECT_EQ(t->decode(Ids{264, 262, 3 + 0xC3, 3 + 0xA9, 3 + 0x78}), "ab a\xC3\xA9x");
  // A byte run that is not UTF-8 decodes as one U+FFFD per byte, as the library's ByteFallback.
  EXPECT_EQ(t->decode(Ids{262, 3 + 0xC3, 3 + 0xFF}), "a\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(t->id_to_token(264), kSpace + "ab");
  EXPECT_EQ(t->token_to_id("<0x41>"), 3 + 0x41);
}

TEST(SentencePieceStyleBpe, UnknownCharactersFuseWithoutByteFallback) {
  json j = sentencepiece_json();
  j["model"]["byte_fallback"] = false;
  EXPECT_EQ(parse(j)->encode_bare("xy"), (Ids{259, 0}));  // "▁" then one <unk> for "xy"
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(parse(j)->encode_bare("xy"), (Ids{259, 0, 0}));
  j["model"].erase("unk_token");
  EXPECT_EQ(parse(j)->encode_bare("xay"), (Ids{262}));  // no unk token: unknown characters dropped
}

TEST(SentencePieceStyleBpe, MetaspacePreTokenizerAndDecoder) {
  json j = sentencepiece_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "first"}, {"split", true}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "first"}, {"split", true}};
  const auto t = parse(j);
  // "ab b" -> "▁ab▁b", split before each ▁: "▁ab" "▁b"; "▁b" has no merge.
  EXPECT_EQ(t->encode_bare("ab b"), (Ids{264, 259, 261}));
  // "first": only the segment that starts the input gets a ▁.
  EXPECT_EQ(t->encode_bare("<s>ab"), (Ids{1, 263}));
  EXPECT_EQ(t->decode(Ids{264, 259, 261}), "ab b");
  j["pre_tokenizer"]["prepend_scheme"] = "never";
  EXPECT_EQ(parse(j)->encode_bare("ab"), (Ids{263}));
}

TEST(Normalizer, StepsInOrder) {
  using Kind = NormalizerStep::Kind;
  Normalizer n;
  n.steps = {{.kind = Kind::Nfd}, {.kind = Kind::Lowercase}, {.kind = Kind::Strip, .left = true, .right = true}};
  EXPECT_EQ(n.apply(" \u3000\u00C9T\u00C9 \u0130 \t"), "e\u0301te\u0301 i\u0307");
  n.steps = {{.kind = Kind::Nfc}};
  // Unicode 9.0's NFC, the library's: Old Uyghur (14.0) is not in it, so U+10F82 (ccc 230 since)
  // and U+10F83 (220) stay unordered; marks 9.0 knows are ordered, and composed, as ever.
  EXPECT_EQ(n.apply("a\U00010F82\U00010F83"), "a\U00010F82\U00010F83");
  EXPECT_EQ(n.apply("a\u0301\u0323 e\u0301"), "\u1EA1\u0301 \u00E9");
  // Nor does anything compose across a character 9.0 does not know (U+1DFA, 14.0).
  EXPECT_EQ(n.apply("e\u1DFA\u0301"), "e\u1DFA\u0301");
  n.steps = {{.kind = Kind::Lowercase}};
  // Character by character, as the library's Lowercase: a final Σ is σ too, not ς; U+A7CE
  // (Unicode 17) has its lowercase U+A7CF.
  EXPECT_EQ(n.apply("\u039F\u0394\u039F\u03A3 \uA7CE"), "\u03BF\u03B4\u03BF\u03C3 \uA7CF");
  n.steps = {{.kind = Kind::Nfkc}};
  EXPECT_EQ(n.apply("\uFB01 \u2460 e\u0301"), "fi 1 \u00E9");
  n.steps = {{.kind = Kind::Replace, .content = "-", .regex = std::make_shared<Regex>("\\s+", "test")}};
  EXPECT_EQ(n.apply("a  b\u00A0\tc"), "a-b-c");
  n.steps = {{.kind = Kind::Prepend, .text = "^"}};
  EXPECT_EQ(n.apply(""), "");
  EXPECT_EQ(n.apply("x"), "^x");
}

TEST(UnicodeClasses, VersionSixteenBeyondPcre2) {
  EXPECT_EQ(unicode_version(), "16.0.0");
  EXPECT_EQ(unicode_category(0x41), UnicodeCategory::Lu);
  EXPECT_EQ(unicode_category(0x1FA77), UnicodeCategory::So);  // 🩷, Unicode 15.0
  EXPECT_EQ(unicode_category(0x1FAE9), UnicodeCategory::So);  // Unicode 16.0
  EXPECT_EQ(unicode_category(0x1C89), UnicodeCategory::Lu);   // Unicode 16.0
  EXPECT_EQ(unicode_category(0x10FFFF), UnicodeCategory::Cn);
  size_t b = 0, e = 0;
  EXPECT_TRUE(Regex("\\p{S}", "t").find(" \U0001FA77", 0, b, e));
  EXPECT_EQ(b, 1u);
  EXPECT_TRUE(Regex("[\\p{Lu}]+", "t").find("\u1C89", 0, b, e));
  EXPECT_FALSE(Regex("\\P{L}", "t").find("\u1C89\u1C8A", 0, b, e));
  EXPECT_TRUE(Regex("[^\\s\\p{L}\\p{N}]", "t").find("a1 \U0001FAE9", 0, b, e));
  EXPECT_EQ(b, 3u);
  // U+1171E went from Mn (Unicode 14) to Mc (16): PCRE2's \p{Mn} alone would still match it.
  EXPECT_TRUE(Regex("\\p{Mc}", "t").find("\U0001171E", 0, b, e));
  EXPECT_FALSE(Regex("\\p{Mn}", "t").find("\U0001171E", 0, b, e));
  EXPECT_TRUE(Regex("\\p{M}", "t").find("\U0001171E", 0, b, e));
}

}  // namespace
}  // namespace tessel
