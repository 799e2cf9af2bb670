// `tessel preprocess`: its files against what tools/preprocess_data.py writes (an independent
// Python reference, tests/data/preprocess_reference.py, byte for byte), the same output for any
// number of workers, and bad input named by file and line.
#include "tessel/data/preprocess.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data_test_util.h"
#include "tessel/data/text_documents.h"

namespace tessel {
namespace {

using testing::error_of;
using testing::read_bytes;
using testing::run_python;
using testing::run_tessel;
using testing::TestDir;

// JSONL lines of the bundled corpus's paragraphs, with a second key, a list-of-sentences record,
// an empty text, Unicode and a blank line; enough of them to span several batches.
std::string corpus_jsonl() {
  const std::string corpus = read_bytes(std::string(TESSEL_SOURCE_DIR) + "/data/kjv-genesis-esther.txt");
  std::string out;
  size_t pos = 0;
  for (int n = 0; n < 300 && pos < corpus.size(); ++n) {
    const size_t end = pos + text_document_length(std::string_view(corpus).substr(pos), true);
    const std::string paragraph = corpus.substr(pos, end - pos);
    out += nlohmann::json({{"text", paragraph}, {"title", std::to_string(n)}}).dump() + "\n";
    pos = end;
  }
  out += R"({"text": ["Erste Zeile. ", "", "Zweite — ünïcödé ✓ 😀"], "title": "list"})" "\n";
  out += R"({"text": "", "title": "empty text"})" "\n";
  out += "   \n";
  out += R"({"title": "no newline at the end", "text": "日本語のテキスト"})";
  return out;
}

PreprocessResult run(const std::string& input, const std::string& prefix, int workers,
                     std::vector<std::string> keys = {"text"}, int64_t batch_bytes = 4096) {
  PreprocessOptions o;
  o.input = input;
  o.output_prefix = prefix;
  o.json_keys = std::move(keys);
  o.workers = workers;
  o.batch_bytes = batch_bytes;  // small batches: many of them in flight at once
  return preprocess(o, ByteTokenizer());
}

TEST(Preprocess, JsonlMatchesMegatronsPreprocessByteForByte) {
  TestDir dir;
  const std::string input = dir.write("corpus.jsonl", corpus_jsonl());
  const PreprocessResult r = run(input, dir.path("tessel"), 2, {"text", "title"});
  ASSERT_EQ(r.prefixes.size(), 2u);
  EXPECT_EQ(r.dtype, TokenDType::UInt16);
  EXPECT_EQ(r.totals.documents, 303);
  const auto py = run_python(fmt::format("preprocess_reference.py {} {} text title", input, dir.path("py")));
  ASSERT_EQ(py.exit_code, 0) << py.output;
  for (const char* key : {"text", "title"})
    for (const char* ext : {".bin", ".idx"}) {
      const std::string suffix = fmt::format("_{}_document{}", key, ext);
      EXPECT_EQ(read_bytes(dir.path("tessel" + suffix)), read_bytes(dir.path("py" + suffix))) << suffix;
    }
}

TEST(Preprocess, TextFileDocumentsArePartsOfTheFileAndMatchTheReference) {
  TestDir dir;
  const std::string text = "\nfirst paragraph\nstill first\n\n\nsecond\n \t\nthird, no final newline";
  const std::string input = dir.write("notes.txt", text);
  const PreprocessResult r = run(input, dir.path("tessel"), 1);
  EXPECT_EQ(r.totals.documents, 3);
  const IndexedDataset data = IndexedDataset::open(r.prefixes[0]);
  std::string joined;
  std::vector<std::string> docs;
  for (int64_t i = 0; i < data.num_sequences(); ++i) {
    const std::vector<int32_t> t = data.sequence(i);
    docs.emplace_back(t.begin(), t.end());
    joined += docs.back();
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(docs, (std::vector<std::string>{"\nfirst paragraph\nstill first\n\n\n", "second\n \t\n",
                                            "third, no final newline"}));
  const auto py = run_python(fmt::format("preprocess_reference.py {} {} text", input, dir.path("py")));
  ASSERT_EQ(py.exit_code, 0) << py.output;
  EXPECT_EQ(read_bytes(dir.path("tessel_text_document.idx")), read_bytes(dir.path("py_text_document.idx")));
  EXPECT_EQ(read_bytes(dir.path("tessel_text_document.bin")), read_bytes(dir.path("py_text_document.bin")));
}

TEST(Preprocess, OutputDoesNotDependOnWorkersOrBatches) {
  TestDir dir;
  const std::string jsonl = dir.write("c.jsonl", corpus_jsonl());
  const std::string txt = std::string(TESSEL_SOURCE_DIR) + "/data/kjv-genesis-esther.txt";
  for (const std::string& input : {jsonl, txt}) {
    run(input, dir.path("one"), 1, {"text"}, 1 << 20);
    for (int workers : {2, 3}) {
      run(input, dir.path("many"), workers, {"text"}, 3000);
      for (const char* ext : {".bin", ".idx"})
        EXPECT_EQ(read_bytes(dir.path(std::string("one_text_document") + ext)),
                  read_bytes(dir.path(std::string("many_text_document") + ext)))
            << input << " with " << workers << " workers";
    }
  }
}

TEST(Preprocess, BadInputNamesFileAndLine) {
  TestDir dir;
  const std::string bad_json = dir.write("bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n");
  EXPECT_NE(error_of([&] { run(bad_json, dir.path("o"), 2); }).find(bad_json + ":2: bad JSON"), std::string::npos);
  const std::string missing = dir.write("missing.jsonl", "{\"text\": \"a\"}\n\n{\"body\": \"b\"}\n");
  EXPECT_NE(error_of([&] { run(missing, dir.path("o"), 1); }).find(missing + ":3: no key \"text\""), std::string::npos);
  const std::string number = dir.write("number.jsonl", "{\"text\": 5}\n");
  EXPECT_NE(error_of([&] { run(number, dir.path("o"), 1); }).find(number + ":1: \"text\" is a number, not a string"),
            std::string::npos);
  const std::string not_object = dir.write("array.jsonl", "[1, 2]\n");
  EXPECT_NE(error_of([&] { run(not_object, dir.path("o"), 1); }).find(not_object + ":1: expected a JSON object"), std::string::npos);
  // Invalid UTF-8: a lone continuation byte on line 3 of a JSONL file, an overlong form in text.
  const std::string utf8_jsonl = dir.write("utf8.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \"\x80\"}\n");
  EXPECT_NE(error_of([&] { run(utf8_jsonl, dir.path("o"), 2); }).find(utf8_jsonl + ":3: invalid UTF-8 at byte offset 38 (0x80)"),
            std::string::npos);
  const std::string utf8_txt = dir.write("utf8.txt", "fine\n\nstill fine\n\xc0\xaf\n");
  EXPECT_NE(error_of([&] { run(utf8_txt, dir.path("o"), 1); }).find(utf8_txt + ":4: invalid UTF-8 at byte offset 17 (0xc0)"),
            std::string::npos);
  const std::string empty = dir.write("empty.jsonl", "\n  \n");
  EXPECT_NE(error_of([&] { run(empty, dir.path("o"), 1); }).find(empty + ": no documents"), std::string::npos);
  EXPECT_NE(error_of([&] { run(dir.path("absent.jsonl"), dir.path("o"), 1); }).find("absent.jsonl: no such file"), std::string::npos);
  // A failed run leaves no output that looks complete.
  EXPECT_FALSE(std::filesystem::exists(dir.path("o_text_document.idx")));
  EXPECT_FALSE(std::filesystem::exists(dir.path("o_text_document.bin")));
}

TEST(Preprocess, FlagsAreCheckedTogether) {
  TestDir dir;
  PreprocessOptions o;
  o.input = dir.write("a.jsonl", "{\"text\": \"a\"}\n");
  o.workers = 0;
  o.append_eod = true;
  const std::string e = error_of([&] { preprocess(o, ByteTokenizer()); });
  EXPECT_NE(e.find("--output-prefix is required"), std::string::npos) << e;
  EXPECT_NE(e.find("--workers must be at least 1 (got 0)"), std::string::npos) << e;
  EXPECT_NE(e.find("--append-eod: the tokenizer ByteTokenizer has no end-of-document token"), std::string::npos) << e;
  o.input = dir.write("a.txt", "text");
  o.json_keys = {"text", "title"};
  EXPECT_NE(error_of([&] { preprocess(o, ByteTokenizer()); }).find("a.txt is plain text, one output: --json-keys takes one key"),
            std::string::npos);
}

TEST(PreprocessCommand, WritesFilesThatDataInspectReads) {
  TestDir dir;
  const std::string input = dir.write("c.jsonl", corpus_jsonl());
  auto r = run_tessel(fmt::format("preprocess --input {} --output-prefix {} --workers 2", input, dir.path("out")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + dir.path("out_text_document") + ".bin and"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("303 documents"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MB/s"), std::string::npos) << r.output;
  r = run_tessel(fmt::format("data inspect {} --doc 300 --decode", dir.path("out_text_document")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dtype uint16 (code 8) | 303 sequences | 303 documents"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("document 300: sequences [300, 302)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Erste Zeile. Zweite — ünïcödé ✓ 😀"), std::string::npos) << r.output;
  r = run_tessel(fmt::format("data inspect {} --doc 302", dir.path("out_text_document")));
  EXPECT_NE(r.output.find("230 151 165"), std::string::npos) << r.output;  // 日 in UTF-8
  r = run_tessel(fmt::format("preprocess --input {} --output-prefix {} --append-eod", input, dir.path("x")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("has no end-of-document token"), std::string::npos) << r.output;
  r = run_tessel(fmt::format("data inspect {} --doc 999", dir.path("out_text_document")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--doc 999"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tessel
