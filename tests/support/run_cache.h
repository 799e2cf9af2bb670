// Folders that tests compute once and share across test processes (every ctest case is one):
// the equivalence suite's single-process references and its preprocessed datasets. An entry is
// named by the MD5 of its key (everything that defines what it holds), under a folder named by
// the identity of what made it (the tessel binary's bytes): a rebuilt binary computes afresh and
// its predecessors' entries are removed. An entry is made under an flock of its own, so that two
// processes never compute it twice, in a temporary folder renamed into place once complete, so
// that none reads it half-written; the key is kept beside it (key.txt) and checked when read.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>

#include "tessel/data/gpt_dataset.h"

namespace tessel::testing {

// An exclusive lock on `path` (created if missing), held while the object lives.
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT, 0644)) {
    if (fd_ < 0 || ::flock(fd_, LOCK_EX) != 0) throw std::runtime_error(path.string() + ": cannot lock");
  }
  ~FileLock() { ::close(fd_); }  // closing releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot read");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class RunCache {
 public:
  // Entries live in root/identity/; every other folder under root is an older binary's, removed.
  RunCache(const std::filesystem::path& root, const std::string& identity) : dir_(root / identity) {
    std::filesystem::create_directories(dir_);
    const FileLock lock(root / ".lock");
    for (const auto& entry : std::filesystem::directory_iterator(root))
      if (entry.is_directory() && entry.path() != dir_) std::filesystem::remove_all(entry.path());
  }

  // The folder of `key`: filled by make(folder) the first time and reused after; nullopt when
  // make returns false (nothing is kept, so the next caller tries again).
  std::optional<std::filesystem::path> get(
      const std::string& key, const std::function<bool(const std::filesystem::path&)>& make) const {
    const std::string name = md5_hex(key);
    const std::filesystem::path entry = dir_ / name;
    const FileLock lock(dir_ / (name + ".lock"));
    if (std::filesystem::exists(entry)) {
      if (read_bytes(entry / "key.txt") != key)
        throw std::runtime_error(entry.string() + ": holds another key with the same MD5");
      return entry;
    }
    const std::filesystem::path scratch = dir_ / (name + ".tmp");  // a crashed maker's is reused
    std::filesystem::remove_all(scratch);
    std::filesystem::create_directories(scratch);
    if (!make(scratch)) {
      std::filesystem::remove_all(scratch);
      return std::nullopt;
    }
    std::ofstream(scratch / "key.txt", std::ios::binary) << key;
    std::filesystem::rename(scratch, entry);
    return entry;
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace tessel::testing
