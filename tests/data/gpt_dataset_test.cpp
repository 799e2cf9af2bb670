// The GPT dataset's indices against an independent numpy implementation of Megatron-Core's
// algorithm (tests/data/megatron_reference.py, numpy.random.RandomState shuffles): `tessel data
// index` builds each case into a cache and dumps its samples, the reference builds the same
// splits from Megatron's Python logic and compares the cached document, sample, shuffle and
// blending indices (found by the MD5 of Megatron's description) and every sample.
#include "tessel/data/gpt_dataset.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "data_test_util.h"
#include "tessel/data/gpt_indices.h"
#include "tessel/data/indexed_dataset.h"
#include "tessel/data/numpy_random.h"

namespace tessel {
namespace {

using testing::run_python;
using testing::run_tessel;
using testing::TestDir;

// `count` documents of 1..max_len tokens in [0, 256) (the byte tokenizer's vocabulary, which
// `tessel data index` checks against by default), each token telling its dataset apart.
void write_dataset(const std::string& prefix, int count, int max_len, uint32_t seed) {
  std::mt19937 rng(seed);
  IndexedDatasetWriter writer(prefix, TokenDType::UInt16);
  for (int d = 0; d < count; ++d) {
    std::vector<int32_t> doc(1 + rng() % static_cast<uint32_t>(max_len));
    for (int32_t& t : doc) t = static_cast<int32_t>(rng() % 256);
    writer.add_document(doc);
  }
  writer.finalize();
}

struct Case {
  std::string name;
  std::string flags;  // data flags of `tessel data index`, DIR standing for the test folder
  nlohmann::json reference;  // the same, for megatron_reference.py
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string replace_dir(std::string s, const std::string& dir) {
  for (size_t p; (p = s.find("DIR")) != std::string::npos;) s.replace(p, 3, dir);
  return s;
}

nlohmann::json replace_dir(nlohmann::json j, const std::string& dir) {
  if (j.is_string()) return replace_dir(j.get<std::string>(), dir);
  if (!j.is_structured()) return j;
  for (auto& v : j) v = replace_dir(v, dir);
  return j;
}

void check_against_reference(const Case& c) {
  TestDir dir;
  write_dataset(dir.path("a"), 1000, 60, 1);
  write_dataset(dir.path("b"), 500, 100, 2);
  write_dataset(dir.path("c"), 200, 30, 3);
  nlohmann::json config = replace_dir(c.reference, dir.path(""));
  config["dump"] = dir.path("dump");
  config["tokenizer"] = "ByteTokenizer";
  if (!config.contains("cache")) config["cache"] = dir.path("cache");
  std::string flags = replace_dir(c.flags, dir.path(""));
  if (!config["cache"].is_null()) flags += " --data-cache-path " + dir.path("cache");
  const auto built = run_tessel("data index " + flags + " --dump-samples " + dir.path("dump"));
  ASSERT_EQ(built.exit_code, 0) << built.output;
  std::ofstream(dir.path("config.json")) << config.dump();
  const auto checked = run_python("megatron_reference.py check " + dir.path("config.json"));
  EXPECT_EQ(checked.exit_code, 0) << c.name << "\ntessel: " << built.output << "\nreference: " << checked.output;
  // Loading the indices back from the cache gives the same samples.
  const auto again = run_tessel("data index " + flags + " --dump-samples " + dir.path("dump"));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("loaded from"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("built"), std::string::npos) << again.output;
  EXPECT_EQ(run_python("megatron_reference.py check " + dir.path("config.json")).exit_code, 0) << c.name;
}

nlohmann::json gpt(std::vector<std::string> data_path, const std::string& split, int seq, int seed,
                   std::vector<int64_t> samples) {
  return {{"data_path", data_path}, {"split", split}, {"seq_length", seq}, {"seed", seed}, {"num_samples", samples}};
}

std::string flags_of(const std::string& data, const std::string& split, int seq, int seed,
                     std::vector<int64_t> s) {
  return fmt::format("{} --split \"{}\" --seq-length {} --seed {} --train-samples {} --valid-samples {} --test-samples {}",
                     data, split, seq, seed, s[0], s[1], s[2]);
}

class MegatronReference : public ::testing::TestWithParam<Case> {};

TEST_P(MegatronReference, IndicesAndSamplesEqualMegatrons) { check_against_reference(GetParam()); }

// Datasets a (1000 documents, 30.6k tokens), b (500, 26.4k), c (200, 3.1k): random lengths and
// tokens from seeds 1, 2, 3. The epochs and separate final epochs the cases reach are asserted
// below.
const std::vector<Case> kCases = {
    {"one_epoch", flags_of("--data-path DIRa", "949,50,1", 32, 1234, {500, 20, 5}),
     gpt({"DIRa"}, "949,50,1", 32, 1234, {500, 20, 5})},
    {"epochs_separate_final", flags_of("--data-path DIRa", "949,50,1", 64, 7, {600, 60, 12}),
     gpt({"DIRa"}, "949,50,1", 64, 7, {600, 60, 12})},
    {"epochs_joined_final", flags_of("--data-path DIRb", "90,8,2", 16, 0, {4300, 400, 120}),
     gpt({"DIRb"}, "90,8,2", 16, 0, {4300, 400, 120})},
    {"two_numbers_no_test", flags_of("--data-path DIRc", "98,2", 8, 99, {1000, 50, 0}),
     gpt({"DIRc"}, "98,2", 8, 99, {1000, 50, 0})},
    {"default_cache_beside_data", flags_of("--data-path DIRa", "969, 30, 1", 128, 5, {100, 10, 10}),
     [] { auto j = gpt({"DIRa"}, "969, 30, 1", 128, 5, {100, 10, 10}); j["cache"] = nullptr; return j; }()},
    {"weighted_blend_10000", flags_of("--data-path 0.5 DIRa 0.3 DIRb 0.2 DIRc", "94,5,1", 32, 1234, {10000, 300, 40}),
     gpt({"0.5", "DIRa", "0.3", "DIRb", "0.2", "DIRc"}, "94,5,1", 32, 1234, {10000, 300, 40})},
    {"unweighted_blend", flags_of("--data-path DIRa DIRb", "80,10,10", 24, 3, {900, 80, 10}),
     gpt({"DIRa", "DIRb"}, "80,10,10", 24, 3, {900, 80, 10})},
    {"single_weighted", flags_of("--data-path 3 DIRb", "94,5,1", 32, 11, {700, 30, 6}),
     gpt({"3", "DIRb"}, "94,5,1", 32, 11, {700, 30, 6})},
    {"per_split_paths",
     "--train-data-path 0.6 DIRa 0.4 DIRb --valid-data-path DIRc --test-data-path 2 DIRa --seq-length 20 "
     "--seed 42 --train-samples 1500 --valid-samples 100 --test-samples 30",
     {{"train_data_path", {"0.6", "DIRa", "0.4", "DIRb"}}, {"valid_data_path", {"DIRc"}},
      {"test_data_path", {"2", "DIRa"}}, {"seq_length", 20}, {"seed", 42}, {"num_samples", {1500, 100, 30}}}},
    {"per_split_train_only",
     "--train-data-path DIRb DIRc --seq-length 12 --seed 8 --train-samples 500 --valid-samples 10 --test-samples 10",
     {{"train_data_path", {"DIRb", "DIRc"}}, {"seq_length", 12}, {"seed", 8}, {"num_samples", {500, 10, 10}}}},
};

INSTANTIATE_TEST_SUITE_P(Cases, MegatronReference, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

TEST(MegatronReference, CasesReachSeveralEpochsWithAndWithoutASeparateFinalEpoch) {
  TestDir dir;
  write_dataset(dir.path("a"), 1000, 60, 1);
  write_dataset(dir.path("b"), 500, 100, 2);
  const IndexedDataset a = IndexedDataset::open(dir.path("a")), b = IndexedDataset::open(dir.path("b"));
  auto tokens = [](const IndexedDataset& d, int64_t begin, int64_t end) {
    int64_t t = 0;
    for (int64_t i = begin; i < end; ++i) t += d.sequence_length(i);
    return t;
  };
  // epochs_separate_final: a's train split [0, 949) (29,143 tokens, 455 samples of 64 an epoch)
  // with 600 samples: 2 epochs, 145 samples from the last, under 80 % of 455.
  const GptEpochPlan separate = plan_gpt_epochs(tokens(a, 0, 949), 600, 64);
  EXPECT_GT(separate.num_epochs, 1);
  EXPECT_TRUE(separate.separate_final_epoch);
  // epochs_joined_final: b's train split [0, 450) (23,835 tokens, 1489 samples of 16 an epoch)
  // with 4300 samples: 3 epochs, 1321 from the last, over 80 % of 1489.
  const GptEpochPlan joined = plan_gpt_epochs(tokens(b, 0, 450), 4300, 16);
  EXPECT_EQ(joined.num_epochs, 3);
  EXPECT_FALSE(joined.separate_final_epoch);
}

TEST(NumpyRandomState, ShufflesAsNumpysRandomState) {
  std::vector<std::pair<uint32_t, int>> cases;
  std::string args;
  for (uint32_t seed : {0u, 1u, 1234u, 4294967295u})
    for (int n : {1, 2, 3, 10, 1000, 65537}) {
      cases.emplace_back(seed, n);
      args += fmt::format(" {} {}", seed, n);
    }
  const auto r = run_python("megatron_reference.py shuffle" + args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto expected = nlohmann::json::parse(r.output).get<std::vector<std::vector<int64_t>>>();
  ASSERT_EQ(expected.size(), cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<int64_t> got(static_cast<size_t>(cases[c].second));
    std::iota(got.begin(), got.end(), 0);
    NumpyRandomState rng(cases[c].first);
    rng.shuffle(std::span<int64_t>(got));
    EXPECT_EQ(got, expected[c]) << "seed " << cases[c].first << ", n " << cases[c].second;
  }
}

TEST(NumpyRandomState, DrawsAreMersenneTwisterAndBounded) {
  NumpyRandomState rng(5489);  // MT19937's reference seed: its 10000th output is 4123659995
  uint32_t v = 0;
  for (int i = 0; i < 10000; ++i) v = rng.next_uint32();
  EXPECT_EQ(v, 4123659995u);
  NumpyRandomState bounded(3);
  for (uint64_t max : {uint64_t{1}, uint64_t{6}, uint64_t{1000}, uint64_t{1} << 40})
    for (int i = 0; i < 200; ++i) EXPECT_LE(bounded.random_interval(max), max);
  EXPECT_EQ(bounded.random_interval(0), 0u);
}

TEST(GptEpochPlan, MegatronsEpochArithmetic) {
  // 1000 tokens, seq 10: one epoch holds (1000 - 1) / 10 = 99 samples.
  EXPECT_EQ(plan_gpt_epochs(1000, 99, 10).num_epochs, 1);
  GptEpochPlan p = plan_gpt_epochs(1000, 100, 10);  // needs 1001 tokens: 2 epochs
  EXPECT_EQ(p.num_epochs, 2);
  EXPECT_EQ(p.samples_before_final_epoch, 99);
  EXPECT_TRUE(p.separate_final_epoch);  // 1 sample from the last epoch < int(0.8 · 99) = 79
  p = plan_gpt_epochs(1000, 99 + 80, 10);  // 80 from the last epoch: not separate
  EXPECT_EQ(p.num_epochs, 2);
  EXPECT_FALSE(p.separate_final_epoch);
  EXPECT_TRUE(plan_gpt_epochs(1000, 99 + 78, 10).separate_final_epoch);
  EXPECT_EQ(plan_gpt_epochs(1000, std::nullopt, 10).num_epochs, 1);
  EXPECT_THROW(plan_gpt_epochs(1, 5, 10), Error);
  EXPECT_THROW(plan_gpt_epochs(1000, 5, 1), Error);
}

}  // namespace
}  // namespace tessel
