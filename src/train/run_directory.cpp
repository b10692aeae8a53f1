#include "train/run_directory.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>

#include "engine/error.h"

namespace canonlab {

namespace fs = std::filesystem;

namespace {

// Whether there is anything at `path`; when that cannot be told (a permission error), there may be, which keeps the
// check on the safe side.
bool present(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(path, ec);
  return ec ? ec != std::errc::no_such_file_or_directory : fs::exists(status);
}

// metrics.jsonl holds a record from its first line on, metrics.csv from the line after its header.
bool holds_records(const fs::path& path, bool after_header) {
  if (!present(path)) return false;
  std::ifstream in(path, std::ios::binary);
  if (!in) return true;  // there, but unreadable: it may hold records
  std::string header;
  if (after_header && !std::getline(in, header)) return false;
  return in.peek() != std::ifstream::traits_type::eof();
}

// Whether a directory holds anything but `ignored` names. An error reading it counts as holding something.
bool holds_entries(const fs::path& path, std::initializer_list<const char*> ignored = {}) {
  if (!present(path)) return false;
  std::error_code ec;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (std::ranges::none_of(ignored, [&](const char* i) { return name == i; })) return true;
  }
  return bool(ec);
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::vector<std::string> earlier_run_results(const std::string& run_dir) {
  const fs::path dir(run_dir);
  std::vector<std::string> found;
  if (present(dir / "summary.json")) found.push_back("summary.json");
  if (holds_records(dir / "metrics.jsonl", false)) found.push_back("metrics.jsonl");
  if (holds_records(dir / "metrics.csv", true)) found.push_back("metrics.csv");
  // The step-0 files alone are what a kill during the first save leaves (latest.json comes last): the initial
  // weights, a function of the config, and no result.
  if (holds_entries(dir / "checkpoints", {"step_00000000.model.safetensors", "step_00000000.state.safetensors"}))
    found.push_back("checkpoints/");
  if (holds_entries(dir / "probe")) found.push_back("probe/");
  return found;
}

fs::path unused_superseded_directory(const fs::path& parent) {
  const std::string now = std::to_string(std::time(nullptr));
  fs::path candidate = parent / now;
  for (int n = 1; present(candidate); n++) candidate = parent / (now + "-" + std::to_string(n));
  return candidate;
}

void claim_run_directory(const std::string& run_dir, bool resume, bool force) {
  CANONLAB_CHECK(!(resume && force), "--resume continues the run in '" + run_dir +
                                         "' and --force starts a new one there (moving the earlier run aside); pass "
                                         "one of them");
  if (resume) return;
  const std::vector<std::string> results = earlier_run_results(run_dir);
  if (results.empty()) return;
  const fs::path dir(run_dir);
  if (!force) {
    const bool resumable = present(dir / "checkpoints" / "latest.json");
    throw Error("'" + run_dir + "' already holds a run (" + joined(results) +
                "); a new run there would replace it, so nothing was changed. " +
                (resumable ? "Continue it with --resume, choose another --out,"
                           : "It has no checkpoint to continue from: choose another --out,") +
                " or pass --force to move its files to '" + (dir / "superseded").string() + "/<time>/' and train afresh");
  }
  const fs::path aside = unused_superseded_directory(dir / "superseded");
  std::error_code ec;
  fs::create_directories(aside, ec);
  if (ec) throw Error("--force: cannot create '" + aside.string() + "' to move the earlier run to: " + ec.message());
  // Everything `canonlab train` writes there, so that the directory reads as a new run and the old one stays whole.
  std::vector<std::string> moved;
  for (const char* name :
       {"summary.json", "metrics.jsonl", "metrics.csv", "config.resolved.yaml", "checkpoints", "probe", "tb"}) {
    if (!present(dir / name)) continue;
    fs::rename(dir / name, aside / name, ec);
    if (ec)
      throw Error("--force: cannot move '" + (dir / name).string() + "' to '" + (aside / name).string() +
                  "': " + ec.message() + (moved.empty() ? "" : " (moved already: " + joined(moved) + ")"));
    moved.push_back(name);
  }
  std::fprintf(stderr, "--force: moved the earlier run's %s from '%s' to '%s'\n", joined(moved).c_str(),
               run_dir.c_str(), aside.string().c_str());
}

}  // namespace canonlab
