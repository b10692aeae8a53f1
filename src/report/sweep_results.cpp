#include "report/sweep_results.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/paths.h"
#include "io/json_read.h"

namespace canonlab::report {

namespace fs = std::filesystem;
using nlohmann::json;

std::string to_string(RunState s) {
  switch (s) {
    case RunState::done: return "done";
    case RunState::failed: return "failed";
    case RunState::running: return "running";
    case RunState::pending: return "pending";
  }
  return "?";
}

namespace {

// Axis labels and run axis values are strings in the format, but a hand-written sweep.json may use numbers.
std::string as_label(const json& v) { return v.is_string() ? v.get<std::string>() : brief(v, 200); }

std::vector<std::string> string_list(const json& j, const std::string& what) {
  CANONLAB_CHECK(j.is_array(), what + " must be a list");
  std::vector<std::string> out;
  for (const json& v : j) out.push_back(as_label(v));
  return out;
}

double number_or_nan(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : std::numeric_limits<double>::quiet_NaN();
}

void read_metrics_jsonl(const fs::path& path, RunResult& run) {
  // An ifstream opens a directory too and then reads nothing, which would pass for a run without curves.
  if (!path_exists(path, "cannot read run metrics")) return;
  require_regular_file(path, "cannot read run metrics");
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    // A run still writing (or killed mid-write) can leave a partial last line; it is skipped, not fatal.
    json j = parse_json_or_discarded(line);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number()) continue;
    const double step = j["step"].get<double>();
    const std::string split = j.contains("split") && j["split"].is_string() ? j["split"].get<std::string>() : "";
    auto add = [&](const std::string& curve, const char* key) {
      const double v = number_or_nan(j, key);
      if (!std::isfinite(v)) return;
      run.curves[curve].steps.push_back(step);
      run.curves[curve].values.push_back(v);
    };
    if (split == "train") add("train_loss", "loss");
    if (split == "eval") {
      add("eval_loss", "loss");
      // Every task metric (copy_acc, depo_acc_k_max, bpc, ...) gets a curve under its own name.
      for (const auto& [key, value] : j.items())
        if (value.is_number() && key != "loss" && key != "step" && key != "elapsed_s") add(key, key.c_str());
    }
  }
}

// "delta_2" -> 2; false for any other key (so a malformed summary cannot throw from std::stoi).
bool parse_delta_key(const std::string& key, int* delta) {
  const std::string prefix = "delta_";
  if (key.rfind(prefix, 0) != 0 || key.size() == prefix.size() || key.size() > prefix.size() + 6) return false;
  for (size_t i = prefix.size(); i < key.size(); i++)
    if (key[i] < '0' || key[i] > '9') return false;
  *delta = std::stoi(key.substr(prefix.size()));
  return true;
}

void read_ipmr_matrices(const json& summary, RunResult& run) {
  if (!summary.contains("ipmr") || !summary["ipmr"].is_object()) return;
  for (const auto& [key, entry] : summary["ipmr"].items()) {
    int delta = 0;
    if (!parse_delta_key(key, &delta) || !entry.is_object() || !entry.contains("per_head") || !entry["per_head"].is_array())
      continue;
    IpmrMatrix m;
    const json& rows = entry["per_head"];
    m.layers = int(rows.size());
    for (const json& row : rows) {
      if (!row.is_array()) return;
      m.heads = std::max(m.heads, int(row.size()));
      for (const json& v : row) m.rates.push_back(v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN());
    }
    if (m.rates.size() == size_t(m.layers) * m.heads) run.ipmr[delta] = std::move(m);
  }
}

// A run file that is not there yet is normal (the run is pending); one that cannot be read (a directory in its
// place, no permission) is an error that names it, not a run silently left out.
void load_run(const fs::path& sweep_dir, RunResult& run) {
  const fs::path dir = sweep_dir / run.dir;
  const auto status_text = read_text_if_exists(dir / "status.json", "run status");
  if (!status_text) {
    run.state = RunState::pending;
    return;
  }
  const json status = parse_json_or_discarded(*status_text);
  if (!status.is_object()) {
    run.state = RunState::failed;
    run.error = "status.json is not valid JSON";
    return;
  }
  const std::string state = status.value("state", "pending");
  if (state == "failed") {
    run.state = RunState::failed;
    run.error = status.contains("error") ? as_label(status["error"]) : "failed (no error message)";
    return;
  }
  if (state == "running") run.state = RunState::running;
  if (state != "done") return;

  const auto summary_text = read_text_if_exists(dir / "summary.json", "run summary");
  json summary = summary_text ? parse_json_or_discarded(*summary_text) : json();
  if (!summary.is_object()) {
    run.state = RunState::failed;
    run.error = summary_text ? "summary.json is not valid JSON" : "marked done but summary.json is missing";
    return;
  }
  run.state = RunState::done;
  // A later `canonlab probe` of the final checkpoint (probe/probe.json) supersedes the probe taken at the end
  // of training: it may measure more sequences or metrics the training binary did not have.
  if (const auto probe_text = read_text_if_exists(dir / "probe" / "probe.json", "probe result")) {
    const json probe = parse_json_or_discarded(*probe_text);
    if (probe.is_object() && probe.contains("ipmr") && probe["ipmr"].is_object()) summary["ipmr"] = probe["ipmr"];
  }
  run.metrics = metrics_from_summary(summary.dump());
  read_ipmr_matrices(summary, run);
  read_metrics_jsonl(dir / "metrics.jsonl", run);
  if (const auto loss = run.curves.find("train_loss"); loss != run.curves.end())
    run.metrics["phase_change_step"] = phase_change_step(loss->second);
}

