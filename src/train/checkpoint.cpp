#include "train/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "io/atomic_file.h"
#include "io/paths.h"
#include "io/safetensors.h"
#include "io/strict_number.h"
#include "io/json_read.h"

namespace canonlab {

namespace fs = std::filesystem;

namespace {

// 3: the state file records the data checksum of the model file saved with it (kModelChecksumKey), so a resume
//    cannot pair a model file with the optimizer state of another run or step.
// 2: the safetensors header carries canonlab.header_checksum, so metadata (config, step, adam_t) is covered.
// 1: the data checksum only.
constexpr const char* kFormatVersion = "3";
constexpr const char* kFormatVersionKey = "canonlab.format_version";
constexpr const char* kModelChecksumKey = "canonlab.model_data_checksum";

// What canonlab can read but not verify is read, never silently: one line on stderr per file.
void warn(const std::string& message) { std::fprintf(stderr, "warning: %s\n", message.c_str()); }

std::string step_stem(int step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08d", step);
  return buf;
}

// Settings that do not change the numbers a run produces; they may differ between a run and its resume.
nlohmann::json trajectory_relevant(const RunConfig& cfg) {
  nlohmann::json j = config_to_json(cfg);
  // device: like threads, it may change the last bits but not the run (a run may resume on another machine);
  // so may micro_batches (the order gradients are summed in), so a job of N ranks may resume on another count
  for (const char* k :
       {"threads", "device", "cuda_graph", "attention_kernel", "micro_batches", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints", "max_memory_gb"})
    j["train"].erase(k);
  j.erase("probe");
  j.erase("log");
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
    out.push_back(prefix + " (checkpoint: " + brief(a) + ", now: " + brief(b) + ")");
  }
}

}  // namespace

std::string save_model(const std::string& path, const RunConfig& cfg, const ParameterStore<float>& params, int step) {
  SafetensorsWriter w;
  w.add_metadata("format", "pt");
  w.add_metadata(kFormatVersionKey, kFormatVersion);
  w.add_metadata("canonlab.config", config_to_json(cfg).dump());
  w.add_metadata("canonlab.step", std::to_string(step));
  const std::vector<float> host = params.host_values();  // checkpoints are fp32 whatever the device and precision
  const std::span<const float> values = host;
  for (const ParamInfo& p : params.infos()) w.add(p.name, values.subspan(p.offset, p.numel), p.shape);
  return w.write_atomic(path);
}

SafetensorsFile read_checkpoint_file(const std::string& path) {
  SafetensorsFile f = read_safetensors(path);
  const auto version = f.metadata.find(kFormatVersionKey);
  if (version == f.metadata.end()) {
    // Written by another tool (PyTorch's save_file, say): loadable, but what it lacks cannot vouch for it.
    std::string lacks = f.checksum_verified ? "" : "no data checksum";
    if (!f.header_checksum_verified) lacks += std::string(lacks.empty() ? "" : " and ") + "no header checksum";
    if (!lacks.empty())
      warn("checkpoint '" + path + "' has no " + kFormatVersionKey + " (not written by canonlab?) and " + lacks +
           ": its contents cannot be verified");
    return f;
  }
  const std::string& v = version->second;
  CANONLAB_CHECK(v == "1" || v == "2" || v == "3", "checkpoint '" + path + "' has format version '" + v +
                                                       "'; this canonlab reads versions 1, 2 and 3 (docs/checkpoint-format.md)");
  // canonlab has always written the data checksum: a file of its format without one was edited, and its weights
  // (a flipped bit, a changed value) would load unnoticed.
  CANONLAB_CHECK(f.checksum_verified, "checkpoint '" + path + "' is corrupt: format version " + v +
                                          " requires the data checksum " + kChecksumKey + ", which is missing");
  // Version 1 files predate the header checksum; from version 2 on it must be there and match.
  CANONLAB_CHECK(v == "1" || f.header_checksum_verified, "checkpoint '" + path + "' is corrupt: format version " + v +
                                                             " requires the header checksum " + kHeaderChecksumKey +
                                                             ", which is missing");
  if (v == "1")
    warn("checkpoint '" + path + "' is format version 1, whose header carries no checksum: its config, step and "
         "tensor names and shapes cannot be verified (its data checksum was)");
  return f;
}

std::string checkpoint_metadata(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata.find(key);
  CANONLAB_CHECK(it != f.metadata.end(), "checkpoint '" + f.path + "' is corrupt: metadata '" + key + "' is missing");
  return it->second;
}

int64_t checkpoint_count(const SafetensorsFile& f, const std::string& key) {
  const std::string text = checkpoint_metadata(f, key);
  const std::optional<int64_t> value = parse_integer<int64_t>(text);
  CANONLAB_CHECK(value && *value >= 0 && *value <= std::numeric_limits<int>::max(),
                 "checkpoint '" + f.path + "' is corrupt: metadata '" + key + "' is '" + text +
                     "'; allowed: a whole number from 0 to " + std::to_string(std::numeric_limits<int>::max()));
  return *value;
}

RunConfig read_model_config(const std::string& path) { return read_model_config(read_checkpoint_file(path)); }

RunConfig read_model_config(const SafetensorsFile& f) {
  const std::string& path = f.path;
  auto it = f.metadata.find("canonlab.config");
  CANONLAB_CHECK(it != f.metadata.end(), "checkpoint '" + path + "' has no canonlab.config metadata");
  return config_from_json(parse_json(it->second, "checkpoint '" + path + "': canonlab.config metadata"));
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
  // Non-finite weights would evaluate to a "loss: null" that looks like a result, or resume into a run that
  // stops at once; say which tensor holds them instead.
  for (const ParamInfo& p : params.infos()) {
    const std::vector<float> v = f.get(prefix + p.name).to_vector<float>();
    const auto bad = std::ranges::find_if(v, [](float x) { return !std::isfinite(x); });
    if (bad != v.end())
      throw Error("checkpoint '" + f.path + "': tensor '" + prefix + p.name + "' holds " + std::to_string(*bad) +
                  " at index " + std::to_string(bad - v.begin()) +
                  "; a checkpoint with non-finite weights cannot be evaluated or resumed");
  }
  std::vector<float> host(params.total());
  const std::span<float> values = host;
  for (const ParamInfo& p : params.infos()) f.get(prefix + p.name).copy_to<float>(values.subspan(p.offset, p.numel));
  params.set_values(host);
}
}  // namespace

void load_model(const std::string& path, ParameterStore<float>& params) { load_model(read_checkpoint_file(path), params); }

void load_model(const SafetensorsFile& f, ParameterStore<float>& params) { load_into(f, params, ""); }

void save_checkpoint(const std::string& dir, const RunConfig& cfg, const ParameterStore<float>& params,
                     const AdamWState& opt, const TrainingCursor& cursor) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create checkpoint directory '" + dir + "': " + ec.message());
  const std::string stem = step_stem(cursor.step);
  const std::string model_file = stem + ".model.safetensors", state_file = stem + ".state.safetensors";
  const std::string model_checksum = save_model((fs::path(dir) / model_file).string(), cfg, params, cursor.step);

