// core/json_values.h: integers from JSON files are whole and in their type's range, floats are
// finite and fit their type; each refusal names the file, the key and the value.
#include <gtest/gtest.h>

#include "support/fixtures.h"
#include "tessel/core/json_values.h"

namespace tessel {
namespace {

using nlohmann::json;
using testing::expect_error;

TEST(JsonValues, IntegersAreWholeAndInRange) {
  EXPECT_EQ(json_integer<int>(json::parse("12"), "f.json", "k"), 12);
  EXPECT_EQ(json_integer<int>(json::parse("-7"), "f.json", "k"), -7);
  EXPECT_EQ(json_integer<int>(json::parse("4.0"), "f.json", "k"), 4);
  EXPECT_EQ(json_integer<int64_t>(json::parse("4294967298"), "f.json", "k"), 4294967298);
  expect_error([] { json_integer<int>(json::parse("4294967298"), "f.json", "num_layers"); },
               {"f.json: num_layers 4294967298 is not a whole number in [-2147483648, 2147483647]"});
  expect_error([] { json_integer<int>(json::parse("-4294967264"), "f.json", "seq_length"); },
               {"seq_length -4294967264"});
  expect_error([] { json_integer<int>(json::parse("2.7"), "f.json", "seq_length"); }, {"seq_length 2.7"});
  expect_error([] { json_integer<uint32_t>(json::parse("-1"), "f.json", "crc32"); }, {"crc32 -1"});
  expect_error([] { json_integer<int>(json::parse("\"4\""), "f.json", "k"); }, {"k \"4\""});
  expect_error([] { json_integer<int64_t>(json::parse("1e300"), "f.json", "k"); }, {"k 1e+300"});
  expect_error([] { json_integer<int64_t>(json::parse("18446744073709551615"), "f.json", "k"); },
               {"k 18446744073709551615"});
}

TEST(JsonValues, FloatsAreFiniteAndFitTheirType) {
  EXPECT_EQ(json_number<float>(json::parse("1e-5"), "f.json", "eps"), 1e-5f);
  EXPECT_EQ(json_number<double>(json::parse("1e300"), "f.json", "x"), 1e300);
  expect_error([] { json_number<float>(json::parse("1e39"), "f.json", "norm_epsilon"); },
               {"f.json: norm_epsilon 1e+39 is not a finite number of its type"});
  expect_error([] { json_number<float>(json::parse("true"), "f.json", "x"); }, {"x true is not a number"});
}

}  // namespace
}  // namespace tessel
