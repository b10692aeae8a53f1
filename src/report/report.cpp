#include "report/report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/paths.h"
#include "report/report_doc.h"
#include "report/stats.h"
#include "report/svg.h"

namespace canonlab::report {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kMaxCurvePoints = 300;  // per line; keeps SVGs small without visibly changing a curve

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); i++) out += (i ? sep : "") + parts[i];
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t pos; (pos = s.find(sep, start)) != std::string::npos; start = pos + 1) out.push_back(s.substr(start, pos - start));
  out.push_back(s.substr(start));
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::vector<std::string> axis_names(const SweepResults& s) {
  std::vector<std::string> names;
  for (const Axis& a : s.axes) names.push_back(a.name);
  return names;
}

const Axis& require_axis(const SweepResults& s, const std::string& name, const std::string& where) {
  const Axis* a = s.find_axis(name);
  CANONLAB_CHECK(a, "unknown axis '" + name + "' in " + where + "; the sweep's axes are: " + join(axis_names(s), ", "));
  return *a;
}

// "layer=L1" or "L1" -> the column label, checked.
std::string parse_compare_side(const std::string& side, const Axis& col, const std::string& spec) {
  std::string label = side;
  if (const size_t eq = side.find('='); eq != std::string::npos) {
    const std::string axis = side.substr(0, eq);
    CANONLAB_CHECK(axis == col.name, "--compare '" + spec + "': comparisons are between values of the column axis '" +
                                         col.name + "', but '" + side + "' names axis '" + axis + "'");
    label = side.substr(eq + 1);
  }
  CANONLAB_CHECK(contains(col.labels, label), "--compare '" + spec + "': '" + label + "' is not a value of axis '" +
                                                  col.name + "'; its values are: " + join(col.labels, ", "));
  return label;
}

// The column axis when only the row axis is named: the first axis of the sweep that is not the row ("" if none).
std::string first_axis_other_than(const SweepResults& s, const std::string& row) {
  for (const Axis& a : s.axes)
    if (a.name != row) return a.name;
  return "";
}

bool known_metric_name(const std::string& name) {
  return !metric_info(name).description.empty() && name != "global_ipmr_d<k>";
}

}  // namespace

SweepResults with_sweep_column(SweepResults sweep) {
  if (sweep.axes.size() != 1) return sweep;
  const std::string name = "sweep";
  CANONLAB_CHECK(sweep.axes.front().name != name, "a one-axis sweep whose axis is named '" + name +
                                                      "' cannot get a column of that name; rename the axis");
  sweep.axes.push_back(Axis{name, {}, {sweep.name}});
  for (RunResult& r : sweep.runs) r.axes[name] = sweep.name;
  return sweep;
}

