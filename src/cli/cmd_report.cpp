// canonlab report SWEEP_DIR [--pivot ROW,COL] [--metric NAME] [--threshold X] [--compare A:B]... [--heatmap RUN]...
//                 [--out DIR]
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "report/report.h"

namespace canonlab::cli {

namespace {

struct ReportArgs {
  std::string sweep_dir, pivot, metric, out;
  double threshold = 0.5;
  std::vector<std::string> compare, heatmap;
};

// Single-quotes an argument when the shell would otherwise split or expand it.
std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,:/@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The command as the user could type it again (options in a fixed order).
std::string command_line(const ReportArgs& a, bool threshold_given) {
  std::string cmd = "canonlab report " + shell_quote(a.sweep_dir);
  if (!a.pivot.empty()) cmd += " --pivot " + shell_quote(a.pivot);
  if (!a.metric.empty()) cmd += " --metric " + shell_quote(a.metric);
  if (threshold_given) {
    std::ostringstream t;
    t << a.threshold;
    cmd += " --threshold " + t.str();
  }
  for (const std::string& c : a.compare) cmd += " --compare " + shell_quote(c);
  for (const std::string& h : a.heatmap) cmd += " --heatmap " + shell_quote(h);
  if (!a.out.empty()) cmd += " --out " + shell_quote(a.out);
  return cmd;
}

int run_report(const ReportArgs& a, bool threshold_given) {
  const report::SweepResults sweep = report::with_sweep_column(report::load_sweep(a.sweep_dir));
  report::ReportRequest request;
  request.pivot = a.pivot;
  request.metric = a.metric;
  if (threshold_given) request.threshold = a.threshold;
  request.compare = a.compare;
  request.heatmap_runs = a.heatmap;
  request.command_line = command_line(a, threshold_given);
  const report::ReportPlan plan = report::plan_report(sweep, request);
  const report::ReportDocument doc = report::build_report(sweep, plan);
  const std::filesystem::path out = a.out.empty() ? std::filesystem::path(a.sweep_dir) / "report" : std::filesystem::path(a.out);
  report::write_report(doc, out);
  std::cout << "runs: " << sweep.count(report::RunState::done) << " done, " << sweep.count(report::RunState::failed)
            << " failed, " << sweep.count(report::RunState::running) << " running, "
            << sweep.count(report::RunState::pending) << " pending\n"
            << "rows " << plan.row.name << ", columns " << plan.col.name << ", metric " << plan.metric << "\n"
            << "wrote " << (out / "report.md").string() << ", " << (out / "report.html").string() << " and "
            << doc.svgs.size() << " .svg files\n";
  return 0;
}

std::string metrics_help() {
  std::string s = "Metrics (--metric):\n";
  for (const report::MetricInfo& m : report::documented_metrics()) s += "  " + m.name + ": " + m.description + "\n";
  return s;
}

}  // namespace

Command add_report_command(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* sub = app.add_subcommand(
      "report", "Tables, paired statistics and plots of a sweep as Markdown and self-contained HTML");
  sub->add_option("sweep_dir", a->sweep_dir, "Sweep directory (holds sweep.json)")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--pivot", a->pivot,
                  "ROW_AXIS,COL_AXIS, or ROW_AXIS with the first other axis as columns (default: the sweep's "
                  "report.pivot, else rows = the train.seed axis, columns = the first other axis); remaining axes get "
                  "a section per value. A sweep of one axis gets one column, named after the sweep");
  sub->add_option("--metric", a->metric, "Metric in the tables and strip plot (default global_ipmr; list below)");
  CLI::Option* threshold =
      sub->add_option("--threshold", a->threshold, "Count seeds strictly above this value (default 0.5 = 50%)");
  sub->add_option("--compare", a->compare,
                  "Paired comparison A:B of two column values, e.g. layer=L0:layer=L1 (repeatable; default: every "
                  "column value against the first)")
      ->allow_extra_args(false);  // one value per --compare, so a following SWEEP_DIR is not swallowed
  sub->add_option("--heatmap", a->heatmap,
                  "Run name whose per-head IPMR to draw (repeatable; default: per column value, the first seed's run)")
      ->allow_extra_args(false);
  sub->add_option("--out", a->out, "Output directory (default SWEEP_DIR/report)");
  sub->footer(metrics_help());
  return {sub, [a, threshold] { return run_report(*a, threshold->count() > 0); }};
}

}  // namespace canonlab::cli
