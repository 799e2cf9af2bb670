// --mock-data against Megatron's MockGPTDataset written in numpy (tests/data/megatron_reference.py,
// whose MockLowLevel draws the lengths with numpy's own default_rng): `tessel data index
// --mock-data` builds the three splits into a cache and dumps their first samples; the reference
// builds the same splits as pretrain_gpt.py --mock-data does and compares the cached document,
// sample and shuffle indices (named by the MD5 of Megatron's description) and the samples. Three
// seeds by three sequence lengths, one of them over two epochs. And the NullTokenizer.
#include "tessel/data/mock_dataset.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "data_test_util.h"
#include "tessel/data/dataset_builder.h"
#include "tessel/data/tokenizer.h"

namespace tessel {
namespace {

using testing::run_python;
using testing::run_tessel;
using testing::TestDir;

struct MockCase {
  int seq_length;
  uint32_t seed;
  int vocab_size;
  int64_t train_samples;
};

void PrintTo(const MockCase& c, std::ostream* os) {
  *os << "seq" << c.seq_length << "_seed" << c.seed << "_vocab" << c.vocab_size;
}

class MockDataReference : public ::testing::TestWithParam<MockCase> {};

TEST_P(MockDataReference, IndicesAndSamplesEqualMegatrons) {
  const MockCase& c = GetParam();
  TestDir dir;
  const int64_t valid = 40, test = 8, dumped = 60;
  const std::string flags = fmt::format(
      "data index --mock-data --tokenizer-type NullTokenizer --vocab-size {} --seq-length {} --seed {} "
      "--train-samples {} --valid-samples {} --test-samples {} --data-cache-path {}",
      c.vocab_size, c.seq_length, c.seed, c.train_samples, valid, test, dir.path("cache"));
  const auto built = run_tessel(flags + " --dump-samples " + dir.path("dump") +
                                fmt::format(" --dump-limit {}", dumped));
  ASSERT_EQ(built.exit_code, 0) << built.output;
  for (const char* split : {"train", "valid", "test"})
    EXPECT_NE(built.output.find(std::string(split) + ": "), std::string::npos) << built.output;
  EXPECT_NE(built.output.find("-MockGPTDataset-train-*"), std::string::npos) << built.output;
  const nlohmann::json config = {
      {"mock", {{"vocab_size", c.vocab_size}, {"eod", c.vocab_size - 1}}},
      {"seq_length", c.seq_length}, {"seed", c.seed},
      {"num_samples", {c.train_samples, valid, test}}, {"cache", dir.path("cache")},
      {"dump", dir.path("dump")}, {"dump_limit", dumped}, {"tokenizer", "NullTokenizer"}};
  std::ofstream(dir.path("config.json")) << config.dump();
  const auto checked = run_python("megatron_reference.py check " + dir.path("config.json"));
  EXPECT_EQ(checked.exit_code, 0) << "tessel: " << built.output << "\nreference: " << checked.output;
  // The cache under --data-cache-path serves the next run.
  const auto again = run_tessel(flags);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output.find("built"), std::string::npos) << again.output;
}

// The train split holds 33333 documents of about 68M tokens: 20000 samples of 4096 tokens take a
// second epoch, shuffled apart (a separate final epoch). A vocabulary of 1000 wraps the tokens.
INSTANTIATE_TEST_SUITE_P(ThreeSeedsThreeLengths, MockDataReference,
                         ::testing::Values(MockCase{256, 1234, 50000, 100}, MockCase{256, 7, 1000, 300},
                                           MockCase{256, 0, 4096, 10},
                                           MockCase{1000, 1234, 50000, 1000}, MockCase{1000, 7, 1000, 20},
                                           MockCase{1000, 0, 4096, 5},
                                           MockCase{4096, 1234, 50000, 20000}, MockCase{4096, 7, 1000, 100},
                                           MockCase{4096, 0, 4096, 31000}),
                         [](const auto& info) {
                           return fmt::format("seq{}_seed{}_vocab{}", info.param.seq_length,
                                              info.param.seed, info.param.vocab_size);
                         });

// Document d: 1, 2, ..., L - 1 modulo the vocabulary, then the end-of-document token; any window
// of it reads the same tokens.
TEST(MockGptLowLevelDataset, DocumentsCountUpToTheEndOfDocumentToken) {
  const MockGptLowLevelDataset mock(100, 99);
  ASSERT_EQ(mock.num_sequences(), 100000);
  // numpy.random.default_rng(0).integers(1, 4096, size=3, dtype=numpy.int32)
  EXPECT_EQ(mock.sequence_length(0), 3484);
  EXPECT_EQ(mock.sequence_length(1), 2609);
  EXPECT_EQ(mock.sequence_length(2), 2094);
  EXPECT_EQ(mock.dataset_path(), std::nullopt);
  EXPECT_STREQ(mock.gpt_dataset_class(), "MockGPTDataset");
  int64_t shortest = 4096, longest = 0;
  for (int64_t d = 0; d < mock.num_sequences(); ++d) {
    shortest = std::min<int64_t>(shortest, mock.sequence_length(d));
    longest = std::max<int64_t>(longest, mock.sequence_length(d));
  }
  EXPECT_EQ(shortest, 1);
  EXPECT_EQ(longest, 4095);
  const int32_t length = mock.sequence_length(2);
  std::vector<int32_t> whole(static_cast<size_t>(length));
  mock.read(2, 0, whole);
  for (int32_t p = 0; p + 1 < length; ++p) ASSERT_EQ(whole[static_cast<size_t>(p)], (p + 1) % 100) << p;
  EXPECT_EQ(whole.back(), 99);
  std::vector<int32_t> window(7);
  mock.read(2, length - 7, window);
  EXPECT_TRUE(std::equal(window.begin(), window.end(), whole.end() - 7));
  EXPECT_THROW(mock.read(2, length - 6, window), Error);
  EXPECT_THROW(MockGptLowLevelDataset(100, 100), Error);
}

// Megatron's NullTokenizer: ids written as numbers between single spaces, eod the last id.
TEST(NullTokenizer, IdsAreTheirNumbers) {
  TokenizerOptions options;
  options.type = "NullTokenizer";
  options.vocab_size = 1000;
  const std::unique_ptr<Tokenizer> t = make_tokenizer(options);
  EXPECT_EQ(t->type(), "NullTokenizer");
  EXPECT_EQ(t->vocab_size(), 1000);
  EXPECT_EQ(t->special_ids().eod, 999);
  EXPECT_EQ(t->special_ids().bos, -1);
  const std::vector<int32_t> ids = {0, 7, 999, 42};
  EXPECT_EQ(t->decode(ids), "0 7 999 42");
  EXPECT_EQ(t->encode("0 7 999 42"), ids);
  EXPECT_EQ(t->encode("5 6\n"), (std::vector<int32_t>{5, 6}));  // int() strips each word
  EXPECT_EQ(t->encode(""), std::vector<int32_t>{});
  for (const char* bad : {"1  2", "1,2", "1000", "-1", "x"})
    EXPECT_THROW(t->encode(bad), Error) << bad;
  EXPECT_THROW(t->decode(std::vector<int32_t>{1000}), Error);
  options.vocab_size = 0;  // --vocab-size not given
  try {
    make_tokenizer(options);
    ADD_FAILURE() << "a NullTokenizer without --vocab-size";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs --vocab-size"), std::string::npos) << e.what();
  }
}

// One data source (Megatron's rule), and mock documents end with an end-of-document token: every
// rule broken is named in one message.
TEST(MockDataRules, EveryBrokenRuleNamedAtOnce) {
  const ByteTokenizer bytes;
  GptDataOptions o;
  o.mock_data = true;
  o.data_path = {"somewhere"};
  o.seq_length = 16;
  o.tokenizer = &bytes;
  try {
    build_gpt_datasets(o);
    ADD_FAILURE() << "--mock-data with --data-path and the byte tokenizer";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--mock-data generates the data: it excludes --data-path"), std::string::npos) << m;
    EXPECT_NE(m.find("which the ByteTokenizer has none of"), std::string::npos) << m;
  }
}

// --mock-data splits its documents 1,1,1 as Megatron's does, but a --split beside it is held to
// the form it must have beside --data-path: a malformed one is refused by name, not accepted
// without a word.
TEST(MockDataRules, AMalformedSplitIsRefusedAsWithRealData) {
  TokenizerOptions null;
  null.type = "NullTokenizer";
  null.vocab_size = 1000;
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(null);
  GptDataOptions o;
  o.mock_data = true;
  o.seq_length = 16;
  o.tokenizer = tokenizer.get();
  o.num_samples = {4, 0, 0};
  for (const char* split : {"90,x", "1,2,3,4", "0,0,0", "-1,2"}) {
    o.split = split;
    const std::string refused = testing::error_of([&] { build_gpt_datasets(o); });
    EXPECT_NE(refused.find(std::string("--split \"") + split + "\""), std::string::npos) << refused;
  }
  o.split = "98,2";  // well formed: mock data splits 1,1,1 whatever it says
  EXPECT_NE(build_gpt_datasets(o).get(Split::Train), nullptr);
}

}  // namespace
}  // namespace tessel