ReportPlan plan_report(const SweepResults& sweep, const ReportRequest& req) {
  CANONLAB_CHECK(sweep.axes.size() >= 2, "a report pivots one axis against another, but this sweep has " +
                                             std::to_string(sweep.axes.size()) + " axis(es): " +
                                             join(axis_names(sweep), ", ") +
                                             " (with_sweep_column gives a one-axis sweep a column)");
  ReportPlan plan;
  // Messages name where a bad value came from: the command line or the sweep file's "report" object.
  const std::string pivot_source = req.pivot.empty() ? "sweep.json report.pivot" : "--pivot";
  std::vector<std::string> pivot = !req.pivot.empty() ? split(req.pivot, ',') : sweep.defaults.pivot;
  if (pivot.size() == 1 && !pivot.front().empty())
    pivot.push_back(first_axis_other_than(sweep, pivot.front()));  // ROW alone
  if (!req.pivot.empty() || !pivot.empty())
    CANONLAB_CHECK(pivot.size() == 2, pivot_source + " takes ROW_AXIS,COL_AXIS (two axis names) or ROW_AXIS, got '" +
                                          join(pivot, ",") + "'");
  if (pivot.empty()) {
    // Seeds are what one averages over, so they make the rows; the first other axis is what is compared.
    std::string row = sweep.axes.front().name;
    for (const Axis& a : sweep.axes)
      if (contains(a.keys, "train.seed")) {
        row = a.name;
        break;
      }
    pivot = {row, first_axis_other_than(sweep, row)};
  }
  plan.row = require_axis(sweep, pivot[0], pivot_source);
  plan.col = require_axis(sweep, pivot[1], pivot_source);
  CANONLAB_CHECK(plan.row.name != plan.col.name,
                 pivot_source + " needs two different axes, got '" + pivot[0] + "' twice");
  for (const Axis& a : sweep.axes)
    if (a.name != plan.row.name && a.name != plan.col.name) plan.section_axes.push_back(a);

  plan.metric = !req.metric.empty() ? req.metric : !sweep.defaults.metric.empty() ? sweep.defaults.metric : "global_ipmr";
  const std::vector<std::string> present = sweep.metric_names();
  if (!contains(present, plan.metric)) {
    // Before any run has finished there is nothing to list; a documented name is then accepted as is.
    std::vector<std::string> documented;
    for (const MetricInfo& m : documented_metrics()) documented.push_back(m.name);
    CANONLAB_CHECK(present.empty() && known_metric_name(plan.metric),
                   "unknown metric '" + plan.metric + "'; " +
                       (present.empty() ? "no run has finished yet; known metrics: " + join(documented, ", ")
                                        : "this sweep's runs have: " + join(present, ", ")));
  }

  plan.threshold_given = req.threshold.has_value() || sweep.defaults.threshold.has_value();
  plan.threshold = req.threshold ? *req.threshold : sweep.defaults.threshold.value_or(0.5);

  const std::vector<std::string>& specs = !req.compare.empty() ? req.compare : sweep.defaults.compare;
  for (const std::string& spec : specs) {
    const size_t colon = spec.find(':');
    CANONLAB_CHECK(colon != std::string::npos, "--compare takes A:B, two values of the column axis (e.g. " +
                                                   plan.col.name + "=X:" + plan.col.name + "=Y), got '" + spec + "'");
    plan.compare.emplace_back(parse_compare_side(spec.substr(0, colon), plan.col, spec),
                              parse_compare_side(spec.substr(colon + 1), plan.col, spec));
  }
  if (specs.empty())
    for (size_t c = 1; c < plan.col.labels.size(); c++) plan.compare.emplace_back(plan.col.labels[0], plan.col.labels[c]);

  for (const std::string& name : req.heatmap_runs) {
    if (sweep.find_run(name)) continue;
    std::vector<std::string> names;
    for (const RunResult& r : sweep.runs) names.push_back(r.name);
    throw Error("--heatmap: unknown run '" + name + "'; the sweep's runs are: " + join(names, ", "));
  }
  plan.heatmap_runs = req.heatmap_runs;
  plan.command_line = req.command_line;
  return plan;
}

namespace {

// Everything the sections share: the plan, the metric's formatting, and runs indexed by their labels.
class Builder {
 public:
  Builder(const SweepResults& sweep, const ReportPlan& plan)
      : sweep_(sweep), plan_(plan), metric_(metric_info(plan.metric)) {
    for (const RunResult& r : sweep.runs) {
      std::vector<std::string> labels;
      bool placed = true;
      for (const Axis* a : plan_axes()) {
        auto it = r.axes.find(a->name);
        if (it == r.axes.end()) {
          placed = false;
          break;
        }
        labels.push_back(it->second);
      }
      if (placed) by_labels_[join(labels, "\x1f")] = &r;
      else unplaced_.push_back(r.name);
    }
  }

  ReportDocument build() {
    header();
    for (const std::vector<std::string>& section : sections()) section_content(section);
    heatmaps();
    unfinished_runs();
    ReportDocument out;
    out.markdown = doc_.markdown();
    out.html = doc_.html(sweep_.name + " · canonlab report");
    out.svgs = std::move(svgs_);
    return out;
  }