  SafetensorsWriter w;
  w.add_metadata(kFormatVersionKey, kFormatVersion);
  w.add_metadata(kModelChecksumKey, model_checksum);
  w.add_metadata("canonlab.config", config_to_json(cfg).dump());
  w.add_metadata("canonlab.step", std::to_string(cursor.step));
  w.add_metadata("canonlab.adam_t", std::to_string(opt.t));
  // Before the first update the moments are not allocated yet; they are zero by definition.
  const std::vector<float> m = opt.m.empty() ? std::vector<float>(params.total(), 0.f) : opt.m.download();
  const std::vector<float> v = opt.v.empty() ? std::vector<float>(params.total(), 0.f) : opt.v.download();
  w.add("adam.m", std::span<const float>(m), {int64_t(params.total())});
  w.add("adam.v", std::span<const float>(v), {int64_t(params.total())});
  w.write_atomic((fs::path(dir) / state_file).string());

  nlohmann::json latest = {{"step", cursor.step}, {"model", model_file}, {"state", state_file}};
  write_text_atomic((fs::path(dir) / "latest.json").string(), latest.dump(2) + "\n");
  prune_checkpoints(dir, stem, cfg.train.keep_checkpoints);
}

void prune_checkpoints(const std::string& dir, const std::string& current_stem, int keep_checkpoints) {
  // Stems are collected from model and state files alike: a kill between the two removals below (or during a
  // save) leaves one file of a pair, which must still be pruned later.
  std::set<std::string> stems;
  for (const fs::path& path : directory_listing(dir, "cannot read checkpoint directory")) {
    const std::string name = path.filename().string();
    if (name.size() == 31 && name.starts_with("step_") &&
        (name.ends_with(".model.safetensors") || name.ends_with(".state.safetensors")))
      stems.insert(name.substr(0, 13));
  }
  // Keep the newest `keep_checkpoints` step checkpoints; the one just written is always among them.
  const size_t keep = size_t(std::max(1, keep_checkpoints));
  size_t index = 0;
  for (const std::string& s : stems) {
    if (index++ + keep >= stems.size() || s == current_stem) continue;
    // State first: a model file alone is still a loadable checkpoint for eval; a state file alone is useless.
    for (const char* kind : {".state.safetensors", ".model.safetensors"}) {
      std::error_code ec;
      fs::remove(fs::path(dir) / (s + kind), ec);
      if (ec) throw Error("cannot remove old checkpoint '" + (fs::path(dir) / (s + kind)).string() + "': " + ec.message());
    }
  }
}

