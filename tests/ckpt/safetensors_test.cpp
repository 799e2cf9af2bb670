#include "tessel/ckpt/safetensors.h"

#include <gtest/gtest.h>

#include "support/fixtures.h"
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>

#include "tessel/core/error.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;

// A fresh folder per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.path(name); }

  testing::TestDir dir_;
};

// A file from raw parts, for shapes of trouble the writer never makes: header length as given,
// header text as given (no padding), then the data bytes.
void write_raw(const std::string& path, uint64_t header_len, const std::string& header,
               const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&header_len), 8);
  out << header << data;
}

void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  write_raw(path, header.size(), header, data);
}

std::string bytes_of(const void* p, size_t n) {
  return std::string(static_cast<const char*>(p), n);
}


TEST_F(SafetensorsTest, WriteReadRoundTrip) {
  std::vector<float> a(6), b(5), scalar{-0.0f};
  for (int i = 0; i < 6; ++i) a[i] = std::sin(1.0f + i) * 1e3f;
  for (int i = 0; i < 5; ++i) b[i] = std::exp(-3.0f * i);
  b[4] = std::numeric_limits<float>::denorm_min();
  const std::string file = path("w.safetensors");
  write_safetensors(file,
                    {{"layer.a", {2, 3}, a.data()},
                     {"b", {5}, b.data()},
                     {"s", {}, scalar.data()},
                     {"empty", {0, 4}, nullptr}},
                    {{"format", "pt"}, {"note", "x y"}});

  // Only the final file remains: the temporary was renamed.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator{}), 1);
  std::ifstream in(file, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(fs::file_size(file), 8 + header_len + (6 + 5 + 1) * 4);

  SafetensorsReader reader(file);
  ASSERT_EQ(reader.tensors().size(), 4u);
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  EXPECT_EQ(reader.metadata().at("note"), "x y");
  EXPECT_EQ(reader.tensor("layer.a").shape, (Shape{2, 3}));
  EXPECT_EQ(reader.tensor("layer.a").dtype, "F32");
  EXPECT_EQ(reader.tensor("s").shape, Shape{});
  EXPECT_EQ(reader.tensor("empty").numel(), 0);
  std::vector<float> got_a(6), got_b(5), got_s(1);
  reader.read("layer.a", got_a.data());
  reader.read("b", got_b.data());
  reader.read("s", got_s.data());
  EXPECT_EQ(std::memcmp(got_a.data(), a.data(), 6 * 4), 0);
  EXPECT_EQ(std::memcmp(got_b.data(), b.data(), 5 * 4), 0);
  EXPECT_TRUE(std::signbit(got_s[0]));
  expect_error([&] { reader.read("nope", got_a.data()); }, {file, "no tensor named 'nope'"});
}

TEST_F(SafetensorsTest, OverwriteReplacesWholeFile) {
  const std::string file = path("w.safetensors");
  std::vector<float> big(100, 1.0f), small{2.0f};
  write_safetensors(file, {{"x", {100}, big.data()}});
  write_safetensors(file, {{"y", {1}, small.data()}});
  SafetensorsReader reader(file);
  EXPECT_FALSE(reader.has("x"));
  float y = 0;
  reader.read("y", &y);
  EXPECT_EQ(y, 2.0f);
}

// IEEE binary16 by its definition, computed differently from the reader (sign, exponent, fraction).
double f16_reference(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
  const double magnitude = exponent == 0 ? fraction / 1024.0 * std::pow(2.0, -14)
                                         : (1.0 + fraction / 1024.0) * std::pow(2.0, exponent - 15);
  return sign ? -magnitude : magnitude;
}

TEST_F(SafetensorsTest, ConvertsF16BF16F64) {
  // Every finite binary16 value, then +inf, -inf and a NaN.
  std::vector<uint16_t> f16;
  for (uint32_t h = 0; h < 65536; ++h)
    if (((h >> 10) & 0x1f) != 0x1f) f16.push_back(static_cast<uint16_t>(h));
  const size_t finite = f16.size();
  f16.insert(f16.end(), {0x7c00, 0xfc00, 0x7e00});

  // bfloat16 is the top half of a float: take random-ish floats and cut them.
  std::vector<float> bf16_values;
  std::vector<uint16_t> bf16;
  for (int i = 0; i < 1000; ++i) {
    float v = std::sin(0.37f * i) * std::pow(10.0f, static_cast<float>(i % 60 - 30));
    uint16_t top = static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
    bf16.push_back(top);
    bf16_values.push_back(std::bit_cast<float>(static_cast<uint32_t>(top) << 16));
  }
  const std::vector<double> f64 = {0.1, -1e300, 3.0, 1e-50};

  const std::string header =
      fmt::format(R"({{"h":{{"dtype":"F16","shape":[{}],"data_offsets":[0,{}]}},)"
                  R"("b":{{"dtype":"BF16","shape":[10,100],"data_offsets":[{},{}]}},)"
                  R"("d":{{"dtype":"F64","shape":[2,2],"data_offsets":[{},{}]}}}})",
                  f16.size(), 2 * f16.size(), 2 * f16.size(), 2 * f16.size() + 2000,
                  2 * f16.size() + 2000, 2 * f16.size() + 2032);
  // The header's odd length leaves the data unaligned, which the reader must cope with.
  ASSERT_NE(header.size() % 2, 0u);
  const std::string file = path("mixed.safetensors");
  write_raw(file, header,
            bytes_of(f16.data(), 2 * f16.size()) + bytes_of(bf16.data(), 2000) +
                bytes_of(f64.data(), 32));

  SafetensorsReader reader(file);
  std::vector<float> out(f16.size());
  reader.read("h", out.data());
  for (size_t i = 0; i < finite; ++i)
    ASSERT_EQ(static_cast<double>(out[i]), f16_reference(f16[i])) << "f16 bits " << f16[i];
  EXPECT_EQ(out[finite], INFINITY);
  EXPECT_EQ(out[finite + 1], -INFINITY);
  EXPECT_TRUE(std::isnan(out[finite + 2]));
  EXPECT_TRUE(std::signbit(out[0x8000]));  // -0

  out.assign(1000, 0.0f);
  reader.read("b", out.data());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(out[i], bf16_values[i]) << i;

  reader.read("d", out.data());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], static_cast<float>(f64[i]));
}

