// Writing files: folders a run writes into, checked before it starts (a run that can only fail at
// its first save, or at its end when it exports, should fail at once instead), and whole files
// written so that a failure is an error and never half a file. AtomicFile is the one place that
// renames a file into place (tools/checks/one_rename.sh).
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessel {

// Creates `dir` (with its parents) and writes, flushes and removes a small probe file in it,
// created exclusively and never through a link. Throws tessel::Error naming the flag, the folder
// and the system's reason otherwise. `tag` keeps the probes of several processes writing into one
// folder apart (the rank).
void require_writable_dir(const std::string& flag, const std::string& dir, int tag = 0);

// A file a run writes (through AtomicFile) only late, at a save or at its end, checked before it
// starts: its folder there and writable (probed, not made), and `path`, where it exists, a file
// that rename can replace: not a folder, and in a sticky folder (/tmp) one this user owns.
void require_writable_file(const std::string& flag, const std::string& path, int tag = 0);

// A folder a command writes whole (an export) must not be, or hold, a folder it reads from: the
// writes would replace the files still to be read (a tokenizer, weights), leaving both half
// done. Throws tessel::Error naming both flags unless every source (flag and path, a file or a
// folder; an empty path is none) is read from outside `dir`.
void require_apart_from_sources(const std::string& flag, const std::string& dir,
                                const std::vector<std::pair<std::string, std::string>>& sources);

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
// created exclusively and never through a link, and both it and the rename are relative to the
// folder held open from the start, so a folder swapped for a link meanwhile is not written
// through. Dropped without commit() (an error on the way),
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
  std::string name_, temp_name_;  // in the folder
  Durability durability_;
  int dir_fd_ = -1;
  int fd_ = -1;
  std::string buffer_;
  bool committed_ = false;
};

// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view bytes, Durability durability);

// A file a run grows as it goes (a log, an event file): `initial` put in place through an
// AtomicFile, so that a link planted at `path` is replaced and never written through, then opened
// to append to, again never through a link (one planted meanwhile is an error), and locked while
// open: a file another process grows is refused, not replaced under it. Throws tessel::Error
// naming the file and the reason.
std::FILE* open_growing_file(const std::string& path, std::string_view initial);

}  // namespace tessel
