// canonlab._core's view of a sweep directory for canonlab.Sweep: every run's state and final metrics
// (report/sweep_results.h, the reader `canonlab report` uses), the report's plan (pivot, metric, comparisons, with
// the sweep file's defaults) and its paired test (report/stats.h), so the Python numbers are the report's.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "bindings.h"
#include "engine/error.h"
#include "report/report.h"
#include "report/stats.h"
#include "report/sweep_results.h"

namespace canonlab::python {

namespace {

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json axis_json(const report::Axis& a) { return {{"name", a.name}, {"keys", a.keys}, {"labels", a.labels}}; }

std::string sweep_json(const std::string& dir) {
  const report::SweepResults s = report::load_sweep(dir);
  nlohmann::json out = {{"name", s.name}, {"description", s.description}, {"axes", nlohmann::json::array()},
                        {"runs", nlohmann::json::array()}};
  for (const report::Axis& a : s.axes) out["axes"].push_back(axis_json(a));
  for (const report::RunResult& r : s.runs) {
    nlohmann::json metrics = nlohmann::json::object();
    for (const auto& [name, v] : r.metrics) metrics[name] = finite_or_null(v);
    out["runs"].push_back({{"name", r.name}, {"dir", r.dir}, {"axes", r.axes}, {"state", report::to_string(r.state)},
                           {"error", r.error}, {"metrics", metrics}});
  }
  return out.dump();
}

std::string plan_json(const std::string& dir, const std::string& metric, const std::string& pivot,
                      const std::vector<std::string>& compare) {
  const report::SweepResults s = report::with_sweep_column(report::load_sweep(dir));
  const report::ReportPlan plan = report::plan_report(s, {pivot, metric, std::nullopt, compare, {}, ""});
  nlohmann::json sections = nlohmann::json::array();
  for (const report::Axis& a : plan.section_axes) sections.push_back(axis_json(a));
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& [a, b] : plan.compare) pairs.push_back({a, b});
  return nlohmann::json{{"row", axis_json(plan.row)},
                        {"col", axis_json(plan.col)},
                        {"sections", sections},
                        {"metric", plan.metric},
                        {"higher_is_better", report::metric_info(plan.metric).higher_is_better},
                        {"compare", pairs}}
      .dump();
}

// The report's paired comparison of b against a (same index = same row, e.g. seed); NaN pairs are dropped.
nb::dict compare_paired(const std::vector<double>& a, const std::vector<double>& b) {
  CANONLAB_CHECK(a.size() == b.size(), "compare_paired: " + std::to_string(a.size()) + " values against " +
                                           std::to_string(b.size()) + "; the pairs need one of each");
  const stats::PairedComparison pc = stats::compare_paired(a, b);
  nb::dict out;
  out["pairs"] = pc.n;
  out["mean_delta"] = pc.mean_delta;
  out["std_delta"] = pc.std_delta;
  out["wins"] = pc.wins;
  out["losses"] = pc.losses;
  out["ties"] = pc.ties;
  out["p_value"] = pc.p_value;
  out["test"] = pc.test;
  out["t"] = pc.t;
  out["t_p_value"] = pc.t_p_value;
  return out;
}

}  // namespace

void bind_report(nb::module_& m) {
  m.def("sweep_results", &sweep_json, nb::arg("dir"), "A sweep directory's axes and runs (state, final metrics) as JSON");
  m.def("report_plan", &plan_json, nb::arg("dir"), nb::arg("metric") = "", nb::arg("pivot") = "",
        nb::arg("compare") = std::vector<std::string>{},
        "The report's plan for a sweep directory (row and column axes, metric, comparisons) as JSON");
  m.def("compare_paired", &compare_paired, nb::arg("a"), nb::arg("b"),
        "The report's one-sided paired test of b > a (exact sign flips up to 20 pairs, t-test beside it)");
}

}  // namespace canonlab::python
