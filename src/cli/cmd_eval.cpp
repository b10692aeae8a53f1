// canonlab eval CHECKPOINT|RUN_DIR [--set task.k=v]... [--json] [--int8]: task metrics and the IPMR table of a
// checkpoint, on the task it was trained on or on a changed one (longer cycles, a smaller window, more eval samples);
// --int8 evaluates the weight-only int8 quantization of its GEMM weights (eval/int8_inference.h).
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "eval/int8_inference.h"
#include "eval/probe.h"

namespace canonlab::cli {

namespace {

struct EvalArgs {
  std::string checkpoint;
  std::vector<std::string> sets;
  bool json_out = false, int8 = false;
};

int run_eval(const EvalArgs& a) {
  LoadedCheckpoint c = load_checkpoint(a.checkpoint, a.sets);
  std::optional<Int8Summary> int8;
  if (a.int8) int8 = quantize_for_inference(*c.model, c.cfg);
  const ProbeResult probe = run_probe(*c.model, *c.task, c.cfg);
  nlohmann::json out = probe.to_json();
  out["checkpoint"] = c.path;
  out["weights"] = int8 ? "int8" : "fp32";
  if (int8) out["int8"] = int8->to_json();
  if (a.json_out) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "checkpoint " << c.path << "\n" << (int8 ? int8->text() : "weights fp32\n") << probe.eval_text()
              << probe.ipmr_text();
  }
  return 0;
}

}  // namespace

Command add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand("eval", "Evaluate a checkpoint: task metrics and the IPMR table");
  sub->add_option("checkpoint", a->checkpoint, "A .model.safetensors file, a run directory or its checkpoints/")
      ->required();
  sub->add_option("--set", a->sets,
                  "Evaluate on a changed task or eval setting: --set task.context=64 (repeatable; task.*, train.*, probe.*)");
  sub->add_flag("--json", a->json_out, "Print JSON");
  sub->add_flag("--int8", a->int8,
                "Evaluate with weight-only int8 GEMM weights (per-output-channel scales, fp32 activations; CPU, fp32)");
  return {sub, [a] { return run_eval(*a); }};
}

}  // namespace canonlab::cli
