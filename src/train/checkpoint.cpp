#include "train/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace canonlab {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormatVersion = "1";

std::string step_stem(int step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08d", step);
  return buf;
}

// Settings that do not change the numbers a run produces; they may differ between a run and its resume.
nlohmann::json trajectory_relevant(const RunConfig& cfg) {
  nlohmann::json j = config_to_json(cfg);
  for (const char* k : {"threads", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints"})
    j["train"].erase(k);
  j.erase("probe");
  return j;
}

void collect_differences(const nlohmann::json& a, const nlohmann::json& b, const std::string& prefix,
                         std::vector<std::string>& out) {
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (auto& [k, v] : a.items()) keys.insert(k);
    for (auto& [k, v] : b.items()) keys.insert(k);
    for (const std::string& k : keys) {
      const std::string path = prefix.empty() ? k : prefix + "." + k;
      if (!a.contains(k) || !b.contains(k)) out.push_back(path);
      else collect_differences(a[k], b[k], path, out);
    }
  } else if (a != b) {
    out.push_back(prefix + " (checkpoint: " + a.dump() + ", now: " + b.dump() + ")");
  }
}

}  // namespace

void save_model(const std::string& path, const RunConfig& cfg, const ParameterStore<float>& params, int step) {
  SafetensorsWriter w;
  w.add_metadata("format", "pt");
  w.add_metadata("canonlab.format_version", kFormatVersion);
  w.add_metadata("canonlab.config", config_to_json(cfg).dump());
  w.add_metadata("canonlab.step", std::to_string(step));
  std::span<const float> values = params.values();
  for (const ParamInfo& p : params.infos()) w.add(p.name, values.subspan(p.offset, p.numel), p.shape);
  w.write_atomic(path);
}

RunConfig read_model_config(const std::string& path) {
  SafetensorsFile f = read_safetensors(path);
  auto it = f.metadata.find("canonlab.config");
  CANONLAB_CHECK(it != f.metadata.end(), "checkpoint '" + path + "' has no canonlab.config metadata");
  try {
    return config_from_json(nlohmann::json::parse(it->second));
  } catch (const nlohmann::json::exception& e) {
    throw Error("checkpoint '" + path + "': canonlab.config metadata is not valid JSON: " + e.what());
  }
}

namespace {
// Validates every tensor against the registered parameters, then copies. Nothing is written on failure.
void load_into(const SafetensorsFile& f, ParameterStore<float>& params, const std::string& prefix) {
  std::set<std::string> expected;
  for (const ParamInfo& p : params.infos()) {
    expected.insert(prefix + p.name);
    const TensorEntry* t = f.find(prefix + p.name);
    CANONLAB_CHECK(t, "checkpoint '" + f.path + "' does not match the model: missing tensor '" + prefix + p.name + "'");
    CANONLAB_CHECK(t->dtype == DType::F32, "checkpoint '" + f.path + "': tensor '" + t->name + "' has dtype " +
                                               dtype_name(t->dtype) + ", expected F32");
    if (t->shape != p.shape) {
      auto show = [](const std::vector<int64_t>& s) {
        std::string r = "[";
        for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
        return r + "]";
      };
      throw Error("checkpoint '" + f.path + "' does not match the model: tensor '" + t->name + "' has shape " +
                  show(t->shape) + ", the model expects " + show(p.shape));
    }
  }
  for (const TensorEntry& t : f.tensors)
    if (t.name.rfind(prefix, 0) == 0 && !expected.count(t.name))
      throw Error("checkpoint '" + f.path + "' does not match the model: unexpected tensor '" + t.name + "'");
  std::span<float> values = params.values();
  for (const ParamInfo& p : params.infos()) f.get(prefix + p.name).copy_to<float>(values.subspan(p.offset, p.numel));
}
}  // namespace

void load_model(const std::string& path, ParameterStore<float>& params) {
  SafetensorsFile f = read_safetensors(path);
  load_into(f, params, "");
}

