// Writing files: folders a run writes into, checked before it starts (a run that can only fail at
// its first save, or at its end when it exports, should fail at once instead), and whole files
// written so that a failure is an error and never half a file. AtomicFile is the one place that
// renames a file into place (tools/checks/one_rename.sh).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tessel {

// Creates `dir` (with its parents) and writes, flushes and removes a small probe file in it.
// Throws tessel::Error naming the flag, the folder and the system's reason otherwise. `tag`
// keeps the probes of several processes writing into one folder apart (the rank).
void require_writable_dir(const std::string& flag, const std::string& dir, int tag = 0);

// What a committed file survives. Every commit is atomic against a crash of the process (a reader
// sees the old file or the new one); only a durable one also survives a power loss, at the cost
// of an fsync of the file and of its folder.
enum class Durability {
  kDurable,      // checkpoints, exported weights, data sets and caches a later run trusts
  kReplaceable,  // files made again by rerunning what wrote them (logs, plots, traces)
};

// A file written under a temporary name next to `path` and renamed over it by commit():
// PATH.tmp.HOST.PID.N, N counting this process's files, so that ranks of several nodes writing
// one path on a shared file system never write into each other's temporaries. The temporary is
// created exclusively and never through a link. Dropped without commit() (an error on the way),
// the temporary is removed and `path` is untouched. Every error throws tessel::Error naming the
// file and the system's reason.
class AtomicFile {
 public:
  AtomicFile(std::string path, Durability durability);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends bytes; small writes are gathered into one buffer, large ones go straight to the file.
  void write(const void* data, size_t size);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Writes what is buffered now, so that a full disk is found before another file is committed.
  void flush();
  // Writes what is buffered, fsyncs when durable, closes, renames over `path`, and fsyncs the
  // folder when durable. Called once; the file can take no more writes after it.
  void commit();

  const std::string& temp_path() const { return temp_; }

 private:
  void write_through(const char* data, size_t size);

  std::string path_;
  std::string temp_;
  Durability durability_;
  int fd_ = -1;
  std::string buffer_;
  bool committed_ = false;
};

// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view bytes, Durability durability);

}  // namespace tessel
