// One writer per output folder. Two runs writing one --save folder at once mix their files (a
// save's metadata from one, a rank file from the other, under a tracker that names it); two
// exports into one --out mix one model's config with the other's weights. So a command holds
// DIR/.tessel-save.lock for as long as it may write there: an flock(2) lock, taken (in a job) by
// the one rank that writes the folder's metadata and tracker (the others learn the verdict
// through check_together). The kernel releases the lock however its holder ends, so the file a
// killed run leaves is stale and the next run takes it over; what the file says (host, pid,
// start) only names the holder in the message that refuses a second run.
//
// The lock guards one folder, not a path: it holds the folder open, and check() (before each
// save) stops a run whose folder was deleted or replaced under it, rather than letting it make
// the folder again, unlocked, for a second run to write into too.
#pragma once

#include <string>

namespace tessel {

class SaveLock {
 public:
  // Takes the lock of `dir` (an existing folder) for the command's `flag` (--save, --out), or
  // throws tessel::Error naming the folder and the run that holds it. A lock file that is a link
  // or not a plain file is refused, never opened through.
  explicit SaveLock(const std::string& dir, const std::string& flag = "--save");
  ~SaveLock();  // releases it
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;

  // Throws tessel::Error unless `dir` still names the folder locked and its lock file is still
  // the one this run holds.
  void check() const;

  // The run a stale lock file named ("pid 123 on host h since ..."), or "" when none was left.
  const std::string& stale_holder() const { return stale_holder_; }
  // How many files of killed writes (temporary files, write probes) the lock's taker removed.
  int removed_leftovers() const { return removed_leftovers_; }

 private:
  std::string dir_, flag_, path_;
  int dir_fd_ = -1;  // the folder locked, whatever its path names later
  int fd_ = -1;
  std::string stale_holder_;
  int removed_leftovers_ = 0;
};

}  // namespace tessel