 private:
  std::vector<const Axis*> plan_axes() const {
    std::vector<const Axis*> axes{&plan_.row, &plan_.col};
    for (const Axis& a : plan_.section_axes) axes.push_back(&a);
    return axes;
  }

  // Every combination of the section axes' labels, the last axis varying fastest.
  std::vector<std::vector<std::string>> sections() const {
    std::vector<std::vector<std::string>> out{{}};
    for (const Axis& a : plan_.section_axes) {
      std::vector<std::vector<std::string>> next;
      for (const auto& prefix : out)
        for (const std::string& label : a.labels) {
          next.push_back(prefix);
          next.back().push_back(label);
        }
      out = std::move(next);
    }
    return out;
  }

  std::string section_name(const std::vector<std::string>& section) const {
    std::vector<std::string> parts;
    for (size_t i = 0; i < section.size(); i++) parts.push_back(plan_.section_axes[i].name + "=" + section[i]);
    return join(parts, ", ");
  }

  const RunResult* run_at(const std::string& row, const std::string& col, const std::vector<std::string>& section) const {
    std::vector<std::string> labels{row, col};
    labels.insert(labels.end(), section.begin(), section.end());
    auto it = by_labels_.find(join(labels, "\x1f"));
    return it == by_labels_.end() ? nullptr : it->second;
  }

  // The metric of a run, or NaN when the run is not done or lacks it: exactly what statistics leave out.
  double value_of(const RunResult* r) const {
    if (!r || r->state != RunState::done) return kNaN;
    auto it = r->metrics.find(plan_.metric);
    return it == r->metrics.end() ? kNaN : it->second;
  }

  std::string fmt_value(double v) const {
    if (!std::isfinite(v)) return "–";
    return metric_.percent ? svg::fmt(100 * v, 1) + "%" : svg::fmt(v, 3);
  }
  // Differences and spreads of percentages are in percentage points.
  std::string fmt_spread(double v, bool sign = false) const {
    if (!std::isfinite(v)) return "–";
    std::string s = metric_.percent ? svg::fmt(100 * v, 1) : svg::fmt(v, 3);
    if (sign && s.front() != '-' && s.find_first_not_of("0.") != std::string::npos) s = "+" + s;
    return metric_.percent ? s + " pp" : s;
  }
  static std::string fmt_p(double p) {
    if (!std::isfinite(p)) return "–";
    if (p >= 0.001) return svg::fmt(p, 4);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1e", p);
    return buf;
  }
  std::string fmt_threshold() const { return metric_.percent ? svg::fmt(100 * plan_.threshold, 1) + "%" : svg::fmt(plan_.threshold, 3); }

  doc::Cell cell_of(const RunResult* r) const {
    if (!r) return {"–", false, "missing"};
    if (r->state != RunState::done) return {to_string(r->state), false, to_string(r->state)};
    const double v = value_of(r);
    if (!std::isfinite(v)) return {"n/a", false, "na"};
    return {fmt_value(v)};
  }

  bool better(double a, double b) const { return metric_.higher_is_better ? a > b : a < b; }

  // Bold the best finite value(s) of `cells`, unless they are all equal (then none stands out).
  void bold_best(std::vector<doc::Cell>& cells, const std::vector<double>& values, size_t first) const {
    double best = kNaN, worst = kNaN;
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      if (!std::isfinite(best) || better(v, best)) best = v;
      if (!std::isfinite(worst) || better(worst, v)) worst = v;
    }
    if (!std::isfinite(best) || best == worst) return;
    for (size_t i = 0; i < values.size(); i++)
      if (values[i] == best) cells[first + i].bold = true;
  }

  static std::string slug(const std::string& s) {
    std::string out;
    for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-') ? c : '-';
    return out;
  }

  doc::Figure add_svg(const std::string& file, std::string svg, const std::string& caption) {
    svgs_.push_back({file, svg});
    return {file, std::move(svg), caption};
  }