TEST_F(SafetensorsTest, IntegerTensorIsNotReadAsFloat) {
  const std::string file = path("int.safetensors");
  const int64_t ids[2] = {7, 9};
  write_raw(file, R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})",
            bytes_of(ids, 16));
  SafetensorsReader reader(file);
  EXPECT_FALSE(safetensors_dtype_is_float(reader.tensor("ids").dtype));
  float out[2];
  expect_error([&] { reader.read("ids", out); }, {file, "'ids'", "I64"});
}

TEST_F(SafetensorsTest, EmptyFile) {
  const std::string file = path("empty.safetensors");
  std::ofstream{file};
  expect_error([&] { SafetensorsReader r(file); }, {file, "empty file"});
}

TEST_F(SafetensorsTest, MissingFile) {
  expect_error([&] { SafetensorsReader r(path("absent.safetensors")); },
               {path("absent.safetensors"), "cannot open"});
}

TEST_F(SafetensorsTest, TooShortForHeaderLength) {
  const std::string file = path("short.safetensors");
  std::ofstream(file) << "abc";
  expect_error([&] { SafetensorsReader r(file); }, {file, "truncated", "3 bytes"});
}

TEST_F(SafetensorsTest, HeaderLengthBeyondFile) {
  const std::string file = path("long.safetensors");
  write_raw(file, 1000, "{}", "");
  expect_error([&] { SafetensorsReader r(file); }, {file, "header length 1000", "10 bytes"});
  // A text file read as safetensors: its first 8 bytes make an absurd length.
  std::ofstream(file) << "this is not a safetensors file at all";
  expect_error([&] { SafetensorsReader r(file); }, {file, "goes beyond the end of the file"});
}

