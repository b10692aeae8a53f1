#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "engine/error.h"
#include "io/paths.h"
#include "io/strict_number.h"

namespace canonlab {
namespace {

// Large single write() calls are legal but Linux caps them at ~2 GiB and the test hook needs a granularity
// finer than "the whole tensor"; 1 MiB keeps the syscall overhead negligible.
constexpr size_t kWriteChunk = size_t(1) << 20;

std::string errno_text(int err) { return std::strerror(err); }

std::string directory_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// When process `pid` started, in clock ticks since boot (field 22 of /proc/PID/stat); nothing when that cannot be
// read (no such process, no /proc). A pid and this time name one process: pids are reused, start times are not.
std::optional<uint64_t> process_start_time(long pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];  // the line is a few hundred bytes; the command name in it at most 64
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  // Field 2, the command name, is in parentheses and may hold spaces and ')' itself: count from the last ')'.
  const std::string_view stat(buf, size_t(n));
  size_t at = stat.rfind(')');
  if (at == std::string_view::npos) return std::nullopt;
  for (int field = 2; field < 22; field++) {
    at = stat.find(' ', at + 1);
    if (at == std::string_view::npos) return std::nullopt;
  }
  const std::string_view rest = stat.substr(at + 1);
  return parse_integer<uint64_t>(rest.substr(0, rest.find(' ')));
}

// What follows ".tmp." in this process's temp files: "<pid>.<start time>", or "<pid>" without /proc.
std::string temp_owner() {
  const long pid = ::getpid();
  const std::optional<uint64_t> start = process_start_time(pid);
  return std::to_string(pid) + (start ? "." + std::to_string(*start) : "");
}

// Whether the writer of a temp file named with `pid` and `start` is gone. The pid alone cannot tell once another
// process holds it again (after a kill and a quick restart it may well: a sweep's next child), and such a file was
// kept forever; with the start time, a live process of that pid that started at another time is not the writer.
bool writer_is_gone(long pid, std::optional<uint64_t> start) {
  if (start) {
    if (const std::optional<uint64_t> now = process_start_time(pid)) return *now != *start;
  }
  // No start time to compare (a file of an earlier canonlab, or /proc/PID hidden from us): kill(pid, 0) probes
  // without signalling, and only ESRCH (no such process) says the writer is gone.
  return ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
}

// Whether `owner`, what follows ".tmp." in a temp name, names a writer that is gone: "<pid>.<start time>" (or "<pid>"
// alone, from an earlier canonlab). Anything else is not an atomic write's, and is left alone.
bool owner_is_gone(std::string_view owner) {
  const size_t dot = owner.find('.');
  const std::optional<long> pid = parse_integer<long>(owner.substr(0, dot));
  const std::optional<uint64_t> start =
      dot == std::string_view::npos ? std::nullopt : parse_integer<uint64_t>(owner.substr(dot + 1));
  return pid && *pid > 0 && (dot == std::string_view::npos || start) && writer_is_gone(*pid, start);
}

// fsync of a directory, so that a rename in it survives a power cut: which step failed (none, open, fsync) and its
// errno. Some filesystems (certain FUSE and network mounts) cannot fsync directories at all (EINVAL, ENOTSUP); there
// is no stronger guarantee to be had there, so that is a success.
struct DirectorySync {
  enum Step { none, open, fsync } failed = none;
  int err = 0;
};
DirectorySync fsync_directory(const std::string& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return {DirectorySync::open, errno};
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL && err != ENOTSUP) return {DirectorySync::fsync, err};
  return {};
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path, AtomicWriteOptions options)
    : path_(std::move(path)), options_(std::move(options)) {
  CANONLAB_CHECK(!path_.empty(), "cannot write a file with an empty path");
  temp_path_ = path_ + ".tmp." + temp_owner();
  // No O_EXCL: a temp file of this name can only be left by an earlier writer of this process that failed to remove
  // it, so truncating it is safe and the write must not fail because of it.
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    int err = errno;
    done_ = true;  // nothing was created, nothing to remove
    throw Error("cannot write '" + path_ + "': cannot create temporary file '" + temp_path_ + "': " + errno_text(err));
  }
}

