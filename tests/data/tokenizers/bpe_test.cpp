// The pieces under the BPE tokenizers: GPT-2's byte alphabet, the merge loops, the pre-tokenizer's
// Split behaviours and the added-token splitter.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/data/tokenizers/added_tokens.h"
#include "tessel/data/tokenizers/bpe.h"
#include "tessel/data/tokenizers/byte_level.h"
#include "tessel/data/tokenizers/pretokenizer.h"
#include "tokenizer_fixtures.h"

namespace tessel {
namespace {

TEST(ByteLevel, GptTwoAlphabet) {
  EXPECT_EQ(byte_level_encode(" "), "\xC4\xA0");  // Ġ
  EXPECT_EQ(byte_level_encode("\n"), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_level_encode("A~"), "A~");
  EXPECT_EQ(byte_level_encode("\xAD"), "\xC5\x83");  // soft hyphen: the 68th moved byte, U+0143
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(byte_level_decode(byte_level_encode(all)), all);
  EXPECT_EQ(byte_level_decode("<|endoftext|>"), "<|endoftext|>");
  EXPECT_EQ(byte_level_decode(" "), std::nullopt);              // a raw space is outside the alphabet
  EXPECT_EQ(byte_level_decode("\xE4\xB8\xAD"), std::nullopt);  // so is 中
}

// The tiny model of tokenizer_fixtures.h as a BpeModel.
BpeModel tiny_model(bool ignore_merges) {
  BpeVocab vocab;
  for (int b = 0; b < 256; ++b) vocab.set(b, std::string(1, static_cast<char>(b)));
  std::vector<BpeMerge> merges;
  TokenIndex index;
  for (const auto& [a, b] : testing::tiny_merges()) {
    index.build(vocab);
    const int32_t id = vocab.size();
    vocab.set(id, a + b);
    merges.push_back({*index.find(a), *index.find(b), id, static_cast<int32_t>(merges.size())});
  }
  vocab.set(vocab.size(), "xyz");
  return BpeModel(std::move(vocab), merges, ignore_merges, "tiny");
}

std::vector<int32_t> encode(const BpeModel& m, std::string_view piece) {
  std::vector<int32_t> ids;
  m.encode_piece(piece, ids);
  return ids;
}

TEST(BpeModel, LowestRankFirstLeftmostOnTies) {
  const BpeModel m = tiny_model(false);
  EXPECT_EQ(encode(m, "the"), (std::vector<int32_t>{'t', 257}));  // "he"; no merge joins t + he
  EXPECT_EQ(encode(m, " the"), (std::vector<int32_t>{258}));      // " t" (rank 0), "he", then " the"
  EXPECT_EQ(encode(m, "aaaaa"), (std::vector<int32_t>{259, 259, 'a'}));
  EXPECT_EQ(encode(m, " in"), (std::vector<int32_t>{261}));
  EXPECT_EQ(encode(m, "x"), (std::vector<int32_t>{'x'}));
}

TEST(BpeModel, IgnoreMergesEmitsAWholeTokenOnlyWhenAsked) {
  // "xyz" is a token that no merge builds: GPT-2's rule spells it out, ignore_merges (tiktoken,
  // Llama-3) takes it whole.
  EXPECT_EQ(encode(tiny_model(false), "xyz"), (std::vector<int32_t>{'x', 'y', 'z'}));
  EXPECT_EQ(encode(tiny_model(true), "xyz"), (std::vector<int32_t>{262}));
}

TEST(BpeModel, ScanAndHeapMergeAlike) {
  // Random merges over a four-letter alphabet, random pieces up to the scan's limit.
  std::mt19937 rng(7);
  BpeVocab vocab;
  for (int b = 0; b < 256; ++b) vocab.set(b, std::string(1, static_cast<char>(b)));
  std::vector<BpeMerge> merges;
  std::vector<int32_t> pool = {'a', 'b', 'c', 'd'};
  TokenIndex index;
  while (merges.size() < 600) {
    const int32_t a = pool[rng() % pool.size()], b = pool[rng() % pool.size()];
    const std::string joined = vocab.bytes[a] + vocab.bytes[b];
    index.build(vocab);
    if (joined.size() > 12 || index.find(joined)) continue;
    const int32_t id = vocab.size();
    vocab.set(id, joined);
    pool.push_back(id);
    merges.push_back({a, b, id, static_cast<int32_t>(merges.size())});
  }
  const BpeModel m(std::move(vocab), merges, false, "random");
  for (int trial = 0; trial < 500; ++trial) {
    std::string piece(2 + rng() % (BpeModel::kHeapThreshold - 1), 'a');
    for (char& c : piece) c = "abcd"[rng() % 4];
    std::vector<int32_t> symbols, scan, heap;
    m.first_symbols(piece, symbols);
    m.merge_by_scan(symbols, scan);
    m.merge_by_heap(symbols, heap);
    ASSERT_EQ(scan, heap) << piece;
    std::string back;
    for (int32_t id : heap) back += m.vocab().bytes[id];
    ASSERT_EQ(back, piece);
  }
}

TEST(BpeModel, CutMergingEqualsMergingWhole) {
  // SentencePiece-style models over "a", "b", "▁" and "c", which has no token and falls back to
  // its byte's "<0x63>". Each model's random merges never join some pairs of first symbols (a
  // random half of the sixteen; the first model only "▁" after another symbol, as Llama 2 and
  // Mistral), so merge() cuts long pieces there; it must give the ids of one heap merge over
  // the whole piece.
  const std::vector<std::string> alphabet = {"a", "b", "\u2581", "c"};
  for (int model = 0; model < 6; ++model) {
    std::mt19937 rng(model + 3);
    BpeVocab vocab;
    for (int b = 0; b < 256; ++b) vocab.set(b, fmt::format("<0x{:02X}>", b));
    std::vector<int32_t> pool = {0x63};
    for (size_t c = 0; c < 3; ++c) {
      pool.push_back(vocab.size());
      vocab.set(vocab.size(), alphabet[c]);
    }
    std::vector<int32_t> first_of(vocab.size()), last_of(vocab.size());  // a token's edge symbols, as 0..3
    for (int32_t s = 0; s < 4; ++s) first_of[pool[s]] = last_of[pool[s]] = (s + 3) % 4;
    bool joins[4][4];
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 4; ++c) joins[x][c] = model == 0 ? !(c == 2 && x != 2) : rng() % 2 == 0;
    std::vector<BpeMerge> merges;
    TokenIndex index;
    for (int tries = 0; merges.size() < 400 && tries < 100000; ++tries) {
      const int32_t a = pool[rng() % pool.size()], b = pool[rng() % pool.size()];
      const std::string joined = vocab.bytes[a] + vocab.bytes[b];
      index.build(vocab);
      if (joined.size() > 24 || index.find(joined) || !joins[last_of[a]][first_of[b]]) continue;
      const int32_t id = vocab.size();
      vocab.set(id, joined);
      first_of.push_back(first_of[a]);
      last_of.push_back(last_of[b]);
      pool.push_back(id);
      merges.push_back({a, b, id, static_cast<int32_t>(merges.size())});
    }
    ASSERT_GT(merges.size(), 100u);
    const BpeModel m(std::move(vocab), merges, false, "random", BpeSymbols{.by_character = true, .byte_fallback = true});
    for (int trial = 0; trial < 200; ++trial) {
      std::string piece;
      for (size_t n = BpeModel::kHeapThreshold + 1 + rng() % 400; n > 0; --n) piece += alphabet[rng() % 4];
      std::vector<int32_t> symbols, cut, whole;
      m.first_symbols(piece, symbols);
      m.merge(symbols, cut);
      m.merge_by_heap(symbols, whole);
      ASSERT_EQ(cut, whole) << "model " << model << ": " << piece;
    }
  }
}

TEST(BpeModel, LongPiecesMergeInLogLinearTime) {
  // A megabyte without a pre-token boundary: the heap path, not one scan per merge.
  const BpeModel m = tiny_model(false);
  const std::string piece(1 << 20, 'a');
  std::vector<int32_t> ids;
  m.encode_piece(piece, ids);
  EXPECT_EQ(ids, std::vector<int32_t>(1 << 19, 259));
}

TEST(BpeModel, ByteWithoutTokenIsAnError) {
  BpeVocab vocab;
  vocab.set(0, "a");
  const BpeModel m(std::move(vocab), {}, false, "small.json");
  try {
    encode(m, "ab");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("small.json: byte 0x62 has no token"), std::string::npos) << e.what();
  }
}

