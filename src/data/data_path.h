#pragma once
// Where a task's data file is read from. A relative path (task.lano.grammar, task.capo.fields, task.text.path) is
// taken from the working directory when it exists there, else from the canonlab checkout the binary was built from
// (which ships data/physicslm4/), so the configs in configs/ work from any directory.
#include <filesystem>
#include <string>

namespace canonlab {

inline std::string resolve_data_path(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;  // an unreadable or over-long path is reported by whoever opens it, with its key
  if (path.empty() || p.is_absolute() || fs::exists(p, ec)) return path;
#ifdef CANONLAB_DATA_ROOT
  const fs::path shipped = fs::path(CANONLAB_DATA_ROOT) / p;
  if (fs::exists(shipped, ec)) return shipped.string();
#endif
  return path;
}

}  // namespace canonlab
