// `tessel tokenizer encode | decode | inspect | train` as a user runs them, on the small model of
// tests/data/tokenizers/tokenizer_fixtures.h.
#include <gtest/gtest.h>

#include <string>

#include "data/tokenizers/tokenizer_fixtures.h"
#include "support/run_command.h"

namespace tessel {
namespace {

using testing::run_command;
using testing::run_tessel;

struct TinyFlags {
  testing::TestDir dir;
  std::string flags;
  TinyFlags() {
    flags = "--tokenizer-type HuggingFaceTokenizer --tokenizer-model " +
            dir.write("tokenizer.json", testing::tiny_tokenizer_json(true).dump());
  }
};

TEST(TokenizerCommand, EncodeAndDecode) {
  TinyFlags t;
  const std::string bin = TESSEL_BINARY;
  EXPECT_EQ(run_command("printf ' the aa x' | " + bin + " tokenizer encode " + t.flags).output, "258 32 259 32 120\n");
  EXPECT_EQ(run_command("printf ' the aa x' | " + bin + " tokenizer encode --json " + t.flags).output, "[258,32,259,32,120]\n");
  const std::string file = t.dir.write("in.txt", "x<|endoftext|>\n");
  EXPECT_EQ(run_tessel("tokenizer encode --input " + file + " " + t.flags).output, "120 263 10\n");
  EXPECT_EQ(run_command("echo '258 32 259' | " + bin + " tokenizer decode " + t.flags).output, " the aa");
  EXPECT_EQ(run_command("echo '[258, 32, 259]' | " + bin + " tokenizer decode " + t.flags).output, " the aa");
  // Every byte string that is UTF-8 round-trips.
  const std::string text = t.dir.write("text.txt", "caf\xC3\xA9 \xE4\xB8\xAD\n\n  the end ");
  EXPECT_EQ(run_command(bin + " tokenizer encode --input " + text + " " + t.flags + " | " + bin + " tokenizer decode " +
                        t.flags + " | cmp - " + text).exit_code, 0);
}

TEST(TokenizerCommand, BadInputIsAClearError) {
  TinyFlags t;
  const std::string bin = TESSEL_BINARY;
  testing::CommandResult r = run_command("printf 'ab\\377c' | " + bin + " tokenizer encode " + t.flags);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("standard input: invalid UTF-8 at byte offset 2"), std::string::npos) << r.output;
  r = run_command("echo '1 two 3' | " + bin + " tokenizer decode " + t.flags);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("standard input: \"two\" at byte offset 2 is not a token id"), std::string::npos) << r.output;
  r = run_command("echo '1 99999' | " + bin + " tokenizer decode " + t.flags);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("token 99999 at position 1 is not in the vocabulary"), std::string::npos) << r.output;
  r = run_tessel("tokenizer encode --tokenizer-type GPT2BPETokenizer --vocab-file /nonexistent/vocab.json --merge-file x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/nonexistent/vocab.json: cannot read"), std::string::npos) << r.output;
  r = run_tessel("tokenizer train --input x --vocab-size 0 --model-type wordpiece --output " + t.dir.path("o"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--vocab-size: give the vocabulary size; --model-type wordpiece: must be"), std::string::npos) << r.output;
}

TEST(TokenizerCommand, Inspect) {
  TinyFlags t;
  testing::CommandResult r = run_tessel("tokenizer inspect --token \xC4\xA0the --id 259 --text ' the' " + t.flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"type: HuggingFaceTokenizer\n", "vocab size: 264\n",
                           "unicode: 16.0.0 (pre-tokenizer classes), 9.0.0 (NFC/NFD/NFKC/NFKD, as the library), 17.0.0 (Lowercase)\n",
                           "eod: 263 \"<|endoftext|>\"",
                           "token \"\xC4\xA0the\": 258\n", "id 259: \"aa\"\n", "ids: 258\n"})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  r = run_tessel("tokenizer inspect --json " + t.flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["vocab_size"], 264);
  EXPECT_EQ(j["unicode"], "16.0.0");
  EXPECT_EQ(j["unicode_normalization"], "9.0.0");
  EXPECT_EQ(j["unicode_case"], "17.0.0");
  EXPECT_EQ(j["special_ids"]["eos"], 263);
  EXPECT_EQ(j["special_tokens"][0]["content"], "<|endoftext|>");
  r = run_tessel("tokenizer inspect");
  EXPECT_NE(r.output.find("type: ByteTokenizer\nvocab size: 256\n"), std::string::npos) << r.output;
}

TEST(TokenizerCommand, TrainByteBpe) {
  testing::TestDir dir;
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the cat sat on the mat; the dog sat on the log.\n";
  const std::string input = dir.write("small.txt", text);
  testing::CommandResult r = run_tessel("tokenizer train --model-type byte-bpe --vocab-size 300 --input " + input +
                                        " --output " + dir.path("bpe"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--tokenizer-type HuggingFaceTokenizer --tokenizer-model " + dir.path("bpe")), std::string::npos);
  r = run_tessel("tokenizer encode --tokenizer-type hf --tokenizer-model " + dir.path("bpe") + " --input " + input + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json ids = nlohmann::json::parse(r.output);
  EXPECT_EQ(ids.size(), 200u * 15);  // "the", " cat", ..., ".", "\n": each one token
  r = run_tessel("tokenizer train --model-type byte-bpe --vocab-size 300 --input " + dir.write("bad.txt", "ok\xC3") +
                 " --output " + dir.path("x"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("bad.txt: invalid UTF-8 at byte offset 2"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tessel
