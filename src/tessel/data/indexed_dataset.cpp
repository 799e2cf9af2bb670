#include "tessel/data/indexed_dataset.h"

#include <bit>
#include <cstring>
#include <limits>

#include "tessel/core/error.h"

namespace tessel {

static_assert(std::endian::native == std::endian::little, "the .idx/.bin format is little-endian");

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

bool valid_dtype_code(uint8_t code) { return code >= 1 && code <= 8; }

// Token i of `bytes` (in `dtype`) as a signed 64-bit value.
int64_t token_at(const uint8_t* bytes, TokenDType dtype, int64_t i) {
  switch (dtype) {
    case TokenDType::UInt8: return bytes[i];
    case TokenDType::Int8: return static_cast<int8_t>(bytes[i]);
    case TokenDType::Int16: { int16_t v; std::memcpy(&v, bytes + 2 * i, 2); return v; }
    case TokenDType::UInt16: { uint16_t v; std::memcpy(&v, bytes + 2 * i, 2); return v; }
    case TokenDType::Int32: { int32_t v; std::memcpy(&v, bytes + 4 * i, 4); return v; }
    case TokenDType::Int64: { int64_t v; std::memcpy(&v, bytes + 8 * i, 8); return v; }
    case TokenDType::Float32:
    case TokenDType::Float64: break;  // refused at open
  }
  fail("token dtype {} is not an integer type", static_cast<int>(dtype));
}

bool token_fits(TokenDType dtype, int64_t v) {
  switch (dtype) {
    case TokenDType::UInt8: return v >= 0 && v <= 0xff;
    case TokenDType::Int8: return v >= -128 && v <= 127;
    case TokenDType::Int16: return v >= -32768 && v <= 32767;
    case TokenDType::UInt16: return v >= 0 && v <= 0xffff;
    case TokenDType::Int32:
    case TokenDType::Int64: return true;
    case TokenDType::Float32:
    case TokenDType::Float64: return false;
  }
  return false;
}

}  // namespace

const char* token_dtype_name(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::UInt8: return "uint8";
    case TokenDType::Int8: return "int8";
    case TokenDType::Int16: return "int16";
    case TokenDType::Int32: return "int32";
    case TokenDType::Int64: return "int64";
    case TokenDType::Float64: return "float64";
    case TokenDType::Float32: return "float32";
    case TokenDType::UInt16: return "uint16";
  }
  return "unknown";
}

int token_dtype_size(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::UInt8:
    case TokenDType::Int8: return 1;
    case TokenDType::Int16:
    case TokenDType::UInt16: return 2;
    case TokenDType::Int32:
    case TokenDType::Float32: return 4;
    case TokenDType::Int64:
    case TokenDType::Float64: return 8;
  }
  return 1;
}

TokenDType optimal_token_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::UInt16 : TokenDType::Int32;
}

// ---- reading ----

IndexedDataset::IndexedDataset(std::string prefix, FileBytes idx, FileBytes bin)
    : prefix_(std::move(prefix)), idx_(std::move(idx)), bin_(std::move(bin)) {
  validate();
}

IndexedDataset IndexedDataset::open(const std::string& prefix) {
  FileBytes idx = FileBytes::map(prefix + ".idx");  // first: a missing index is the likelier mistake
  FileBytes bin = FileBytes::map(prefix + ".bin");
  return IndexedDataset(prefix, std::move(idx), std::move(bin));
}

IndexedDataset IndexedDataset::from_bytes(const std::string& prefix, std::string idx,
                                          std::string bin) {
  return IndexedDataset(prefix, FileBytes::own(prefix + ".idx", std::move(idx)),
                        FileBytes::own(prefix + ".bin", std::move(bin)));
}

