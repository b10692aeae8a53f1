// `canonlab report` on a fixture sweep written here: the tables carry the hand-computed statistics, failed and
// unfinished runs are shown but left out, the SVGs and the HTML are well-formed and self-contained, and
// unknown names fail with a message that lists what exists.
#include <gtest/gtest.h>

#include "cli_runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "report/report.h"
#include "report/report_doc.h"
#include "report/svg.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace canonlab;
using namespace canonlab::report;

namespace {

using canonlab::test_support::run_cli;
using CliResult = canonlab::test_support::CliResult;

// The user's nine seeds; L0/L1 IPMR in percent from their notes (the same numbers as test_report_stats.cpp).
const std::vector<std::string> kSeeds = {"0", "1", "2", "7", "13", "21", "42", "99", "100"};
const std::vector<double> kL0 = {0.7, 13.6, 24.3, 0, 3.8, 11.4, 0, 0, 0.2};
const std::vector<double> kL1 = {0.2, 43.3, 19.9, 0, 2.5, 0, 96.2, 74.1, 99.8};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json summary(double global, double copy_acc, int layers = 4, int heads = 4, std::optional<double> global_d2 = {}) {
  auto matrix = [&](double peak) {
    json rows = json::array();
    for (int l = 0; l < layers; l++) {
      json row = json::array();
      for (int h = 0; h < heads; h++) row.push_back(l == layers - 1 && h == heads - 1 ? peak : 0.01 * (l * heads + h));
      rows.push_back(row);
    }
    return rows;
  };
  json s = {{"steps", 100}, {"final_train_loss", 2.25}, {"eval", {{"copy_acc", copy_acc}, {"loss", 2.3}}}};
  s["ipmr"] = {{"chance_head", 0.079}, {"chance_global", 0.725},
               {"delta_1", {{"global", global}, {"mean", global / 4}, {"per_head", matrix(global * 0.9)}}}};
  if (global_d2) s["ipmr"]["delta_2"] = {{"global", *global_d2}, {"mean", 0.1}, {"per_head", matrix(0.5)}};
  return s;
}

std::string metrics_jsonl(double final_acc) {
  std::string out;
  for (int step = 10; step <= 100; step += 10)
    out += json({{"step", step}, {"split", "train"}, {"loss", 4.0 - step / 50.0}, {"lr", 1e-3}}).dump() + "\n";
  for (int step : {50, 100})
    out += json({{"step", step}, {"split", "eval"}, {"copy_acc", final_acc * step / 100}, {"loss", 3.0}}).dump() + "\n";
  return out;
}

enum class Fate { done, failed, pending, running, done_without_summary };

struct FixtureRun {
  std::map<std::string, std::string> axes;
  Fate fate;
  double global = 0;
  std::optional<double> global_d2;
};

// A sweep directory as `canonlab sweep` leaves it.
fs::path write_sweep(const std::string& tag, const json& axes, const std::vector<FixtureRun>& runs,
                     const json& report_defaults = nullptr) {
  const fs::path dir = fs::temp_directory_path() / ("canonlab_report_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  json manifest = {{"format", "canonlab-sweep/1"}, {"name", "fixture-" + tag}, {"description", "test sweep"},
                   {"axes", axes}, {"runs", json::array()}};
  if (!report_defaults.is_null()) manifest["report"] = report_defaults;
  for (const FixtureRun& r : runs) {
    std::string name;
    for (const json& a : axes) {
      const std::string axis = a["name"];
      name += (name.empty() ? "" : "__") + axis + "=" + r.axes.at(axis);
    }
    const fs::path run_dir = dir / "runs" / name;
    manifest["runs"].push_back({{"name", name}, {"dir", "runs/" + name}, {"axes", r.axes}, {"config", json::object()}});
    fs::create_directories(run_dir);
    switch (r.fate) {
      case Fate::pending: break;
      case Fate::running: write(run_dir / "status.json", R"({"state":"running"})"); break;
      case Fate::failed:
        write(run_dir / "status.json", R"({"state":"failed","error":"non-finite loss at step 17","exit_code":2})");
        break;
      case Fate::done_without_summary: write(run_dir / "status.json", R"({"state":"done","exit_code":0})"); break;
      case Fate::done:
        write(run_dir / "status.json", R"({"state":"done","exit_code":0,"wall_s":1.5})");
        write(run_dir / "summary.json", summary(r.global, 0.9 + r.global / 10, 4, 4, r.global_d2).dump(1));
        write(run_dir / "metrics.jsonl", metrics_jsonl(0.5 + r.global / 2));
        break;
    }
  }
  write(dir / "sweep.json", manifest.dump(2));
  return dir;
}

json layer_seed_axes() {
  return json::array({{{"name", "layer"}, {"keys", {"model.attention.key_shift.layers"}}, {"labels", {"L0", "L1", "L2"}}},
                      {{"name", "seed"}, {"keys", {"train.seed"}}, {"labels", kSeeds}}});
}

// L0 and L1 from the notes; L2 has seed 0 failed, seed 1 pending, seed 2 done without a summary (failed),
// and 65%, 70%, ..., 90% for the other six seeds.
fs::path nine_seed_sweep() {
  std::vector<FixtureRun> runs;
  for (size_t i = 0; i < kSeeds.size(); i++) {
    runs.push_back({{{"layer", "L0"}, {"seed", kSeeds[i]}}, Fate::done, kL0[i] / 100, {}});
    runs.push_back({{{"layer", "L1"}, {"seed", kSeeds[i]}}, Fate::done, kL1[i] / 100, {}});
    const Fate l2 = i == 0 ? Fate::failed : i == 1 ? Fate::pending : i == 2 ? Fate::done_without_summary : Fate::done;
    runs.push_back({{{"layer", "L2"}, {"seed", kSeeds[i]}}, l2, 0.5 + 0.05 * double(i), {}});
  }
  return write_sweep("nine", layer_seed_axes(), runs);
}

ReportDocument build(const fs::path& dir, ReportRequest req = {}) {
  req.command_line = "canonlab report " + dir.string();
  const SweepResults sweep = load_sweep(dir);
  return build_report(sweep, plan_report(sweep, req));
}

void expect_contains(const std::string& text, const std::string& what) {
  EXPECT_NE(text.find(what), std::string::npos) << "missing: " << what << "\n---\n" << text;
}

// A small well-formedness check: every tag closes in order, attributes are quoted, '&' starts an entity, and
// there is one root. `void_elements` (HTML's <meta> etc.) need no closing tag.
bool well_formed(const std::string& s, std::string* why, const std::vector<std::string>& void_elements = {}) {
  std::vector<std::string> open;
  int roots = 0;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      const std::string entity = semi == std::string::npos ? "" : s.substr(i + 1, semi - i - 1);
      if (!(entity == "amp" || entity == "lt" || entity == "gt" || entity == "quot" || entity == "#39")) {
        *why = "bad entity at " + std::to_string(i) + ": " + s.substr(i, 12);
        return false;
      }
      i = semi + 1;
      continue;
    }
    if (s[i] != '<') {
      i++;
      continue;
    }
    if (s.compare(i, 4, "<!--") == 0) {
      i = s.find("-->", i) + 3;
      continue;
    }
    if (s.compare(i, 2, "<!") == 0 || s.compare(i, 2, "<?") == 0) {
      i = s.find('>', i) + 1;
      continue;
    }
    const bool closing = s.compare(i, 2, "</") == 0;
    size_t j = i + (closing ? 2 : 1);
    const size_t name_start = j;
    while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '-' || s[j] == ':')) j++;
    const std::string name = s.substr(name_start, j - name_start);
    if (name.empty()) {
      *why = "unescaped '<' at " + std::to_string(i);
      return false;
    }
    bool self_closing = false;
    for (;;) {  // attributes
      while (j < s.size() && std::isspace(static_cast<unsigned char>(s[j]))) j++;
      if (j >= s.size()) {
        *why = "unterminated tag " + name;
        return false;
      }
      if (s[j] == '>') break;
      if (s.compare(j, 2, "/>") == 0) {
        self_closing = true;
        j++;
        break;
      }
      const size_t eq = s.find('=', j);
      if (eq == std::string::npos || s[eq + 1] != '"') {
        *why = "unquoted attribute in <" + name + "> at " + std::to_string(j);
        return false;
      }
      const size_t end = s.find('"', eq + 2);
      if (end == std::string::npos || s.substr(eq + 2, end - eq - 2).find('<') != std::string::npos) {
        *why = "bad attribute value in <" + name + ">";
        return false;
      }
      j = end + 1;
    }
    i = j + 1;
    if (closing) {
      if (open.empty() || open.back() != name) {
        *why = "</" + name + "> closes <" + (open.empty() ? std::string("nothing") : open.back()) + ">";
        return false;
      }
      open.pop_back();
    } else if (!self_closing && std::find(void_elements.begin(), void_elements.end(), name) == void_elements.end()) {
      if (open.empty()) roots++;
      open.push_back(name);
    } else if (open.empty()) {
      roots++;
    }
  }
  if (!open.empty()) {
    *why = "<" + open.back() + "> never closed";
    return false;
  }
  if (roots != 1) {
    *why = std::to_string(roots) + " root elements";
    return false;
  }
  return true;
}


}  // namespace

