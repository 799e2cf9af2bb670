// The tokenizer files as make_tokenizer reads them: GPT-2's pair, tokenizer.json, tiktoken rank
// files and Megatron's TikTokenizer JSON, on the small model of tokenizer_fixtures.h; and their
// errors, which name the file and the line or offset.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/data/tokenizer.h"
#include "tessel/data/tokenizers/loaders.h"
#include "support/fixtures.h"
#include "tokenizer_fixtures.h"

namespace tessel {
namespace {

using testing::TestDir;
using Ids = std::vector<int32_t>;

using testing::error_of;

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// " the aa x" with the tiny model: pieces " the", " aa", " x".
const Ids kTinyIds = {258, ' ', 259, ' ', 'x'};

TEST(Gpt2BpeTokenizer, ReadsVocabAndMerges) {
  TestDir dir;
  TokenizerOptions o{.type = "GPT2BPETokenizer"};
  o.vocab_file = dir.write("vocab.json", testing::tiny_vocab_json().dump());
  o.merge_file = dir.write("merges.txt", testing::tiny_merges_txt());
  const auto t = make_tokenizer(o);
  EXPECT_EQ(t->type(), "GPT2BPETokenizer");
  EXPECT_EQ(t->vocab_size(), 264);
  EXPECT_EQ(t->encode(" the aa x"), kTinyIds);
  EXPECT_EQ(t->decode(kTinyIds), " the aa x");
  EXPECT_EQ(t->special_ids().eod, 263);
  EXPECT_EQ(t->special_ids().eos, 263);
  // <|endoftext|> in the text is text, as in Megatron's GPT-2 tokenizer.
  EXPECT_EQ(t->encode("<|endoftext|>").size(), 13u);
  EXPECT_EQ(t->id_to_token(258), "\xC4\xA0the");  // Ġthe
  EXPECT_EQ(t->token_to_id("\xC4\xA0the"), 258);
  EXPECT_EQ(t->token_to_id("nope"), std::nullopt);
}

TEST(Gpt2BpeTokenizer, ErrorsNameTheFileAndLine) {
  TestDir dir;
  const std::string vocab = dir.write("vocab.json", testing::tiny_vocab_json().dump());
  const std::string merges = dir.write("merges.txt", testing::tiny_merges_txt());
  auto load = [&](const std::string& v, const std::string& m) { return [=] { load_gpt2_bpe(v, m); }; };
  EXPECT_CONTAINS(error_of(load(dir.write("bad.json", "{\"a\": 0,"), merges)), "bad.json: not valid JSON at byte ");
  EXPECT_CONTAINS(error_of(load(dir.write("ids.json", R"({"a": 0, "b": 0})"), merges)), "ids.json: id 0 is given to two tokens");
  EXPECT_CONTAINS(error_of(load(dir.write("neg.json", R"({"a": -1})"), merges)), "neg.json: token \"a\" has id -1");
  EXPECT_CONTAINS(error_of(load(vocab, dir.write("m1.txt", "#version: 0.2\nh e\nq zz\n"))),
                  "m1.txt line 3: merge \"q\" \"zz\" names \"zz\", which is not in the vocabulary");
  EXPECT_CONTAINS(error_of(load(vocab, dir.write("m2.txt", "x y\n"))),
                  "m2.txt line 1: merge \"x\" \"y\" makes \"xy\", which is not in the vocabulary");
  EXPECT_CONTAINS(error_of(load(vocab, dir.write("m3.txt", "h e x\n"))), "m3.txt line 1: expected two tokens");
  EXPECT_CONTAINS(error_of(load(dir.path("missing.json"), merges)), "missing.json: cannot read");
  EXPECT_CONTAINS(error_of([] { make_tokenizer({.type = "GPT2BPETokenizer"}); }), "needs --vocab-file");
}

TEST(HuggingFaceTokenizer, MergesAsStringsOrPairsAndAFolder) {
  TestDir dir;
  for (bool pairs : {false, true}) {
    const std::string file = dir.write("tokenizer.json", testing::tiny_tokenizer_json(pairs).dump());
    const auto t = make_tokenizer({.type = "HuggingFaceTokenizer", .tokenizer_model = pairs ? dir.path() : file});
    EXPECT_EQ(t->encode(" the aa x"), kTinyIds);
    // Added tokens are cut out of the text first.
    EXPECT_EQ(t->encode("x<|endoftext|> the"), (Ids{'x', 263, 258}));
    EXPECT_EQ(t->decode(Ids{'x', 263, 258}), "x<|endoftext|> the");
    EXPECT_EQ(t->special_ids().eos, 263);  // no tokenizer_config.json: the usual name
    EXPECT_EQ(t->special_ids().bos, -1);
  }
}

TEST(HuggingFaceTokenizer, LlamaThreeStyle) {
  // Split with cl100k's pattern, ByteLevel without its own regex, ignore_merges, a template
  // adding <|begin_of_text|>, bos/eos from tokenizer_config.json.
  TestDir dir;
  nlohmann::json j = testing::tiny_tokenizer_json(true, true);
  j["added_tokens"].push_back({{"id", 264}, {"content", "<|begin_of_text|>"}, {"special", true}});
  j["pre_tokenizer"] = nlohmann::json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "behavior": "Isolated", "invert": false, "pattern": {"Regex":
        "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})");
  j["post_processor"] = nlohmann::json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel"},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
       "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [264], "tokens": ["<|begin_of_text|>"]}}}]})");
  dir.write("tokenizer.json", j.dump());
  dir.write("tokenizer_config.json", R"({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|endoftext|>"}})");
  const auto t = make_tokenizer({.type = "hf", .tokenizer_model = dir.path()});
  EXPECT_EQ(t->encode("xyz 1234"), (Ids{264, 262, ' ', '1', '2', '3', '4'}));  // "xyz" whole; digits by threes
  EXPECT_EQ(t->special_ids().bos, 264);
  EXPECT_EQ(t->special_ids().eos, 263);
  EXPECT_EQ(t->special_ids().eod, 263);
  EXPECT_EQ(t->vocab_size(), 265);
}