  void header() {
    doc_.heading(1, sweep_.name);
    if (!sweep_.description.empty()) doc_.paragraph(sweep_.description);
    const int total = int(sweep_.runs.size());
    std::string counts = std::to_string(total) + " runs: " + std::to_string(sweep_.count(RunState::done)) + " done, " +
                         std::to_string(sweep_.count(RunState::failed)) + " failed, ";
    if (int running = sweep_.count(RunState::running)) counts += std::to_string(running) + " running, ";
    counts += std::to_string(sweep_.count(RunState::pending)) + " pending";
    doc_.paragraph("Generated by `" + plan_.command_line + "` from `" + sweep_.dir.string() + "`. " + counts + ".");

    std::string layout = "**Metric** `" + plan_.metric + "`" +
                         (metric_.description.empty() ? "" : ": " + metric_.description) + ". **Rows**: `" +
                         plan_.row.name + "`; **columns**: `" + plan_.col.name + "`";
    if (!plan_.section_axes.empty()) {
      std::vector<std::string> names;
      for (const Axis& a : plan_.section_axes) names.push_back("`" + a.name + "`");
      layout += "; one section per value of " + join(names, " × ");
    }
    doc_.paragraph(layout + ". **Threshold**: " + fmt_threshold() + " (seeds strictly above it are counted).");
    doc_.paragraph(
        "**How to read**: each table cell is one run's final `" + plan_.metric + "`; **bold** marks the best cell of a "
        "row. Runs that failed, are unfinished or lack the metric are shown as such and left out of every statistic. "
        "std is the sample standard deviation (n − 1). A comparison pairs runs by `" + plan_.row.name +
        "`: Δ = B − A per " + plan_.row.name + "; p is the one-sided probability, if B were no better than A "
        "(each Δ equally likely to have either sign), of a total Δ at least as favourable to B as observed. " +
        (metric_.higher_is_better ? std::string("Higher `") + plan_.metric + "` is better."
                                            : std::string("Lower `") + plan_.metric + "` is better: B wins where "
                                              "its value is lower, and p tests B < A.") +
        " The test is named beside each p (sign-flip permutation: exact for up to 20 pairs); the t-test p is for "
        "reference only.");
    std::vector<std::string> metrics;
    for (const MetricInfo& m : documented_metrics()) metrics.push_back("`" + m.name + "`: " + m.description);
    doc_.paragraph("**Metrics** (choose with `--metric`; percentages of queries or tokens unless a loss):");
    doc_.bullets(metrics);
  }