bool is_delta_metric(const std::string& name, int* delta) {
  const std::string prefix = "global_ipmr_d";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() || name.size() > prefix.size() + 6) return false;
  const std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  if (delta) *delta = std::stoi(digits);
  return true;
}

}  // namespace

std::map<std::string, double> metrics_from_summary(const std::string& summary_json_text) {
  const json s = parse_json_or_discarded(summary_json_text);
  std::map<std::string, double> m;
  if (!s.is_object()) return m;
  auto put = [&](const std::string& name, double v) {
    if (std::isfinite(v)) m[name] = v;
  };
  put("final_train_loss", number_or_nan(s, "final_train_loss"));
  if (s.contains("eval") && s["eval"].is_object()) {
    for (const auto& [key, value] : s["eval"].items())
      if (key != "loss" && value.is_number()) put(key, value.get<double>());
    put("eval_loss", number_or_nan(s["eval"], "loss"));
  }
  if (!s.contains("ipmr") || !s["ipmr"].is_object()) return m;
  double best = -std::numeric_limits<double>::infinity();
  for (const auto& [key, e] : s["ipmr"].items()) {
    int delta = 0;
    if (!parse_delta_key(key, &delta) || !e.is_object()) continue;
    const double global = number_or_nan(e, "global");
    if (std::isfinite(global)) best = std::max(best, global);
    if (delta != 1) {
      put("global_ipmr_d" + std::to_string(delta), global);
      continue;
    }
    put("global_ipmr", global);
    put("mean_ipmr", number_or_nan(e, "mean"));
    put("confident_ipmr", number_or_nan(e, "confident"));
    double top = -std::numeric_limits<double>::infinity();
    if (e.contains("per_head") && e["per_head"].is_array())
      for (const json& row : e["per_head"])
        if (row.is_array())
          for (const json& v : row)
            if (v.is_number()) top = std::max(top, v.get<double>());
    put("top_head_ipmr", top);
  }
  put("global_ipmr_best", best);
  return m;
}

std::vector<MetricInfo> documented_metrics() {
  return {
      {"global_ipmr", "IPMR at delta 1, global: fraction of copy queries where some head's attention argmax is the "
                      "token after the earlier occurrence", true, true},
      {"mean_ipmr", "IPMR at delta 1, mean over all layers and heads", true, true},
      {"confident_ipmr", "IPMR at delta 1 counting, per query, only the head with the highest attention peak (chance is "
                         "the per-head level; global_ipmr saturates on short sequences)", true, true},
      {"top_head_ipmr", "IPMR at delta 1 of the best single head", true, true},
      {"global_ipmr_d<k>", "global IPMR at delta k (the key-shift offset), for each k != 1 in the runs", true, true},
      {"global_ipmr_best", "the larger of the global IPMRs over all deltas measured", true, true},
      {"copy_acc", "held-out next-token accuracy where the token can be copied (eval.copy_acc)", true, true},
      {"depo_acc_k_max", "Depo: answer-token accuracy at n = N, k = K (teacher forced)", true, true},
      {"depo_acc_k_half", "Depo: answer-token accuracy at n = N, k = K/2 (teacher forced)", true, true},
      {"brevo_acc", "Brevo: generated answers that list exactly the query's ancestors in a valid order, n = N", true, true},
      {"mano_acc", "Mano: answer accuracy at l = L operators", true, true},
      {"lano_acc", "Lano: sentences sampled at temperature 1 from <bos> that the grammar accepts", true, true},
      {"capo_bits", "Capo: bits of biography knowledge stored (Part 3.3 estimate from attribute losses)", false, true},
      {"capo_bits_per_param", "Capo: capo_bits divided by the model's parameter count", false, true},
      {"mqar_acc", "MQAR: accuracy at the query positions", true, true},
      {"bpc", "text: bits per character (UTF-8 code points) on the held-out split", false, false},
      {"bpb", "text: bits per byte on the held-out split (equals bpc on ASCII text)", false, false},
      {"eval_loss", "held-out loss at the end of training", false, false},
      {"final_train_loss", "training loss at the last step", false, false},
      {"phase_change_step", "step of the loss phase change: where the smoothed training loss has made half of its drop "
                            "from the start to the end of the run (– when it drops by less than 10%)", false, false},
  };
}

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

