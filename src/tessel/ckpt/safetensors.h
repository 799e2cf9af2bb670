// The safetensors file format (Hugging Face): an 8-byte little-endian header length N, N bytes of
// JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then
// the data section; offsets are relative to its start. The reader validates everything before
// trusting it (a corrupt file gets an Error naming the file and the problem) and reads a tensor, or
// a range of its elements, only when asked; the writer writes fp32 tensors atomically (temporary
// file, then rename).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessel/core/tensor.h"

namespace tessel {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // as spelled in the file: "F32", "BF16", "I64", ...
  Shape shape;
  int64_t begin = 0;  // byte range [begin, end) within the data section
  int64_t end = 0;

  int64_t numel() const { return shape_numel(shape); }
};

// Bytes per element of a safetensors dtype name, or 0 when the name is not a safetensors dtype.
int safetensors_dtype_size(const std::string& dtype);
// Whether read() can convert this dtype to float: F32, F16, BF16, F64.
bool safetensors_dtype_is_float(const std::string& dtype);

class SafetensorsReader {
 public:
  // Opens the file and validates its header; throws Error naming the file on any problem. Tensor
  // data is read on demand (pread), so only what read() is asked for ever reaches memory.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  // Every tensor, in the order of their bytes in the file.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  const SafetensorsTensor& tensor(const std::string& name) const;

  // Converts tensor `name` (F32, F16, BF16 or F64) into out[0 .. numel).
  void read(const std::string& name, float* out) const;
  // Elements [first, first + count) of tensor `name` (row-major) into out[0 .. count).
  void read(const std::string& name, int64_t first, int64_t count, float* out) const;

 private:
  void parse_header();
  void read_bytes(int64_t offset, int64_t size, void* out) const;

  std::string path_;
  int fd_ = -1;
  int64_t file_size_ = 0;
  int64_t data_start_ = 0;  // 8 + header length
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, int> index_;
  std::map<std::string, std::string> metadata_;
};

struct SafetensorsEntry {
  std::string name;
  Shape shape;
  const float* data;  // shape_numel(shape) values, written as F32
};

// Writes `path` (F32 tensors in the given order, the header padded with spaces to a multiple of 8
// bytes as Hugging Face does), durably through an AtomicFile (core/writable.h): a crash leaves the
// old file or the new one, never half.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace tessel
