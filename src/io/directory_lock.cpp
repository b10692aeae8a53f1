#include "io/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/error.h"

namespace canonlab {

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& lock_name, const std::string& what_runs_there) {
  const std::string path = dir + "/" + lock_name;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot create lock file '" + path + "': " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    const std::string pid = n > 0 ? std::string(holder, size_t(n)) : std::string("?");
    throw Error("another " + what_runs_there + " is already running in '" + dir + "' (pid " +
                pid.substr(0, pid.find('\n')) + "); wait for it or stop it first");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    // The pid is only for the message of a second process; the lock itself holds without it.
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace canonlab
