// Megatron-Core's IndexedDataset: the `.bin`/`.idx` pair that Megatron-LM's
// tools/preprocess_data.py writes and its GPT dataset reads, byte for byte.
//
// PREFIX.bin: every sequence's tokens, back to back, in the dtype of the index.
// PREFIX.idx (all little-endian, no padding):
//   offset 0   magic "MMIDIDX\0\0" (9 bytes)
//   offset 9   version, uint64 = 1
//   offset 17  dtype code, uint8 (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
//              7 float32, 8 uint16)
//   offset 18  sequence count S, uint64
//   offset 26  document count D, uint64 (the length of the document index: documents + 1)
//   offset 34  sizes, int32[S]: tokens per sequence
//              pointers, int64[S]: byte offset of each sequence in the .bin
//              document index, int64[D]: 0, then the sequence index where each document ends
// Without --split-sentences a document is one sequence. Arrays start at unaligned offsets (34
// is not a multiple of 4), so they are read through memcpy, never through a cast pointer.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessel/core/writable.h"
#include "tessel/data/low_level_dataset.h"
#include "tessel/data/mapped_file.h"

namespace tessel {

// Megatron's DType codes. Token data must be one of the integer types.
enum class TokenDType : uint8_t {
  UInt8 = 1, Int8 = 2, Int16 = 3, Int32 = 4, Int64 = 5, Float64 = 6, Float32 = 7, UInt16 = 8,
};

const char* token_dtype_name(TokenDType dtype);
int token_dtype_size(TokenDType dtype);
// Megatron's DType.optimal_dtype(vocab size): uint16 under 65500 tokens, else int32.
TokenDType optimal_token_dtype(int64_t vocab_size);

constexpr int64_t kIndexHeaderBytes = 34;

class IndexedDataset final : public LowLevelDataset {
 public:
  // Maps PREFIX.idx and PREFIX.bin and validates the index against itself and the .bin: magic,
  // version, dtype code, the sizes of both files, every size, pointer and document boundary.
  // Throws tessel::Error naming the file and the offset of the first bad field.
  static IndexedDataset open(const std::string& prefix);
  // The same validation over bytes in memory (datasets tokenized at start-up, fuzzing); `prefix`
  // names them in messages.
  static IndexedDataset from_bytes(const std::string& prefix, std::string idx, std::string bin);

  const std::string& prefix() const override { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_sequences() const override { return num_sequences_; }
  // Documents (the document index holds one more entry).
  int64_t num_documents() const { return document_index_count_ - 1; }
  int64_t num_tokens() const { return bin_.size() / token_dtype_size(dtype_); }
  int64_t bin_bytes() const { return bin_.size(); }

  int32_t sequence_length(int64_t i) const override { return load<int32_t>(sizes_offset() + 4 * i); }
  int64_t sequence_pointer(int64_t i) const { return load<int64_t>(pointers_offset() + 8 * i); }
  // Entry i of the document index: document d holds sequences [entry d, entry d+1).
  int64_t document_index(int64_t i) const { return load<int64_t>(documents_offset() + 8 * i); }

  // Token ids must lie in [0, vocab_size); checked as tokens are read (not at open: a scan of
  // the whole .bin would cost as much as reading the corpus). 0 disables the check.
  void set_vocab_size(int64_t vocab_size) { vocab_size_ = vocab_size; }
  int64_t vocab_size() const { return vocab_size_; }

  // Copies tokens [offset, offset + out.size()) of sequence `sequence` into `out`. Throws
  // tessel::Error naming the .bin and the token's byte offset for an id outside the vocabulary.
  void read(int64_t sequence, int64_t offset, std::span<int32_t> out) const override;
  std::vector<int32_t> sequence(int64_t i) const;

 private:
  IndexedDataset(std::string prefix, FileBytes idx, FileBytes bin);
  void validate();
  int64_t sizes_offset() const { return kIndexHeaderBytes; }
  int64_t pointers_offset() const { return kIndexHeaderBytes + 4 * num_sequences_; }
  int64_t documents_offset() const { return pointers_offset() + 8 * num_sequences_; }
  template <typename T>
  T load(int64_t offset) const {
    T v;
    std::memcpy(&v, idx_.data() + offset, sizeof(T));
    return v;
  }

  std::string prefix_;
  FileBytes idx_;
  FileBytes bin_;
  TokenDType dtype_ = TokenDType::UInt16;
  int64_t num_sequences_ = 0;
  int64_t document_index_count_ = 0;
  int64_t vocab_size_ = 0;
};

// Megatron's IndexedDatasetBuilder: tokens go to PREFIX.bin as they come, the index is written
// by finalize(). Both files are AtomicFiles (core/writable.h), durable and renamed at finalize():
// a failed run never leaves a .bin/.idx pair that looks complete, nor a temporary file.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, TokenDType dtype);
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // One document of sequences with the given lengths (summing to tokens.size()); an empty
  // document adds a document index entry and no sequence, as Megatron's add_document does.
  // Throws when a token does not fit the dtype.
  void add_document(std::span<const int32_t> tokens, std::span<const int32_t> sequence_lengths);
  void add_document(std::span<const int32_t> tokens);  // one sequence
  // Documents already encoded in the dtype (encode_tokens): `bytes` holds all their tokens,
  // `sequence_lengths` their sequences, `sequences_per_document` how many sequences each has.
  void add_encoded(std::span<const uint8_t> bytes, std::span<const int32_t> sequence_lengths,
                   std::span<const int32_t> sequences_per_document);
  void finalize();

  int64_t num_documents() const { return static_cast<int64_t>(document_index_.size()) - 1; }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  std::string prefix_;
  TokenDType dtype_;
  std::optional<AtomicFile> bin_;  // until finalize()
  std::vector<int32_t> sizes_;
  std::vector<int64_t> document_index_{0};
  int64_t num_tokens_ = 0;
  std::vector<uint8_t> scratch_;  // one document in the file's dtype
};

// The .idx bytes for these sequence lengths and document index (pointers follow from the lengths).
std::string encode_index(TokenDType dtype, std::span<const int32_t> sizes,
                         std::span<const int64_t> document_index);
// Appends tokens to `out` in `dtype`; throws naming `where` when one does not fit.
void encode_tokens(TokenDType dtype, std::span<const int32_t> tokens, std::vector<uint8_t>& out,
                   const std::string& where);

// An in-memory IndexedDataset of whole documents (one sequence each), laid out exactly as on disk.
IndexedDataset indexed_dataset_from_documents(const std::string& name, TokenDType dtype,
                                              const std::vector<std::vector<int32_t>>& documents);

}  // namespace tessel