TEST(HuggingFaceTokenizer, UnsupportedOrBrokenFilesAreNamed) {
  TestDir dir;
  auto load = [&](const nlohmann::json& j) {
    const std::string f = dir.write("t.json", j.dump());
    return error_of([&] { load_hf_tokenizer(f); });
  };
  nlohmann::json j = testing::tiny_tokenizer_json(false);
  j["model"]["merges"].push_back("Ġ zz");
  EXPECT_CONTAINS(load(j), "t.json (model.merges[6]): merge \"Ġ\" \"zz\" names \"zz\"");
  j = testing::tiny_tokenizer_json(false);
  j["model"]["type"] = "WordPiece";
  EXPECT_CONTAINS(load(j),
                  "t.json: model WordPiece is not supported (supported: BPE, byte-level or with byte_fallback; Unigram)");
  EXPECT_EQ(load(j).find('\n'), std::string::npos);  // one line
  j = testing::tiny_tokenizer_json(false);
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  EXPECT_CONTAINS(load(j), "t.json: pre_tokenizer BertPreTokenizer is not supported");
  j = testing::tiny_tokenizer_json(false);
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "BertNormalizer"}}}}};
  EXPECT_CONTAINS(load(j), "t.json: normalizer BertNormalizer is not supported");
  j = testing::tiny_tokenizer_json(false);
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_CONTAINS(load(j), "t.json: decoder WordPiece is not supported");
  j = testing::tiny_tokenizer_json(false);
  j["post_processor"] = {{"type", "BertProcessing"}};
  EXPECT_CONTAINS(load(j), "t.json: post_processor BertProcessing is not supported");
  // An id that no int holds was converted unchecked (undefined behaviour; a fuzzer's find).
  j["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [2.4e67]}}})");
  EXPECT_CONTAINS(load(j), "t.json: TemplateProcessing's \"<s>\" has an id that is not a token id: 2.4e+67");
  j = testing::tiny_tokenizer_json(false);
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}}, {{"type", "Metaspace"}}}}};
  EXPECT_CONTAINS(load(j), "t.json: pre_tokenizer Metaspace after another pre-tokenizer is not supported");
  j = testing::tiny_tokenizer_json(false);
  j["model"]["vocab"] = nlohmann::json::array();
  EXPECT_CONTAINS(load(j), "t.json (model.vocab): the vocabulary must be a JSON object");
  j = testing::tiny_tokenizer_json(false);
  j["added_tokens"][0]["id"] = "x";
  EXPECT_CONTAINS(load(j), "t.json: an added token needs an integer \"id\"");
  EXPECT_CONTAINS(error_of([&] { load_hf_tokenizer(dir.write("bad.json", "{\"model\": [")); }), "bad.json: not valid JSON at byte ");
  // A number too large for a double is nlohmann's out_of_range, not a parse error (a fuzzer's find).
  EXPECT_CONTAINS(error_of([&] { load_hf_tokenizer(dir.write("huge.json", "{\"model\": 1E400}")); }),
                  "huge.json: not valid JSON at byte 10: number overflow parsing '1E400'");
  EXPECT_CONTAINS(error_of([&] { load_hf_tokenizer(dir.path("nowhere")); }), "nowhere: cannot read");
}