TEST(Report, LoadsRunsWithTheirStates) {
  const SweepResults s = load_sweep(nine_seed_sweep());
  ASSERT_EQ(s.runs.size(), 27u);
  EXPECT_EQ(s.count(RunState::done), 24);
  EXPECT_EQ(s.count(RunState::failed), 2);  // the failed one and the one marked done without summary.json
  EXPECT_EQ(s.count(RunState::pending), 1);
  const RunResult* failed = s.find_run("layer=L2__seed=0");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->error, "non-finite loss at step 17");
  EXPECT_NE(s.find_run("layer=L2__seed=2")->error.find("summary.json"), std::string::npos);
  const RunResult* done = s.find_run("layer=L1__seed=42");
  EXPECT_NEAR(done->metrics.at("global_ipmr"), 0.962, 1e-12);
  EXPECT_EQ(done->curves.at("train_loss").steps.size(), 10u);
  EXPECT_EQ(done->curves.at("copy_acc").steps.size(), 2u);
  EXPECT_EQ(done->ipmr.at(1).layers, 4);
}

TEST(Report, MetricsFromSummary) {
  const auto m = metrics_from_summary(summary(0.8, 0.95, 2, 3, 0.6).dump());
  EXPECT_DOUBLE_EQ(m.at("global_ipmr"), 0.8);
  EXPECT_DOUBLE_EQ(m.at("mean_ipmr"), 0.2);
  EXPECT_DOUBLE_EQ(m.at("top_head_ipmr"), 0.8 * 0.9);
  EXPECT_DOUBLE_EQ(m.at("global_ipmr_d2"), 0.6);
  EXPECT_DOUBLE_EQ(m.at("global_ipmr_best"), 0.8);
  EXPECT_DOUBLE_EQ(m.at("copy_acc"), 0.95);
  EXPECT_DOUBLE_EQ(m.at("eval_loss"), 2.3);
  EXPECT_DOUBLE_EQ(m.at("final_train_loss"), 2.25);
}