std::vector<std::string> pieces(const PreTokenizer& pre, std::string_view text) {
  std::vector<std::string> out;
  pre.for_each_piece(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

PreTokenizer split_on(const char* pattern, SplitBehavior behavior, bool invert = false) {
  PreTokenizer pre;
  pre.rules.push_back({Regex(pattern, "test"), behavior, invert});
  return pre;
}

TEST(PreTokenizer, SplitBehavioursAsHuggingFaceDocumentsThem) {
  using V = std::vector<std::string>;
  const char* text = "the-final--countdown";
  EXPECT_EQ(pieces(split_on("-", SplitBehavior::Removed), text), (V{"the", "final", "countdown"}));
  EXPECT_EQ(pieces(split_on("-", SplitBehavior::Isolated), text), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pieces(split_on("-", SplitBehavior::MergedWithPrevious), text), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pieces(split_on("-", SplitBehavior::MergedWithNext), text), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pieces(split_on("-", SplitBehavior::Contiguous), text), (V{"the", "-", "final", "--", "countdown"}));
  // invert: the matches are the pieces, the rest the delimiters.
  EXPECT_EQ(pieces(split_on("[a-z]+", SplitBehavior::Removed, true), text), (V{"the", "final", "countdown"}));
  EXPECT_EQ(pieces(split_on("[a-z]+", SplitBehavior::MergedWithPrevious, true), text), (V{"the-", "final--", "countdown"}));
}

TEST(PreTokenizer, RulesApplyInSequenceAndEmptyMatchesCutNothing) {
  PreTokenizer pre = split_on(" ", SplitBehavior::MergedWithNext);
  pre.rules.push_back({Regex("\\p{N}", "test"), SplitBehavior::Isolated, false});
  EXPECT_EQ(pieces(pre, "ab 12 c3"), (std::vector<std::string>{"ab", " ", "1", "2", " c", "3"}));
  EXPECT_EQ(pieces(split_on("x*", SplitBehavior::Isolated), "axxb"), (std::vector<std::string>{"a", "xx", "b"}));
}

TEST(PreTokenizer, WhiteSpaceIsUnicodesWhiteSpace) {
  // U+0085 (NEL) is white space to Rust's regex and Oniguruma; U+200B (zero width space) is not.
  const std::vector<std::string> p = pieces(split_on("\\s+", SplitBehavior::Isolated), "a\xC2\x85" "b\xE2\x80\x8B" "c");
  EXPECT_EQ(p, (std::vector<std::string>{"a", "\xC2\x85", "b\xE2\x80\x8B" "c"}));
  const std::string ws = R"(\x{9}-\x{d}\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}-\x{2029}\x{202f}\x{205f}\x{3000})";
  EXPECT_EQ(unicode_pattern(R"(\\s|\S|[^\s]|\Q\s\E)"), R"(\\s|[^)" + ws + "]|[^" + ws + R"(]|\Q\s\E)");
}

TEST(PreTokenizer, NamedPatternsCompileAndUnknownNamesAreListed) {
  for (const char* name : {"gpt2", "r50k", "p50k", "cl100k", "llama3", "o200k", "qwen2", "v1", "v2"})
    EXPECT_NO_THROW(Regex(named_pattern(name), name)) << name;
  EXPECT_THROW(named_pattern("cl200k"), Error);
  try {
    Regex("(unclosed", "tokenizer.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json: bad regular expression"), std::string::npos) << e.what();
  }
}

TEST(AddedTokens, LongestLeftmostWithStrips) {
  AddedTokenSplitter splitter({{.content = "<a>", .id = 1},
                               {.content = "<a><b>", .id = 2},
                               {.content = "<s>", .id = 3, .lstrip = true, .rstrip = true},
                               {.content = "tok", .id = 4, .single_word = true}});
  std::vector<std::string> out;
  splitter.split("x<a><b>y<a> z <s>  w tok token",
                 [&](std::string_view t) { out.push_back("'" + std::string(t) + "'"); },
                 [&](int32_t id) { out.push_back(std::to_string(id)); });
  EXPECT_EQ(out, (std::vector<std::string>{"'x'", "2", "'y'", "1", "' z'", "3", "'w '", "4", "' token'"}));
}

// Where single_word refuses the longest token at a place, its text stays text, no shorter token
// there or inside it (the Rust library, checked through npm @anush008/tokenizers on Llama 2's
// file with "QQZ" single_word and "QQ" added: "xQQZ c" is ▁x Q Q Z ▁c, "QQZQQ" ▁Q Q Z and "QQ");
// a content given twice keeps its first id; a token's prefix that is no token matches nothing.
TEST(AddedTokens, SingleWordRefusalLeavesTheMatchTextAndFirstOfTwinsHolds) {
  AddedTokenSplitter splitter({{.content = "\n", .id = 1},
                               {.content = "\n\n\n", .id = 3, .single_word = true},
                               {.content = "\n\n\n", .id = 9},
                               {.content = "<unused12>", .id = 5}});
  std::vector<std::string> out;
  splitter.split("\n\n\n x\n\n\n<unused1<unused12>",
                 [&](std::string_view t) { out.push_back("'" + std::string(t) + "'"); },
                 [&](int32_t id) { out.push_back(std::to_string(id)); });
  EXPECT_EQ(out, (std::vector<std::string>{"3", "' x\n\n\n<unused1'", "5"}));
}

}  // namespace
}  // namespace tessel