  void section_content(const std::vector<std::string>& section) {
    const std::string name = section_name(section);
    const std::string suffix = name.empty() ? "" : "-" + slug(join(section, "-"));
    doc_.heading(2, name.empty() ? "Results" : name);
    const Axis& row = plan_.row;
    const Axis& col = plan_.col;

    // values[c][r]: the metric per column value and row value; NaN where not usable.
    std::vector<std::vector<double>> values(col.labels.size(), std::vector<double>(row.labels.size(), kNaN));
    doc::Table per_seed;
    per_seed.header.push_back(row.name);
    per_seed.numeric.push_back(true);
    for (const std::string& c : col.labels) {
      per_seed.header.push_back(col.name + "=" + c);
      per_seed.numeric.push_back(true);
    }
    for (size_t r = 0; r < row.labels.size(); r++) {
      std::vector<doc::Cell> cells{{row.labels[r]}};
      std::vector<double> row_values;
      for (size_t c = 0; c < col.labels.size(); c++) {
        const RunResult* run = run_at(row.labels[r], col.labels[c], section);
        values[c][r] = value_of(run);
        row_values.push_back(values[c][r]);
        cells.push_back(cell_of(run));
      }
      bold_best(cells, row_values, 1);
      per_seed.rows.push_back(std::move(cells));
    }
    doc_.heading(3, "Per " + row.name + ": `" + plan_.metric + "`");
    doc_.table(std::move(per_seed));

    doc::Table agg;
    agg.header = {col.name, "n", "mean", "std", "min", "max", "> " + fmt_threshold(), "not in stats"};
    agg.numeric = {false, true, true, true, true, true, true, false};
    std::vector<double> means;
    for (size_t c = 0; c < col.labels.size(); c++) {
      const stats::Summary s = stats::summarize(values[c], plan_.threshold);
      means.push_back(s.mean);
      std::map<std::string, int> excluded;  // state -> count, for runs that exist but gave no value
      for (const std::string& r : row.labels) {
        const RunResult* run = run_at(r, col.labels[c], section);
        if (!run) excluded["missing"]++;
        else if (run->state != RunState::done) excluded[to_string(run->state)]++;
        else if (!std::isfinite(value_of(run))) excluded["without metric"]++;
      }
      std::vector<std::string> notes;
      for (const auto& [state, n] : excluded) notes.push_back(std::to_string(n) + " " + state);
      agg.rows.push_back({{col.labels[c]},
                          {std::to_string(s.n)},
                          {fmt_value(s.mean)},
                          {fmt_spread(s.std)},
                          {fmt_value(s.min)},
                          {fmt_value(s.max)},
                          {std::to_string(s.above) + "/" + std::to_string(s.n)},
                          {notes.empty() ? "" : join(notes, ", ")}});
    }
    // Bold the best mean (column 2).
    double best = kNaN;
    for (double m : means)
      if (std::isfinite(m) && (!std::isfinite(best) || better(m, best))) best = m;
    for (size_t c = 0; c < means.size(); c++)
      if (std::isfinite(best) && means[c] == best && means.size() > 1) agg.rows[c][2].bold = true;
    doc_.heading(3, "Summary over " + row.name + "s");
    doc_.table(std::move(agg));

    if (!plan_.compare.empty()) {
      doc::Table cmp;
      // For a metric where lower is better (bpc, losses) the test runs on the negated values, so that "B wins" and
      // p always mean "B is better than A"; Δ stays B − A in the metric's own units.
      const double sign = metric_.higher_is_better ? 1.0 : -1.0;
      cmp.header = {"A", "B", "pairs", "mean Δ (B − A)", "std Δ", "B wins / losses / ties",
                    metric_.higher_is_better ? "p (one-sided, B > A)" : "p (one-sided, B < A)", "test", "t-test p"};
      cmp.numeric = {false, false, true, true, true, true, true, false, true};
      for (const auto& [a_label, b_label] : plan_.compare) {
        const auto ia = size_t(std::find(col.labels.begin(), col.labels.end(), a_label) - col.labels.begin());
        const auto ib = size_t(std::find(col.labels.begin(), col.labels.end(), b_label) - col.labels.begin());
        std::vector<double> a_oriented = values[ia], b_oriented = values[ib];
        for (double& v : a_oriented) v *= sign;
        for (double& v : b_oriented) v *= sign;
        const stats::PairedComparison pc = stats::compare_paired(a_oriented, b_oriented);
        cmp.rows.push_back({{col.name + "=" + a_label},
                            {col.name + "=" + b_label},
                            {std::to_string(pc.n)},
                            {fmt_spread(sign * pc.mean_delta, true)},
                            {fmt_spread(pc.std_delta)},
                            {std::to_string(pc.wins) + " / " + std::to_string(pc.losses) + " / " + std::to_string(pc.ties)},
                            {fmt_p(pc.p_value), std::isfinite(pc.p_value) && pc.p_value <= 0.05},
                            {pc.test},
                            {fmt_p(pc.t_p_value)}});
      }
      doc_.heading(3, "Paired comparisons over " + row.name + "s");
      doc_.table(std::move(cmp));
    }

    std::vector<doc::Figure> figures;
    svg::StripPlot strip;
    strip.title = plan_.metric + " by " + col.name + (name.empty() ? "" : " (" + name + ")");
    strip.x_label = col.name;
    strip.y_label = plan_.metric;
    strip.categories = col.labels;
    strip.points = values;
    strip.percent = metric_.percent;
    if (!metric_.percent) {
      // Losses: let the data set the range.
      strip.y_min = strip.y_max = kNaN;
      for (const auto& col_values : values)
        for (double v : col_values)
          if (std::isfinite(v)) strip.y_min = std::isfinite(strip.y_min) ? std::min(strip.y_min, v) : v;
      if (!std::isfinite(strip.y_min)) strip.y_min = 0;
      strip.y_max = strip.y_min;
    }
    strip.has_threshold = metric_.percent || plan_.threshold_given;
    strip.threshold = plan_.threshold;
    strip.point_legend = "one " + row.name;
    strip.mean_legend = "mean over " + row.name + "s";
    figures.push_back(add_svg("strip-" + slug(plan_.metric) + suffix + ".svg", svg::strip_plot(strip),
                              "Figure: " + plan_.metric + " per " + col.name + "; dots are " + row.name +
                                  "s (jittered sideways), the line joins the means."));
    // The reported metric's own eval curve when the runs log one (task metrics); IPMR metrics are measured once at
    // the end, and their runs' eval curve is the copy task's accuracy.
    const std::string eval_curve = any_run_has_curve(plan_.metric) ? plan_.metric : "copy_acc";
    const bool eval_percent = eval_curve == plan_.metric ? metric_.percent : true;
    figures.push_back(curve_figure(eval_curve, "eval " + eval_curve, eval_percent, section, suffix));
    figures.push_back(curve_figure("train_loss", "train loss", false, section, suffix));
    doc_.heading(3, "Plots");
    doc_.figures(std::move(figures));
  }

