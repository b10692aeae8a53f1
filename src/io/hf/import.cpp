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
#include "io/json_read.h"
#include "io/paths.h"
#include "models/language_model.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/resource_estimate.h"

namespace canonlab {

namespace fs = std::filesystem;

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The refusal of an --out that exists and is not empty, saying so when it looks like what an interrupted import of an
// earlier canonlab left (checkpoints/ without imported_from.json, which an import writes last); imports now build the
// run beside it and move it into place, so they leave nothing under that name.
void refuse_existing_run_dir(const std::string& run_dir) {
  const fs::path run(run_dir);
  const bool interrupted = path_exists(run / "checkpoints", "--out: run directory") &&
                           !path_exists(run / "imported_from.json", "--out: run directory");
  throw path_error("--out: run directory", run_dir,
                   interrupted ? "exists and holds checkpoints/ without imported_from.json: what an interrupted import "
                                 "left; remove it (rm -r '" + run_dir + "') and run the import again"
                               : "exists and is not empty; import into a new run directory");
}

}  // namespace

HfImportResult import_hf(const std::string& dir, const std::string& run_dir, const std::vector<std::string>& overrides) {
  CANONLAB_CHECK(is_directory_at(dir, "import-hf: Hugging Face folder"),
                 "import-hf: Hugging Face folder '" + dir + "' is not a directory");
  if (path_exists(run_dir, "--out: run directory") &&
      (!is_directory_at(run_dir, "--out: run directory") || !directory_listing(run_dir, "--out: run directory").empty()))
    refuse_existing_run_dir(run_dir);

  const std::string config_path = (fs::path(dir) / "config.json").string();
  const nlohmann::json hf_config = read_hf_config(config_path);
  HfImportResult r;
  r.cfg = imported_run_config(model_config_from_hf(hf_config, config_path), overrides);
  const std::string type = hf_config.value("model_type", "");
  r.format = hf_linear_format_of(type).value_or(type == "llama" ? HfFormat::llama : HfFormat::llama_canon);

  // The model is built before the weights are read, and only if it fits (a config claiming a huge model fails here);
  // the weights' headers are read and checked against the model before any of their data.
  check_resources(estimate_resources(r.cfg, Purpose::eval), r.cfg);
  const HfTensors weights = read_hf_weights(dir);
  auto model = build_model<float>(r.cfg.model, r.cfg.train.seed);
  ParameterStore<float>& params = model->params();
  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : params.infos()) by_name[p.name] = &p;
  const std::vector<HfTensorPlan> plan = hf_export_plan(r.format, r.cfg.model, params.infos());
  std::set<std::string> used;
  for (const HfTensorPlan& t : plan) {
    const std::string ours = t.sources.empty() ? "(none: unused by the model)" : t.sources[0];
    const auto it = weights.find(t.name);
    CANONLAB_CHECK(it != weights.end(), "Hugging Face folder '" + dir + "': tensor '" + t.name + "' (canonlab's '" + ours +
                                            "') is missing, but config.json's model has it");
    CANONLAB_CHECK(it->second.shape == t.shape, "Hugging Face weights '" + it->second.file + "': tensor '" + t.name +
                                                    "' has shape " + shape_text(it->second.shape) +
                                                    ", config.json's model needs " + shape_text(t.shape));
    used.insert(t.name);
  }
  // Tied models may still carry lm_head.weight; it must then be the embedding, which is what transformers uses.
  std::string tied_head_of;
  if (r.cfg.model.tie_embeddings && weights.count("lm_head.weight"))
    for (const HfTensorPlan& t : plan)
      if (t.sources == std::vector<std::string>{"tok_emb.weight"}) tied_head_of = t.name;
  if (!tied_head_of.empty()) used.insert("lm_head.weight");
  for (const auto& [name, t] : weights)
    if (!used.count(name) && !name.ends_with("rotary_emb.inv_freq"))  // a buffer older transformers saved; recomputed
      throw Error("Hugging Face weights '" + t.file + "': tensor '" + brief_text(name) +
                  "' has no place in the model config.json describes (canonlab maps the names in docs/huggingface.md)");

  // The data, one tensor at a time: the export plan read backwards, a fused matrix split into its sources by rows.
  std::vector<float> host(params.total());
  for (const HfTensorPlan& t : plan) {
    const std::vector<float> values = read_hf_tensor(t.name, weights.at(t.name));
    size_t at = 0;
    for (const std::string& source : t.sources) {
      const ParamInfo& p = *by_name.at(source);
      std::copy_n(values.begin() + ptrdiff_t(at), p.numel, host.begin() + ptrdiff_t(p.offset));
      at += p.numel;
    }
    if (t.name == tied_head_of)
      CANONLAB_CHECK(read_hf_tensor("lm_head.weight", weights.at("lm_head.weight")) == values,
                     "Hugging Face folder '" + dir + "': tie_word_embeddings is true, but lm_head.weight differs from " +
                         tied_head_of + "; canonlab's tied model has one matrix");
  }
  params.set_values(host);
  r.tensors = used.size();

  // Written beside --out and moved into place whole: a failure or a kill leaves nothing under --out.
  StagingDirectory staging(run_dir, "--out: run directory");
  const fs::path temp(staging.temp_path());
  save_checkpoint((temp / "checkpoints").string(), r.cfg, params, AdamWState{}, TrainingCursor{0});
  write_text_atomic((temp / "config.resolved.yaml").string(), config_to_yaml(r.cfg));
  nlohmann::json provenance = {{"imported_from", absolute_path(dir, "import-hf: Hugging Face folder").string()},
                               {"model_type", type},
                               {"tensors", r.tensors}};
  write_text_atomic((temp / "imported_from.json").string(), provenance.dump(2) + "\n");
  staging.commit();
  r.checkpoint = latest_model_path((fs::path(run_dir) / "checkpoints").string());
  return r;
}

}  // namespace canonlab