void IndexedDataset::validate() {
  const std::string& idx = idx_.path();
  const int64_t idx_size = idx_.size();
  TESSEL_CHECK(idx_size >= kIndexHeaderBytes,
               "{}: truncated index: {} bytes, the header alone takes {}", idx, idx_size,
               kIndexHeaderBytes);
  TESSEL_CHECK(std::memcmp(idx_.data(), kMagic, sizeof kMagic) == 0,
               "{}: not a Megatron index file: wrong magic at offset 0 (expected \"MMIDIDX\\0\\0\")",
               idx);
  const uint64_t version = load<uint64_t>(9);
  TESSEL_CHECK(version == 1, "{}: unsupported index version {} at offset 9 (expected 1)", idx,
               version);
  const uint8_t code = load<uint8_t>(17);
  TESSEL_CHECK(valid_dtype_code(code), "{}: unknown dtype code {} at offset 17 (expected 1..8)",
               idx, code);
  dtype_ = static_cast<TokenDType>(code);
  TESSEL_CHECK(dtype_ != TokenDType::Float32 && dtype_ != TokenDType::Float64,
               "{}: dtype code {} at offset 17 is {}: token ids must be integers", idx, code,
               token_dtype_name(dtype_));
  const uint64_t sequences = load<uint64_t>(18);
  const uint64_t doc_entries = load<uint64_t>(26);
  // Each sequence takes 12 bytes (size + pointer), each document index entry 8: bound the
  // counts by the file before multiplying, so no count can overflow the arithmetic.
  const uint64_t room = static_cast<uint64_t>(idx_size - kIndexHeaderBytes);
  TESSEL_CHECK(sequences <= room / 12 && doc_entries <= room / 8 &&
                   12 * sequences + 8 * doc_entries <= room,
               "{}: truncated index: the header (offset 18) promises {} sequences and {} document "
               "index entries, {} bytes in all, but the file has {}",
               idx, sequences, doc_entries,
               static_cast<double>(kIndexHeaderBytes) + 12.0 * static_cast<double>(sequences) +
                   8.0 * static_cast<double>(doc_entries),
               idx_size);
  num_sequences_ = static_cast<int64_t>(sequences);
  document_index_count_ = static_cast<int64_t>(doc_entries);
  const int64_t expected = documents_offset() + 8 * document_index_count_;
  TESSEL_CHECK(idx_size == expected,
               "{}: {} bytes after the document index (offset {}): the file has {} bytes, the "
               "header describes {}{}",
               idx, idx_size - expected, expected, idx_size, expected,
               idx_size - expected == num_sequences_ ? " (a multimodal index? not supported)" : "");
  TESSEL_CHECK(document_index_count_ >= 1,
               "{}: the document index (offset {}) is empty; it must start with 0", idx,
               documents_offset());

  // The document index: 0, non-decreasing (an empty document repeats its predecessor), ending at
  // the sequence count.
  int64_t previous = 0;
  for (int64_t d = 0; d < document_index_count_; ++d) {
    const int64_t v = document_index(d);
    const int64_t at = documents_offset() + 8 * d;
    TESSEL_CHECK(d > 0 || v == 0, "{}: document index[0] at offset {} is {}, expected 0", idx, at,
                 v);
    TESSEL_CHECK(v >= previous && v <= num_sequences_,
                 "{}: document index[{}] at offset {} is {}: entries must not decrease (previous "
                 "{}) nor exceed the sequence count {}",
                 idx, d, at, v, previous, num_sequences_);
    previous = v;
  }
  TESSEL_CHECK(previous == num_sequences_,
               "{}: the document index ends at sequence {} (offset {}), but there are {} sequences",
               idx, previous, documents_offset() + 8 * (document_index_count_ - 1), num_sequences_);

  // Sizes and pointers: sequence i starts where sequence i-1 ends, as Megatron's writer lays
  // them out, and the last ends where the .bin does.
  const int64_t item = token_dtype_size(dtype_);
  int64_t end = 0;
  for (int64_t i = 0; i < num_sequences_; ++i) {
    const int32_t size = sequence_length(i);
    TESSEL_CHECK(size >= 0, "{}: sizes[{}] at offset {} is negative ({})", idx, i,
                 sizes_offset() + 4 * i, size);
    const int64_t pointer = sequence_pointer(i);
    TESSEL_CHECK(pointer == end,
                 "{}: pointers[{}] at offset {} is {}, but the sequences before it end at byte {} "
                 "of the .bin",
                 idx, i, pointers_offset() + 8 * i, pointer, end);
    end += item * size;  // at most 2^34 more than a value <= the .bin size: no overflow
    TESSEL_CHECK(end <= bin_.size(),
                 "{}: sequence {} (sizes[{}] at offset {}) ends at byte {}, past the end of {} ({} "
                 "bytes)",
                 idx, i, i, sizes_offset() + 4 * i, end, bin_.path(), bin_.size());
  }
  TESSEL_CHECK(end == bin_.size(),
               "{}: holds {} bytes but its index {} describes {} ({} sequences of {})", bin_.path(),
               bin_.size(), idx, end, num_sequences_, token_dtype_name(dtype_));
}