TEST(TikTokenizer, RankFile) {
  TestDir dir;
  TokenizerOptions o{.type = "TikTokenizer", .tokenizer_model = dir.write("tiny.tiktoken", testing::tiny_ranks()),
                     .tiktoken_pattern = "cl100k"};
  o.special_tokens = {"<|endoftext|>"};
  const auto t = make_tokenizer(o);
  // " xyz" is no token and no pair of its bytes makes one: it stays bytes.
  EXPECT_EQ(t->encode(" the aa xyz"), (Ids{258, ' ', 259, ' ', 'x', 'y', 'z'}));
  EXPECT_EQ(t->special_ids().eod, 263);
  EXPECT_EQ(t->decode(Ids{263}), "<|endoftext|>");
  EXPECT_EQ(t->encode("<|endoftext|>").size(), 13u);  // special text is ordinary text (encode_ordinary)
  EXPECT_EQ(t->id_to_token(258), " the");
  EXPECT_CONTAINS(error_of([&] { make_tokenizer({.type = "tiktoken", .tokenizer_model = o.tokenizer_model}); }),
                  "needs --tiktoken-pattern");
}

// The merges a rank file implies are found in time linear in each token's length: a token of
// 300 KB took minutes (every split hashed its two halves afresh), and takes milliseconds.
TEST(TikTokenizer, ALongTokenLoadsInLinearTime) {
  TestDir dir;
  std::string ranks = testing::tiny_ranks();
  std::string token;
  for (size_t i = 0; token.size() < 300'000; ++i) token += static_cast<char>('a' + i * 7 % 26);
  ranks += testing::base64(token) + " " + std::to_string(std::count(ranks.begin(), ranks.end(), '\n')) + "\n";
  const TokenizerOptions o{.type = "TikTokenizer", .tokenizer_model = dir.write("long.tiktoken", ranks),
                           .tiktoken_pattern = "cl100k"};
  const auto start = std::chrono::steady_clock::now();
  const auto t = make_tokenizer(o);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));  // ~0.1 s alone
  EXPECT_EQ(t->encode(" the aa"), (Ids{258, ' ', 259}));
}

