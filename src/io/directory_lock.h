#pragma once
// One canonlab process per directory at a time: a second `canonlab sweep` on a sweep directory would start every
// run twice, and a second `canonlab train` on a run directory would interleave two runs' metrics and checkpoints.
// The lock is an flock(2) on DIR/<lock_name>, so it disappears with the process however it ends (kill -9
// included); the file holds the owner's pid for the message a second process gets.
#include <string>

namespace canonlab {

class DirectoryLock {
 public:
  // Takes the lock or throws canonlab::Error naming the directory, the holder's pid and `what_runs_there`
  // ("canonlab sweep", "canonlab train").
  DirectoryLock(const std::string& dir, const std::string& lock_name, const std::string& what_runs_there);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace canonlab
