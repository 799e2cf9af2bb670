#include "tessel/ckpt/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/core/writable.h"

namespace tessel {

// Tensor bytes are copied as they are: the file is little-endian and so must the host be.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace {

// The official reader refuses headers above 100 MB; a larger length means a corrupt file.
constexpr int64_t kMaxHeaderBytes = 100'000'000;

// nlohmann's messages can quote the offending input, newlines included: keep errors on one line.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24, exact in fp32
    float v = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -v : v;
  }
  uint32_t bits;
  if (exponent == 0x1f)
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf or NaN
  else
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  return std::bit_cast<float>(bits);
}

float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// A non-negative integer that fits int64, or -1.
int64_t as_size(const nlohmann::json& j) {
  if (!j.is_number_unsigned()) return -1;
  uint64_t v = j.get<uint64_t>();
  return v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? -1
                                                                        : static_cast<int64_t>(v);
}

}  // namespace

int safetensors_dtype_size(const std::string& dtype) {
  static const std::unordered_map<std::string, int> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

bool safetensors_dtype_is_float(const std::string& dtype) {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64";
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TESSEL_CHECK(fd_ >= 0, "{}: cannot open ({})", path, std::strerror(errno));
  try {
    struct stat st;
    TESSEL_CHECK(::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode), "{}: not a regular file", path);
    file_size_ = st.st_size;
    TESSEL_CHECK(file_size_ > 0, "{}: empty file (a safetensors file starts with an 8-byte header length)",
                 path);
    parse_header();
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() { ::close(fd_); }

void SafetensorsReader::read_bytes(int64_t offset, int64_t size, void* out) const {
  auto* to = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t got = ::pread(fd_, to, static_cast<size_t>(std::min<int64_t>(size, 1 << 30)), offset);
    if (got < 0 && errno == EINTR) continue;
    TESSEL_CHECK(got > 0, "{}: read failed at byte {} ({})", path_, offset,
                 got == 0 ? "the file shrank while open" : std::strerror(errno));
    to += got, offset += got, size -= got;
  }
}

void SafetensorsReader::parse_header() {
  const std::string& file = path_;
  TESSEL_CHECK(file_size_ >= 8, "{}: truncated: {} bytes, too short for the 8-byte header length",
               file, file_size_);
  uint64_t header_len;
  read_bytes(0, 8, &header_len);
  TESSEL_CHECK(header_len <= static_cast<uint64_t>(file_size_ - 8),
               "{}: header length {} goes beyond the end of the file ({} bytes): truncated or "
               "not a safetensors file",
               file, header_len, file_size_);
  TESSEL_CHECK(static_cast<int64_t>(header_len) <= kMaxHeaderBytes,
               "{}: header length {} is over the 100 MB limit: not a safetensors file", file,
               header_len);
  data_start_ = 8 + static_cast<int64_t>(header_len);
  const int64_t data_size = file_size_ - data_start_;

  std::string text(header_len, '\0');
  read_bytes(8, static_cast<int64_t>(header_len), text.data());
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: header is not valid JSON ({})", file, one_line(e.what()));
  }
  TESSEL_CHECK(header.is_object(), "{}: header is JSON but not an object", file);

  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      TESSEL_CHECK(entry.is_object(), "{}: __metadata__ is not an object", file);
      for (auto& [key, value] : entry.items()) {
        TESSEL_CHECK(value.is_string(), "{}: __metadata__ value of '{}' is not a string", file,
                     key);
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    TESSEL_CHECK(entry.is_object(), "{}: tensor '{}': header entry is not an object", file, name);
    SafetensorsTensor t;
    t.name = name;
    auto dtype = entry.find("dtype");
    TESSEL_CHECK(dtype != entry.end() && dtype->is_string(), "{}: tensor '{}': no dtype string",
                 file, name);
    t.dtype = dtype->get<std::string>();
    const int elem_size = safetensors_dtype_size(t.dtype);
    TESSEL_CHECK(elem_size > 0, "{}: tensor '{}': unknown dtype '{}'", file, name, t.dtype);

    auto shape = entry.find("shape");
    TESSEL_CHECK(shape != entry.end() && shape->is_array(), "{}: tensor '{}': no shape array", file,
                 name);
    int64_t numel = 1;
    for (const nlohmann::json& d : *shape) {
      int64_t size = as_size(d);
      TESSEL_CHECK(size >= 0,
                   "{}: tensor '{}': shape {} has a dimension that is not a "
                   "non-negative integer",
                   file, name, one_line(shape->dump()));
      TESSEL_CHECK(size == 0 || numel <= std::numeric_limits<int64_t>::max() / size,
                   "{}: tensor '{}': shape {} is too large", file, name, one_line(shape->dump()));
      numel *= size;
      t.shape.push_back(size);
    }

    auto offsets = entry.find("data_offsets");
    TESSEL_CHECK(offsets != entry.end() && offsets->is_array() && offsets->size() == 2,
                 "{}: tensor '{}': data_offsets is not a [begin, end] pair", file, name);
    t.begin = as_size((*offsets)[0]);
    t.end = as_size((*offsets)[1]);
    TESSEL_CHECK(t.begin >= 0 && t.end >= t.begin,
                 "{}: tensor '{}': data_offsets {} is not a range of non-negative integers", file,
                 name, one_line(offsets->dump()));
    TESSEL_CHECK(numel <= std::numeric_limits<int64_t>::max() / elem_size,
                 "{}: tensor '{}': shape is too large", file, name);
    TESSEL_CHECK(t.end - t.begin == numel * elem_size,
                 "{}: tensor '{}': data_offsets [{}, {}] span {} bytes but shape {} of {} needs {}",
                 file, name, t.begin, t.end, t.end - t.begin, shape_str(t.shape), t.dtype,
                 numel * elem_size);
    tensors_.push_back(std::move(t));
  }

  // The data section must be covered exactly: no gaps, no overlaps, nothing past the end.
  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t covered = 0;
  for (const SafetensorsTensor& t : tensors_) {
    TESSEL_CHECK(t.end <= data_size,
                 "{}: truncated: tensor '{}' ends at byte {} but the file has {}", file, t.name,
                 data_start_ + t.end, file_size_);
    TESSEL_CHECK(t.begin >= covered,
                 "{}: tensor '{}' overlaps the tensor before it (bytes {} < {})", file, t.name,
                 t.begin, covered);
    TESSEL_CHECK(t.begin == covered, "{}: gap of {} bytes in the data before tensor '{}'", file,
                 t.begin - covered, t.name);
    covered = t.end;
  }
  TESSEL_CHECK(covered == data_size, "{}: {} bytes after the last tensor belong to no tensor", file,
               data_size - covered);
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = static_cast<int>(i);
}

