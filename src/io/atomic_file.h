#pragma once
// File primitives for checkpoints: crash-safe whole-file writes and bounded reads.
//
// A checkpoint that is being overwritten must never be left half-written: a run killed mid-save (OOM, a
// pre-empted job, Ctrl-C) would otherwise destroy the only copy it could resume from. So a write goes to
// `<path>.tmp.<pid>.<start>` in the same directory (rename is atomic only within one filesystem), is fsync'ed, renamed
// over the target and the directory is fsync'ed so the rename itself survives a power cut. A reader of `path`
// therefore sees either the complete old file or the complete new one.
//
// Limits: one writer per target path at a time. A temp file left by a killed writer never affects `path`; it is
// removed by remove_stale_temp_files (called when a run starts). <start> is when the writing process started
// (field 22 of /proc/<pid>/stat): with the pid it names one process, even after the pid is reused.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace canonlab {

struct AtomicWriteOptions {
  // Test hook: called after every chunk handed to the OS, with the number of bytes written so far. Tests
  // kill the process from here to simulate a crash mid-write; production code leaves it empty.
  std::function<void(uint64_t bytes_written)> after_write;
};

// Streams a file to `<path>.tmp.<pid>.<start>` and publishes it with commit(). If the writer is destroyed without a
// successful commit() (an exception while producing the data, an I/O error), the temp file is removed and
// `path` is untouched. Every failure throws canonlab::Error naming the path and the errno text.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path, AtomicWriteOptions options = {});
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(std::span<const std::byte> bytes);
  // fsync, rename over the target, fsync the directory. The writer is finished afterwards.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  uint64_t bytes_written() const { return written_; }

 private:
  [[noreturn]] void fail(const std::string& step, int err);
  void discard() noexcept;

  std::string path_;
  std::string temp_path_;
  AtomicWriteOptions options_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool done_ = false;  // committed or failed: nothing left to clean up
};

// Writes `bytes` to `path` atomically (see above).
void write_file_atomic(const std::string& path, std::span<const std::byte> bytes,
                       const AtomicWriteOptions& options = {});
// The same for text (resolved configs, summaries, latest.json).
inline void write_text_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, std::as_bytes(std::span(text.data(), text.size())));
}

// A directory written whole or not at all (import-hf's run directory): built under the sibling name
// `<path>.tmp.<pid>.<start>` (temp_path()), published by commit(), which renames it to `path` (absent, or an empty
// directory) and fsyncs the parent. Destroyed without a successful commit(), the sibling is removed with everything in
// it. A sibling left by a process that was killed (kill -9, power cut) is recognised by its name, as the temp files
// below, and removed when the next StagingDirectory for the same `path` is created; one of a live process is kept.
class StagingDirectory {
 public:
  // `what` ("--out: run directory") names the directory in errors.
  StagingDirectory(std::string path, std::string what);
  ~StagingDirectory();
  StagingDirectory(const StagingDirectory&) = delete;
  StagingDirectory& operator=(const StagingDirectory&) = delete;

  const std::string& temp_path() const { return temp_path_; }
  void commit();

 private:
  std::string path_, what_, temp_path_;
  bool committed_ = false;
};

// Removes the `<name>.tmp.<pid>.<start>` files in dir (not recursively) whose writer process no longer exists: what
// a writer killed mid-write leaves behind. A writer is gone when no process has its pid, or when the process that
// has it now started at another time than <start> (pids are reused). Files of live writers are kept, so this is safe
// while another process writes there (a sweep writing a run's status.json). `<name>.tmp.<pid>` files, of canonlab
// before the start time was added, go only when no process has that pid. Returns how many were removed.
int remove_stale_temp_files(const std::string& dir);

// The whole content of a file. Throws canonlab::Error naming the path and the errno text.
std::vector<std::byte> read_file(const std::string& path);

// The whole content of a text file a user handed us (a config, a grammar, a word list): a regular file (never a
// device such as /dev/zero, a pipe or a directory) of at most max_bytes. `what` names it in every error:
// "cannot read config file 'x.yaml': No such file or directory".
std::string read_text_file(const std::string& path, uint64_t max_bytes, const std::string& what);

// The whole content of a text file, or nothing when there is no file of that name (status and summary files of
// runs that have not written them yet). Anything else in its place (a directory, a device) and a file that cannot be
// read are errors, as for read_text_file; `what` ("run status") names the file in them.
std::optional<std::string> read_text_if_exists(const std::string& path, const std::string& what = "");

// A file opened for sequential reading whose size is known before anything is read, so a parser can check
// sizes stored inside the file against the real file size before allocating for them.
class InputFile {
 public:
  // `what` ("config file", "checkpoint") names the file in errors; empty: just its path.
  explicit InputFile(std::string path, const std::string& what = "");
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Fills `out` from the current position; throws if the file ends first (e.g. truncated while reading).
  void read_exact(std::span<std::byte> out);
  // Moves the position to `offset` bytes from the start (at most size()), for a reader that has checked a stored
  // offset against size() and reads only what it needs.
  void seek(uint64_t offset);

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace canonlab
