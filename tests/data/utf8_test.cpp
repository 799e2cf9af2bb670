#include <gtest/gtest.h>

#include <string>

#include "tessel/core/error.h"
#include "tessel/data/utf8.h"

namespace tessel {
namespace {

TEST(Utf8, AcceptsWellFormedText) {
  EXPECT_EQ(first_invalid_utf8(""), std::nullopt);
  EXPECT_EQ(first_invalid_utf8("plain ASCII, longer than eight bytes"), std::nullopt);
  EXPECT_EQ(first_invalid_utf8("caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x91\x8D \xF4\x8F\xBF\xBF"), std::nullopt);  // é 中 👍 U+10FFFF
}

TEST(Utf8, FindsTheFirstBadByte) {
  EXPECT_EQ(first_invalid_utf8("abc\x80"), 3u);                      // a stray continuation byte
  EXPECT_EQ(first_invalid_utf8("abcdefghij\xC3"), 10u);              // cut off by the end
  EXPECT_EQ(first_invalid_utf8("\xC0\xAF"), 0u);                     // overlong '/'
  EXPECT_EQ(first_invalid_utf8("ok \xE0\x80\xAF"), 3u);              // overlong three-byte form
  EXPECT_EQ(first_invalid_utf8("x\xED\xA0\x80"), 1u);                // a UTF-16 surrogate
  EXPECT_EQ(first_invalid_utf8("\xF4\x90\x80\x80"), 0u);             // above U+10FFFF
  EXPECT_EQ(first_invalid_utf8("\xE4\xB8 \xAD"), 0u);                // continuation missing
  EXPECT_EQ(first_invalid_utf8("good \xC3\xA9 then \xFF"), 13u);
}

TEST(Utf8, CheckNamesTheInputAndOffset) {
  try {
    check_utf8("hello \xFE world", "corpus.txt");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "corpus.txt: invalid UTF-8 at byte offset 6 (bytes 0xFE 0x20 0x77 0x6F)");
  }
  EXPECT_NO_THROW(check_utf8("fine", "x"));
}

// Generation shows a decoder's output as it grows, holding back a character whose bytes are not
// all there yet (or a decoder's U+FFFD for them).
TEST(Utf8, CompletePrefixHoldsBackACutCharacter) {
  EXPECT_EQ(complete_utf8_prefix(""), 0u);
  EXPECT_EQ(complete_utf8_prefix("abc"), 3u);
  EXPECT_EQ(complete_utf8_prefix("caf\xC3"), 3u);                   // é's first byte
  EXPECT_EQ(complete_utf8_prefix("caf\xC3\xA9"), 5u);
  EXPECT_EQ(complete_utf8_prefix("x\xF0\x9F\x91"), 1u);             // 👍 missing its last byte
  EXPECT_EQ(complete_utf8_prefix("x\xF0\x9F\x91\x8D"), 5u);
  EXPECT_EQ(complete_utf8_prefix("ab\xE4\xB8"), 2u);
  EXPECT_EQ(complete_utf8_prefix("ab\xEF\xBF\xBD"), 2u);            // a decoder's U+FFFD
  EXPECT_EQ(replace_invalid_utf8("a\x80" "b\xC3\xA9\xE4\xB8"), "a\xEF\xBF\xBD" "b\xC3\xA9\xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace
}  // namespace tessel