AtomicFileWriter::~AtomicFileWriter() { discard(); }

void AtomicFileWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!done_) ::unlink(temp_path_.c_str());
  done_ = true;
}

void AtomicFileWriter::fail(const std::string& step, int err) {
  discard();
  throw Error("cannot write '" + path_ + "': " + step + ": " + errno_text(err));
}

void AtomicFileWriter::write(std::span<const std::byte> bytes) {
  CANONLAB_CHECK(fd_ >= 0 && !done_, "cannot write '" + path_ + "': the writer is already finished");
  while (!bytes.empty()) {
    size_t n = std::min(bytes.size(), kWriteChunk);
    ssize_t r = ::write(fd_, bytes.data(), n);
    if (r < 0) {
      if (errno == EINTR) continue;
      fail("write to '" + temp_path_ + "' failed", errno);
    }
    // A short write (e.g. interrupted by a signal) is not an error; continue with the rest.
    bytes = bytes.subspan(size_t(r));
    written_ += uint64_t(r);
    if (options_.after_write) options_.after_write(written_);
  }
}

void AtomicFileWriter::commit() {
  CANONLAB_CHECK(fd_ >= 0 && !done_, "cannot write '" + path_ + "': the writer is already finished");
  // The data must be on disk before the rename makes it visible, otherwise a crash right after the rename
  // can leave a correctly named file with missing blocks.
  if (::fsync(fd_) != 0) fail("fsync of '" + temp_path_ + "' failed", errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close of '" + temp_path_ + "' failed", errno);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) fail("rename from '" + temp_path_ + "' failed", errno);
  done_ = true;  // the temp name no longer exists

  // Persist the directory entry: without this the rename may be lost on power failure, leaving the old file.
  const std::string dir = directory_of(path_);
  const DirectorySync sync = fsync_directory(dir);
  if (sync.failed == DirectorySync::open)
    throw Error("cannot write '" + path_ + "': cannot open directory '" + dir + "' to fsync it: " + errno_text(sync.err));
  if (sync.failed == DirectorySync::fsync)
    throw Error("cannot write '" + path_ + "': fsync of directory '" + dir + "' failed: " + errno_text(sync.err));
}

StagingDirectory::StagingDirectory(std::string path, std::string what) : path_(std::move(path)), what_(std::move(what)) {
  namespace fs = std::filesystem;
  CANONLAB_CHECK(!path_.empty(), what_ + ": empty path");
  fs::path target = fs::path(path_).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "out/" names "out"
  CANONLAB_CHECK(!target.empty() && target.filename() != "." && target.filename() != "..",
                 what_ + " '" + path_ + "': not a name a new directory can have");
  path_ = target.string();
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = target.filename().string() + ".tmp.";
  // What a killed earlier attempt left: <name>.tmp.<pid>.<start> whose process is gone.
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    if (!owner_is_gone(std::string_view(name).substr(prefix.size()))) continue;
    std::error_code remove_ec;
    fs::remove_all(it->path(), remove_ec);
    if (remove_ec)
      throw Error(what_ + " '" + path_ + "': cannot remove '" + it->path().string() +
                  "', what an interrupted earlier attempt left: " + remove_ec.message() + "; remove it by hand");
  }
  temp_path_ = (parent / (prefix + temp_owner())).string();
  fs::remove_all(temp_path_, ec);  // only this process can have left one of this name
  if (!fs::create_directories(temp_path_, ec) || ec)
    throw Error(what_ + " '" + path_ + "': cannot create the temporary directory '" + temp_path_ + "': " +
                (ec ? ec.message() : std::string("it already exists")));
}

