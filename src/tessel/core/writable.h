// Folders a run writes into, checked before it starts: a run that can only fail at its first
// save, or at its end when it exports, should fail at once instead.
#pragma once

#include <string>

namespace tessel {

// Creates `dir` (with its parents) and writes, flushes and removes a small probe file in it.
// Throws tessel::Error naming the flag, the folder and the system's reason otherwise. `tag`
// keeps the probes of several processes writing into one folder apart (the rank).
void require_writable_dir(const std::string& flag, const std::string& dir, int tag = 0);

}  // namespace tessel