void IndexedDataset::read(int64_t sequence, int64_t offset, std::span<int32_t> out) const {
  TESSEL_CHECK(sequence >= 0 && sequence < num_sequences_, "{}: no sequence {} (it has {})",
               idx_.path(), sequence, num_sequences_);
  const int64_t length = sequence_length(sequence);
  const int64_t count = static_cast<int64_t>(out.size());
  TESSEL_CHECK(offset >= 0 && count <= length - offset,
               "{}: tokens [{}, {}) of sequence {} are out of its {} tokens", idx_.path(), offset,
               offset + count, sequence, length);
  const int64_t item = token_dtype_size(dtype_);
  const int64_t first = sequence_pointer(sequence) / item + offset;
  const int64_t limit = vocab_size_ > 0 ? vocab_size_ : std::numeric_limits<int32_t>::max();
  thread_local std::vector<uint8_t> bytes;  // a copy first: the .bin may have shrunk (FileBytes::copy)
  bytes.resize(static_cast<size_t>(count * item));
  bin_.copy(first * item, count * item, bytes.data());
  for (int64_t k = 0; k < count; ++k) {
    const int64_t v = token_at(bytes.data(), dtype_, k);
    if (v < 0 || v >= limit)
      fail("{}: token {} at byte offset {} (sequence {}) is outside the vocabulary [0, {})",
           bin_.path(), v, (first + k) * item, sequence, limit);
    out[static_cast<size_t>(k)] = static_cast<int32_t>(v);
  }
}

std::vector<int32_t> IndexedDataset::sequence(int64_t i) const {
  TESSEL_CHECK(i >= 0 && i < num_sequences_, "{}: no sequence {} (it has {})", idx_.path(), i,
               num_sequences_);
  std::vector<int32_t> tokens(static_cast<size_t>(sequence_length(i)));
  read(i, 0, tokens);
  return tokens;
}

// ---- writing ----

std::string encode_index(TokenDType dtype, std::span<const int32_t> sizes,
                         std::span<const int64_t> document_index) {
  std::string out;
  out.reserve(static_cast<size_t>(kIndexHeaderBytes) + 12 * sizes.size() + 8 * document_index.size());
  auto put = [&out](const auto& v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  out.append(kMagic, sizeof kMagic);
  put(uint64_t{1});
  put(static_cast<uint8_t>(dtype));
  put(static_cast<uint64_t>(sizes.size()));
  put(static_cast<uint64_t>(document_index.size()));
  for (int32_t s : sizes) put(s);
  int64_t pointer = 0;
  for (int32_t s : sizes) {
    put(pointer);
    pointer += static_cast<int64_t>(s) * token_dtype_size(dtype);
  }
  for (int64_t d : document_index) put(d);
  return out;
}

void encode_tokens(TokenDType dtype, std::span<const int32_t> tokens, std::vector<uint8_t>& out,
                   const std::string& where) {
  for (size_t i = 0; i < tokens.size(); ++i)
    TESSEL_CHECK(token_fits(dtype, tokens[i]), "{}: token {} does not fit the dtype {}", where,
                 tokens[i], token_dtype_name(dtype));
  const size_t size = static_cast<size_t>(token_dtype_size(dtype));
  const size_t start = out.size();
  out.resize(start + tokens.size() * size);
  uint8_t* dst = out.data() + start;
  // Little-endian: a value's encoding is its low `size` bytes, whatever its signedness.
  auto narrow = [&](auto type_tag) {
    using T = decltype(type_tag);
    for (size_t i = 0; i < tokens.size(); ++i) {
      const T v = static_cast<T>(tokens[i]);
      std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
    }
  };
  switch (dtype) {
    case TokenDType::UInt8: case TokenDType::Int8: narrow(uint8_t{}); break;
    case TokenDType::UInt16: case TokenDType::Int16: narrow(uint16_t{}); break;
    case TokenDType::Int32: narrow(int32_t{}); break;
    case TokenDType::Int64: narrow(int64_t{}); break;
    case TokenDType::Float32: case TokenDType::Float64: break;  // refused by token_fits
  }
}

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDType dtype)
    : prefix_(prefix), dtype_(dtype) {
  TESSEL_CHECK(dtype != TokenDType::Float32 && dtype != TokenDType::Float64,
               "{}: token data must have an integer dtype, not {}", prefix, token_dtype_name(dtype));
  bin_.emplace(prefix + ".bin", Durability::kDurable);
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens,
                                        std::span<const int32_t> sequence_lengths) {
  int64_t total = 0;
  for (int32_t n : sequence_lengths) total += n;
  TESSEL_CHECK(total == static_cast<int64_t>(tokens.size()),
               "{}: document of {} tokens given sequence lengths summing to {}", prefix_,
               tokens.size(), total);
  scratch_.clear();
  encode_tokens(dtype_, tokens, scratch_, fmt::format("{}.bin, document {}", prefix_, num_documents()));
  const int32_t sequences = static_cast<int32_t>(sequence_lengths.size());
  add_encoded(scratch_, sequence_lengths, std::span<const int32_t>(&sequences, 1));
}