// The phase-change step: the midpoint of the training loss's drop, by hand.
TEST(Report, PhaseChangeStepIsTheMidpointOfTheDrop) {
  Curve c;
  for (int i = 0; i < 20; i++) {
    c.steps.push_back(10.0 * i);
    c.values.push_back(i < 8 ? 3.5 : i < 11 ? 3.5 - 0.5 * (i - 7) : 1.75);  // plateau 3.5, drop at steps 80..100
  }
  // start 3.5, end 1.75: half 2.625; smoothed values at steps 80, 90, 100 are 3.0, 2.5, 2.0
  EXPECT_EQ(phase_change_step(c), 90.0);
  c.values[9] = 0.0;  // one outlier does not move it (running median of 3)
  EXPECT_EQ(phase_change_step(c), 90.0);
  Curve flat;
  for (int i = 0; i < 20; i++) flat.steps.push_back(i), flat.values.push_back(3.5 - 0.01 * i);  // 5% drop: none
  EXPECT_TRUE(std::isnan(phase_change_step(flat)));
  Curve short_curve{{0, 1, 2, 3}, {3, 2, 1, 0}};
  EXPECT_TRUE(std::isnan(phase_change_step(short_curve)));
}

TEST(Report, TablesCarryTheHandComputedStatistics) {
  const ReportDocument doc = build(nine_seed_sweep());
  const std::string& md = doc.markdown;
  // Per-seed table: the best cell of each row in bold; unusable runs named, not numbers.
  expect_contains(md, "| seed | layer=L0 | layer=L1 | layer=L2 |");
  expect_contains(md, "| 0 | **0.7%** | 0.2% | failed |");
  expect_contains(md, "| 1 | 13.6% | **43.3%** | pending |");
  expect_contains(md, "| 2 | **24.3%** | 19.9% | failed |");
  expect_contains(md, "| 42 | 0.0% | **96.2%** | 80.0% |");
  // Summaries: L0 sums to 54.0 over 9 seeds, L1 to 336.0; L2 has six usable seeds, 65%..90%.
  expect_contains(md, "| L0 | 9 | 6.0% |");
  expect_contains(md, "| 0.0% | 24.3% | 0/9 |");
  expect_contains(md, "| L1 | 9 | 37.3% |");
  expect_contains(md, "| 3/9 |");
  expect_contains(md, "| L2 | 6 | **77.5%** |");
  expect_contains(md, "| 6/6 | 2 failed, 1 pending |");
  // The paired comparison of the notes, with the test named next to the p-value.
  expect_contains(md, "| layer=L0 | layer=L1 | 9 | +31.3 pp | 45.9 pp | 4 / 4 / 1 | 0.0625 | "
                      "exact paired sign-flip (all 2^9 = 512 sign patterns) | 0.0374 |");
  // L0 vs L2 pairs only the six seeds where both are usable, all wins: p = 1/64.
  expect_contains(md, "| layer=L0 | layer=L2 | 6 |");
  expect_contains(md, "| 6 / 0 / 0 | **0.0156** | exact paired sign-flip (all 2^6 = 64 sign patterns) |");
  expect_contains(md, "## Runs not in the statistics");
  expect_contains(md, "`layer=L2__seed=0`: failed (non-finite loss at step 17)");
  expect_contains(md, "`layer=L2__seed=1`: pending");
  expect_contains(md, "27 runs: 24 done, 2 failed, 1 pending");
  expect_contains(md, "canonlab report ");
  expect_contains(md, "`global_ipmr_best`");  // the metric list in the header
}

