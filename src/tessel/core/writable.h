// Writing files: folders a run writes into, checked before it starts (a run that can only fail at
// its first save, or at its end when it exports, should fail at once instead), and whole files
// written so that a failure is an error and never half a file.
#pragma once

#include <string>

namespace tessel {

// Creates `dir` (with its parents) and writes, flushes and removes a small probe file in it.
// Throws tessel::Error naming the flag, the folder and the system's reason otherwise. `tag`
// keeps the probes of several processes writing into one folder apart (the rank).
void require_writable_dir(const std::string& flag, const std::string& dir, int tag = 0);

// Writes `bytes` to `path` under a temporary name unique to this process and host, then renames
// it: a reader never sees half a file, and ranks of several nodes that write the same cache file
// on a shared file system never write into each other's. A failed write (a full disk) removes the
// temporary file and throws tessel::Error naming it and the system's reason; `path` is untouched.
void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace tessel
