#pragma once
// `canonlab report`: tables, paired statistics and plots for a sweep, as Markdown (report.md beside its .svg
// files, for GitHub or a paper draft) and as one self-contained HTML page (report.html: CSS and SVGs inline,
// no scripts, no external resources).
//
// The sweep is pivoted into a grid: rows = one axis (seeds by default), columns = another (e.g. the key-shift
// layer); every combination of the remaining axes gets its own section. Runs that failed or have not
// finished are shown in the tables as such and left out of every statistic.
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "report/sweep_results.h"

namespace canonlab::report {

// What the user asked for on the command line; empty fields take the sweep's "report" defaults, then the
// built-in ones.
struct ReportRequest {
  std::string pivot;                      // "ROW_AXIS,COL_AXIS"
  std::string metric;
  std::optional<double> threshold;
  std::vector<std::string> compare;       // "layer=L0:layer=L1" or "L0:L1" (column-axis values)
  std::vector<std::string> heatmap_runs;  // run names
  std::string command_line;               // printed in the report so it can be regenerated
};

// The request resolved against a sweep: defaults filled in and every name checked.
struct ReportPlan {
  Axis row, col;
  std::vector<Axis> section_axes;  // the remaining axes, in sweep order
  std::string metric;
  double threshold = 0.5;
  bool threshold_given = false;    // shown on plots of non-percentage metrics only when asked for
  std::vector<std::pair<std::string, std::string>> compare;  // (A, B) column labels
  std::vector<std::string> heatmap_runs;  // empty = the default choice, made per section
  std::string command_line;
};
// Throws canonlab::Error naming what exists when an axis, metric, comparison or run name is unknown. A pivot of one
// axis name takes the first other axis as the columns.
ReportPlan plan_report(const SweepResults& sweep, const ReportRequest& request);

// A sweep of one axis (seeds only, say) has nothing to pivot against: this gives it a column axis "sweep" whose one
// value is the sweep's name, so its report is one column (table, curves, strip plot; no paired comparison). A sweep of
// two or more axes is returned as it is.
SweepResults with_sweep_column(SweepResults sweep);

struct ReportFile {
  std::string name, content;  // name relative to the output directory
};
struct ReportDocument {
  std::string markdown, html;
  std::vector<ReportFile> svgs;
};
ReportDocument build_report(const SweepResults& sweep, const ReportPlan& plan);

// Writes report.md, report.html and the .svg files into `out_dir` (created if needed).
void write_report(const ReportDocument& doc, const std::filesystem::path& out_dir);

}  // namespace canonlab::report