StagingDirectory::~StagingDirectory() {
  if (committed_) return;
  std::error_code ignored;
  std::filesystem::remove_all(temp_path_, ignored);
}

void StagingDirectory::commit() {
  CANONLAB_CHECK(!committed_, what_ + " '" + path_ + "': already published");
  // rename() replaces an empty directory and refuses a non-empty one (ENOTEMPTY/EEXIST): a concurrent writer wins.
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    throw Error(what_ + " '" + path_ + "': cannot move the finished directory '" + temp_path_ + "' into place: " +
                (err == ENOTEMPTY || err == EEXIST ? std::string("it exists and is not empty now") : errno_text(err)));
  }
  committed_ = true;
  fsync_directory(directory_of(path_));  // best effort: the directory is in place whole either way
}

void write_file_atomic(const std::string& path, std::span<const std::byte> bytes, const AtomicWriteOptions& options) {
  AtomicFileWriter writer(path, options);
  writer.write(bytes);
  writer.commit();
}

InputFile::InputFile(std::string path, const std::string& what) : path_(std::move(path)) {
  const std::string cannot = "cannot read " + (what.empty() ? "" : what + " ") + "'" + printable_path(path_) + "': ";
  // open() would stop at a NUL and read another file.
  if (path_.find('\0') != std::string::npos) throw Error(cannot + path_status(path_).problem);
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before the type check below.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw Error(cannot + errno_text(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    throw Error(cannot + "fstat failed: " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(cannot + (S_ISDIR(st.st_mode) ? "it is a directory" : "not a regular file (a device, pipe or socket)") +
                "; allowed: a regular file");
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = uint64_t(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_exact(std::span<std::byte> out) {
  while (!out.empty()) {
    ssize_t r = ::read(fd_, out.data(), std::min(out.size(), kWriteChunk));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot read '" + path_ + "': " + errno_text(errno));
    }
    if (r == 0) throw Error("cannot read '" + path_ + "': unexpected end of file (was it truncated while being read?)");
    out = out.subspan(size_t(r));
  }
}

void InputFile::seek(uint64_t offset) {
  if (offset > size_ || ::lseek(fd_, off_t(offset), SEEK_SET) != off_t(offset))
    throw Error("cannot read '" + path_ + "': cannot move to byte " + std::to_string(offset) + " of " +
                std::to_string(size_) + (offset > size_ ? "" : ": " + errno_text(errno)));
}

std::vector<std::byte> read_file(const std::string& path) {
  InputFile file(path);
  std::vector<std::byte> bytes(file.size());
  file.read_exact(bytes);
  return bytes;
}

int remove_stale_temp_files(const std::string& dir) {
  namespace fs = std::filesystem;
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t tmp = name.rfind(".tmp.");
    if (tmp == std::string::npos || tmp == 0) continue;
    if (!owner_is_gone(std::string_view(name).substr(tmp + 5))) continue;
    std::error_code remove_ec;
    if (fs::remove(it->path(), remove_ec)) removed++;
  }
  return removed;
}

std::string read_text_file(const std::string& path, uint64_t max_bytes, const std::string& what) {
  InputFile file(path, what);
  if (file.size() > max_bytes)
    throw Error(what + " '" + path + "' is " + std::to_string(file.size()) + " bytes; allowed: at most " +
                std::to_string(max_bytes) + " bytes");
  std::string text(file.size(), '\0');
  file.read_exact(std::as_writable_bytes(std::span(text)));
  return text;
}

std::optional<std::string> read_text_if_exists(const std::string& path, const std::string& what) {
  // Only "nothing there" means "not written yet". An ifstream also opens a directory, and reading it then threw
  // std::ios_base::failure ("basic_filebuf::underflow ... Is a directory") without naming the file.
  const PathStatus status = path_status(path);
  if (status.examined() && !status.exists()) return std::nullopt;
  return read_text_file(path, std::numeric_limits<uint64_t>::max(), what);
}

}  // namespace canonlab
