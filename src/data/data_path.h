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
  if (path.empty() || p.is_absolute() || fs::exists(p)) return path;
#ifdef CANONLAB_DATA_ROOT
  const fs::path shipped = fs::path(CANONLAB_DATA_ROOT) / p;
  if (fs::exists(shipped)) return shipped.string();
#endif
  return path;
}

}  // namespace canonlab
