// canonlab import-hf DIR --out RUN_DIR [--set task.k=v]...: a Hugging Face LlamaForCausalLM, LlamaCanon, GLACanon,
// GatedDeltaNetCanon or Mamba2Canon folder (F32, BF16 or F16; one file or shards) as a canonlab run directory for
// eval, probe, generate and debug-dump. The task is the copy task over the model's vocabulary unless --set says
// otherwise (io/hf/import.h, docs/huggingface.md).
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "io/hf/import.h"

namespace canonlab::cli {

namespace {

struct ImportArgs {
  std::string dir, out;
  std::vector<std::string> sets;
};

int run_import(const ImportArgs& a) {
  const HfImportResult r = import_hf(a.dir, a.out, a.sets);
  std::cout << "imported " << a.dir << " (model_type " << hf_format_name(r.format) << ", " << r.tensors
            << " tensors) as " << r.checkpoint << "; task " << r.cfg.task.name << "\n";
  return 0;
}

}  // namespace

Command add_import_hf_command(CLI::App& app) {
  auto a = std::make_shared<ImportArgs>();
  CLI::App* sub = app.add_subcommand("import-hf", "Import a Hugging Face Llama / LlamaCanon / GLACanon / GatedDeltaNetCanon / Mamba2Canon folder as a run directory");
  sub->add_option("dir", a->dir, "Folder with config.json and model.safetensors (or model.safetensors.index.json)")
      ->required();
  sub->add_option("--out", a->out, "New run directory")->required();
  sub->add_option("--set", a->sets,
                  "Task or eval setting of the run: --set task.name=depo (repeatable; task.*, train.*, probe.*); "
                  "default: the copy task over the model's vocabulary");
  return {sub, [a] { return run_import(*a); }};
}

}  // namespace canonlab::cli
