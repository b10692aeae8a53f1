#include "sweep/manifest.h"
#include "io/json_read.h"

#include <map>

namespace canonlab {

namespace {

// {"a": {"b": 1}} -> {"a.b": "1"}: config differences are reported by key path, like config errors.
void flatten(const nlohmann::json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object()) {
    for (auto& [key, value] : j.items()) flatten(value, prefix.empty() ? key : prefix + "." + key, out);
  } else {
    out[prefix] = j.dump();
  }
}

// Every key's default, flattened: what a key that canonlab gained after a sweep.json was written means there.
const std::map<std::string, std::string>& default_config_values() {
  static const std::map<std::string, std::string> defaults = [] {
    std::map<std::string, std::string> out;
    flatten(config_to_json(RunConfig{}), "", out);
    return out;
  }();
  return defaults;
}

}  // namespace

std::optional<std::string> config_difference(const nlohmann::json& before, const nlohmann::json& now) {
  std::map<std::string, std::string> a, b;
  flatten(before, "", a);
  flatten(now, "", b);
  const std::map<std::string, std::string>& defaults = default_config_values();
  for (auto& [key, value] : b) {
    auto it = a.find(key);
    if (it == a.end()) {
      // A key added to canonlab since `before` was written, at its default, is what that run trained with: every
      // new key's default keeps the earlier behaviour (model.canon.dynamic: 0, cross_layer.layers: []).
      auto d = defaults.find(key);
      if (d != defaults.end() && d->second == value) continue;
      return key + " is new (" + brief_text(value) + ")";
    }
    if (it->second != value) return key + " was " + brief_text(it->second) + ", now " + brief_text(value);
  }
  for (auto& [key, value] : a)
    if (!b.count(key)) return brief_text(key) + " is gone (was " + brief_text(value) + ")";
  return std::nullopt;
}

nlohmann::json make_sweep_manifest(const SweepSpec& spec, const std::vector<SweepRun>& runs) {
  nlohmann::json m;
  m["format"] = kSweepFormat;
  m["name"] = spec.name;
  m["description"] = spec.description;
  m["source"] = spec.source_path;
  m["axes"] = nlohmann::json::array();
  for (const SweepAxis& axis : spec.axes)
    m["axes"].push_back({{"name", axis.name}, {"keys", axis.keys}, {"labels", axis.labels}});
  m["report"] = spec.report;
  m["runs"] = nlohmann::json::array();
  for (const SweepRun& run : runs)
    m["runs"].push_back({{"name", run.name}, {"dir", "runs/" + run.name}, {"axes", run.labels},
                         {"config", config_to_json(run.config)}});
  return m;
}

std::optional<std::string> sweep_difference(const nlohmann::json& before, const nlohmann::json& now) {
  const bool has_format = before.is_object() && before.contains("format") && before["format"].is_string();
  if (!has_format || before["format"] != kSweepFormat)
    return "sweep.json has format " + (has_format ? brief(before["format"]) : std::string("(none)")) + ", expected " +
           kSweepFormat;
  // sweep.json is read back from disk: check its shape before indexing it (a const operator[] on a missing key
  // is undefined behaviour in nlohmann).
  if (!before.contains("runs") || !before["runs"].is_array() || !before.contains("axes"))
    return "sweep.json has no list of runs or axes";
  if (before["axes"] != now["axes"]) return "the axes changed (names, keys or values)";
  std::map<std::string, const nlohmann::json*> old_runs;
  for (const auto& run : before["runs"]) {
    if (!run.is_object() || !run.contains("name") || !run["name"].is_string() || !run.contains("config"))
      return "sweep.json lists a run without a name or config";
    old_runs[run["name"].get<std::string>()] = &run;
  }
  for (const auto& run : now["runs"]) {
    const std::string name = run["name"];
    auto it = old_runs.find(name);
    if (it == old_runs.end()) return "run '" + brief_text(name) + "' is new";
    if (auto diff = config_difference((*it->second)["config"], run["config"])) return "run '" + brief_text(name) + "': " + *diff;
  }
  if (before["runs"].size() != now["runs"].size()) return "some runs of the old sweep are no longer in it";
  return std::nullopt;
}

}  // namespace canonlab