  static svg::Line thin(const Curve& c) {
    svg::Line l;
    const size_t n = c.steps.size(), stride = std::max<size_t>(1, (n + kMaxCurvePoints - 1) / kMaxCurvePoints);
    for (size_t i = 0; i < n; i++)
      if (i % stride == 0 || i + 1 == n) l.x.push_back(c.steps[i]), l.y.push_back(c.values[i]);
    return l;
  }

  // Mean over member runs at the steps every member has, so the mean never jumps where one run's log ends.
  static Curve mean_curve(const std::vector<const Curve*>& members) {
    Curve mean;
    if (members.empty()) return mean;
    std::map<double, std::pair<double, int>> at;  // step -> (sum, count)
    for (const Curve* c : members)
      for (size_t i = 0; i < c->steps.size(); i++) at[c->steps[i]].first += c->values[i], at[c->steps[i]].second++;
    for (const auto& [step, sum_count] : at)
      if (sum_count.second == int(members.size())) {
        mean.steps.push_back(step);
        mean.values.push_back(sum_count.first / sum_count.second);
      }
    return mean;
  }

  bool any_run_has_curve(const std::string& curve) const {
    for (const RunResult& r : sweep_.runs)
      if (r.curves.count(curve)) return true;
    return false;
  }

  doc::Figure curve_figure(const std::string& curve, const std::string& label, bool percent,
                           const std::vector<std::string>& section, const std::string& suffix) {
    svg::LineChart chart;
    const std::string name = section_name(section);
    chart.title = label + " by " + plan_.col.name + (name.empty() ? "" : " (" + name + ")");
    chart.x_label = "step";
    chart.y_label = label;
    chart.percent = percent;
    for (const std::string& c : plan_.col.labels) {
      svg::Series series;
      series.label = plan_.col.name + "=" + c;
      std::vector<const Curve*> members;
      for (const std::string& r : plan_.row.labels) {
        const RunResult* run = run_at(r, c, section);
        if (!run || run->state != RunState::done) continue;
        auto it = run->curves.find(curve);
        if (it == run->curves.end() || it->second.steps.empty()) continue;
        members.push_back(&it->second);
        series.members.push_back(thin(it->second));
      }
      series.mean = thin(mean_curve(members));
      chart.series.push_back(std::move(series));
    }
    return add_svg("curve-" + curve + suffix + ".svg", svg::line_chart(chart),
                   "Figure: " + label + " vs step; thick = mean over " + plan_.row.name + "s, thin = each " +
                       plan_.row.name + " (done runs only).");
  }