TEST(Report, MarkdownReferencesEverySvgAndHtmlInlinesThem) {
  const ReportDocument doc = build(nine_seed_sweep());
  // strip plot + 2 learning curves, and one heatmap per column value (first finished seed).
  ASSERT_EQ(doc.svgs.size(), 6u);
  size_t inlined = 0;
  for (size_t pos = 0; (pos = doc.html.find("<svg xmlns=", pos)) != std::string::npos; pos++) inlined++;
  EXPECT_EQ(inlined, doc.svgs.size());
  for (const ReportFile& f : doc.svgs) {
    expect_contains(doc.markdown, "](" + f.name + ")");
    std::string why;
    EXPECT_TRUE(well_formed(f.content, &why)) << f.name << ": " << why;
    expect_contains(f.content, "xmlns=\"http://www.w3.org/2000/svg\"");
    expect_contains(f.content, "viewBox=\"0 0 ");
  }
  expect_contains(doc.markdown, "heatmap-layer-L2__seed-7-d1.svg");  // L2's seeds 0-2 are not usable
}

TEST(Report, HtmlIsSelfContainedAndBalanced) {
  const ReportDocument doc = build(nine_seed_sweep());
  std::string why;
  EXPECT_TRUE(well_formed(doc.html, &why, {"meta"})) << why;
  EXPECT_EQ(doc.html.find("<script"), std::string::npos);
  EXPECT_EQ(doc.html.find("src="), std::string::npos);
  EXPECT_EQ(doc.html.find("href="), std::string::npos);
  EXPECT_EQ(doc.html.find("url("), std::string::npos);
  // The only URL is the SVG namespace.
  std::string rest = doc.html;
  for (size_t p; (p = rest.find("http://www.w3.org/2000/svg")) != std::string::npos;) rest.erase(p, 26);
  EXPECT_EQ(rest.find("http"), std::string::npos);
  expect_contains(doc.html, "<td class=\"num failed\">failed</td>");
  expect_contains(doc.html, "<td class=\"num\"><strong>96.2%</strong></td>");
}

