#include <gtest/gtest.h>

#include "support/fixtures.h"
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/data/dataset.h"
#include "tessel/data/tokenizer.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;

using testing::TestDir;
using testing::error_of;

// n bytes 'A', 'B', ... cycling through 60 distinct values, so token t is recognisable.
std::string pattern(int n) {
  std::string s(n, '\0');
  for (int i = 0; i < n; ++i) s[i] = static_cast<char>('A' + i % 60);
  return s;
}

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

TEST(TokenDataset, LoadsTheBundledCorpus) {
  const std::string path = std::string(TESSEL_SOURCE_DIR) + "/data/kjv-genesis-esther.txt";
  TokenDataset data(path, ByteTokenizer());
  EXPECT_EQ(data.size(), 1893989);  // data/README.md
  const std::string head = "Genesis 1\n\nIn the beginning God created";
  EXPECT_EQ(ByteTokenizer().decode(std::span(data.tokens()).first(head.size())), head);
}

TEST(TokenDataset, ErrorsNameTheFile) {
  TestDir dir;
  const std::string missing = dir.path("missing.txt");
  EXPECT_NE(error_of([&] { TokenDataset{missing, ByteTokenizer()}; }).find(missing),
            std::string::npos);
  const std::string empty = dir.write("empty.txt", "");
  const std::string msg = error_of([&] { TokenDataset{empty, ByteTokenizer()}; });
  EXPECT_NE(msg.find(empty), std::string::npos);
  EXPECT_NE(msg.find("empty"), std::string::npos);
  // A directory opens but cannot be read.
  EXPECT_NE(error_of([&] { TokenDataset{dir.path(""), ByteTokenizer()}; }).find("read"),
            std::string::npos);
}

TEST(Sampler, RejectsTooShortFile) {
  TestDir dir;
  const std::string path = dir.write("short.txt", pattern(8));
  TokenDataset data(path, ByteTokenizer());
  // 8 tokens make one sample of length 7 (inputs 0..6, targets 1..7) but none of length 8.
  EXPECT_EQ(Sampler(data, 7, 1, Sampling::Sequential, 0).num_samples(), 1);
  const std::string msg = error_of([&] { Sampler{data, 8, 1, Sampling::Sequential, 0}; });
  EXPECT_NE(msg.find(path), std::string::npos);
  EXPECT_NE(msg.find("too few"), std::string::npos);
}

TEST(Sampler, SampleBoundaries) {
  TestDir dir;
  const int64_t S = 4;
  for (int n_tokens : {21, 23, 24}) {
    const std::string text = pattern(n_tokens);
    TokenDataset data(dir.write("seq.txt", text), ByteTokenizer());
    const int64_t N = (n_tokens - 1) / S;
    Sampler sampler(data, S, N, Sampling::Sequential, 0);
    ASSERT_EQ(sampler.num_samples(), N);
    std::vector<int32_t> inputs(N * S), targets(N * S);
    sampler.fill(0, 0, N, inputs.data(), targets.data());
    for (int64_t j = 0; j < N; ++j)
      for (int64_t t = 0; t < S; ++t) {
        EXPECT_EQ(inputs[j * S + t], static_cast<unsigned char>(text[j * S + t]));
        EXPECT_EQ(targets[j * S + t], static_cast<unsigned char>(text[j * S + t + 1]));
      }
    // The last target of the last sample is token N·S.
    EXPECT_EQ(targets.back(), static_cast<unsigned char>(text[N * S]));
  }
}

TEST(Sampler, SequentialWrapsAround) {
  TestDir dir;
  TokenDataset data(dir.write("seq.txt", pattern(21)), ByteTokenizer());
  Sampler sampler(data, 4, 3, Sampling::Sequential, 0);  // N = 5, G = 3
  const std::vector<std::vector<int64_t>> expected = {{0, 1, 2}, {3, 4, 0}, {1, 2, 3}, {4, 0, 1}};
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(sampler.sample_index(i, k), expected[i][k]);
  // fill() copies exactly those samples.
  std::vector<int32_t> inputs(2 * 4), targets(2 * 4);
  sampler.fill(1, 1, 2, inputs.data(), targets.data());  // samples 4 and 0
  EXPECT_EQ(inputs[0], data.tokens()[16]);
  EXPECT_EQ(inputs[4], data.tokens()[0]);
  EXPECT_EQ(targets[7], data.tokens()[4]);
}

