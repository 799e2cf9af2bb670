// TensorBoard's event files, written by tessel itself: --tensorboard-dir's
// events.out.tfevents.<time>.<host>.<pid>.0, a TFRecord stream of Event protobufs, each holding one
// scalar. The format, from TensorBoard's published schema and record writer:
//   record  = uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
//             the data, uint32 masked CRC-32C of the data;
//   masked  = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32);
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
// The first event of a file carries file_version "brain.Event:2" and no summary.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace tessel {

// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), as TFRecord checks its records with.
uint32_t crc32c(std::string_view data);
// The stored form of a CRC: rotated and offset so that a CRC of data holding CRCs stays useful.
uint32_t masked_crc32c(std::string_view data);
// One TFRecord: the framing above around `data`.
std::string tfrecord(std::string_view data);
// An Event protobuf: one scalar `tag` = `value` at `step`, or (empty tag) the file-version event.
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);
std::string file_version_event(double wall_time);

// One event file in `dir` (created with its parents), as TensorBoard's SummaryWriter opens it:
// a new file per run, so a resumed run adds its own beside the earlier ones. Events are kept in
// memory until `queue_size` of them wait (--tensorboard-queue-size), `flush_seconds` have passed
// since the last write to disk, or the writer is flushed or destroyed. Throws tessel::Error
// naming the file when it cannot be created or written.
class EventFileWriter {
 public:
  EventFileWriter(const std::string& dir, int64_t queue_size, double flush_seconds = 120);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  void add_scalar(std::string_view tag, double value, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void add(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
  std::string pending_;
  int64_t pending_events_ = 0, queue_size_;
  double flush_seconds_, last_flush_;
};

}  // namespace tessel