double phase_change_step(const Curve& c) {
  const size_t n = std::min(c.steps.size(), c.values.size());
  if (n < 5) return std::numeric_limits<double>::quiet_NaN();
  std::vector<double> smooth(n);
  for (size_t i = 0; i < n; i++)
    smooth[i] = i == 0 || i + 1 == n ? c.values[i] : median_of({c.values[i - 1], c.values[i], c.values[i + 1]});
  const double start = median_of({c.values[0], c.values[1], c.values[2]});
  const size_t tail = std::max<size_t>(1, n / 10);
  const double end = median_of(std::vector<double>(c.values.begin() + ptrdiff_t(n - tail), c.values.begin() + ptrdiff_t(n)));
  if (!(start - end >= 0.1 * std::abs(start))) return std::numeric_limits<double>::quiet_NaN();
  const double half = 0.5 * (start + end);
  for (size_t i = 0; i < n; i++)
    if (smooth[i] <= half) return c.steps[i];
  return std::numeric_limits<double>::quiet_NaN();
}

MetricInfo metric_info(const std::string& name) {
  int delta = 0;
  if (is_delta_metric(name, &delta))
    return {name, "global IPMR at delta " + std::to_string(delta), true, true};
  for (const MetricInfo& m : documented_metrics())
    if (m.name == name) return m;
  return {name, "", false, true};
}

const Axis* SweepResults::find_axis(const std::string& axis_name) const {
  for (const Axis& a : axes)
    if (a.name == axis_name) return &a;
  return nullptr;
}

const RunResult* SweepResults::find_run(const std::string& run_name) const {
  for (const RunResult& r : runs)
    if (r.name == run_name) return &r;
  return nullptr;
}

std::vector<std::string> SweepResults::metric_names() const {
  std::vector<std::string> names;
  auto add = [&](const std::string& n) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  };
  // Documented order first, then the per-delta names in delta order.
  std::vector<std::string> present;
  for (const RunResult& r : runs)
    for (const auto& [n, v] : r.metrics) present.push_back(n);
  for (const MetricInfo& m : documented_metrics())
    if (std::find(present.begin(), present.end(), m.name) != present.end()) add(m.name);
  std::vector<std::pair<int, std::string>> deltas;
  for (const std::string& n : present) {
    int d = 0;
    if (is_delta_metric(n, &d)) deltas.emplace_back(d, n);
  }
  std::sort(deltas.begin(), deltas.end());
  for (const auto& [d, n] : deltas) add(n);
  return names;
}

int SweepResults::count(RunState s) const {
  return int(std::count_if(runs.begin(), runs.end(), [&](const RunResult& r) { return r.state == s; }));
}

SweepResults load_sweep(const fs::path& dir) {
  const fs::path file = dir / "sweep.json";
  const auto text = read_text_if_exists(file, "sweep manifest");
  CANONLAB_CHECK(text, "no sweep.json in '" + dir.string() + "' (a sweep directory is written by `canonlab sweep`)");
  const json j = parse_json(*text, file.string());
  CANONLAB_CHECK(j.is_object(), file.string() + ": expected a JSON object");
  SweepResults s;
  s.dir = dir;
  try {
    const std::string format = j.value("format", "canonlab-sweep/1");
    CANONLAB_CHECK(format == "canonlab-sweep/1",
                   file.string() + ": format '" + format + "' is not supported (expected canonlab-sweep/1)");
    s.name = j.value("name", dir.filename().string());
    s.description = j.value("description", "");
    for (const json& a : j.at("axes")) {
      Axis axis;
      axis.name = a.at("name").get<std::string>();
      if (a.contains("keys")) axis.keys = string_list(a["keys"], "axis '" + axis.name + "' keys");
      axis.labels = string_list(a.at("labels"), "axis '" + axis.name + "' labels");
      s.axes.push_back(std::move(axis));
    }
    for (const json& r : j.at("runs")) {
      RunResult run;
      run.name = r.at("name").get<std::string>();
      run.dir = r.value("dir", "runs/" + run.name);
      if (r.contains("axes"))
        for (const auto& [k, v] : r["axes"].items()) run.axes[k] = as_label(v);
      s.runs.push_back(std::move(run));
    }
    if (j.contains("report") && j["report"].is_object()) {
      const json& rep = j["report"];
      if (rep.contains("pivot")) s.defaults.pivot = string_list(rep["pivot"], "report.pivot");
      if (rep.contains("metric")) s.defaults.metric = rep["metric"].get<std::string>();
      if (rep.contains("threshold")) s.defaults.threshold = rep["threshold"].get<double>();
      if (rep.contains("compare")) s.defaults.compare = string_list(rep["compare"], "report.compare");
    }
  } catch (const json::exception& e) {
    throw Error(file.string() + ": " + e.what());
  }
  for (RunResult& run : s.runs) {
    // One run's malformed files (wrong JSON types) make that run unusable, not the whole report.
    try {
      load_run(dir, run);
    } catch (const json::exception& e) {
      run.metrics.clear();
      run.curves.clear();
      run.ipmr.clear();
      run.state = RunState::failed;
      run.error = std::string("unreadable run files: ") + e.what();
    }
  }
  return s;
}

}  // namespace canonlab::report
