// NumPy's .npy files (format 1.0), for the dataset index caches: Megatron-Core caches its
// document, sample, shuffle and blending indices with numpy.save, and tessel writes the same
// arrays the same way, so either side's tools can read the other's with numpy.load.
#pragma once

#include <cstdint>
#include <string>

#include "tessel/core/writable.h"  // write_file_atomically
#include <vector>

namespace tessel {

struct NpyArray {
  std::string descr;           // NumPy's dtype string: "<i2", "<i4", "<u4", "<i8"
  std::vector<int64_t> shape;  // C order
  std::string data;            // the elements' bytes, little-endian

  int64_t numel() const;
};

// The descr of an integer element type (int16, int32, uint32, int64).
template <typename T>
const char* npy_descr();

void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes);

template <typename T>
void write_npy(const std::string& path, const std::vector<T>& values, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  write_npy(path, npy_descr<T>(), shape, values.data(), values.size() * sizeof(T));
}

// Throws tessel::Error naming the file when it is not a well-formed C-order .npy file.
NpyArray read_npy(const std::string& path);

}  // namespace tessel
