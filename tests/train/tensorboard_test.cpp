// TensorBoard's event-file format as tessel writes it (train/tensorboard.h): CRC-32C against its
// published check values, TFRecord's framing, an Event's bytes against what protobuf itself
// serialises for the same message, and the writer's file (name, first event, queue).
#include "tessel/train/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace tessel {
namespace {

std::string from_hex(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i < hex.size(); i += 2) bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return bytes;
}

template <typename T>
T read_le(const std::string& bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// RFC 3720's check value and test vectors of CRC-32C (iSCSI, appendix B.4).
TEST(TensorBoard, Crc32cKnownVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
}

TEST(TensorBoard, MaskedCrcRotatesAndOffsets) {
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, RecordFramesLengthDataAndBothCrcs) {
  const std::string data = "event bytes";
  const std::string r = tfrecord(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(read_le<uint64_t>(r, 0), data.size());
  EXPECT_EQ(read_le<uint32_t>(r, 8), masked_crc32c(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, data.size()), data);
  EXPECT_EQ(read_le<uint32_t>(r, 12 + data.size()), masked_crc32c(data));
}

// The bytes python3-protobuf serialises for Event{wall_time: 1.5, step: 3, summary {value {tag:
// "a", simple_value: 2}}} with the schema's field numbers (tests/train/tensorboard_events.py's).
TEST(TensorBoard, ScalarEventIsProtobufsEncoding) {
  EXPECT_EQ(scalar_event(1.5, 3, "a", 2.0f), from_hex("09000000000000f83f10032a0a0a080a01611500000040"));
  // Event{wall_time: 1.5, file_version: "brain.Event:2"}: the step 0 left out, as proto3 does.
  EXPECT_EQ(file_version_event(1.5), from_hex("09000000000000f83f1a0d") + "brain.Event:2");
}

TEST(TensorBoard, WriterNamesItsFileAsTensorBoardAndHoldsEventsUntilTheQueueIsFull) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessel_tensorboard_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  {
    EventFileWriter writer((dir / "runs").string(), 2);
    const std::string name = std::filesystem::path(writer.path()).filename().string();
    EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
    const std::string version = tfrecord(file_version_event(0));
    EXPECT_EQ(read_file(writer.path()).size(), version.size());  // the version event at once
    writer.add_scalar("lm loss", 2.5, 1);
    EXPECT_EQ(read_file(writer.path()).size(), version.size());  // one event waits
    writer.add_scalar("lm loss", 2.25, 2);
    const std::string both = read_file(writer.path());
    EXPECT_EQ(both.size(), version.size() + 2 * tfrecord(scalar_event(0, 1, "lm loss", 0)).size());
    EXPECT_NE(both.find(scalar_event(0, 2, "lm loss", 2.25f).substr(9)), std::string::npos);
    writer.add_scalar("lm loss", 2.0, 3);
  }
  const std::string all = read_file(std::filesystem::directory_iterator(dir / "runs")->path());
  EXPECT_NE(all.find(scalar_event(0, 3, "lm loss", 2.0f).substr(9)), std::string::npos);  // flushed at the end
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessel
