#include "io/hf/export.h"

#include <deque>
#include <filesystem>
#include <map>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/hf/hf_plan.h"
#include "io/hf/remote_code.h"
#include "io/paths.h"
#include "io/safetensors.h"
#include "models/language_model.h"
#include "train/checkpoint.h"
#include "train/resource_estimate.h"

namespace canonlab {

namespace fs = std::filesystem;

namespace {

std::string checkpoint_path(const std::string& where) {
  if (!is_directory_at(where, "export: checkpoint")) return where;
  const fs::path ckpts = fs::path(where) / "checkpoints";
  const std::string path = latest_model_path(is_directory_at(ckpts, "export: checkpoint") ? ckpts.string() : where);
  CANONLAB_CHECK(!path.empty(), "no checkpoint found in '" + where +
                                    "' (expected a run directory, its checkpoints/ or a .model.safetensors file)");
  return path;
}

// An existing folder with files in it may be another model (or anything else); only --force writes into it.
void check_output_dir(const std::string& out_dir, bool force) {
  if (!path_exists(out_dir, "--out: Hugging Face folder")) return;
  if (!is_directory_at(out_dir, "--out: Hugging Face folder"))
    throw path_error("--out: Hugging Face folder", out_dir, "exists and is not a directory");
  if (!force && !directory_listing(out_dir, "--out: Hugging Face folder").empty())
    throw path_error("--out: Hugging Face folder", out_dir,
                     "exists and is not empty; choose a new folder, or pass --force to replace the files an export "
                     "writes there (config.json, model.safetensors, generation_config.json and the model code)");
}

}  // namespace

HfExportResult export_hf(const std::string& where, const std::string& out_dir, bool force) {
  HfExportResult r;
  r.checkpoint = checkpoint_path(where);
  // Everything is checked (the checkpoint whole, the config against the formats) before the folder is touched.
  const SafetensorsFile file = read_checkpoint_file(r.checkpoint);
  const RunConfig cfg = read_model_config(file);
  r.format = hf_export_format(cfg.model);
  if (file.metadata.count("canonlab.step")) r.step = int(checkpoint_count(file, "canonlab.step"));
  uint64_t stored = 0;
  for (const TensorEntry& t : file.tensors) stored += t.numel();
  CANONLAB_CHECK(stored == count_parameters(cfg.model),
                 "checkpoint '" + r.checkpoint + "' does not match its own config: its tensors hold " +
                     std::to_string(stored) + " values, its canonlab.config describes " +
                     std::to_string(count_parameters(cfg.model)) + " parameters");
  // Loading into the model checks every name, shape and value (finite) and gives the registration order.
  auto model = build_model<float>(cfg.model, cfg.train.seed);
  load_model(file, model->params());
  const std::vector<float> values = model->params().host_values();
  const std::span<const float> all = values;

  std::map<std::string, const ParamInfo*> by_name;
  for (const ParamInfo& p : model->params().infos()) by_name[p.name] = &p;
  SafetensorsWriter w;
  w.add_metadata("format", "pt");  // transformers refuses safetensors files without it
  std::deque<std::vector<float>> joined;  // fused or placeholder tensors; the writer keeps views until it writes
  for (const HfTensorPlan& t : hf_export_plan(r.format, cfg.model, model->params().infos())) {
    if (t.sources.size() == 1) {
      const ParamInfo& p = *by_name.at(t.sources[0]);
      w.add(t.name, all.subspan(p.offset, p.numel), t.shape);
    } else {
      size_t numel = 1;
      for (int64_t d : t.shape) numel *= size_t(d);
      std::vector<float>& buf = joined.emplace_back();
      buf.reserve(numel);
      for (const std::string& source : t.sources) {
        const ParamInfo& p = *by_name.at(source);
        const auto part = all.subspan(p.offset, p.numel);
        buf.insert(buf.end(), part.begin(), part.end());
      }
      buf.resize(numel, 0.0f);  // no sources: the zero placeholder
      w.add(t.name, buf, t.shape);
    }
    r.tensors++;
  }
  check_output_dir(out_dir, force);
  create_directories_at(out_dir, "--out: cannot create Hugging Face folder");
  const fs::path dir(out_dir);
  w.write_atomic((dir / "model.safetensors").string());
  r.files.push_back("model.safetensors");
  write_text_atomic((dir / "generation_config.json").string(), hf_generation_config_json(cfg).dump(2) + "\n");
  r.files.push_back("generation_config.json");
  // The Canon formats' model code, which config.json's auto_map names (none for stock llama).
  for (const HfRemoteFile& file : hf_remote_code_for(r.format)) {
    write_text_atomic((dir / file.name).string(), std::string(file.text));
    r.files.emplace_back(file.name);
  }
  // config.json last: a folder interrupted before it is not mistaken for a complete model.
  write_text_atomic((dir / "config.json").string(), hf_config_json(cfg, r.format).dump(2) + "\n");
  r.files.push_back("config.json");
  return r;
}

}  // namespace canonlab
