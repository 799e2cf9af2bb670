#include "tessel/data/npy.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "tessel/core/error.h"

namespace tessel {

namespace {

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes, then major and minor version bytes

int descr_size(const std::string& descr) {
  if (descr.size() == 3 && (descr[0] == '<' || descr[0] == '|') &&
      (descr[1] == 'i' || descr[1] == 'u') && descr[2] >= '1' && descr[2] <= '8')
    return descr[2] - '0';
  return 0;
}

// The value of 'key' in NumPy's header dict, e.g. "'<i4'" or "(3, 2)"; empty when absent.
std::string header_field(const std::string& header, const std::string& key) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t v = header.find(':', k);
  if (v == std::string::npos) return "";
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  if (v >= header.size()) return "";
  const char open = header[v];
  const char close = open == '(' ? ')' : open == '\'' ? '\'' : ',';
  const size_t end = header.find(close, v + 1);
  if (end == std::string::npos) return "";
  return header.substr(v, end - v + (close == ',' ? 0 : 1));
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

template <> const char* npy_descr<int16_t>() { return "<i2"; }
template <> const char* npy_descr<int32_t>() { return "<i4"; }
template <> const char* npy_descr<uint32_t>() { return "<u4"; }
template <> const char* npy_descr<int64_t>() { return "<i8"; }

void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + (shape.size() == 1 ? "," : ", ");
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // NumPy pads the header with spaces and a newline so that the data starts 64-byte aligned.
  const size_t preamble = 10;  // magic 6 + version 2 + header length 2
  header.append(63 - (preamble + header.size()) % 64, ' ');
  header += '\n';
  const uint16_t header_len = static_cast<uint16_t>(header.size());
  std::string preamble_and_header(kMagic, 6);
  preamble_and_header += '\x01';
  preamble_and_header += '\x00';
  preamble_and_header.append(reinterpret_cast<const char*>(&header_len), 2);
  preamble_and_header += header;
  // Durable: a later run reads a complete set of caches instead of building them again.
  AtomicFile file(path, Durability::kDurable);
  file.write(preamble_and_header);
  file.write(data, bytes);
  file.commit();
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "{}: cannot open ({})", path, std::strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  TESSEL_CHECK(bytes.size() >= 10 && bytes.compare(0, 6, kMagic, 6) == 0,
               "{}: not a .npy file (wrong magic at offset 0)", path);
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
    header_start = 10;
  } else {
    TESSEL_CHECK(major == 2 || major == 3, "{}: unknown .npy version {} at offset 6", path, major);
    TESSEL_CHECK(bytes.size() >= 12, "{}: truncated .npy header", path);
    for (int b = 0; b < 4; ++b) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + b])) << (8 * b);
    header_start = 12;
  }
  TESSEL_CHECK(header_start + header_len <= bytes.size(), "{}: truncated .npy header", path);
  const std::string header = bytes.substr(header_start, header_len);
  NpyArray array;
  const std::string descr = header_field(header, "descr");
  TESSEL_CHECK(descr.size() >= 2, "{}: .npy header without a descr", path);
  array.descr = descr.substr(1, descr.size() - 2);
  const int item = descr_size(array.descr);
  TESSEL_CHECK(item > 0, "{}: .npy dtype '{}' is not a little-endian integer", path, array.descr);
  TESSEL_CHECK(header_field(header, "fortran_order") == "False", "{}: .npy array is not in C order",
               path);
  const std::string shape = header_field(header, "shape");
  TESSEL_CHECK(shape.size() >= 2 && shape.front() == '(', "{}: .npy header without a shape", path);
  std::stringstream dims(shape.substr(1, shape.size() - 2));
  std::string dim;
  while (std::getline(dims, dim, ',')) {
    if (dim.find_first_not_of(' ') == std::string::npos) continue;
    try {
      array.shape.push_back(std::stoll(dim));
    } catch (const std::exception&) {
      fail("{}: bad .npy shape {}", path, shape);
    }
    TESSEL_CHECK(array.shape.back() >= 0 &&
                     array.shape.back() <= static_cast<int64_t>(bytes.size()),
                 "{}: bad .npy shape {}", path, shape);
  }
  int64_t elements = 1;  // bounded by the file size at every step, so the product cannot overflow
  for (int64_t d : array.shape) {
    elements *= d;
    TESSEL_CHECK(elements <= static_cast<int64_t>(bytes.size()), "{}: .npy shape {} exceeds the file",
                 path, shape);
  }
  const size_t data_start = header_start + header_len;
  const size_t want = static_cast<size_t>(array.numel()) * static_cast<size_t>(item);
  TESSEL_CHECK(bytes.size() - data_start == want,
               "{}: .npy data holds {} bytes, the header's shape {} of {} needs {}", path,
               bytes.size() - data_start, shape, array.descr, want);
  array.data = bytes.substr(data_start);
  return array;
}

}  // namespace tessel