TEST(Sampler, ShuffledIsAPermutationWithinEachEpoch) {
  TestDir dir;
  TokenDataset data(dir.write("seq.txt", pattern(2 * 37 + 1)), ByteTokenizer());
  const int64_t G = 5;
  Sampler sampler(data, 2, G, Sampling::Shuffled, 1234);
  const int64_t N = sampler.num_samples();
  ASSERT_EQ(N, 37);
  std::vector<int64_t> drawn;
  for (int64_t i = 0; drawn.size() < static_cast<size_t>(3 * N); ++i)
    for (int64_t k = 0; k < G; ++k) drawn.push_back(sampler.sample_index(i, k));
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> epoch(drawn.begin() + e * N, drawn.begin() + (e + 1) * N);
    std::vector<int64_t> sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t j = 0; j < N; ++j) ASSERT_EQ(sorted[j], j) << "epoch " << e;
    epochs.push_back(epoch);
  }
  std::vector<int64_t> identity(N);
  for (int64_t j = 0; j < N; ++j) identity[j] = j;
  EXPECT_NE(epochs[0], identity);
  EXPECT_NE(epochs[0], epochs[1]);  // each epoch has its own order
  EXPECT_NE(epochs[1], epochs[2]);
}

TEST(Sampler, ShuffledDependsOnlyOnSeedIterationAndPosition) {
  TestDir dir;
  TokenDataset data(dir.write("seq.txt", pattern(3 * 29 + 2)), ByteTokenizer());
  const int64_t S = 3, G = 8, iters = 12;  // 96 draws over 29 samples: crosses epochs
  // Everything iteration by iteration, split into microbatches of `micro` (as DP ranks would).
  auto run = [&](uint64_t seed, int64_t micro, bool backwards) {
    Sampler sampler(data, S, G, Sampling::Shuffled, seed);
    std::vector<int32_t> inputs(iters * G * S), targets(iters * G * S);
    for (int64_t n = 0; n < iters; ++n) {
      const int64_t i = backwards ? iters - 1 - n : n;
      for (int64_t k = 0; k < G; k += micro)
        sampler.fill(i, k, micro, &inputs[(i * G + k) * S], &targets[(i * G + k) * S]);
    }
    return std::pair(inputs, targets);
  };
  const auto by2 = run(7, 2, false);
  EXPECT_EQ(run(7, 4, false), by2);
  EXPECT_EQ(run(7, 8, false), by2);
  EXPECT_EQ(run(7, 1, true), by2);  // order of the calls and the cached epoch do not matter
  EXPECT_NE(run(8, 2, false).first, by2.first);
  // Targets are the inputs shifted by one within the token stream.
  const auto& [inputs, targets] = by2;
  for (int64_t r = 0; r < iters * G; ++r)
    for (int64_t t = 0; t + 1 < S; ++t) EXPECT_EQ(targets[r * S + t], inputs[r * S + t + 1]);
}

TEST(Sampler, RejectsBadArguments) {
  TestDir dir;
  TokenDataset data(dir.write("seq.txt", pattern(21)), ByteTokenizer());
  Sampler sampler(data, 4, 3, Sampling::Shuffled, 0);
  int32_t buf[16];
  EXPECT_THROW(sampler.fill(0, 2, 2, buf, buf + 8), Error);  // beyond the global batch
  EXPECT_THROW(sampler.sample_index(-1, 0), Error);
  EXPECT_THROW((Sampler{data, 0, 3, Sampling::Shuffled, 0}), Error);
  EXPECT_THROW((Sampler{data, 4, 0, Sampling::Shuffled, 0}), Error);
  EXPECT_EQ(parse_sampling("sequential"), Sampling::Sequential);
  EXPECT_EQ(parse_sampling(sampling_name(Sampling::Shuffled)), Sampling::Shuffled);
  EXPECT_NE(error_of([] { parse_sampling("random"); }).find("random"), std::string::npos);
}

}  // namespace
}  // namespace tessel
