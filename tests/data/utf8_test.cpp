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

}  // namespace
}  // namespace tessel
