// numpy.random.default_rng(seed).integers against Debian's numpy itself
// (tests/data/megatron_reference.py integers): SeedSequence, PCG64 and the bounded draws, over
// every path of numpy's algorithm — Lemire's 32-bit method (int32, and int64 with a range that
// fits 32 bits), the full 32-bit range (no rejection), Lemire's 64-bit method — one call after
// another on one generator, so that a 32-bit draw's unused half carries over as numpy's does.
#include "tessel/data/numpy_generator.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data_test_util.h"

namespace tessel {
namespace {

using testing::run_python;

struct Call {
  int64_t low, high, count;
  bool int32;  // dtype int32, else int64
};

// The calls in turn on default_rng(seed), from numpy and from NumpyGenerator.
void expect_numpys_draws(uint64_t seed, const std::vector<Call>& calls) {
  std::string args = std::to_string(seed);
  for (const Call& c : calls)
    args += fmt::format(" {} {} {} {}", c.low, c.high, c.count, c.int32 ? "int32" : "int64");
  const auto r = run_python("megatron_reference.py integers " + args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json expected = nlohmann::json::parse(r.output);
  ASSERT_EQ(expected.size(), calls.size());
  NumpyGenerator g(seed);
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    std::vector<int64_t> got;
    if (c.int32) {
      for (int32_t v : g.integers_int32(c.low, c.high, c.count))
        got.push_back(v);
    } else {
      got = g.integers_int64(c.low, c.high, c.count);
    }
    EXPECT_EQ(got, expected[i].get<std::vector<int64_t>>())
        << "seed " << seed << ", call " << i << ": integers(" << c.low << ", " << c.high << ", size="
        << c.count << ", dtype=" << (c.int32 ? "int32" : "int64") << ")";
  }
}

constexpr int64_t kInt32Min = -2147483648LL, kTwo31 = 2147483648LL;

// MockGPTLowLevelDataset's own call first (seed 0, [1, 4096), int32), then the other paths.
TEST(NumpyGenerator, IntegersEqualNumpysOnEveryPath) {
  const std::vector<Call> calls = {
      {1, 4096, 1001, true},                   // odd: the next call starts on a buffered half
      {-5, 1000000000000000000LL, 300, false},  // 64-bit Lemire
      {0, 7, 300, false},                      // int64, a 32-bit range
      {kInt32Min, kTwo31, 101, true},          // the whole int32 range: plain 32-bit draws
      {0, 4294967296LL, 101, false},           // int64 over 2^32 values: the same
      {0, kTwo31 + 1, 500, false},             // 2^31 + 1 values: half the 32-bit draws rejected
      {-1000, 1000, 777, true},
      {(int64_t{1} << 62) - 17, (int64_t{1} << 62) + (int64_t{1} << 61), 400, false},
      {-(int64_t{1} << 62), (int64_t{1} << 62) + 1, 400, false},  // 2^63 + 1 values: half rejected
      {9, 10, 5, true},                        // one value: no draw
  };
  for (uint64_t seed : {0ULL, 1ULL, 1234ULL, 4294967295ULL, 4294967296ULL, 18446744073709551615ULL})
    expect_numpys_draws(seed, calls);
}

TEST(NumpyGenerator, ARangeOfOneDrawsNothing) {
  NumpyGenerator a(7), b(7);
  EXPECT_EQ(a.integers_int32(5, 6, 10), std::vector<int32_t>(10, 5));
  EXPECT_EQ(a.integers_int64(0, 1000, 3), b.integers_int64(0, 1000, 3));
}

TEST(NumpyGenerator, AnEmptyRangeIsRefused) {
  NumpyGenerator g(0);
  EXPECT_THROW(g.integers_int32(4, 4, 1), Error);
  EXPECT_THROW(g.integers_int32(0, kTwo31 + 1, 1), Error);  // past int32
  EXPECT_THROW(g.integers_int64(5, -5, 1), Error);
}

}  // namespace
}  // namespace tessel
