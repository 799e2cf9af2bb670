// The dataset builder's API as the trainer will use it: blending, the build-then-wait protocol of
// the index caches, text files as datasets, and every bad input with a clear message.
#include "tessel/data/dataset_builder.h"

#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <thread>

#include "data_test_util.h"
#include "tessel/data/npy.h"

namespace tessel {
namespace {

using testing::error_of;
using testing::read_bytes;
using testing::TestDir;

// Documents d = 0..count-1 of length 5 + d % 7, every token d % 256.
void write_dataset(const std::string& prefix, int count, TokenDType dtype = TokenDType::UInt16,
                   int32_t token_offset = 0) {
  IndexedDatasetWriter writer(prefix, dtype);
  for (int d = 0; d < count; ++d)
    writer.add_document(std::vector<int32_t>(static_cast<size_t>(5 + d % 7), token_offset + d % 256));
  writer.finalize();
}

GptDataOptions options(std::vector<std::string> data_path, const Tokenizer& tokenizer) {
  GptDataOptions o;
  o.data_path = std::move(data_path);
  o.split = "90,8,2";
  o.seq_length = 16;
  o.seed = 1234;
  o.num_samples = {200, 20, 5};
  o.tokenizer = &tokenizer;
  return o;
}

TEST(Blending, GreedyIndexFollowsTheWeightsWithinOneSample) {
  for (const std::vector<double>& raw : std::vector<std::vector<double>>{{0.5, 0.3, 0.2}, {9, 1}, {1, 1, 1}, {0.01, 0.99}}) {
    const std::vector<double> w = normalize_weights(raw);
    std::vector<int16_t> which;
    std::vector<int64_t> nth;
    build_blending_indices(w, 10000, which, nth);
    std::vector<int64_t> served(w.size(), 0);
    for (int64_t k = 0; k < 10000; ++k) {
      const size_t d = static_cast<size_t>(which[static_cast<size_t>(k)]);
      EXPECT_EQ(nth[static_cast<size_t>(k)], served[d]);  // each dataset's samples in order
      ++served[d];
      for (size_t e = 0; e < w.size(); ++e)
        ASSERT_LE(std::abs(static_cast<double>(served[e]) - w[e] * static_cast<double>(k + 1)), 1.0 + 1e-9)
            << "after " << k + 1 << " samples";
    }
    for (size_t e = 0; e < w.size(); ++e)
      EXPECT_NEAR(static_cast<double>(served[e]) / 10000.0, w[e], 0.01);
  }
}

TEST(Blending, BlendedSamplesComeFromTheirDatasets) {
  TestDir dir;
  write_dataset(dir.path("low"), 100, TokenDType::UInt16, 0);     // tokens 0..99
  write_dataset(dir.path("high"), 100, TokenDType::UInt16, 200);  // tokens 200..255, then 256+
  ByteTokenizer bytes;
  GptDataOptions o = options({"0.75", dir.path("low"), "0.25", dir.path("high")}, bytes);
  o.tokenizer = nullptr;  // token ids past 255
  const GptDataSplits s = build_gpt_datasets(o);
  const auto* train = dynamic_cast<const BlendedDataset*>(s.get(Split::Train));
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->size(), 150 + 50);  // ceil(200 · 0.75) + ceil(200 · 0.25)
  // Megatron's 0.5 % margin: each dataset is asked for ceil(ceil(200 · w) · 1.005) samples.
  EXPECT_EQ(train->datasets()[0]->num_samples(), 151);
  EXPECT_EQ(train->datasets()[1]->num_samples(), 51);
  EXPECT_GE(train->datasets()[0]->size(), 151);
  std::vector<int32_t> tokens(17);
  int high = 0;
  for (int64_t i = 0; i < train->size(); ++i) {
    train->sample(i, tokens);
    const bool from_high = tokens[0] >= 200;
    EXPECT_EQ(from_high, train->dataset_index()[static_cast<size_t>(i)] == 1);
    for (int32_t t : tokens) EXPECT_EQ(t >= 200, from_high);
    high += from_high;
  }
  EXPECT_EQ(high, 50);
}

// A 300-document dataset whose indices go to dir/cache.
class CachedDataset : public ::testing::Test {
 protected:
  void SetUp() override {
    write_dataset(dir.path("d"), 300);
    o = options({dir.path("d")}, bytes);
    o.data_cache_path = dir.path("cache");
  }
  TestDir dir;
  ByteTokenizer bytes;
  GptDataOptions o;
};

TEST_F(CachedDataset, BuildersFirstThenTheOthersLoadIt) {
  // Two ranks as threads: each phase ends when both have run it.
  std::barrier sync(2);
  const auto together = [&](const std::function<void()>& phase) {
    phase();
    sync.arrive_and_wait();
  };
  GptDataSplits rank0, rank1;
  std::thread other([&] { rank1 = build_gpt_datasets(o, {.builds_first = false, .together = together}); });
  rank0 = build_gpt_datasets(o, {.builds_first = true, .together = together});
  other.join();
  const auto& built = dynamic_cast<const GptDataset&>(*rank0.get(Split::Train));
  const auto& loaded = dynamic_cast<const GptDataset&>(*rank1.get(Split::Train));
  EXPECT_FALSE(built.loaded_from_cache());
  EXPECT_TRUE(loaded.loaded_from_cache());
  EXPECT_EQ(built.document_index(), loaded.document_index());
  EXPECT_EQ(built.sample_index(), loaded.sample_index());
  EXPECT_EQ(built.shuffle_index(), loaded.shuffle_index());
  EXPECT_EQ(built.num_epochs(), loaded.num_epochs());
  // A node whose cache folder lacks the files (a local disk) builds its own, the same.
  o.data_cache_path = dir.path("other_node_cache");
  const GptDataSplits rank2 = build_gpt_datasets(o, {.builds_first = false, .together = nullptr});
  const auto& own = dynamic_cast<const GptDataset&>(*rank2.get(Split::Train));
  EXPECT_FALSE(own.loaded_from_cache());
  EXPECT_EQ(own.shuffle_index(), built.shuffle_index());
}

TEST_F(CachedDataset, DamagedIsAnErrorNamingTheFile) {
  const GptDataSplits s = build_gpt_datasets(o);
  const auto& train = dynamic_cast<const GptDataset&>(*s.get(Split::Train));
  const std::string shuffle = dir.path("cache/" + train.description_hash() + "-GPTDataset-train-shuffle_index.npy");
  std::vector<uint32_t> wrong(train.shuffle_index().begin(), train.shuffle_index().end());
  wrong[3] = 1u << 30;
  write_npy(shuffle, wrong);
  EXPECT_NE(error_of([&] { build_gpt_datasets(o); }).find(shuffle + ": sample 1073741824 out of range"), std::string::npos);
  std::ofstream(shuffle) << "not numpy";
  EXPECT_NE(error_of([&] { build_gpt_datasets(o); }).find(shuffle + ": not a .npy file"), std::string::npos);
}

TEST(DatasetBuilder, TextFileIsTokenizedIntoTheSameInterface) {
  TestDir dir;
  const std::string corpus = std::string(TESSEL_SOURCE_DIR) + "/data/kjv-genesis-esther.txt";
  ByteTokenizer bytes;
  const IndexedDataset text = tokenize_text_file(corpus, bytes, true);
  std::string joined;
  for (int64_t i = 0; i < text.num_sequences(); ++i) {
    const std::vector<int32_t> t = text.sequence(i);
    joined.append(t.begin(), t.end());
  }
  EXPECT_EQ(joined, read_bytes(corpus));  // byte tokenizer, no end-of-document token to append
  EXPECT_EQ(text.num_documents(), 872);
  GptDataOptions o = options({corpus}, bytes);
  o.seq_length = 128;
  const GptDataSplits s = build_gpt_datasets(o);
  ASSERT_NE(s.get(Split::Valid), nullptr);
  EXPECT_GT(s.get(Split::Valid)->size(), 20);
  std::vector<int32_t> tokens(129), starts;
  for (int64_t i = 0; i < s.get(Split::Train)->size(); ++i) {
    s.get(Split::Train)->sample(i, tokens, &starts);
    for (int32_t p : starts) {
      ASSERT_GT(p, 0);
      ASSERT_LT(p, 129);
      // Every document of the corpus ends with a newline: the token before a start is one.
      EXPECT_EQ(tokens[p - 1], '\n') << "sample " << i << " at " << p;
    }
  }
  // JSONL as a data path: the "text" key of each line.
  const std::string jsonl = dir.write("t.jsonl", "{\"text\": \"hello world, \"}\n{\"text\": \"and more text\"}\n");
  o.data_path = {jsonl};
  o.split = "1";
  o.seq_length = 4;
  o.num_samples = {6, 0, 0};
  EXPECT_EQ(build_gpt_datasets(o).get(Split::Train)->size(), 6);
}

TEST(DatasetBuilder, BadFlagsListEveryProblem) {
  ByteTokenizer bytes;
  GptDataOptions o = options({"a"}, bytes);
  o.train_data_path = {"b"};
  o.seq_length = 1;
  o.num_samples[1] = -3;
  const std::string e = error_of([&] { build_gpt_datasets(o); });
  EXPECT_NE(e.find("--data-path excludes --train-data-path"), std::string::npos) << e;
  EXPECT_NE(e.find("--seq-length must be at least 2 (got 1)"), std::string::npos) << e;
  EXPECT_NE(e.find("the valid split is asked for -3 samples"), std::string::npos) << e;
  o = options({}, bytes);
  EXPECT_NE(error_of([&] { build_gpt_datasets(o); }).find("no data: give --data-path"), std::string::npos);
}

TEST(DatasetBuilder, BadBlendsAndSplits) {
  auto blend_error = [](std::vector<std::string> words) {
    return error_of([&] { parse_data_blend(words, "--data-path"); });
  };
  EXPECT_NE(blend_error({"0.3", "a", "0.7"}).find("--data-path: 3 words, but a weighted blend is pairs"), std::string::npos);
  const std::string weights = blend_error({"0", "a", "-1", "b", "x", "c"});
  EXPECT_NE(weights.find("the weight 0 of a must be > 0"), std::string::npos) << weights;
  EXPECT_NE(weights.find("the weight -1 of b must be > 0"), std::string::npos) << weights;
  EXPECT_NE(weights.find("'x' (before c) is not a weight"), std::string::npos) << weights;
  EXPECT_NE(blend_error({"a", "0.5", "b"}).find("'0.5' looks like a weight"), std::string::npos);
  EXPECT_NE(blend_error({}).find("--data-path is empty"), std::string::npos);
  const DataBlend plain = parse_data_blend({"a", "b"}, "--data-path");
  EXPECT_TRUE(plain.weights.empty());
  EXPECT_EQ(parse_data_blend({"2", "a", "1e-1", "b"}, "--data-path").weights, (std::vector<double>{2, 0.1}));

  EXPECT_NE(error_of([] { parse_split("90,5,4,1"); }).find("at most 3 proportions"), std::string::npos);
  EXPECT_NE(error_of([] { parse_split("0,0,0"); }).find("the proportions sum to 0"), std::string::npos);
  EXPECT_NE(error_of([] { parse_split("90,-5,5"); }).find("must not be negative"), std::string::npos);
  const SplitMatrix m = parse_split("949,50,1");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_DOUBLE_EQ(m[0]->second, 0.949);
  EXPECT_DOUBLE_EQ(m[1]->first, 0.949);
  EXPECT_DOUBLE_EQ(m[2]->second, 0.949 + 0.05 + 0.001);
  EXPECT_FALSE(parse_split("100,0,0")[1].has_value());
  EXPECT_FALSE(parse_split("98,2")[2].has_value());
  // Strictly numbers (issue 26): nothing skipped, exponents read whole, '/' as Megatron allows.
  for (const char* bad : {"nan,1,1", "inf,1,1", "1,x,1", "20abc,1,1", "1,,1", "1;1"})
    EXPECT_NE(error_of([&] { parse_split(bad); }).find("is not a finite number"), std::string::npos) << bad;
  EXPECT_EQ(parse_split("9e1,5,5"), parse_split("90,5,5"));
  EXPECT_EQ(parse_split("98/2"), parse_split("98,2"));
  EXPECT_DOUBLE_EQ(parse_split("98,1,1e-3")[2]->second, 1.0);
  EXPECT_NE(error_of([] { parse_split("1e308,1e308"); }).find("sum past the largest number"), std::string::npos);
  EXPECT_NE(blend_error({"1e308", "a", "1e308", "b"}).find("sum past the largest number"), std::string::npos);
}

TEST(DatasetBuilder, BadDataIsNamed) {
  TestDir dir;
  ByteTokenizer bytes;
  EXPECT_NE(error_of([&] { build_gpt_datasets(options({dir.path("missing")}, bytes)); })
                .find(dir.path("missing") + ": no such dataset (neither"),
            std::string::npos);
  // An empty dataset: one document with no tokens.
  IndexedDatasetWriter empty(dir.path("empty"), TokenDType::UInt16);
  empty.add_document(std::vector<int32_t>{});
  empty.finalize();
  EXPECT_NE(error_of([&] { build_gpt_datasets(options({dir.path("empty")}, bytes)); })
                .find(dir.path("empty") + ": empty dataset (no tokens)"),
            std::string::npos);
  // 10 documents under 90,8,2: the test split is round(0.98 · 10) .. 10 = [10, 10), no tokens.
  write_dataset(dir.path("small"), 10);
  const std::string e = error_of([&] { build_gpt_datasets(options({dir.path("small")}, bytes)); });
  EXPECT_NE(e.find(dir.path("small") + ": the test split (sequences [10, 10) of 10 under --split \"90,8,2\") holds 0 tokens"),
            std::string::npos) << e;
  GptDataOptions none_asked = options({dir.path("small")}, bytes);
  none_asked.num_samples[2] = 0;  // nothing asked of it: an empty split
  EXPECT_EQ(build_gpt_datasets(none_asked).get(Split::Test)->size(), 0);
  // Token ids past the tokenizer's vocabulary: found when the sample is read.
  write_dataset(dir.path("wide"), 300, TokenDType::UInt16, 250);
  const GptDataSplits wide = build_gpt_datasets(options({dir.path("wide")}, bytes));
  std::vector<int32_t> tokens(17);
  std::string error;
  for (int64_t i = 0; i < wide.get(Split::Train)->size() && error.empty(); ++i) {
    try {
      wide.get(Split::Train)->sample(i, tokens);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find(dir.path("wide") + ".bin: token "), std::string::npos) << error;
  EXPECT_NE(error.find(" at byte offset "), std::string::npos) << error;
  EXPECT_NE(error.find("outside the vocabulary [0, 256)"), std::string::npos) << error;
  // A sample index past the end, a wrong buffer.
  EXPECT_NE(error_of([&] { wide.get(Split::Valid)->sample(10000, tokens); }).find("no valid sample 10000"), std::string::npos);
  std::vector<int32_t> short_buffer(3);
  EXPECT_NE(error_of([&] { wide.get(Split::Valid)->sample(0, short_buffer); }).find("a sample has 17 tokens, not 3"), std::string::npos);
  // A weight-0 split has no dataset.
  GptDataOptions no_valid = options({dir.path("wide")}, bytes);
  no_valid.split = "100,0,0";
  EXPECT_EQ(build_gpt_datasets(no_valid).get(Split::Valid), nullptr);
}

TEST(DatasetBuilder, MegatronsSampleCounts) {
  EXPECT_EQ(megatron_num_samples(1000, 32, 100, 10), (std::array<int64_t, 3>{32000, 11 * 10 * 32, 320}));
  EXPECT_EQ(megatron_num_samples(50, 8, 0, 0), (std::array<int64_t, 3>{400, 0, 0}));
}

}  // namespace
}  // namespace tessel
