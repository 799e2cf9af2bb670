#include "tessel/train/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <type_traits>
#include <filesystem>

#include "tessel/core/error.h"
#include "tessel/core/writable.h"

namespace tessel {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[i] = c;
  }
  return table;
}

// Protobuf's wire format, the little of it an Event needs: a field's key is (number << 3) | wire
// type (0 varint, 1 fixed 64-bit, 2 length-delimited, 5 fixed 32-bit); integers little-endian.
void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<char>((v & 0x7f) | 0x80));
  out.push_back(static_cast<char>(v));
}

template <typename T>
void put_fixed(std::string& out, T v) {
  using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
  const Bits bits = std::bit_cast<Bits>(v);
  for (size_t byte = 0; byte < sizeof(T); ++byte) out.push_back(static_cast<char>(bits >> (8 * byte)));
}

void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event's fields 1 (wall_time) and 2 (step); a step of 0 left out, as proto3 writes a default.
std::string event_head(double wall_time, int64_t step) {
  std::string event;
  put_varint(event, (1 << 3) | 1);
  put_fixed(event, wall_time);
  if (step == 0) return event;
  put_varint(event, 2 << 3);
  put_varint(event, static_cast<uint64_t>(step));
  return event;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  static constexpr std::array<uint32_t, 256> table = crc32c_table();
  uint32_t c = 0xffffffffu;
  for (unsigned char byte : data) c = table[(c ^ byte) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string record;
  put_fixed(record, static_cast<uint64_t>(data.size()));
  put_fixed(record, masked_crc32c(record));
  record.append(data);
  put_fixed(record, masked_crc32c(data));
  return record;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_varint(summary_value, (2 << 3) | 5);
  put_fixed(summary_value, value);
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string event = event_head(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

std::string file_version_event(double wall_time) {
  std::string event = event_head(wall_time, 0);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

EventFileWriter::EventFileWriter(const std::string& dir, int64_t queue_size, double flush_seconds)
    : queue_size_(std::max<int64_t>(queue_size, 1)), flush_seconds_(flush_seconds), last_flush_(now_seconds()) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TESSEL_CHECK(!ec, "--tensorboard-dir {}: cannot create it ({})", dir, ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  // TensorBoard's own name: seconds since the epoch (10 digits), host, process, writer number.
  path_ = (std::filesystem::path(dir) /
           fmt::format("events.out.tfevents.{:010d}.{}.{}.0", static_cast<int64_t>(last_flush_), host, getpid()))
              .string();
  try {
    file_ = open_growing_file(path_, tfrecord(file_version_event(last_flush_)));
  } catch (const Error& e) {
    fail("--tensorboard-dir: cannot create {} ({})", path_, e.what());
  }
}

EventFileWriter::~EventFileWriter() {
  try {
    flush();
  } catch (const Error&) {
    // A destructor cannot report it; the run's end flushes first and reports there.
  }
  if (file_ != nullptr) std::fclose(file_);
}

void EventFileWriter::add_scalar(std::string_view tag, double value, int64_t step) {
  add(scalar_event(now_seconds(), step, tag, static_cast<float>(value)));
}

void EventFileWriter::add(const std::string& event) {
  pending_ += tfrecord(event);
  ++pending_events_;
  if (pending_events_ >= queue_size_ || now_seconds() - last_flush_ >= flush_seconds_) flush();
}

void EventFileWriter::flush() {
  last_flush_ = now_seconds();
  if (pending_.empty() || file_ == nullptr) return;
  const bool written = std::fwrite(pending_.data(), 1, pending_.size(), file_) == pending_.size() &&
                       std::fflush(file_) == 0;
  pending_.clear();
  pending_events_ = 0;
  TESSEL_CHECK(written, "--tensorboard-dir: cannot write {} ({})", path_, std::strerror(errno));
}

}  // namespace tessel