void IndexedDatasetWriter::add_encoded(std::span<const uint8_t> bytes,
                                       std::span<const int32_t> sequence_lengths,
                                       std::span<const int32_t> sequences_per_document) {
  TESSEL_CHECK(bin_.has_value(), "{}: documents added after finalize", prefix_);
  int64_t tokens = 0, sequences = 0;
  for (int32_t n : sequence_lengths) tokens += n;
  for (int32_t n : sequences_per_document) sequences += n;
  TESSEL_CHECK(sequences == static_cast<int64_t>(sequence_lengths.size()) &&
                   tokens * token_dtype_size(dtype_) == static_cast<int64_t>(bytes.size()),
               "{}: {} encoded bytes for {} tokens in {} sequences, {} counted by the documents",
               prefix_, bytes.size(), tokens, sequence_lengths.size(), sequences);
  bin_->write(bytes.data(), bytes.size());
  sizes_.insert(sizes_.end(), sequence_lengths.begin(), sequence_lengths.end());
  for (int32_t n : sequences_per_document) document_index_.push_back(document_index_.back() + n);
  num_tokens_ += tokens;
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens) {
  const int32_t length = static_cast<int32_t>(tokens.size());
  TESSEL_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
               "{}: a document of {} tokens is longer than a sequence can be (int32 sizes)", prefix_,
               tokens.size());
  if (tokens.empty()) {
    add_document(tokens, {});
  } else {
    add_document(tokens, std::span<const int32_t>(&length, 1));
  }
}

void IndexedDatasetWriter::finalize() {
  TESSEL_CHECK(bin_.has_value(), "{}: finalize called twice", prefix_);
  // The index is written whole before the .bin is renamed into place: a failed write (a full disk)
  // changes neither file.
  AtomicFile idx(prefix_ + ".idx", Durability::kDurable);
  idx.write(encode_index(dtype_, sizes_, document_index_));
  idx.flush();
  bin_->commit();
  bin_.reset();
  idx.commit();
}

IndexedDataset indexed_dataset_from_documents(const std::string& name, TokenDType dtype,
                                              const std::vector<std::vector<int32_t>>& documents) {
  std::vector<uint8_t> bin;
  std::vector<int32_t> sizes;
  std::vector<int64_t> document_index{0};
  for (const std::vector<int32_t>& doc : documents) {
    encode_tokens(dtype, doc, bin, fmt::format("{}, document {}", name, document_index.size() - 1));
    if (!doc.empty()) sizes.push_back(static_cast<int32_t>(doc.size()));
    document_index.push_back(static_cast<int64_t>(sizes.size()));
  }
  return IndexedDataset::from_bytes(name, encode_index(dtype, sizes, document_index),
                                    std::string(bin.begin(), bin.end()));
}

}  // namespace tessel
