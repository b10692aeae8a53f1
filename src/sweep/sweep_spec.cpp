#include "sweep/sweep_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>

#include <yaml-cpp/yaml.h>

#include "config/yaml_document.h"
#include "engine/error.h"
#include "io/paths.h"
#include "io/strict_number.h"

namespace canonlab {

namespace fs = std::filesystem;

namespace {

// Errors point at the sweep file and line, like config errors do.
struct SpecReader {
  std::string file;

  std::string where(const YAML::Node& node) const {
    return node.Mark().is_null() ? file : file + ":" + std::to_string(node.Mark().line + 1);
  }
  [[noreturn]] void fail(const YAML::Node& node, const std::string& message) const {
    throw Error(where(node) + ": " + message);
  }
  std::string scalar(const YAML::Node& node, const std::string& what) const {
    if (!node.IsScalar()) fail(node, what + ": expected a single value");
    return node.Scalar();
  }
};

std::string flow_yaml(const YAML::Node& node) {
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

// "L0", "3e-4", "0-2" for [0, 2]: readable, and safe as part of a directory name.
std::string default_label(const YAML::Node& value) {
  std::string text;
  if (value.IsScalar()) {
    text = value.Scalar();
  } else if (value.IsSequence()) {
    for (size_t i = 0; i < value.size(); i++) text += (i ? "-" : "") + default_label(value[i]);
    if (value.size() == 0) text = "none";
  } else {
    text = flow_yaml(value);
  }
  return text;
}

std::string directory_safe(const std::string& text) {
  std::string out;
  for (char c : text) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+') ? c : '_';
  return out.empty() ? "_" : out;
}

// Plain YAML -> JSON for the report defaults: numbers and booleans keep their type, everything else is text.
nlohmann::json yaml_to_json(const YAML::Node& node) {
  if (node.IsSequence()) {
    nlohmann::json list = nlohmann::json::array();
    for (const YAML::Node& item : node) list.push_back(yaml_to_json(item));
    return list;
  }
  if (node.IsMap()) {
    nlohmann::json map = nlohmann::json::object();
    for (auto it = node.begin(); it != node.end(); ++it) map[it->first.Scalar()] = yaml_to_json(it->second);
    return map;
  }
  if (!node.IsScalar()) return nullptr;
  const std::string& text = node.Scalar();
  if (text == "true" || text == "false") return text == "true";
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  if (!text.empty() && end == text.c_str() + text.size()) return number;
  return text;
}

constexpr size_t kMaxNameLength = 128;
// Longest run directory name ("layer=L0__seed=0"): file systems allow 255 bytes per path component.
constexpr size_t kMaxRunNameLength = 240;
constexpr size_t kMaxRuns = 100000;

bool is_plain_directory_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength || name == "." || name == "..") return false;
  return std::ranges::all_of(name, [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == '+';
  });
}

std::string canonical_key(const std::string& key) { return key == "seed" ? "train.seed" : key; }

// "task.n_symbols" -> "n-symbols": '_' is kept out of axis names because "__" separates them in run names.
std::string default_axis_name(const std::string& key) {
  auto dot = key.rfind('.');
  std::string name = dot == std::string::npos ? key : key.substr(dot + 1);
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// range: {start, stop, step} or [start, stop(, step)]; Python semantics (stop excluded).
std::vector<YAML::Node> range_values(const YAML::Node& range, const SpecReader& reader) {
  std::string start, stop, step = "1";
  if (range.IsSequence() && (range.size() == 2 || range.size() == 3)) {
    start = reader.scalar(range[0], "range start");
    stop = reader.scalar(range[1], "range stop");
    if (range.size() == 3) step = reader.scalar(range[2], "range step");
  } else if (range.IsMap() && range["start"] && range["stop"]) {
    start = reader.scalar(range["start"], "range.start");
    stop = reader.scalar(range["stop"], "range.stop");
    if (range["step"]) step = reader.scalar(range["step"], "range.step");
  } else {
    reader.fail(range, "range: expected {start: A, stop: B, step: C} or [A, B] / [A, B, C] (stop excluded)");
  }
  auto is_integer = [](const std::string& s) { return !s.empty() && s.find_first_not_of("-+0123456789") == std::string::npos; };
  std::vector<YAML::Node> values;
  try {
    if (is_integer(start) && is_integer(stop) && is_integer(step)) {
      long long a = std::stoll(start), b = std::stoll(stop), s = std::stoll(step);
      if (s == 0) reader.fail(range, "range step must not be 0");
      for (long long v = a; (s > 0 ? v < b : v > b) && values.size() <= 10000;) {
        values.emplace_back(v);
        if (__builtin_add_overflow(v, s, &v)) break;  // the next value would not fit: the range ends here
      }
    } else {
      double a = std::stod(start), b = std::stod(stop), s = std::stod(step);
      if (s == 0 || !std::isfinite(a + b + s)) reader.fail(range, "range needs finite numbers and a non-zero step");
      for (long long i = 0;; i++) {
        double v = a + double(i) * s;
        if (!(s > 0 ? v < b - 1e-12 * std::fabs(s) : v > b + 1e-12 * std::fabs(s)) || values.size() > 10000) break;
        char text[32];
        std::snprintf(text, sizeof text, "%.10g", v);
        values.emplace_back(std::string(text));
      }
    }
  } catch (const std::logic_error&) {
    reader.fail(range, "range: start, stop and step must be numbers");
  }
  if (values.empty()) reader.fail(range, "range is empty (stop is excluded)");
  if (values.size() > 10000) reader.fail(range, "range has more than 10000 values");
  return values;
}

// One `key` + `values`|`range` pair: the values of a plain axis or of one member of a zipped axis.
std::vector<YAML::Node> member_values(const YAML::Node& node, const SpecReader& reader) {
  if (node["values"] && node["range"]) reader.fail(node, "give either values or range, not both");
  if (node["range"]) return range_values(node["range"], reader);
  const YAML::Node values = node["values"];
  if (!values || !values.IsSequence() || values.size() == 0)
    reader.fail(node, "expected `values: [v1, v2, ...]` (a non-empty list) or `range:`");
  return std::vector<YAML::Node>(values.begin(), values.end());
}

SweepAxis parse_axis(const YAML::Node& node, const SpecReader& reader) {
  if (!node.IsMap()) reader.fail(node, "each entry of axes must be a mapping with key and values (or zip)");
  for (auto it = node.begin(); it != node.end(); ++it) {
    static const std::set<std::string> allowed = {"name", "key", "values", "range", "labels", "zip"};
    const std::string k = it->first.Scalar();
    if (!allowed.count(k))
      reader.fail(it->first, "unknown axis field '" + k + "'; allowed: name, key, values, range, labels, zip");
  }
  SweepAxis axis;
  axis.origin = reader.where(node);
  std::vector<std::vector<YAML::Node>> columns;  // [key index][value index]
  std::vector<YAML::Node> first_values;
  if (node["zip"]) {
    if (node["key"]) reader.fail(node, "a zipped axis lists its keys inside zip:, not in key:");
    const YAML::Node zip = node["zip"];
    if (!zip.IsSequence() || zip.size() < 2) reader.fail(zip, "zip: expected a list of at least two {key, values}");
    for (const YAML::Node& member : zip) {
      if (!member.IsMap() || !member["key"]) reader.fail(member, "zip entry: expected {key: a.b, values: [...]}");
      axis.keys.push_back(canonical_key(reader.scalar(member["key"], "key")));
      columns.push_back(member_values(member, reader));
      if (columns.back().size() != columns.front().size())
        reader.fail(member, "zip: every key needs the same number of values (" + std::to_string(columns.front().size()) +
                                " for " + axis.keys.front() + ", " + std::to_string(columns.back().size()) + " for " +
                                axis.keys.back() + ")");
    }
  } else {
    if (!node["key"]) reader.fail(node, "axis needs key: (a config key path such as train.lr, or seed) or zip:");
    axis.keys.push_back(canonical_key(reader.scalar(node["key"], "key")));
    columns.push_back(member_values(node, reader));
  }
  const size_t n = columns.front().size();
  for (size_t v = 0; v < n; v++) {
    std::vector<std::string> row;
    std::string label;
    for (size_t k = 0; k < columns.size(); k++) {
      row.push_back(flow_yaml(columns[k][v]));
      label += (k ? "-" : "") + default_label(columns[k][v]);
    }
    axis.yaml_values.push_back(row);
    axis.labels.push_back(label);
  }
  if (node["labels"]) {
    const YAML::Node labels = node["labels"];
    if (!labels.IsSequence() || labels.size() != n)
      reader.fail(labels, "labels: expected a list of " + std::to_string(n) + " names, one per value");
    for (size_t v = 0; v < n; v++) axis.labels[v] = reader.scalar(labels[v], "label");
  }
  for (auto& label : axis.labels) label = directory_safe(label);
  if (node["name"]) {
    axis.name = reader.scalar(node["name"], "name");
  } else {
    for (size_t k = 0; k < axis.keys.size(); k++)
      axis.name += (k ? "+" : "") + (axis.keys[k] == "train.seed" ? "seed" : default_axis_name(axis.keys[k]));
  }
  // The name is part of every run's directory name and of the report's file names. A control character is
  // refused with the rest: a NUL used to pass here and then cut the run's paths short at it, so that the run
  // directory and runs/ itself were the same path.
  const bool plain = std::ranges::none_of(axis.name, [](char c) {
    return c == '=' || c == '_' || c == '/' || c == ' ' || std::iscntrl(static_cast<unsigned char>(c));
  });
  if (axis.name.empty() || !plain)
    reader.fail(node, "axis name '" + printable_path(axis.name) +
                          "' must be non-empty without '=', '_', '/', spaces or control characters");
  std::set<std::string> seen;
  for (const auto& label : axis.labels)
    if (!seen.insert(label).second)
      reader.fail(node, "axis '" + axis.name + "' has the label '" + label + "' twice; give distinct labels:");
  return axis;
}

// The slurm: section: every value is checked here, so a bad one is reported with its line before anything is
// submitted, not by sbatch afterwards. Names and sizes are restricted to what cannot break an #SBATCH line.
std::optional<std::string> slurm_name_problem(const std::string& value) {
  static const std::regex name(R"([A-Za-z0-9_.+,-]+)");
  if (std::regex_match(value, name)) return std::nullopt;
  return "'" + value + "' is not a Slurm name; allowed: letters, digits and '_', '.', '+', '-' (',' between several)";
}

std::optional<std::string> slurm_time_problem(const std::string& value) {
  // Slurm's --time formats: minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes,
  // days-hours:minutes:seconds.
  static const std::regex time(R"((\d+-)?\d+(:\d+){0,2})");
  if (std::regex_match(value, time) || value == "UNLIMITED" || value == "INFINITE") return std::nullopt;
  return "'" + value + "' is not a Slurm time; allowed: minutes, minutes:seconds, hours:minutes:seconds, days-hours, "
         "days-hours:minutes, days-hours:minutes:seconds (e.g. 90, \"4:00:00\", \"1-12\")";
}

std::optional<std::string> slurm_mem_problem(const std::string& value) {
  static const std::regex mem(R"(\d+[KMGT]?)");
  if (std::regex_match(value, mem)) return std::nullopt;
  return "'" + value + "' is not a Slurm memory size; allowed: a whole number with an optional unit K, M, G or T "
         "(e.g. 8G; without a unit, megabytes)";
}

std::optional<std::string> slurm_integer(int& out, const std::string& value, int lo, int hi) {
  const std::optional<int> number = parse_integer<int>(value);
  if (number && *number >= lo && *number <= hi) {
    out = *number;
    return std::nullopt;
  }
  return "'" + value + "' is not allowed; allowed: a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
}

std::optional<std::string> slurm_sbatch_line_problem(const std::string& value) {
  const bool printable = std::ranges::all_of(value, [](char c) { return c == ' ' || c == '\t' || std::isprint(static_cast<unsigned char>(c)); });
  if (value.size() >= 2 && value[0] == '-' && printable) return std::nullopt;
  return "'" + value + "' is not an sbatch option; allowed: one option per line as sbatch takes it, starting with '-' "
         "(e.g. --constraint=a100), without '#SBATCH' and without line breaks";
}

}  // namespace

std::optional<std::string> set_slurm_setting(SlurmSettings& settings, const std::string& key, const std::string& value) {
  if (key == "partition" || key == "account" || key == "qos") {
    if (auto problem = slurm_name_problem(value)) return problem;
    (key == "partition" ? settings.partition : key == "account" ? settings.account : settings.qos) = value;
  } else if (key == "time") {
    if (auto problem = slurm_time_problem(value)) return problem;
    settings.time = value;
  } else if (key == "mem") {
    if (auto problem = slurm_mem_problem(value)) return problem;
    settings.mem = value;
  } else if (key == "cpus_per_run") {
    return slurm_integer(settings.cpus_per_run, value, 1, 4096);
  } else if (key == "gpus_per_run") {
    return slurm_integer(settings.gpus_per_run, value, 0, 64);
  } else if (key == "runs_per_task") {
    return slurm_integer(settings.runs_per_task, value, 1, 100000);
  } else if (key == "max_running") {
    return slurm_integer(settings.max_running, value, 1, 100000);
  } else if (key == "signal_lead") {
    return slurm_integer(settings.signal_lead, value, 0, 65535);  // Slurm's largest --signal time
  } else if (key == "sbatch") {
    if (auto problem = slurm_sbatch_line_problem(value)) return problem;
    settings.sbatch.push_back(value);
  } else {
    return "unknown key '" + key + "'; allowed: " + kSlurmKeys;
  }
  return std::nullopt;
}

namespace {

void parse_slurm_section(const YAML::Node& section, SlurmSettings& settings, const SpecReader& reader) {
  if (!section.IsMap()) reader.fail(section, std::string("slurm: expected a mapping with any of ") + kSlurmKeys);
  for (auto it = section.begin(); it != section.end(); ++it) {
    const std::string key = it->first.Scalar();
    const YAML::Node node = it->second;
    std::vector<YAML::Node> values = {node};
    if (key == "sbatch" && node.IsSequence()) values = std::vector<YAML::Node>(node.begin(), node.end());
    for (const YAML::Node& value : values)
      if (auto problem = set_slurm_setting(settings, key, reader.scalar(value, "slurm." + key)))
        reader.fail(key == "sbatch" ? value : it->first, "slurm." + key + ": " + *problem);
  }
}

}  // namespace

SweepSpec load_sweep_spec(const std::string& path) {
  SpecReader reader{path};
  // Size, nesting and alias expansion are bounded here, so every walk below (labels, flow text, the report
  // defaults) is bounded too.
  const YAML::Node root = load_yaml_file(path, "sweep file");
  if (!root.IsMap()) throw Error(path + ": a sweep file is a mapping with base, axes and optionally set, name, report, slurm");
  for (auto it = root.begin(); it != root.end(); ++it) {
    static const std::set<std::string> allowed = {"name", "description", "base", "set", "axes", "report", "slurm"};
    const std::string k = it->first.Scalar();
    if (!allowed.count(k)) {
      std::string hint = (k == "model" || k == "task" || k == "train" || k == "probe")
                             ? " (config sections go in the base file, or as key paths under set:)"
                             : "";
      reader.fail(it->first, "unknown sweep field '" + k + "'; allowed: name, description, base, set, axes, report, slurm" + hint);
    }
  }
  SweepSpec spec;
  spec.source_path = path;
  // The name becomes a directory under runs/sweeps/: never a path that climbs out of it or into another one.
  spec.name = root["name"] ? reader.scalar(root["name"], "name")
                           : directory_safe(fs::path(path).stem().string()).substr(0, kMaxNameLength);
  if (!is_plain_directory_name(spec.name))
    reader.fail(root["name"] ? root["name"] : root, "name: '" + spec.name + "' must be a plain directory name of at most " +
                                  std::to_string(kMaxNameLength) +
                                  " letters, digits and '.', '-', '_', '+' (not '.' or '..', no '/')");
  if (root["description"]) spec.description = reader.scalar(root["description"], "description");
  if (!root["base"]) reader.fail(root, "missing base: the config file every run starts from");
  spec.base_path = (fs::path(path).parent_path() / reader.scalar(root["base"], "base")).lexically_normal().string();
  require_regular_file(spec.base_path, reader.where(root["base"]) + ": base: cannot read config file");
  if (const YAML::Node set = root["set"]) {
    if (!set.IsMap()) reader.fail(set, "set: expected a mapping of key paths to values, e.g. task.n_symbols: 8");
    for (auto it = set.begin(); it != set.end(); ++it)
      spec.shared.push_back({it->first.Scalar(), flow_yaml(it->second), reader.where(it->first) + ": set"});
  }
  const YAML::Node axes = root["axes"];
  if (!axes || !axes.IsSequence() || axes.size() == 0) reader.fail(root, "axes: expected a non-empty list of axes");
  std::set<std::string> names, keys;
  for (const YAML::Node& node : axes) {
    SweepAxis axis = parse_axis(node, reader);
    if (!names.insert(axis.name).second) reader.fail(node, "two axes are named '" + axis.name + "'");
    for (const auto& key : axis.keys)
      if (!keys.insert(key).second) reader.fail(node, "two axes set the same key '" + key + "'");
    spec.axes.push_back(std::move(axis));
  }
  if (const YAML::Node report = root["report"]) {
    if (!report.IsMap()) reader.fail(report, "report: expected a mapping like {pivot: [seed, layer], metric: global_ipmr}");
    spec.report = yaml_to_json(report);
  }
  if (const YAML::Node slurm = root["slurm"]) parse_slurm_section(slurm, spec.slurm, reader);
  return spec;
}

std::vector<SweepRun> expand_sweep(const SweepSpec& spec, int threads_per_run) {
  // The product is checked as it grows, so no grid can overflow it into a small number.
  size_t total = 1;
  std::string sizes;
  for (const auto& axis : spec.axes) {
    sizes += (sizes.empty() ? "" : " x ") + std::to_string(axis.labels.size());
    total = std::min(total * axis.labels.size(), kMaxRuns + 1);
  }
  CANONLAB_CHECK(total <= kMaxRuns, spec.source_path + ": the grid has " + sizes + (total > kMaxRuns ? " > " : " = ") +
                                        std::to_string(kMaxRuns) + " runs; allowed: at most " + std::to_string(kMaxRuns));
  std::vector<SweepRun> runs;
  std::vector<size_t> index(spec.axes.size(), 0);
  for (size_t r = 0; r < total; r++) {
    // Mixed-radix counter, last axis fastest.
    size_t rest = r;
    for (size_t a = spec.axes.size(); a-- > 0;) {
      index[a] = rest % spec.axes[a].labels.size();
      rest /= spec.axes[a].labels.size();
    }
    SweepRun run;
    std::vector<ConfigOverride> overrides = spec.shared;
    for (size_t a = 0; a < spec.axes.size(); a++) {
      const SweepAxis& axis = spec.axes[a];
      const std::string& label = axis.labels[index[a]];
      run.name += (a ? "__" : "") + axis.name + "=" + label;
      run.labels[axis.name] = label;
      for (size_t k = 0; k < axis.keys.size(); k++)
        overrides.push_back({axis.keys[k], axis.yaml_values[index[a]][k],
                             axis.origin + ": axis '" + axis.name + "' = " + label});
    }
    CANONLAB_CHECK(run.name.size() <= kMaxRunNameLength,
                   spec.source_path + ": run name '" + run.name.substr(0, 60) + "...' is " + std::to_string(run.name.size()) +
                       " characters, longer than a directory name may be (" + std::to_string(kMaxRunNameLength) +
                       "); give the axes shorter names or labels:");
    overrides.push_back({"train.threads", std::to_string(threads_per_run), "--threads-per-run"});
    try {
      run.config = load_config_with(spec.base_path, overrides);
    } catch (const Error& e) {
      throw Error("sweep run '" + run.name + "': " + e.what());
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

}  // namespace canonlab