  void heatmaps() {
    std::vector<std::string> chosen = plan_.heatmap_runs;
    if (chosen.empty())
      // Default: per section and column value, the first run (in row order) that finished.
      for (const auto& section : sections())
        for (const std::string& c : plan_.col.labels)
          for (const std::string& r : plan_.row.labels) {
            const RunResult* run = run_at(r, c, section);
            if (run && run->state == RunState::done && !run->ipmr.empty()) {
              chosen.push_back(run->name);
              break;
            }
          }
    if (chosen.empty()) return;
    doc_.heading(2, "IPMR per layer and head");
    doc_.paragraph("Per-head induction pattern match rate of chosen runs (choose with `--heatmap RUN_NAME`): the "
                   "fraction of copy queries whose attention argmax lands δ tokens after the earlier occurrence.");
    std::vector<doc::Figure> figures;
    std::vector<std::string> notes;
    for (const std::string& run_name : chosen) {
      const RunResult* run = sweep_.find_run(run_name);
      if (!run || run->state != RunState::done || run->ipmr.empty()) {
        notes.push_back("`" + run_name + "`: no IPMR (" + (run ? to_string(run->state) : "unknown run") + ")");
        continue;
      }
      for (const auto& [delta, m] : run->ipmr) {
        svg::Heatmap h;
        h.title = run_name + " · δ=" + std::to_string(delta);
        for (int l = 0; l < m.layers; l++) h.row_labels.push_back(std::string("L").append(std::to_string(l)));
        for (int k = 0; k < m.heads; k++) h.col_labels.push_back(std::string("H").append(std::to_string(k)));
        h.values = m.rates;
        h.annotate = true;
        h.x_label = "head";
        h.y_label = "layer";
        figures.push_back(add_svg("heatmap-" + slug(run_name) + "-d" + std::to_string(delta) + ".svg",
                                  svg::heatmap(h), "IPMR of `" + run_name + "` at δ=" + std::to_string(delta)));
      }
    }
    if (!figures.empty()) doc_.figures(std::move(figures));
    if (!notes.empty()) doc_.bullets(notes);
  }

  void unfinished_runs() {
    std::vector<std::string> items;
    for (const RunResult& r : sweep_.runs) {
      if (r.state == RunState::done) {
        if (!r.metrics.count(plan_.metric)) items.push_back("`" + r.name + "`: done, but has no `" + plan_.metric + "`");
        continue;
      }
      std::string item = "`" + r.name + "`: " + to_string(r.state);
      if (!r.error.empty()) {
        std::string error = r.error.substr(0, 300);
        std::replace(error.begin(), error.end(), '`', '\'');
        std::replace(error.begin(), error.end(), '\n', ' ');
        item += " (" + error + ")";
      }
      items.push_back(item);
    }
    for (const std::string& name : unplaced_)
      items.push_back("`" + name + "`: has no label for one of the axes " + plan_.row.name + ", " + plan_.col.name +
                      " or the section axes, so it is not in any table");
    if (items.empty()) return;
    doc_.heading(2, "Runs not in the statistics");
    doc_.bullets(items);
  }

  const SweepResults& sweep_;
  const ReportPlan& plan_;
  const MetricInfo metric_;
  std::map<std::string, const RunResult*> by_labels_;
  std::vector<std::string> unplaced_;
  doc::Document doc_;
  std::vector<ReportFile> svgs_;
};

}  // namespace

ReportDocument build_report(const SweepResults& sweep, const ReportPlan& plan) { return Builder(sweep, plan).build(); }

void write_report(const ReportDocument& doc, const std::filesystem::path& out_dir) {
  create_directories_at(out_dir, "cannot create the report directory (--out, default SWEEP_DIR/report)");
  for (const ReportFile& f : doc.svgs) write_text_atomic((out_dir / f.name).string(), f.content);
  write_text_atomic((out_dir / "report.md").string(), doc.markdown);
  write_text_atomic((out_dir / "report.html").string(), doc.html);
}

}  // namespace canonlab::report