TEST_F(SafetensorsTest, InvalidJsonHeader) {
  const std::string file = path("json.safetensors");
  write_raw(file, "{\"x\": [1,\n", "");
  expect_error([&] { SafetensorsReader r(file); }, {file, "not valid JSON"});
  write_raw(file, "[1, 2]", "");
  expect_error([&] { SafetensorsReader r(file); }, {file, "not an object"});
}

TEST_F(SafetensorsTest, Truncated) {
  const std::string file = path("cut.safetensors");
  const std::string header = R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  write_raw(file, header, std::string(10, '\0'));
  const int64_t expected_end = 8 + header.size() + 16, file_size = 8 + header.size() + 10;
  expect_error([&] { SafetensorsReader r(file); },
               {file, fmt::format("truncated: tensor 'x' ends at byte {} but the file has {}",
                                  expected_end, file_size)});
}

TEST_F(SafetensorsTest, UnknownDtype) {
  const std::string file = path("dtype.safetensors");
  write_raw(file, R"({"x":{"dtype":"Q4_K","shape":[4],"data_offsets":[0,16]}})",
            std::string(16, '\0'));
  expect_error([&] { SafetensorsReader r(file); }, {file, "'x'", "unknown dtype 'Q4_K'"});
}

TEST_F(SafetensorsTest, SizeDisagreesWithShape) {
  const std::string file = path("size.safetensors");
  write_raw(file, R"({"x":{"dtype":"F16","shape":[4],"data_offsets":[0,16]}})",
            std::string(16, '\0'));
  expect_error([&] { SafetensorsReader r(file); }, {file, "'x'", "span 16 bytes", "needs 8"});
}

TEST_F(SafetensorsTest, OverlapGapAndTrailingBytes) {
  const std::string file = path("layout.safetensors");
  write_raw(file,
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            std::string(12, '\0'));
  expect_error([&] { SafetensorsReader r(file); }, {file, "'b' overlaps"});
  write_raw(file,
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
            std::string(20, '\0'));
  expect_error([&] { SafetensorsReader r(file); }, {file, "gap of 4 bytes", "'b'"});
  write_raw(file, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
            std::string(11, '\0'));
  expect_error([&] { SafetensorsReader r(file); }, {file, "3 bytes after the last tensor"});
}

TEST_F(SafetensorsTest, MalformedEntries) {
  const std::string file = path("entries.safetensors");
  write_raw(file, R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,0]}})", "");
  expect_error([&] { SafetensorsReader r(file); }, {file, "'x'", "non-negative integer"});
  write_raw(file, R"({"x":{"dtype":"F32","shape":[2]}})", "");
  expect_error([&] { SafetensorsReader r(file); }, {file, "'x'", "data_offsets"});
  write_raw(file, R"({"x":{"shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'));
  expect_error([&] { SafetensorsReader r(file); }, {file, "'x'", "no dtype"});
  write_raw(file, R"({"__metadata__":{"k":1}})", "");
  expect_error([&] { SafetensorsReader r(file); }, {file, "__metadata__"});
}

TEST_F(SafetensorsTest, WriterErrors) {
  float v = 1.0f;
  expect_error(
      [&] {
        write_safetensors(path("d.safetensors"), {{"x", {1}, &v}, {"x", {1}, &v}});
      },
      {"d.safetensors", "'x' given twice"});
  const std::string nowhere = path("no/such/folder/w.safetensors");
  expect_error([&] { write_safetensors(nowhere, {{"x", {1}, &v}}); }, {nowhere, "cannot create"});
}

}  // namespace
}  // namespace tessel
