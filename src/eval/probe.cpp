#include "eval/probe.h"

#include <algorithm>
#include <filesystem>

#include "config/config.h"
#include "config/model_shapes.h"

#include "data/copy_task.h"
#include "engine/error.h"
#include "engine/threads.h"
#include "eval/evaluate.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

namespace canonlab {

namespace fs = std::filesystem;

nlohmann::json ProbeResult::ipmr_json() const { return ipmr ? ipmr_to_json(*ipmr, top_k) : nlohmann::json(); }

nlohmann::json ProbeResult::to_json() const {
  nlohmann::json j = {{"eval", eval}};
  if (ipmr) j["ipmr"] = ipmr_json();
  return j;
}

std::string ProbeResult::eval_text() const {
  std::string s;
  for (auto& [k, v] : eval.items()) s += "  eval " + k + " = " + v.dump() + "\n";
  return s;
}

std::string ProbeResult::ipmr_text() const { return ipmr ? format_ipmr(*ipmr, top_k) : std::string(); }

ProbeResult run_probe(LanguageModel<float>& model, const Task& task, const RunConfig& cfg, nlohmann::json eval) {
  ProbeResult r;
  r.eval = std::move(eval);
  r.top_k = cfg.probe.top_heads;
  // IPMR needs to know where the earlier occurrence of each token is, which only the copy task defines.
  // Attention patterns exist only in attention layers.
  const std::string mixers = mixer_letters(model.config());
  const bool has_attention = std::ranges::any_of(mixers, is_attention_letter);
  if (auto* copy = dynamic_cast<const CopyTask*>(&task); copy && has_attention) r.ipmr = measure_ipmr(model, *copy, cfg);
  return r;
}

ProbeResult run_probe(LanguageModel<float>& model, const Task& task, const RunConfig& cfg) {
  Arena arena;
  return run_probe(model, task, cfg, evaluate(model, task, make_eval_batches(task, cfg), cfg, arena));
}

LoadedCheckpoint load_checkpoint(const std::string& where, const std::vector<std::string>& overrides) {
  LoadedCheckpoint c;
  c.path = where;
  if (fs::is_directory(where)) {
    const fs::path run_ckpts = fs::path(where) / "checkpoints";
    c.path = latest_model_path(fs::exists(run_ckpts) ? run_ckpts.string() : where);
    CANONLAB_CHECK(!c.path.empty(), "no checkpoint found in '" + where +
                                        "' (expected a run directory, its checkpoints/ or a .model.safetensors file)");
  }
  CANONLAB_CHECK(fs::is_regular_file(c.path), "checkpoint '" + c.path + "' does not exist");
  c.cfg = read_model_config(c.path);
  if (!overrides.empty()) {
    for (const std::string& o : overrides)
      CANONLAB_CHECK(!o.starts_with("model.") && !o.starts_with("model="),
                     "--set " + o + ": the checkpoint's weights fix model.*; at evaluation only task.*, train.* "
                     "and probe.* keys can change");
    c.cfg = config_from_yaml_string(config_to_yaml(c.cfg), overrides);
  }
  // The step lives in the checkpoint's metadata (checkpoint.h has no accessor; a second read of a few MB).
  const SafetensorsFile file = read_safetensors(c.path);
  if (auto it = file.metadata.find("canonlab.step"); it != file.metadata.end()) c.step = std::stoi(it->second);
  set_thread_count(c.cfg.train.threads);
  c.model = build_model<float>(c.cfg.model, c.cfg.train.seed);
  load_model(c.path, c.model->params());
  c.task = make_task(c.cfg.task);
  return c;
}

}  // namespace canonlab
