// One writer per --save folder. Two runs writing one folder at once mix their files (a save's
// metadata from one, a rank file from the other, under a tracker that names it), so a run holds
// DIR/.tessel-save.lock for as long as it may save: an flock(2) lock, taken by the one rank
// that writes the folder's metadata and tracker (the others learn the verdict through
// check_together). The kernel releases the lock however its holder ends, so the file a killed run
// leaves is stale and the next run takes it over; what the file says (host, pid, start) only names
// the holder in the message that refuses a second run.
#pragma once

#include <string>

namespace tessel {

class SaveLock {
 public:
  // Takes the lock of `dir` (an existing folder), or throws tessel::Error naming the folder and
  // the run that holds it.
  explicit SaveLock(const std::string& dir);
  ~SaveLock();  // releases it
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;

  // The run a stale lock file named ("pid 123 on host h since ..."), or "" when none was left.
  const std::string& stale_holder() const { return stale_holder_; }
  // How many files of killed saves (temporary files, write probes) the lock's taker removed.
  int removed_leftovers() const { return removed_leftovers_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::string stale_holder_;
  int removed_leftovers_ = 0;
};

}  // namespace tessel