// A pre-tokenizer pattern's backtracking is bounded over the whole text, not only per start
// position: this one stays under PCRE2's limit at each of 46,000 positions and ran for hours; it
// is refused once the text's budget is spent, in about a second.
TEST(HuggingFaceTokenizer, ABacktrackingPatternIsRefusedWithinTheTextsBudget) {
  TestDir dir;
  nlohmann::json j = testing::tiny_tokenizer_json(true);
  const nlohmann::json split = {{"type", "Split"}, {"pattern", {{"Regex", "(?:a|a){0,20}[^a]"}}},
                                {"behavior", "Isolated"}, {"invert", false}};
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}};
  const auto t = make_tokenizer({.type = "HuggingFaceTokenizer", .tokenizer_model = dir.write("t.json", j.dump())});
  EXPECT_NO_THROW(t->encode(" aab"));  // short texts are fine
  const auto start = std::chrono::steady_clock::now();
  EXPECT_CONTAINS(error_of([&] { t->encode(std::string(46'000, 'a')); }),
                  "takes more than 56000000 backtracking steps on a text of 46000 bytes (the budget of a text: "
                  "10000000 + 1000 a byte)");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));  // ~2 s alone
}

TEST(TikTokenizer, RankFileErrors) {
  TestDir dir;
  auto load = [&](const std::string& text) {
    const std::string f = dir.write("r.tiktoken", text);
    return error_of([&] { make_tokenizer({.type = "TikTokenizer", .tokenizer_model = f, .tiktoken_pattern = "gpt2"}); });
  };
  EXPECT_CONTAINS(load("YQ== 0\nYg= 1\n"), "r.tiktoken line 2: \"Yg=\" is not valid base64");
  EXPECT_CONTAINS(load("YQ== 0\nYg== 0\n"), "r.tiktoken line 2: rank 0 was already given on line 1");
  EXPECT_CONTAINS(load("YQ== 0\nYQ== 1\n"), "r.tiktoken line 2: the token of rank 1 already has rank 0 (line 1)");
  EXPECT_CONTAINS(load("YQ== x\n"), "r.tiktoken line 1: rank \"x\" is not an integer");
  EXPECT_CONTAINS(load("YQ==\n"), "r.tiktoken line 1: expected `base64-token rank`");
  EXPECT_CONTAINS(load("YQ== 99999999\n"), "r.tiktoken line 1: rank \"99999999\" is not an integer in [0,");
}

TEST(TikTokenizer, MegatronJsonVocabulary) {
  // Megatron's layout: special tokens take the first ids, the ranks follow.
  TestDir dir;
  nlohmann::json list = nlohmann::json::array();
  for_each_line(testing::tiny_ranks(), [&](size_t line_no, std::string_view line) {
    const std::string base64_token(line.substr(0, line.find(' ')));
    list.push_back({{"rank", line_no - 1}, {"token_bytes", base64_token}, {"token_str", ""}});
  });
  TokenizerOptions o{.type = "TikTokenizer", .tokenizer_model = dir.write("vocab.json", list.dump()), .tiktoken_pattern = "v2"};
  o.tiktoken_num_special_tokens = 10;
  o.vocab_size = 270;
  const auto t = make_tokenizer(o);
  EXPECT_EQ(t->vocab_size(), 270);
  EXPECT_EQ(t->special_ids().bos, 1);
  EXPECT_EQ(t->special_ids().eos, 2);
  EXPECT_EQ(t->id_to_token(5), "<SPECIAL_5>");
  EXPECT_EQ(t->encode(" the"), (Ids{268}));  // rank 258 + 10
  EXPECT_EQ(t->decode(Ids{268, 2}), " the</s>");
  o.vocab_size = 300;
  EXPECT_CONTAINS(error_of([&] { make_tokenizer(o); }), "vocab.json: 263 ranks, fewer than");
  list[3]["rank"] = 7;
  o.vocab_size = 270;
  o.tokenizer_model = dir.write("bad.json", list.dump());
  EXPECT_CONTAINS(error_of([&] { make_tokenizer(o); }), "bad.json: entry 3 has rank 7");
}

TEST(Tokenizer, EncodeRefusesInvalidUtf8AndDecodeUnknownIds) {
  TestDir dir;
  const auto t = make_tokenizer({.type = "hf", .tokenizer_model = dir.write("tokenizer.json", testing::tiny_tokenizer_json(true).dump())});
  EXPECT_CONTAINS(error_of([&] { t->encode("abc\xE4\xB8"); }), "invalid UTF-8 at byte offset 3");
  EXPECT_CONTAINS(error_of([&] { t->decode(Ids{1, 999}); }), "token 999 at position 1 is not in the vocabulary");
  EXPECT_CONTAINS(error_of([] { make_tokenizer({.type = "Nope"}); }), "--tokenizer-type Nope: unknown");
  EXPECT_CONTAINS(error_of([&] { make_tokenizer({.type = "Llama2Tokenizer", .tokenizer_model = dir.path("x.model")}); }),
                  "x.model: cannot read");
  EXPECT_CONTAINS(error_of([&] { make_tokenizer({.type = "Llama2Tokenizer", .tokenizer_model = dir.write("junk.model", "junk")}); }),
                  "junk.model: not a SentencePiece model, or a damaged one");
}

TEST(HuggingFaceTokenizer, NfcNormalizer) {
  // Qwen2's tokenizer.json normalizes to NFC: a decomposed é encodes as the composed one.
  TestDir dir;
  nlohmann::json j = testing::tiny_tokenizer_json(true);
  j["normalizer"] = {{"type", "NFC"}};
  const auto t = make_tokenizer({.type = "hf", .tokenizer_model = dir.write("tokenizer.json", j.dump())});
  EXPECT_EQ(t->encode("caf" "e\xCC\x81"), t->encode("caf\xC3\xA9"));
  EXPECT_EQ(t->decode(t->encode("caf" "e\xCC\x81")), "caf\xC3\xA9");
}

TEST(Tokenizer, EncodeIsSafeFromSeveralThreads) {
  // One tokenizer shared by preprocess's worker threads: each gets the single thread's ids.
  TestDir dir;
  const auto t = make_tokenizer({.type = "hf", .tokenizer_model = dir.write("tokenizer.json", testing::tiny_tokenizer_json(true).dump())});
  std::string text;
  for (int i = 0; i < 2000; ++i) text += " the aa in x<|endoftext|>" + std::to_string(i) + "\n";
  const Ids expected = t->encode(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int r = 0; r < 5; ++r) got[k] = t->encode(text);
    });
  for (std::thread& th : threads) th.join();
  for (const Ids& ids : got) EXPECT_EQ(ids, expected);
}

TEST(Tokenizer, ByteTokenizerDefaults) {
  const auto t = make_tokenizer({});
  EXPECT_EQ(t->type(), "ByteTokenizer");
  EXPECT_EQ(t->id_to_token(65), "A");
  EXPECT_EQ(t->token_to_id("A"), 65);
  EXPECT_EQ(t->token_to_id("AB"), std::nullopt);
}

}  // namespace
}  // namespace tessel
