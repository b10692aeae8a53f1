// Fuzz target: sweep file text -> canonlab::load_sweep_spec, then expand_sweep with 1 thread per run
// (src/sweep/sweep_spec.h), as `canonlab sweep` does before it trains anything. The text is written to
// configs/sweeps/fuzz.yaml inside the process's scratch copy of configs/ (fuzz_support.h), so `base:` resolves as
// in the shipped sweep files (`base: ../E1-Bk0.yaml`) and the grid's configs are really loaded and validated.
//
// Contract: canonlab::Error is the only way to reject an input. Grids of more than kMaxExpandedRuns runs are
// parsed but not expanded, only so that one input stays well under the time limit (expand_sweep loads every run's
// config; its own limit is 100000 runs). An expanded grid has one run per grid point, with distinct names that
// are safe as directory names.
#include <fstream>
#include <set>

#include "engine/error.h"
#include "fuzz_support.h"
#include "sweep/sweep_spec.h"

namespace {

constexpr size_t kMaxExpandedRuns = 32;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  canonlab::fuzz::workspace();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace canonlab;
  static const std::string path = (fuzz::workspace().configs() / "sweeps" / "fuzz.yaml").string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
    if (!out) fuzz::fail("cannot write " + path);
  }
  try {
    const SweepSpec spec = load_sweep_spec(path);
    size_t grid = 1;
    for (const SweepAxis& axis : spec.axes) {
      fuzz::expect(!axis.labels.empty() && axis.labels.size() == axis.yaml_values.size(),
                   "axis '" + axis.name + "' has a different number of labels and values");
      grid *= axis.labels.size();
      if (grid > kMaxExpandedRuns) return 0;
    }
    const std::vector<SweepRun> runs = expand_sweep(spec, 1);
    fuzz::expect(runs.size() == grid, "expand_sweep returned " + std::to_string(runs.size()) + " runs for a grid of " +
                                          std::to_string(grid));
    std::set<std::string> names;
    for (const SweepRun& run : runs) {
      fuzz::expect(names.insert(run.name).second, "two runs are named '" + run.name + "'");
      fuzz::expect(run.name.find_first_of(std::string("/\0", 2)) == std::string::npos,
                   "run name '" + run.name + "' is not safe as a directory name");
      fuzz::expect(run.config.train.threads == 1, "run '" + run.name + "' does not have train.threads = 1");
    }
  } catch (const Error&) {
  }
  return 0;
}
