#pragma once
// The search the run-time loaders of cuBLASLt (cublaslt_loader.cpp) and cuDNN (ops/attention/cudnn.cpp) share: one
// shared library tried in directory after directory, each at most once, with an account of where it looked for the
// error message; and where Python environments keep NVIDIA's library wheels (nvidia-cublas, nvidia-cudnn, ...).
#include <glob.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace canonlab::cuda {

// The existing paths <prefix>/lib/python3*/{site,dist}-packages/<pattern> (pattern may hold wildcards) for the
// prefixes $VIRTUAL_ENV, $CONDA_PREFIX, $HOME/.local, /usr/local and /usr, in that order.
inline std::vector<std::string> python_package_paths(const std::string& pattern, bool directories_only) {
  std::vector<std::string> prefixes;
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* v = std::getenv(var); v && *v) prefixes.push_back(v);
  if (const char* home = std::getenv("HOME"); home && *home) prefixes.push_back(std::string(home) + "/.local");
  prefixes.push_back("/usr/local");
  prefixes.push_back("/usr");
  std::vector<std::string> paths;
  for (const std::string& prefix : prefixes)
    for (const char* packages : {"site-packages", "dist-packages"}) {
      const std::string full = prefix + "/lib/python3*/" + packages + "/" + pattern;
      glob_t g{};
      if (glob(full.c_str(), directories_only ? GLOB_ONLYDIR : 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) paths.push_back(g.gl_pathv[i]);
      globfree(&g);
    }
  return paths;
}

class LibrarySearch {
 public:
  // open(file, why): loads the library at `file` (a path, or a bare soname for the loader's own search); on failure
  // says why in `why` and leaves nothing open.
  using Open = std::function<bool(const std::string& file, std::string& why)>;
  LibrarySearch(std::string soname, Open open) : soname_(std::move(soname)), open_(std::move(open)) {}

  // Looks for the library in `dir`. An empty `dir` is a place that does not apply (an unset variable): `label`
  // then says which, for the account. A directory already tried ($CUDA_HOME is often /usr/local/cuda) is skipped.
  bool try_dir(const std::string& label, const std::string& dir) {
    if (dir.empty()) {
      note(label);
      return false;
    }
    if (!tried_.insert(std::filesystem::path(dir).lexically_normal().string()).second) return false;
    const std::string file = (std::filesystem::path(dir) / soname_).string();
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) {
      note(label + dir + " (not there)");
      return false;
    }
    std::string why;
    if (open_(file, why)) return true;
    note(label + file + " (" + why + ")");
    return false;
  }

  // The loader's own search by soname (LD_LIBRARY_PATH, ld.so.cache).
  bool try_loader_path() {
    std::string why;
    if (open_(soname_, why)) return true;
    note("the loader's path (LD_LIBRARY_PATH, ld.so.cache): " + why);
    return false;
  }

  void note(const std::string& line) { searched_ += "\n  " + line; }
  // One line per place looked at, each starting with a newline and an indent.
  const std::string& searched() const { return searched_; }

 private:
  std::string soname_;
  Open open_;
  std::set<std::string> tried_;
  std::string searched_;
};

}  // namespace canonlab::cuda