namespace {
// latest.json names files inside the checkpoint directory, nothing else: "step_00001000.model.safetensors".
std::string checkpoint_file_name(const nlohmann::json& j, const char* key, const char* suffix) {
  const std::string name = j.at(key).get<std::string>();
  if (name.size() != 13 + std::string_view(suffix).size() || !name.starts_with("step_") || !name.ends_with(suffix) ||
      !parse_integer<int>(std::string_view(name).substr(5, 8)))
    throw Error(std::string("'") + key + "' is '" + name + "'; allowed: a file name like step_00001000" + suffix);
  return name;
}
}  // namespace

std::optional<LatestCheckpoint> read_latest_checkpoint(const std::string& dir) {
  const fs::path p = fs::path(dir) / "latest.json";
  std::error_code ec;
  if (!fs::exists(p, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory)
      throw Error("cannot read '" + p.string() + "': " + ec.message());
    return std::nullopt;
  }
  const std::string text = read_text_file(p.string(), 4096, "checkpoint pointer");
  try {
    const nlohmann::json j = parse_json(text, "latest.json");
    const nlohmann::json& step = j.at("step");
    if (!step.is_number_integer() || step.get<int64_t>() < 0 || step.get<int64_t>() > std::numeric_limits<int>::max())
      throw Error("'step' is " + brief(step) + "; allowed: a whole number >= 0");
    return LatestCheckpoint{step.get<int>(), (fs::path(dir) / checkpoint_file_name(j, "model", ".model.safetensors")).string(),
                            (fs::path(dir) / checkpoint_file_name(j, "state", ".state.safetensors")).string()};
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + p.string() + "' is corrupt: " + e.what());
  } catch (const Error& e) {
    throw Error("'" + p.string() + "' is corrupt: " + e.what());
  }
}

std::string latest_model_path(const std::string& dir) {
  const std::optional<LatestCheckpoint> latest = read_latest_checkpoint(dir);
  return latest ? latest->model_path : "";
}