// Issue 25: report.md took text from the sweep as written, so a description with "<script>" was raw HTML for a
// Markdown viewer while report.html escaped it. Markdown keeps the `code` and **bold** marks and nothing else:
// no raw HTML, no links or images, no escapes of the text's own, and code spans where the HTML has them.
TEST(Report, MarkdownShowsSweepTextLiterally) {
  doc::Document d;
  d.paragraph("<script>alert(1)</script> [x](javascript:alert(1)) ![i](x.svg) <http://e.org> &lt;b&gt; B < A & C");
  d.paragraph("\\`<img src=x onerror=alert(1)>` and `a``b` and ``<b> and `x\n\n<i>` and `open <u>");
  d.bullets({"<em>item</em>"});
  d.heading(2, "<h1>x</h1>");
  d.table({{"<th>"}, {false}, {{doc::Cell("<td>|`<td>`", true)}}});
  d.figures({{"f.svg", "", "<b>caption</b> `<code>`"}});
  const std::string md = d.markdown();
  expect_contains(md, "&lt;script>alert(1)&lt;/script> \\[x](javascript:alert(1)) !\\[i](x.svg) &lt;http://e.org> "
                      "&amp;lt;b&amp;gt; B < A & C\n");
  expect_contains(md, "\\\\`<img src=x onerror=alert(1)>` and `ab` and &lt;b> and `x  <i>` and `open <u>`\n");
  expect_contains(md, "- &lt;em>item&lt;/em>\n");
  expect_contains(md, "## &lt;h1>x&lt;/h1>\n");
  expect_contains(md, "| &lt;th> |\n|---|\n| **&lt;td>\\|`<td>`** |\n");
  expect_contains(md, "*&lt;b>caption&lt;/b> `<code>`*");
  // Outside code spans no '<' opens a tag; the HTML rendering of the same text is escaped throughout.
  std::string outside_code;
  bool in_code = false;
  for (char c : md) {
    if (c == '`') in_code = !in_code;
    else if (!in_code) outside_code += c;
  }
  for (const char* tag : {"<script", "<img", "<http", "<em", "<h1", "<th", "<td", "<b", "<i", "<u"})
    EXPECT_EQ(outside_code.find(tag), std::string::npos) << tag << " in\n" << md;
  EXPECT_EQ(d.html("t").find("<script"), std::string::npos);

  // End to end: the sweep's description.
  const fs::path dir = nine_seed_sweep();
  json manifest = json::parse(read(dir / "sweep.json"));
  manifest["description"] = "<script>alert(1)</script>";
  write(dir / "sweep.json", manifest.dump());
  const ReportDocument built = build(dir);
  EXPECT_EQ(built.markdown.find("<script"), std::string::npos);
  expect_contains(built.markdown, "&lt;script>alert(1)&lt;/script>");
  EXPECT_EQ(built.html.find("<script"), std::string::npos);
}

