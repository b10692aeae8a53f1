// canonlab export CHECKPOINT|RUN_DIR --to hf --out DIR [--force]: a checkpoint as a Hugging Face model folder that
// transformers loads (LlamaForCausalLM, or PhysicsLM4's LlamaCanon format for Canon layers and partial RoPE; GLACanon,
// GatedDeltaNetCanon or Mamba2Canon for the linear families, those four with canonlab's model code beside the weights);
// a model its format cannot state exactly is refused, naming the config key (io/hf/export.h, docs/huggingface.md).
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "io/hf/export.h"

namespace canonlab::cli {

namespace {

struct ExportArgs {
  std::string checkpoint, to, out;
  bool force = false;
};

int run_export(const ExportArgs& a) {
  const HfExportResult r = export_hf(a.checkpoint, a.out, a.force);
  std::cout << "exported " << r.checkpoint << " (step " << r.step << ") to " << a.out << ": model_type "
            << hf_format_name(r.format) << ", " << r.tensors << " tensors (F32); files:";
  for (const std::string& f : r.files) std::cout << " " << f;
  std::cout << "\n";
  return 0;
}

}  // namespace

Command add_export_command(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* sub = app.add_subcommand("export", "Export a checkpoint to another format (--to hf: a Hugging Face folder)");
  sub->add_option("checkpoint", a->checkpoint, "A .model.safetensors file, a run directory or its checkpoints/")
      ->required();
  sub->add_option("--to", a->to, "Target format: hf (config.json, model.safetensors, generation_config.json; model code for the Canon formats)")
      ->required()
      ->check(CLI::IsMember({"hf"}));
  sub->add_option("--out", a->out, "Output folder (must be new or empty unless --force)")->required();
  sub->add_flag("--force", a->force, "Write into a non-empty folder, replacing the files an export writes (others are left)");
  return {sub, [a] { return run_export(*a); }};
}

}  // namespace canonlab::cli