namespace {
// The state file must come from the same save as the model file: the AdamW moments of another run (or step) have the
// same shapes and would resume into another trajectory without a word.
void check_saved_together(const SafetensorsFile& model, const SafetensorsFile& state) {
  const std::string not_theirs = "checkpoint '" + state.path + "' does not belong to '" + model.path + "': ";
  const auto tie = state.metadata.find(kModelChecksumKey);
  if (tie != state.metadata.end()) {
    const auto sum = model.metadata.find(kChecksumKey);  // verified when the model file was read
    const std::string actual = sum == model.metadata.end() ? "missing" : sum->second;
    CANONLAB_CHECK(tie->second == actual, not_theirs + "it was saved with a model file whose data checksum is " +
                                              tie->second + ", and this one's is " + actual +
                                              " (a state file of another run or step?); resume needs the model and "
                                              "state files of one save");
    return;
  }
  // read_checkpoint_file admits no other versions than these, or none (a file of another tool).
  const auto version = state.metadata.find(kFormatVersionKey);
  const std::string v = version == state.metadata.end() ? "" : version->second;
  CANONLAB_CHECK(v != kFormatVersion, "checkpoint '" + state.path + "' is corrupt: format version " + v +
                                          " requires " + kModelChecksumKey + ", which is missing");
  // Older state files do not name their model file; one save wrote the same config into both.
  const auto config = [](const SafetensorsFile& f) {
    const auto it = f.metadata.find("canonlab.config");
    return it == f.metadata.end() ? std::string() : it->second;
  };
  CANONLAB_CHECK(config(state) == config(model), not_theirs + "they were saved with different configs (a state file "
                                                             "of another run?); resume needs the model and state "
                                                             "files of one save");
  warn("checkpoint '" + state.path + "' is " + (v.empty() ? "of no canonlab format version" : "format version " + v) +
       ", which does not record the model file it belongs to; it was matched to '" + model.path +
       "' by config and step only");
}
}  // namespace

TrainingCursor load_latest_checkpoint(const std::string& dir, const RunConfig& cfg, ParameterStore<float>& params,
                                      AdamWState& opt) {
  const std::optional<LatestCheckpoint> latest = read_latest_checkpoint(dir);
  CANONLAB_CHECK(latest.has_value(), "--resume: no checkpoint in '" + dir + "' (latest.json missing)");
  const std::string& model_path = latest->model_path;
  const std::string& state_path = latest->state_path;
  // Read and validate both files completely before touching the model or the optimizer.
  const SafetensorsFile model = read_checkpoint_file(model_path);
  const SafetensorsFile state = read_checkpoint_file(state_path);
  check_saved_together(model, state);

  const RunConfig stored = read_model_config(model);
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
  const int model_step = int(checkpoint_count(model, "canonlab.step"));
  const int step = int(checkpoint_count(state, "canonlab.step"));
  const int64_t adam_t = checkpoint_count(state, "canonlab.adam_t");
  CANONLAB_CHECK(step == latest->step && model_step == step,
                 "checkpoint '" + state_path + "' is for step " + std::to_string(step) + " and its model file for step " +
                     std::to_string(model_step) + ", but latest.json says " + std::to_string(latest->step));
  // Every completed step applies exactly one AdamW update, so the update count is the step.
  CANONLAB_CHECK(adam_t == step, "checkpoint '" + state_path + "' is corrupt: canonlab.adam_t is " +
                                     std::to_string(adam_t) + " but the checkpoint is for step " + std::to_string(step) +
                                     " (one AdamW update per step)");
  std::vector<float> m_values = m.to_vector<float>(), v_values = v.to_vector<float>();
  for (size_t i = 0; i < m_values.size(); i++)
    CANONLAB_CHECK(std::isfinite(m_values[i]) && std::isfinite(v_values[i]) && v_values[i] >= 0.f,
                   "checkpoint '" + state_path + "': the AdamW moments at index " + std::to_string(i) + " are m = " +
                       std::to_string(m_values[i]) + ", v = " + std::to_string(v_values[i]) +
                       "; allowed: finite, v >= 0");
  load_into(model, params, "");
  opt.m = DeviceBuffer<float>(params.memory(), m_values);
  opt.v = DeviceBuffer<float>(params.memory(), v_values);
  opt.t = adam_t;
  return TrainingCursor{step};
}

}  // namespace canonlab
