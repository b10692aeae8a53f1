#include "io/hf/import.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/hf/hf_linear.h"
#include "io/hf/hf_plan.h"
#include "io/hf/hf_tensors.h"
#include "io/paths.h"
#include "models/language_model.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/resource_estimate.h"

namespace canonlab {

namespace fs = std::filesystem;

namespace {

constexpr int kDefaultCopySymbols = 24;  // task.n_symbols' default, lowered to what the model's vocabulary allows

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

RunConfig imported_run_config(const ModelConfig& model, const std::vector<std::string>& overrides) {
  for (const std::string& o : overrides)
    CANONLAB_CHECK(!o.starts_with("model.") && !o.starts_with("model="),
                   "--set " + o + ": the imported weights fix model.*; only task.*, train.* and probe.* keys can be set");
  RunConfig cfg;
  cfg.model = model;
  // The copy task over the whole vocabulary: its BOS is id task.vocab, the model's last token.
  cfg.task.name = "copy";
  cfg.task.vocab = std::max(1, model.vocab_size - 1);
  cfg.task.n_symbols = std::max(1, std::min({kDefaultCopySymbols, cfg.task.vocab, (model.max_seq_len - 1) / 2}));
  return config_from_yaml_string(config_to_yaml(cfg), overrides);
}

HfImportResult import_hf(const std::string& dir, const std::string& run_dir, const std::vector<std::string>& overrides) {
  CANONLAB_CHECK(is_directory_at(dir, "import-hf: Hugging Face folder"),
                 "import-hf: Hugging Face folder '" + dir + "' is not a directory");
  if (path_exists(run_dir, "--out: run directory") &&
      (!is_directory_at(run_dir, "--out: run directory") || !directory_listing(run_dir, "--out: run directory").empty()))
    throw path_error("--out: run directory", run_dir, "exists and is not empty; import into a new run directory");

  const std::string config_path = (fs::path(dir) / "config.json").string();
  nlohmann::json hf_config;
  try {
    hf_config = nlohmann::json::parse(read_text_file(config_path, 10'000'000, "Hugging Face config"));
  } catch (const nlohmann::json::exception& e) {
    throw Error("Hugging Face config '" + config_path + "' is not valid JSON: " + e.what());
  }
  HfImportResult r;
  r.cfg = imported_run_config(model_config_from_hf(hf_config, config_path), overrides);
  const std::string type = hf_config.value("model_type", "");
  r.format = hf_linear_format_of(type).value_or(type == "llama" ? HfFormat::llama : HfFormat::llama_canon);

  // The model is built before the weights are read, and only if it fits (a config claiming a huge model fails here).
  check_resources(estimate_resources(r.cfg, Purpose::eval), r.cfg);
  const HfTensors weights = read_hf_weights(dir);
  auto model = build_model<float>(r.cfg.model, r.cfg.train.seed);
  ParameterStore<float>& params = model->params();
  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : params.infos()) by_name[p.name] = &p;
  std::vector<float> host(params.total());
  std::set<std::string> used;
  // The export plan read backwards: a fused matrix splits into its sources by rows, in order.
  for (const HfTensorPlan& t : hf_export_plan(r.format, r.cfg.model, params.infos())) {
    const std::string ours = t.sources.empty() ? "(none: unused by the model)" : t.sources[0];
    const auto it = weights.find(t.name);
    CANONLAB_CHECK(it != weights.end(), "Hugging Face folder '" + dir + "': tensor '" + t.name + "' (canonlab's '" + ours +
                                            "') is missing, but config.json's model has it");
    CANONLAB_CHECK(it->second.shape == t.shape, "Hugging Face weights '" + it->second.file + "': tensor '" + t.name +
                                                    "' has shape " + shape_text(it->second.shape) +
                                                    ", config.json's model needs " + shape_text(t.shape));
    size_t at = 0;
    for (const std::string& source : t.sources) {
      const ParamInfo& p = *by_name.at(source);
      std::copy_n(it->second.values.begin() + ptrdiff_t(at), p.numel, host.begin() + ptrdiff_t(p.offset));
      at += p.numel;
    }
    used.insert(t.name);
  }
  if (r.cfg.model.tie_embeddings) {
    // Tied models may still carry lm_head.weight; it must then be the embedding, which is what transformers uses.
    std::string emb_name;
    for (const HfTensorPlan& t : hf_export_plan(r.format, r.cfg.model, params.infos()))
      if (t.sources == std::vector<std::string>{"tok_emb.weight"}) emb_name = t.name;
    const auto head = weights.find("lm_head.weight"), emb = weights.find(emb_name);
    if (head != weights.end()) {
      CANONLAB_CHECK(head->second.values == emb->second.values,
                     "Hugging Face folder '" + dir + "': tie_word_embeddings is true, but lm_head.weight differs from " +
                         emb_name + "; canonlab's tied model has one matrix");
      used.insert("lm_head.weight");
    }
  }
  for (const auto& [name, t] : weights)
    if (!used.count(name) && !name.ends_with("rotary_emb.inv_freq"))  // a buffer older transformers saved; recomputed
      throw Error("Hugging Face weights '" + t.file + "': tensor '" + name +
                  "' has no place in the model config.json describes (canonlab maps the names in docs/huggingface.md)");
  params.set_values(host);
  r.tensors = used.size();

  create_directories_at(run_dir, "--out: cannot create run directory");
  const fs::path run(run_dir);
  save_checkpoint((run / "checkpoints").string(), r.cfg, params, AdamWState{}, TrainingCursor{0});
  r.checkpoint = latest_model_path((run / "checkpoints").string());
  write_text_atomic((run / "config.resolved.yaml").string(), config_to_yaml(r.cfg));
  nlohmann::json provenance = {{"imported_from", absolute_path(dir, "import-hf: Hugging Face folder").string()},
                               {"model_type", hf_config.value("model_type", "")},
                               {"tensors", r.tensors}};
  write_text_atomic((run / "imported_from.json").string(), provenance.dump(2) + "\n");
  return r;
}

}  // namespace canonlab