void save_checkpoint(const std::string& dir, const RunConfig& cfg, const ParameterStore<float>& params,
                     const AdamWState& opt, const TrainingCursor& cursor) {
  fs::create_directories(dir);
  const std::string stem = step_stem(cursor.step);
  const std::string model_file = stem + ".model.safetensors", state_file = stem + ".state.safetensors";
  save_model((fs::path(dir) / model_file).string(), cfg, params, cursor.step);

  SafetensorsWriter w;
  w.add_metadata("canonlab.format_version", kFormatVersion);
  w.add_metadata("canonlab.config", config_to_json(cfg).dump());
  w.add_metadata("canonlab.step", std::to_string(cursor.step));
  w.add_metadata("canonlab.adam_t", std::to_string(opt.t));
  // Before the first update the moments are not allocated yet; they are zero by definition.
  std::vector<float> zeros;
  if (opt.m.empty()) zeros.assign(params.total(), 0.f);
  const std::span<const float> m = opt.m.empty() ? zeros : opt.m, v = opt.v.empty() ? zeros : opt.v;
  w.add("adam.m", m, {int64_t(params.total())});
  w.add("adam.v", v, {int64_t(params.total())});
  w.write_atomic((fs::path(dir) / state_file).string());

  nlohmann::json latest = {{"step", cursor.step}, {"model", model_file}, {"state", state_file}};
  write_text_atomic((fs::path(dir) / "latest.json").string(), latest.dump(2) + "\n");

  // Keep the newest `keep_checkpoints` step checkpoints; the one just written is always among them.
  std::vector<std::string> stems;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) == 0 && name.size() >= 31 && name.ends_with(".model.safetensors"))
      stems.push_back(name.substr(0, 13));
  }
  std::sort(stems.begin(), stems.end());
  const int keep = std::max(1, cfg.train.keep_checkpoints);
  for (int i = 0; i + keep < int(stems.size()); i++) {
    if (stems[i] == stem) continue;
    fs::remove(fs::path(dir) / (stems[i] + ".model.safetensors"));
    fs::remove(fs::path(dir) / (stems[i] + ".state.safetensors"));
  }
}

std::optional<LatestCheckpoint> read_latest_checkpoint(const std::string& dir) {
  const fs::path p = fs::path(dir) / "latest.json";
  if (!fs::exists(p)) return std::nullopt;
  try {
    std::ifstream in(p);
    nlohmann::json j;
    in >> j;
    return LatestCheckpoint{j.at("step").get<int>(), (fs::path(dir) / j.at("model").get<std::string>()).string(),
                            (fs::path(dir) / j.at("state").get<std::string>()).string()};
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + p.string() + "' is corrupt: " + e.what());
  }
}

std::string latest_model_path(const std::string& dir) {
  const std::optional<LatestCheckpoint> latest = read_latest_checkpoint(dir);
  return latest ? latest->model_path : "";
}

TrainingCursor load_latest_checkpoint(const std::string& dir, const RunConfig& cfg, ParameterStore<float>& params,
                                      AdamWState& opt) {
  const std::optional<LatestCheckpoint> latest = read_latest_checkpoint(dir);
  CANONLAB_CHECK(latest.has_value(), "--resume: no checkpoint in '" + dir + "' (latest.json missing)");
  const std::string& model_path = latest->model_path;
  const std::string& state_path = latest->state_path;
  // Read and validate both files completely before touching the model or the optimizer.
  SafetensorsFile model = read_safetensors(model_path);
  SafetensorsFile state = read_safetensors(state_path);

  const RunConfig stored = read_model_config(model_path);
  std::vector<std::string> diffs;
  collect_differences(trajectory_relevant(stored), trajectory_relevant(cfg), "", diffs);
  if (!diffs.empty()) {
    std::string msg = "--resume: the config differs from the checkpoint's in:";
    for (const std::string& d : diffs) msg += "\n  " + d;
    throw Error(msg);
  }
  const TensorEntry& m = state.get("adam.m");
  const TensorEntry& v = state.get("adam.v");
  CANONLAB_CHECK(m.numel() == params.total() && v.numel() == params.total(),
                 "checkpoint '" + state_path + "' does not match the model: optimizer state has " +
                     std::to_string(m.numel()) + " values, the model has " + std::to_string(params.total()) +
                     " parameters");
  const int step = std::stoi(state.metadata.at("canonlab.step"));
  const int64_t adam_t = std::stoll(state.metadata.at("canonlab.adam_t"));
  CANONLAB_CHECK(step == latest->step, "checkpoint '" + state_path + "' is for step " + std::to_string(step) +
                                          " but latest.json says " + std::to_string(latest->step));
  load_into(model, params, "");
  opt.m = m.to_vector<float>();
  opt.v = v.to_vector<float>();
  opt.t = adam_t;
  return TrainingCursor{step};
}

}  // namespace canonlab