const SafetensorsTensor& SafetensorsReader::tensor(const std::string& name) const {
  auto it = index_.find(name);
  TESSEL_CHECK(it != index_.end(), "{}: no tensor named '{}'", path_, name);
  return tensors_[it->second];
}

void SafetensorsReader::read(const std::string& name, float* out) const {
  read(name, 0, tensor(name).numel(), out);
}

void SafetensorsReader::read(const std::string& name, int64_t first, int64_t count, float* out) const {
  const SafetensorsTensor& t = tensor(name);
  TESSEL_CHECK(first >= 0 && count >= 0 && first + count <= t.numel(),
               "{}: elements [{}, {}) are not within tensor '{}' of {}", path_, first, first + count, name,
               t.numel());
  const int size = safetensors_dtype_size(t.dtype);
  const int64_t start = data_start_ + t.begin + first * size;
  if (t.dtype == "F32") return read_bytes(start, count * size, out);
  TESSEL_CHECK(safetensors_dtype_is_float(t.dtype),
               "{}: tensor '{}' has dtype {}; only F32, F16, BF16 and F64 can be read as floats", path_,
               name, t.dtype);
  // Converted a block at a time: memory beyond `out` stays one small buffer, whatever the tensor.
  const auto convert = [&](auto element_to_float) {
    constexpr int64_t kBlock = 1 << 16;
    std::vector<uint8_t> raw(static_cast<size_t>(std::min(count, kBlock) * size));
    for (int64_t done = 0; done < count; done += kBlock) {
      const int64_t n = std::min(count - done, kBlock);
      read_bytes(start + done * size, n * size, raw.data());
      for (int64_t i = 0; i < n; ++i) out[done + i] = element_to_float(raw.data() + i * size);
    }
  };
  const auto half = [](const uint8_t* at) {
    uint16_t h;
    std::memcpy(&h, at, 2);
    return h;
  };
  if (t.dtype == "F16") return convert([&](const uint8_t* at) { return f16_to_float(half(at)); });
  if (t.dtype == "BF16") return convert([&](const uint8_t* at) { return bf16_to_float(half(at)); });
  convert([](const uint8_t* at) {
    double d;
    std::memcpy(&d, at, 8);
    return static_cast<float>(d);
  });
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps __metadata__ first and the tensors in data order, as Hugging Face does.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const SafetensorsEntry& t : tensors) {
    TESSEL_CHECK(!t.name.empty() && t.name != "__metadata__", "{}: invalid tensor name '{}'", path,
                 t.name);
    TESSEL_CHECK(!header.contains(t.name), "{}: tensor '{}' given twice", path, t.name);
    for (int64_t d : t.shape)
      TESSEL_CHECK(d >= 0, "{}: tensor '{}' has a negative dimension in {}", path, t.name,
                   shape_str(t.shape));
    const int64_t bytes = shape_numel(t.shape) * static_cast<int64_t>(sizeof(float));
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();

  AtomicFile file(path, Durability::kDurable);
  file.write(&header_len, 8);
  file.write(text);
  for (const SafetensorsEntry& t : tensors)
    file.write(t.data, static_cast<size_t>(shape_numel(t.shape)) * sizeof(float));
  file.commit();
}

}  // namespace tessel
