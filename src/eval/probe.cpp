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
#include "train/resource_estimate.h"

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
  Arena arena(model.backend().memory());
  return run_probe(model, task, cfg, evaluate(model, task, make_eval_batches(task, cfg), cfg, arena));
}

LoadedCheckpoint load_checkpoint(const std::string& where, const std::vector<std::string>& overrides, Purpose purpose) {
  LoadedCheckpoint c;
  c.path = where;
  std::error_code ec;
  if (fs::is_directory(where, ec)) {
    const fs::path run_ckpts = fs::path(where) / "checkpoints";
    c.path = latest_model_path(fs::is_directory(run_ckpts, ec) ? run_ckpts.string() : where);
    CANONLAB_CHECK(!c.path.empty(), "no checkpoint found in '" + where +
                                        "' (expected a run directory, its checkpoints/ or a .model.safetensors file)");
  }
  // One read: the file is validated whole (structure, both checksums) before anything in it is used.
  const SafetensorsFile file = read_checkpoint_file(c.path);
  c.cfg = read_model_config(file);
  if (!overrides.empty()) {
    for (const std::string& o : overrides)
      CANONLAB_CHECK(!o.starts_with("model.") && !o.starts_with("model="),
                     "--set " + o + ": the checkpoint's weights fix model.*; at evaluation only task.*, train.* "
                     "and probe.* keys can change");
    c.cfg = config_from_yaml_string(config_to_yaml(c.cfg), overrides);
  }
  if (file.metadata.count("canonlab.step")) c.step = int(checkpoint_count(file, "canonlab.step"));
  // The stored config must describe the tensors actually stored, and the model must fit in memory, before the
  // model is built: a header claiming a huge vocabulary would otherwise allocate it first and fail after.
  uint64_t stored_values = 0;
  for (const TensorEntry& t : file.tensors) stored_values += t.numel();
  const uint64_t parameters = count_parameters(c.cfg.model);
  CANONLAB_CHECK(stored_values == parameters,
                 "checkpoint '" + c.path + "' does not match its own config: its tensors hold " +
                     std::to_string(stored_values) + " values, the model its canonlab.config describes has " +
                     std::to_string(parameters) + " parameters");
  check_resources(estimate_resources(c.cfg, purpose), c.cfg);
  set_thread_count(c.cfg.train.threads);
  c.model = build_model(c.cfg);
  load_model(file, c.model->params());
  c.task = make_task(c.cfg.task);
  return c;
}

}  // namespace canonlab
