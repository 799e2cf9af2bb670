// tokenizer.json's Unigram model (unigram.h) on small hand-made files whose ids are worked out
// in the comments (each was also checked against the Rust library; the larger comparison is
// unigram_reference_test.cpp).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/data/tokenizer.h"
#include "tessel/data/tokenizers/loaders.h"

namespace tessel {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;

using Pieces = std::vector<std::pair<std::string, double>>;

// [[piece, score], ...] (a braced list would read as an object).
json vocab_list(const Pieces& pieces) {
  json list = json::array();
  for (const auto& [piece, score] : pieces) list.push_back(json::array({piece, score}));
  return list;
}

std::unique_ptr<Tokenizer> unigram(const Pieces& pieces, const json& unk_id, bool byte_fallback = false) {
  const json vocab = vocab_list(pieces);
  const json j = {{"added_tokens", json::array()}, {"normalizer", nullptr}, {"pre_tokenizer", nullptr}, {"decoder", nullptr},
                  {"model", {{"type", "Unigram"}, {"unk_id", unk_id}, {"vocab", vocab}, {"byte_fallback", byte_fallback}}}};
  return parse_hf_tokenizer(j.dump(), "unigram.json");
}

TEST(UnigramModel, BestSegmentationFusingUnknownCharacters) {
  // The library's own example: abcd (10) beats ab+cd (3) and abc+d (5); "a" then "cd" (1 over
  // c+d's 0); x and x have no token: each the unknown token, fused into one.
  const auto t = unigram({{"<unk>", 0.0}, {"a", 0.0}, {"b", 0.0}, {"c", 0.0}, {"d", 0.0}, {"cd", 1.0}, {"ab", 2.0},
                          {"abc", 5.0}, {"abcd", 10.0}}, 0);
  EXPECT_EQ(t->encode("abcdacdxx"), (Ids{8, 1, 5, 0}));
  // No decoder: the tokens joined with spaces, as the library does.
  EXPECT_EQ(t->decode(Ids{8, 1, 5, 0}), "abcd a cd <unk>");
  EXPECT_EQ(t->encode(""), Ids{});
}

TEST(UnigramModel, TiesGoToTheLastTokenThatStartsFirst) {
  // a+b and ab both score -2: ab, found first (from position 0), stays.
  EXPECT_EQ(unigram({{"<unk>", 0}, {"a", -1}, {"b", -1}, {"ab", -2}}, 0)->encode("ab"), (Ids{3}));
}

TEST(UnigramModel, ByteFallbackOnUnknownRuns) {
  const auto t = unigram({{"<unk>", 0}, {"a", -1}, {"<0xC3>", -1}, {"<0xA9>", -1}}, 0, true);
  // é alone and éé fused: their bytes; ☃ (E2 98 83) has no byte tokens: the unknown token.
  EXPECT_EQ(t->encode("a\u00E9a\u00E9\u00E9a\u2603"), (Ids{1, 2, 3, 1, 2, 3, 2, 3, 1, 0}));
}

TEST(UnigramModel, AFusedRunThatIsAPieceIsThatPiece) {
  // Scores 100 and 30: the unknown token scores 30 - 10 = 20, so unk + unk (40) beats "xy" (30);
  // the fused run "xy" is then looked up, and is a piece.
  EXPECT_EQ(unigram({{"<unk>", 100}, {"xy", 30}}, 0)->encode("xy"), (Ids{1}));
}

TEST(UnigramModel, APieceGivenTwiceIsItsLastId) {
  const auto t = unigram({{"<unk>", 0}, {"a", -1}, {"a", -0.5}}, 0);
  EXPECT_EQ(t->encode("aa"), (Ids{2, 2}));
  EXPECT_EQ(t->token_to_id("a"), 2);
  EXPECT_EQ(t->id_to_token(1), "a");
}

TEST(UnigramModel, WithoutUnkIdUnknownTextIsRefused) {
  const auto t = unigram({{"a", -1}, {"b", -1}}, nullptr);
  EXPECT_EQ(t->encode("ab"), (Ids{0, 1}));
  try {
    t->encode("abx");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unigram.json: the Unigram model has no token for \"x\" and no unk_id");
  }
}

TEST(UnigramModel, BadFilesAreRefusedInOneLine) {
  auto message = [](const json& model) {
    try {
      parse_hf_tokenizer(json{{"model", model}}.dump(), "u.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({{"type", "Unigram"}, {"vocab", vocab_list({{"a", -1}})}, {"unk_id", 1}}),
            "u.json: model.unk_id must be the index of a piece (the vocabulary has 1): 1");
  EXPECT_EQ(message({{"type", "Unigram"}, {"vocab", json::array({json::array({"a", "x"})})}}),
            "u.json: model.vocab[0] must be [piece, score]: [\"a\",\"x\"]");
  EXPECT_EQ(message({{"type", "Unigram"}}), "u.json: the Unigram model needs a \"vocab\" list");
  EXPECT_EQ(message({{"type", "WordPiece"}}),
            "u.json: model WordPiece is not supported (supported: BPE, byte-level or with byte_fallback; Unigram)");
  const json byte_level = {{"model", {{"type", "Unigram"}, {"vocab", vocab_list({{"a", -1}})}}},
                           {"pre_tokenizer", {{"type", "ByteLevel"}}}};
  try {
    parse_hf_tokenizer(byte_level.dump(), "u.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "u.json: a Unigram model with a ByteLevel pre-tokenizer is not supported");
  }
}

}  // namespace
}  // namespace tessel
