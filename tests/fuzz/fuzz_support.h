#pragma once
// What the fuzz targets share: the input as text, the one way a target reports a broken invariant (abort, which
// libFuzzer records as a crash with the input that caused it) and a scratch copy of configs/ to write into.
//
// The contract every target checks: canonlab::Error is the clean way to reject an input, so targets catch it
// and nothing else. Any other exception escapes LLVMFuzzerTestOneInput, std::terminate prints its type and
// what() and aborts: a finding, like a sanitizer report, a timeout or running out of memory.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace canonlab::fuzz {

inline std::string as_text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Prints what went wrong and aborts; the input is the reproducer.
[[noreturn]] inline void fail(std::string_view what) {
  std::fprintf(stderr, "\ncanonlab fuzz: invariant violated: %.*s\n", int(what.size()), what.data());
  std::abort();
}

inline void expect(bool ok, std::string_view what) {
  if (!ok) fail(what);
}

// A fresh directory under $TMPDIR (default /tmp) holding a copy of the checkout's configs/, removed at exit: where
// the sweep target writes the sweep file it loads, so that `base: ../E1-Bk0.yaml` resolves as in the shipped
// sweep files and nothing lands in the checkout. Built once per process by workspace(). It is not made the
// working directory: libFuzzer resolves its own relative paths (inputs, corpora, the default artifact prefix
// "./") against the working directory, and a crash must not leave its reproducer in a directory that is about
// to be deleted. Relative paths in fuzzed configs resolve against the working directory, which
// scripts/fuzz.sh makes a scratch copy of configs/ too.
class Workspace {
 public:
  Workspace() {
    namespace fs = std::filesystem;
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/canonlab-fuzz-XXXXXX";
    if (!mkdtemp(pattern.data())) fail("cannot create a scratch directory from " + pattern);
    root_ = pattern;
    fs::copy(fs::path(CANONLAB_SOURCE_DIR) / "configs", configs(), fs::copy_options::recursive);
  }
  ~Workspace() {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path configs() const { return root_ / "configs"; }

 private:
  std::filesystem::path root_;
};

inline const Workspace& workspace() {
  static const Workspace instance;  // one per fuzzing process; the entry points are free functions
  return instance;
}

}  // namespace canonlab::fuzz
