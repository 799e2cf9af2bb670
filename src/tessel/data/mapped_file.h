// A file's bytes for the dataset readers: mapped read-only from disk, or owned in memory (datasets
// built from text at start-up, fuzzers, tests). Readers see a (pointer, size) either way. A mapped
// file must not shrink while it is read: a truncated data file is an error naming it, never a
// silent bus error.
#pragma once

#include <cstdint>
#include <string>

namespace tessel {

class FileBytes {
 public:
  FileBytes() = default;
  // Maps `path` read-only; throws tessel::Error naming the file when it cannot be opened or mapped.
  static FileBytes map(const std::string& path);
  // Takes `bytes` as the contents of a file called `name` (for messages only).
  static FileBytes own(std::string name, std::string bytes);

  ~FileBytes();
  FileBytes(FileBytes&& other) noexcept;
  FileBytes& operator=(FileBytes&& other) noexcept;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;

  const std::string& path() const { return path_; }
  // Copies bytes [offset, offset + n) into `out`. The bytes of a mapped file that shrank under the
  // run are gone, and reading them raises SIGBUS: here it becomes a tessel::Error naming the file.
  // (Elsewhere, e.g. an index read, the signal's handler names the file and the process exits 1.)
  void copy(int64_t offset, int64_t n, void* out) const;
  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  void release();

  std::string path_;
  const uint8_t* data_ = nullptr;
  int64_t size_ = 0;
  bool mapped_ = false;  // data_ is an mmap of size_ bytes (else it points into owned_)
  std::string owned_;
};

}  // namespace tessel