TEST(Report, WritesFilesAndTheCliRunsEndToEnd) {
  const fs::path dir = nine_seed_sweep();
  // Repeatable options take one value each, so SWEEP_DIR may follow them.
  const CliResult r = run_cli("report --compare layer=L1:layer=L2 " + dir.string() + " --heatmap layer=L1__seed=42");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path out = dir / "report";
  for (const char* f : {"report.md", "report.html", "heatmap-layer-L1__seed-42-d1.svg", "strip-global_ipmr.svg",
                        "curve-copy_acc.svg", "curve-train_loss.svg"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  const std::string md = read(out / "report.md");
  expect_contains(md, "--compare layer=L1:layer=L2 --heatmap layer=L1__seed=42");
  EXPECT_EQ(md.find("| layer=L0 | layer=L1 | 9 |"), std::string::npos);  // only the asked-for comparison
  expect_contains(md, "| layer=L1 | layer=L2 | 6 |");
}

TEST(Report, UnknownNamesFailListingWhatExists) {
  const fs::path dir = nine_seed_sweep();
  const SweepResults s = load_sweep(dir);
  auto error_of = [&](ReportRequest req) {
    try {
      plan_report(s, req);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ReportRequest metric;
  metric.metric = "global_ipmr_d7";
  const std::string m = error_of(metric);
  expect_contains(m, "unknown metric 'global_ipmr_d7'");
  expect_contains(m, "global_ipmr, mean_ipmr, top_head_ipmr");
  ReportRequest pivot;
  pivot.pivot = "seed,offset";
  expect_contains(error_of(pivot), "unknown axis 'offset' in --pivot; the sweep's axes are: layer, seed");
  ReportRequest compare;
  compare.compare = {"layer=L0:layer=L9"};
  expect_contains(error_of(compare), "'L9' is not a value of axis 'layer'; its values are: L0, L1, L2");
  ReportRequest heat;
  heat.heatmap_runs = {"nope"};
  expect_contains(error_of(heat), "--heatmap: unknown run 'nope'");

  const CliResult r = run_cli("report " + dir.string() + " --metric accuracy");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  expect_contains(r.output, "unknown metric 'accuracy'");
  expect_contains(r.output, "copy_acc");
}

// A sweep over seeds alone (one arm studied beside baselines reported elsewhere) still gets a report: one column
// named after the sweep, its per-seed table and summary, and no paired comparison (there is nothing to pair with).
TEST(Report, ASweepOfOneAxisGetsOneColumn) {
  const json axes = json::array({{{"name", "seed"}, {"keys", {"train.seed"}}, {"labels", {"0", "1", "2"}}}});
  std::vector<FixtureRun> runs;
  for (int seed = 0; seed < 3; seed++) runs.push_back({{{"seed", std::to_string(seed)}}, Fate::done, 0.2 * (seed + 1), {}});
  const fs::path dir = write_sweep("single", axes, runs, json{{"pivot", {"seed"}}});
  const SweepResults raw = load_sweep(dir);
  ReportRequest req;
  try {
    plan_report(raw, req);
    ADD_FAILURE() << "a one-axis sweep was planned without a column";
  } catch (const Error& e) {
    expect_contains(e.what(), "this sweep has 1 axis(es): seed");
  }
  const SweepResults s = with_sweep_column(raw);
  ASSERT_EQ(s.axes.size(), 2u);
  EXPECT_EQ(s.axes[1].labels, std::vector<std::string>{"fixture-single"});
  const ReportPlan plan = plan_report(s, req);  // the manifest's pivot [seed], completed
  EXPECT_EQ(plan.row.name, "seed");
  EXPECT_EQ(plan.col.name, "sweep");
  EXPECT_TRUE(plan.compare.empty());
  const ReportDocument doc = build_report(s, plan);
  expect_contains(doc.markdown, "| seed | sweep=fixture-single |");
  expect_contains(doc.markdown, "| 2 | 60.0% |");  // no bold: a row of one cell has no best
  expect_contains(doc.markdown, "| fixture-single | 3 | 40.0% |");
  // A two-axis sweep is left as it is, and --pivot ROW alone takes the first other axis as columns.
  EXPECT_EQ(with_sweep_column(load_sweep(nine_seed_sweep())).axes.size(), 2u);
  ReportRequest row_only;
  row_only.pivot = "seed";
  EXPECT_EQ(plan_report(load_sweep(nine_seed_sweep()), row_only).col.name, "layer");

  const CliResult r = run_cli("report " + dir.string() + " --pivot seed");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_contains(r.output, "rows seed, columns sweep");
  EXPECT_TRUE(fs::exists(dir / "report" / "strip-global_ipmr.svg"));
}

TEST(Report, ExtraAxesGetASectionEachAndManifestDefaultsApply) {
  const json axes = json::array(
      {{{"name", "layer"}, {"keys", {"model.attention.key_shift.layers"}}, {"labels", {"L0", "L1"}}},
       {{"name", "offset"}, {"keys", {"model.attention.key_shift.offset"}}, {"labels", {"1", "2"}}},
       {{"name", "seed"}, {"keys", {"train.seed"}}, {"labels", {"0", "1", "2"}}}});
  std::vector<FixtureRun> runs;
  for (const char* layer : {"L0", "L1"})
    for (const char* offset : {"1", "2"})
      for (int seed = 0; seed < 3; seed++)
        runs.push_back({{{"layer", layer}, {"offset", offset}, {"seed", std::to_string(seed)}},
                        Fate::done,
                        0.1 * seed + (layer[1] == '1' ? 0.5 : 0),
                        std::string(offset) == "2" ? std::optional<double>(0.3) : std::nullopt});
  const json defaults = {{"metric", "global_ipmr_best"}, {"threshold", 0.25}, {"compare", {"L1:L0"}}};
  const ReportDocument doc = build(write_sweep("three", axes, runs, defaults));
  expect_contains(doc.markdown, "## offset=1");
  expect_contains(doc.markdown, "## offset=2");
  expect_contains(doc.markdown, "**Metric** `global_ipmr_best`");
  expect_contains(doc.markdown, "> 25.0%");
  expect_contains(doc.markdown, "| layer=L1 | layer=L0 | 3 | -50.0 pp |");
  // Runs with offset 2 have a delta-2 IPMR: they get a heatmap for each delta.
  expect_contains(doc.markdown, "heatmap-layer-L0__offset-2__seed-0-d2.svg");
  expect_contains(doc.markdown, "strip-global_ipmr_best-2.svg");
}

TEST(Report, LossMetricsPrintAsPlainNumbers) {
  ReportRequest req;
  req.metric = "eval_loss";
  const ReportDocument doc = build(nine_seed_sweep(), req);
  expect_contains(doc.markdown, "| 42 | 2.300 | 2.300 | 2.300 |");
  expect_contains(doc.markdown, "| 0.000 |");  // std of identical losses
}

// For a metric where lower is better (bpc, losses), "B wins" and p mean B lower than A; Δ stays B − A.
TEST(Report, LowerIsBetterMetricsCompareTowardsLower) {
  std::vector<FixtureRun> runs;
  for (const std::string& seed : kSeeds)
    for (const std::string layer : {"L0", "L1", "L2"}) runs.push_back({{{"layer", layer}, {"seed", seed}}, Fate::done, 0.5, {}});
  const fs::path dir = write_sweep("lower", layer_seed_axes(), runs);
  for (size_t i = 0; i < kSeeds.size(); i++)  // eval loss: L1 = L0 - 0.1 on every seed, L2 = L0 + 0.1
    for (const auto& [layer, loss] : {std::pair{"L0", 2.0 + 0.01 * double(i)}, std::pair{"L1", 1.9 + 0.01 * double(i)},
                                      std::pair{"L2", 2.1 + 0.01 * double(i)}}) {
      const fs::path file = dir / "runs" / (std::string("layer=") + layer + "__seed=" + kSeeds[i]) / "summary.json";
      json s = json::parse(read(file));
      s["eval"]["loss"] = loss;
      write(file, s.dump());
    }
  ReportRequest req;
  req.metric = "eval_loss";
  const std::string md = build(dir, req).markdown;
  expect_contains(md, "p (one-sided, B < A)");
  expect_contains(md, "Lower `eval_loss` is better");
  expect_contains(md, "| layer=L0 | layer=L1 | 9 | -0.100 |");
  expect_contains(md, "| 9 / 0 / 0 | **0.0020** |");  // every seed lower: p = 1/512
  expect_contains(md, "| layer=L0 | layer=L2 | 9 | +0.100 |");
  expect_contains(md, "| 0 / 9 / 0 | 1.0000 |");
}

TEST(Svg, HeatmapIsWellFormedAndColoursTheExtremes) {
  svg::Heatmap h;
  h.title = "a <b> & \"c\"";
  h.row_labels = {"L0", "L1"};
  h.col_labels = {"H0", "H1", "H2"};
  h.values = {0.0, 0.5, 1.0, NAN, 0.25, 2.0};
  h.annotate = true;
  h.x_label = "head";
  h.y_label = "layer";
  const std::string s = svg::heatmap(h);
  std::string why;
  EXPECT_TRUE(well_formed(s, &why)) << why << "\n" << s;
  expect_contains(s, "a &lt;b&gt; &amp; &quot;c&quot;");
  expect_contains(s, "fill=\"" + std::string(svg::kHeatLow) + "\"");
  expect_contains(s, "fill=\"" + std::string(svg::kHeatHigh) + "\"");
  expect_contains(s, ">100.0%</text>");
  expect_contains(s, ">200.0%</text>");  // annotated as is, coloured clamped
  EXPECT_EQ(s.find("NaN"), std::string::npos);
  EXPECT_EQ(s.find("nan"), std::string::npos);
  EXPECT_EQ(s, svg::heatmap(h));  // deterministic
}

TEST(Svg, StripPlotAndLineChartAreWellFormedAndDeterministic) {
  svg::StripPlot p;
  p.title = "global_ipmr by layer";
  p.categories = {"L0", "L1", "L2"};
  p.points = {{0.1, 0.2, NAN}, {0.9, 0.95, 1.0}, {}};
  p.percent = true;
  p.has_threshold = true;
  p.threshold = 0.5;
  const std::string s = svg::strip_plot(p);
  std::string why;
  EXPECT_TRUE(well_formed(s, &why)) << why;
  expect_contains(s, std::string(svg::kMeanColour));
  expect_contains(s, "threshold 50.0%");
  expect_contains(s, ">100%</text>");
  EXPECT_EQ(s, svg::strip_plot(p));

  svg::LineChart c;
  c.title = "eval copy_acc";
  c.percent = true;
  c.series.push_back({"layer=L0", {{0, 50, 100}, {0.1, NAN, 0.9}}, {{{0, 100}, {0.2, 0.8}}}});
  c.series.push_back({"layer=L1", {{0, 100}, {0.5, 0.6}}, {}});
  const std::string l = svg::line_chart(c);
  EXPECT_TRUE(well_formed(l, &why)) << why;
  expect_contains(l, "stroke=\"" + std::string(svg::palette()[1]) + "\"");
  expect_contains(l, " M");  // the NaN breaks the first mean line into two pieces
  EXPECT_EQ(l, svg::line_chart(c));
}

TEST(Svg, FixedNumberFormatting) {
  EXPECT_EQ(svg::fmt(-0.0001, 1), "0.0");
  EXPECT_EQ(svg::fmt(2.25, 1), "2.2");  // round-half-even of the binary value, as printf does
  EXPECT_EQ(svg::fmt(-1.5, 0), "-2");
  EXPECT_EQ(svg::heat_colour(0), std::string(svg::kHeatLow));
  EXPECT_EQ(svg::heat_colour(1), std::string(svg::kHeatHigh));
  EXPECT_EQ(svg::heat_colour(7), std::string(svg::kHeatHigh));
}

TEST(Report, TaskMetricsGetTheirOwnTableAndCurve) {
  // Runs of a non-copy task log their metric in eval records and the summary; the report plots that metric's
  // curve (not copy_acc's) and tabulates its final values.
  const fs::path dir = nine_seed_sweep();
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().filename() == "summary.json") {
      json s = json::parse(read(e.path()));
      s["eval"]["depo_acc_k_max"] = 0.25;
      std::ofstream(e.path()) << s.dump();
    }
    if (e.path().filename() == "metrics.jsonl")
      std::ofstream(e.path(), std::ios::app)
          << json({{"step", 100}, {"split", "eval"}, {"depo_acc_k_max", 0.25}, {"loss", 3.0}}).dump() << "\n";
  }
  const CliResult r = run_cli("report --metric depo_acc_k_max " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "report" / "curve-depo_acc_k_max.svg"));
  EXPECT_FALSE(fs::exists(dir / "report" / "curve-copy_acc.svg"));
  expect_contains(read(dir / "report" / "report.md"), "25.0%");
}
