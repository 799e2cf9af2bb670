// Megatron's .bin/.idx format: tessel's writer and reader against an independent Python + numpy
// reader and writer (tests/data/megatron_format.py) in both dtypes, and every kind of damage the
// reader must refuse with the file and the offset.
#include "tessel/data/indexed_dataset.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>

#include "data_test_util.h"

namespace tessel {

// Readable test names (found by argument-dependent lookup).
inline void PrintTo(TokenDType dtype, std::ostream* os) { *os << token_dtype_name(dtype); }

namespace {

using testing::error_of;
using testing::read_bytes;
using testing::run_python;
using testing::TestDir;

using Document = std::vector<std::vector<int32_t>>;  // its sequences

// Documents of 1-3 sequences of 0-40 tokens below `vocab`, and one empty document (no sequence),
// as Megatron's add_document writes for a JSONL line whose text has no tokens.
std::vector<Document> random_documents(int count, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Document> docs(static_cast<size_t>(count));
  for (int d = 0; d < count; ++d) {
    if (d == count / 2) continue;
    docs[d].resize(1 + rng() % 3);
    for (auto& seq : docs[d]) {
      seq.resize(rng() % 41);
      for (int32_t& t : seq) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    }
  }
  return docs;
}

void write_with_tessel(const std::string& prefix, TokenDType dtype, const std::vector<Document>& docs) {
  IndexedDatasetWriter writer(prefix, dtype);
  for (const Document& doc : docs) {
    std::vector<int32_t> tokens, lengths;
    for (const auto& seq : doc) {
      tokens.insert(tokens.end(), seq.begin(), seq.end());
      lengths.push_back(static_cast<int32_t>(seq.size()));
    }
    writer.add_document(tokens, lengths);
  }
  writer.finalize();
}

void expect_same(const IndexedDataset& data, const std::vector<Document>& docs) {
  ASSERT_EQ(data.num_documents(), static_cast<int64_t>(docs.size()));
  for (size_t d = 0; d < docs.size(); ++d) {
    const int64_t first = data.document_index(static_cast<int64_t>(d));
    ASSERT_EQ(data.document_index(static_cast<int64_t>(d) + 1) - first, static_cast<int64_t>(docs[d].size())) << d;
    for (size_t s = 0; s < docs[d].size(); ++s)
      ASSERT_EQ(data.sequence(first + static_cast<int64_t>(s)), docs[d][s]) << "document " << d;
  }
}

class FormatTest : public ::testing::TestWithParam<TokenDType> {};

TEST_P(FormatTest, FilesWrittenByPythonReadByTessel) {
  TestDir dir;
  const int32_t vocab = GetParam() == TokenDType::UInt16 ? 65000 : 200000;
  const auto docs = random_documents(60, vocab, 7);
  std::ofstream(dir.path("spec.json")) << nlohmann::json(docs).dump();
  const auto r = run_python(fmt::format("megatron_format.py write {} {} {}", dir.path("py"),
                                        token_dtype_name(GetParam()), dir.path("spec.json")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  IndexedDataset data = IndexedDataset::open(dir.path("py"));
  EXPECT_EQ(data.dtype(), GetParam());
  data.set_vocab_size(vocab);
  expect_same(data, docs);
}

TEST_P(FormatTest, FilesWrittenByTesselReadByPythonAndByteIdentical) {
  TestDir dir;
  const int32_t vocab = GetParam() == TokenDType::UInt16 ? 65000 : 200000;
  const auto docs = random_documents(60, vocab, 11);
  write_with_tessel(dir.path("cc"), GetParam(), docs);
  auto r = run_python(fmt::format("megatron_format.py read {} {}", dir.path("cc"), dir.path("out.json")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json got = nlohmann::json::parse(read_bytes(dir.path("out.json")));
  EXPECT_EQ(got.at("dtype").get<std::string>(), token_dtype_name(GetParam()));
  EXPECT_EQ(got.at("documents").get<std::vector<Document>>(), docs);
  // And the files are the ones the published layout gives, byte for byte.
  std::ofstream(dir.path("spec.json")) << nlohmann::json(docs).dump();
  r = run_python(fmt::format("megatron_format.py write {} {} {}", dir.path("py"),
                             token_dtype_name(GetParam()), dir.path("spec.json")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_bytes(dir.path("cc.idx")), read_bytes(dir.path("py.idx")));
  EXPECT_EQ(read_bytes(dir.path("cc.bin")), read_bytes(dir.path("py.bin")));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FormatTest, ::testing::Values(TokenDType::UInt16, TokenDType::Int32),
                         [](const auto& info) { return std::string(token_dtype_name(info.param)); });

TEST(IndexedDataset, DtypeFollowsTheVocabularyAsMegatron) {
  EXPECT_EQ(optimal_token_dtype(256), TokenDType::UInt16);
  EXPECT_EQ(optimal_token_dtype(65499), TokenDType::UInt16);
  EXPECT_EQ(optimal_token_dtype(65500), TokenDType::Int32);
  EXPECT_EQ(optimal_token_dtype(151936), TokenDType::Int32);
}

TEST(IndexedDataset, InMemoryDatasetHasTheFileLayout) {
  TestDir dir;
  const std::vector<std::vector<int32_t>> docs = {{1, 2, 3}, {}, {4}, {5, 6}};
  const IndexedDataset memory = indexed_dataset_from_documents("mem", TokenDType::UInt16, docs);
  IndexedDatasetWriter writer(dir.path("disk"), TokenDType::UInt16);
  for (const auto& d : docs) writer.add_document(d);
  writer.finalize();
  const IndexedDataset disk = IndexedDataset::open(dir.path("disk"));
  ASSERT_EQ(memory.num_sequences(), 3);
  ASSERT_EQ(memory.num_documents(), 4);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(memory.sequence(i), disk.sequence(i));
  for (int64_t d = 0; d <= 4; ++d) EXPECT_EQ(memory.document_index(d), disk.document_index(d));
}

// ---- bad files ----

// A valid pair (uint16, sequences of 2 and 3 tokens, 2 documents) to damage.
struct Pair {
  std::string idx, bin;
  Pair() {
    const std::vector<int32_t> sizes = {2, 3};
    const std::vector<int64_t> docs = {0, 1, 2};
    idx = encode_index(TokenDType::UInt16, sizes, docs);
    std::vector<uint8_t> b;
    encode_tokens(TokenDType::UInt16, std::vector<int32_t>{10, 11, 12, 13, 14}, b, "test");
    bin.assign(b.begin(), b.end());
  }
  template <typename T>
  Pair& set(size_t offset, T v) {
    std::memcpy(idx.data() + offset, &v, sizeof v);
    return *this;
  }
  std::string open_error() const {
    return error_of([&] { IndexedDataset::from_bytes("/data/corpus", idx, bin); });
  }
};

constexpr size_t kSizes = 34, kPointers = 34 + 2 * 4, kDocs = 34 + 2 * 12;

TEST(IndexedDatasetErrors, HeaderFields) {
  Pair p;
  p.idx[0] = 'X';
  EXPECT_NE(p.open_error().find("/data/corpus.idx: not a Megatron index file: wrong magic at offset 0"), std::string::npos);
  EXPECT_NE(Pair().set<uint64_t>(9, 2).open_error().find("/data/corpus.idx: unsupported index version 2 at offset 9"), std::string::npos);
  EXPECT_NE(Pair().set<uint8_t>(17, 9).open_error().find("unknown dtype code 9 at offset 17"), std::string::npos);
  EXPECT_NE(Pair().set<uint8_t>(17, 0).open_error().find("unknown dtype code 0 at offset 17"), std::string::npos);
  EXPECT_NE(Pair().set<uint8_t>(17, 6).open_error().find("is float64: token ids must be integers"), std::string::npos);
}

TEST(IndexedDatasetErrors, TruncatedOrOversizedIndex) {
  Pair p;
  p.idx.resize(20);
  EXPECT_NE(p.open_error().find("/data/corpus.idx: truncated index: 20 bytes, the header alone takes 34"), std::string::npos);
  p = Pair();
  p.idx.resize(p.idx.size() - 8);
  EXPECT_NE(p.open_error().find("truncated index: the header (offset 18) promises 2 sequences and 3"), std::string::npos);
  // A count so large that 12 bytes a sequence would overflow 64 bits.
  EXPECT_NE(Pair().set<uint64_t>(18, uint64_t{1} << 62).open_error().find("truncated index"), std::string::npos);
  p = Pair();
  p.idx += "xyz";
  EXPECT_NE(p.open_error().find("3 bytes after the document index (offset 82)"), std::string::npos);
}

TEST(IndexedDatasetErrors, BinDoesNotMatchTheIndex) {
  Pair p;
  p.bin.resize(p.bin.size() - 1);
  EXPECT_NE(p.open_error().find("sequence 1 (sizes[1] at offset 38) ends at byte 10, past the end of /data/corpus.bin (9 bytes)"),
            std::string::npos);
  p = Pair();
  p.bin += "ab";
  EXPECT_NE(p.open_error().find("/data/corpus.bin: holds 12 bytes but its index /data/corpus.idx describes 10"), std::string::npos);
}

TEST(IndexedDatasetErrors, SizesAndPointers) {
  EXPECT_NE(Pair().set<int32_t>(kSizes, -1).open_error().find("sizes[0] at offset 34 is negative (-1)"), std::string::npos);
  EXPECT_NE(Pair().set<int64_t>(kPointers + 8, 6).open_error().find("pointers[1] at offset 50 is 6, but the sequences before it end at byte 4"),
            std::string::npos);
  EXPECT_NE(Pair().set<int64_t>(kPointers, -4).open_error().find("pointers[0] at offset 42 is -4"), std::string::npos);
  EXPECT_NE(Pair().set<int32_t>(kSizes + 4, 1000).open_error().find("past the end of /data/corpus.bin"), std::string::npos);
}

TEST(IndexedDatasetErrors, DocumentIndex) {
  EXPECT_NE(Pair().set<int64_t>(kDocs, 1).open_error().find("document index[0] at offset 58 is 1, expected 0"), std::string::npos);
  Pair p;
  p.set<int64_t>(kDocs + 8, 2).set<int64_t>(kDocs + 16, 1);
  EXPECT_NE(p.open_error().find("document index[2] at offset 74 is 1: entries must not decrease (previous 2)"), std::string::npos);
  EXPECT_NE(Pair().set<int64_t>(kDocs + 16, 1).open_error().find("the document index ends at sequence 1 (offset 74), but there are 2 sequences"),
            std::string::npos);
  EXPECT_NE(Pair().set<int64_t>(kDocs + 8, 7).open_error().find("exceed the sequence count 2"), std::string::npos);
  Pair none;
  none.set<uint64_t>(26, 0);
  none.idx.resize(kDocs);
  EXPECT_NE(none.open_error().find("the document index (offset 58) is empty"), std::string::npos);
}

TEST(IndexedDatasetErrors, TokensOutsideTheVocabularyWhenRead) {
  Pair p;
  IndexedDataset data = IndexedDataset::from_bytes("/data/corpus", p.idx, p.bin);
  data.set_vocab_size(13);  // tokens 13 and 14 of sequence 1 are outside
  EXPECT_EQ(data.sequence(0), (std::vector<int32_t>{10, 11}));
  EXPECT_NE(error_of([&] { data.sequence(1); }).find("/data/corpus.bin: token 13 at byte offset 6 (sequence 1) is outside the vocabulary [0, 13)"),
            std::string::npos);
  // Negative ids in a signed dtype.
  const std::vector<int32_t> sizes = {1};
  const std::vector<int64_t> docs = {0, 1};
  const int32_t minus_one = -1;
  IndexedDataset negative = IndexedDataset::from_bytes(
      "neg", encode_index(TokenDType::Int32, sizes, docs),
      std::string(reinterpret_cast<const char*>(&minus_one), 4));
  EXPECT_NE(error_of([&] { negative.sequence(0); }).find("token -1 at byte offset 0"), std::string::npos);
}

TEST(IndexedDatasetErrors, MissingFilesAndNamesOnDisk) {
  TestDir dir;
  EXPECT_NE(error_of([&] { IndexedDataset::open(dir.path("none")); }).find(dir.path("none.idx") + ": cannot open"),
            std::string::npos);
  Pair p;
  p.idx[3] = '?';
  dir.write("bad.idx", p.idx);
  dir.write("bad.bin", p.bin);
  EXPECT_NE(error_of([&] { IndexedDataset::open(dir.path("bad")); }).find(dir.path("bad.idx") + ": not a Megatron index file"),
            std::string::npos);
}

TEST(IndexedDatasetWriter, RefusesTokensThatDoNotFitAndLeavesNothingBehind) {
  TestDir dir;
  {
    IndexedDatasetWriter writer(dir.path("w"), TokenDType::UInt16);
    writer.add_document(std::vector<int32_t>{1, 2});
    EXPECT_NE(error_of([&] { writer.add_document(std::vector<int32_t>{70000}); }).find("token 70000 does not fit the dtype uint16"),
              std::string::npos);
    const std::vector<int32_t> tokens = {1, 2, 3}, lengths = {2};
    EXPECT_NE(error_of([&] { writer.add_document(tokens, lengths); }).find("sequence lengths summing to 2"), std::string::npos);
  }  // never finalized
  EXPECT_TRUE(std::filesystem::is_empty(dir.path("")));
}

}  // namespace
}  // namespace tessel
