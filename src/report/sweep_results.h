#pragma once
// A sweep directory read into memory for reporting: its axes, and per run the axis labels, state, final
// metrics by name, learning curves and per-head IPMR matrices. The format is written by `canonlab sweep`:
// SWEEP_DIR/sweep.json lists axes and runs; each run directory holds status.json (missing = pending),
// summary.json (when done) and metrics.jsonl. A run's probe/probe.json, when present, supplies its IPMR.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace canonlab::report {

struct Axis {
  std::string name;
  std::vector<std::string> keys;    // config keys the axis sets (e.g. train.seed)
  std::vector<std::string> labels;  // values in sweep order
};

enum class RunState { done, failed, running, pending };
std::string to_string(RunState s);

// A curve as (step, value) points in step order.
struct Curve {
  std::vector<double> steps, values;
};

struct IpmrMatrix {
  int layers = 0, heads = 0;
  std::vector<double> rates;  // row-major layers x heads
};

struct RunResult {
  std::string name, dir;                     // dir is relative to the sweep directory
  std::map<std::string, std::string> axes;   // axis name -> label
  RunState state = RunState::pending;
  std::string error;                         // why it failed (status.json, or what could not be read)
  std::map<std::string, double> metrics;     // final metrics by name (see metric_info), done runs only
  std::map<std::string, Curve> curves;       // "copy_acc" (eval), "eval_loss", "train_loss"
  std::map<int, IpmrMatrix> ipmr;            // delta -> per-head matrix
};

// What the sweep file suggests for its report; every field optional.
struct ReportDefaults {
  std::vector<std::string> pivot;  // {row axis, column axis}
  std::string metric;
  std::optional<double> threshold;
  std::vector<std::string> compare;
};

struct SweepResults {
  std::filesystem::path dir;
  std::string name, description;
  std::vector<Axis> axes;
  std::vector<RunResult> runs;
  ReportDefaults defaults;

  const Axis* find_axis(const std::string& name) const;
  const RunResult* find_run(const std::string& name) const;
  // Every metric name some done run has, sorted the way metric_names_help lists them.
  std::vector<std::string> metric_names() const;
  int count(RunState s) const;
};

// Reads SWEEP_DIR. Throws canonlab::Error for a missing or malformed sweep.json. A run whose files are
// missing or unreadable is not an error: it is reported as failed (done without summary) or pending.
SweepResults load_sweep(const std::filesystem::path& dir);

// Metric names and what they mean. `global_ipmr_d<k>` exists for every delta k != 1 in the runs.
struct MetricInfo {
  std::string name, description;
  bool percent = true;            // a rate in [0, 1], printed as a percentage
  bool higher_is_better = true;
};
MetricInfo metric_info(const std::string& name);
// One line per metric, for the CLI help and the report header.
std::vector<MetricInfo> documented_metrics();

// The step of a run's loss phase change (the induction phase change on copy tasks; docs/studies/token-shift-family/):
// with the training loss smoothed by a running median of 3 logged points, L0 the median of the first three points and
// L1 the median of the last 10% (at least one), the first logged step where the smoothed loss is at or below
// (L0 + L1) / 2: the midpoint of the drop. NaN when the loss drops by less than 10% of L0 (no phase change in the
// run) or the curve has fewer than 5 points.
double phase_change_step(const Curve& train_loss);

// Final metrics of one run from its summary.json (exposed for tests).
std::map<std::string, double> metrics_from_summary(const std::string& summary_json_text);

}  // namespace canonlab::report
