// The byte tokenizer, the default: one token per byte.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/data/tokenizer.h"

namespace tessel {
namespace {

TEST(ByteTokenizer, RoundTripsEveryByte) {
  ByteTokenizer tok;
  std::string all(256, '\0');
  for (int b = 0; b < 256; ++b) all[b] = static_cast<char>(b);
  const std::vector<int32_t> tokens = tok.encode(all);
  ASSERT_EQ(tokens.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tokens[b], b);  // bytes >= 0x80 are not negative
  EXPECT_EQ(tok.decode(tokens), all);
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.encode("Hi\n"), (std::vector<int32_t>{'H', 'i', '\n'}));
}

TEST(ByteTokenizer, RejectsTokensOutsideTheVocabulary) {
  ByteTokenizer tok;
  EXPECT_THROW(tok.decode(std::vector<int32_t>{65, 256}), Error);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{-1}), Error);
}

}  // namespace
}  // namespace tessel
