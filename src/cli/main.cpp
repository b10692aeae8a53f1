// canonlab command line: train, eval, and the helpers that tests and benchmarks call.
#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "config/config.h"
#include "data/copy_task.h"
#include "engine/threads.h"
#include "eval/evaluate.h"
#include "eval/flops.h"
#include "eval/ipmr.h"
#include "io/safetensors.h"
#include "models/language_model.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/schedule.h"
#include "train/step.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace canonlab;

namespace {

std::string default_out_dir(const std::string& config_path) {
  return "runs/" + fs::path(config_path).stem().string();
}

int cmd_train(const std::string& config_path, const std::vector<std::string>& sets, std::string out, bool resume,
              bool quiet) {
  RunConfig cfg = load_config(config_path, sets);
  if (out.empty()) out = default_out_dir(config_path);
  TrainOptions opt;
  opt.out_dir = out;
  opt.resume = resume;
  opt.progress = !quiet;
  nlohmann::json s = train(cfg, opt);
  std::cout << "\nrun directory: " << out << "\n";
  if (s.contains("eval")) std::cout << "final eval: " << s["eval"].dump() << "\n";
  return 0;
}

int cmd_eval(const std::string& checkpoint, bool json_out) {
  std::string path = checkpoint;
  if (fs::is_directory(path)) {
    const std::string dir = fs::exists(fs::path(path) / "checkpoints") ? (fs::path(path) / "checkpoints").string() : path;
    path = latest_model_path(dir);
    CANONLAB_CHECK(!path.empty(), "no checkpoint found in '" + checkpoint + "'");
  }
  RunConfig cfg = read_model_config(path);
  set_thread_count(cfg.train.threads);
  auto model = build_model<float>(cfg.model, cfg.train.seed);
  load_model(path, model->params());
  auto task = make_task(cfg.task);
  Arena arena;
  nlohmann::json ev = evaluate(*model, *task, make_eval_batches(*task, cfg), arena);
  nlohmann::json out = {{"checkpoint", path}, {"eval", ev}};
  std::string text;
  if (auto* copy = dynamic_cast<CopyTask*>(task.get())) {
    IpmrResult r = measure_ipmr(*model, *copy, cfg);
    out["ipmr"] = ipmr_to_json(r, cfg.probe.top_heads);
    text = format_ipmr(r, cfg.probe.top_heads);
  }
  if (json_out) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "checkpoint " << path << "\n";
    for (auto& [k, v] : ev.items()) std::cout << "  eval " << k << " = " << v.dump() << "\n";
    std::cout << text;
  }
  return 0;
}

// Writes the files the PyTorch parity test reads (tests/torch_ref/test_parity.py).
int cmd_debug_dump(const std::string& config_path, const std::vector<std::string>& sets, const std::string& out) {
  RunConfig cfg = load_config(config_path, sets);
  set_thread_count(cfg.train.threads);
  fs::create_directories(out);
  auto task = make_task(cfg.task);
  auto model = build_model<float>(cfg.model, cfg.train.seed);
  ParameterStore<float>& params = model->params();
  save_model(out + "/model.safetensors", cfg, params, 0);

  const int B = cfg.train.batch_size, T = task->seq_len(), V = model->vocab_size();
  Batch batch = task->make_batch(B, cfg.train.data_seed, 0);
  {
    SafetensorsWriter w;
    w.add("tokens", std::span<const int32_t>(batch.tokens), {B, T});
    w.add("targets", std::span<const int32_t>(batch.targets), {B, T});
    w.add("loss_mask", std::span<const float>(batch.loss_mask), {B, T});
    w.write_atomic(out + "/batch.safetensors");
  }
  Arena arena;
  ActivationTrace<float> trace;
  AdamWState opt;
  const std::vector<uint8_t> decay = decay_mask(params, cfg.train.decay_on);
  nlohmann::json losses = nlohmann::json::array();
  for (int s = 0; s < 10; s++) {
    const ForwardBackwardResult fb = forward_backward(*model, arena, trace, batch, s);
    if (s == 0) {
      SafetensorsWriter w;
      const float loss_value = float(fb.loss);
      w.add("logits", std::span<const float>(fb.logits, size_t(B) * T * V), {B, T, V});
      w.add("loss", std::span<const float>(&loss_value, 1), {1});
      std::span<const float> grads = params.grads();
      for (const ParamInfo& p : params.infos()) w.add("grad." + p.name, grads.subspan(p.offset, p.numel), p.shape);
      w.write_atomic(out + "/reference.safetensors");
    }
    losses.push_back(fb.loss);
    apply_update(params, opt, decay, cfg.train, learning_rate(cfg.train, s), s);
  }
  std::ofstream(out + "/trajectory.json") << nlohmann::json{{"losses", losses}}.dump(2) << "\n";
  std::cout << "wrote " << out << "\n";
  return 0;
}

// Times full training steps (forward, loss, backward, clip, AdamW) for the benchmark script.
int cmd_bench_step(const std::string& config_path, const std::vector<std::string>& sets, int steps, int warmup,
                   int threads) {
  std::vector<std::string> all = sets;
  if (threads > 0) all.push_back("train.threads=" + std::to_string(threads));
  RunConfig cfg = load_config(config_path, all);
  set_thread_count(cfg.train.threads);
  auto task = make_task(cfg.task);
  auto model = build_model<float>(cfg.model, cfg.train.seed);
  ParameterStore<float>& params = model->params();
  const int B = cfg.train.batch_size, T = task->seq_len();
  Batch batch = task->make_batch(B, cfg.train.data_seed, 0);
  Arena arena;
  ActivationTrace<float> trace;
  AdamWState opt;
  const std::vector<uint8_t> decay = decay_mask(params, cfg.train.decay_on);
  std::vector<double> ms;
  for (int s = 0; s < warmup + steps; s++) {
    auto t0 = std::chrono::steady_clock::now();
    forward_backward(*model, arena, trace, batch, s);
    apply_update(params, opt, decay, cfg.train, cfg.train.lr, s);
    auto t1 = std::chrono::steady_clock::now();
    if (s >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms.empty() ? 0 : ms[ms.size() / 2];
  nlohmann::json j = {{"ms_per_step", median},
                      {"tokens_per_step", B * T},
                      {"model_gflop_per_step", transformer_train_flops(cfg.model, B, T) / 1e9},
                      {"threads", thread_count()},
                      {"arena_mib", double(arena.high_water_bytes()) / (1 << 20)}};
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"canonlab: train small language models on synthetic tasks and probe what they learned"};
  app.require_subcommand(1);

  std::string config_path, out, checkpoint;
  std::vector<std::string> sets;
  bool resume = false, quiet = false, json_out = false;
  int steps = 20, warmup = 3, threads = 0;

  auto* train_cmd = app.add_subcommand("train", "Train a model from a YAML config");
  train_cmd->add_option("config", config_path, "YAML config file")->required()->check(CLI::ExistingFile);
  train_cmd->add_option("--set", sets, "Override a config key: --set model.canon.set=ABCD (repeatable)");
  train_cmd->add_option("--out", out, "Run directory (default runs/<config name>)");
  train_cmd->add_flag("--resume", resume, "Continue bit-exactly from the run directory's latest checkpoint");
  train_cmd->add_flag("--quiet", quiet, "No progress bar");

  auto* eval_cmd = app.add_subcommand("eval", "Evaluate a checkpoint: task metrics and the IPMR table");
  eval_cmd->add_option("checkpoint", checkpoint, "A .model.safetensors file, a run directory or its checkpoints/")
      ->required();
  eval_cmd->add_flag("--json", json_out, "Print JSON");

  auto* dump_cmd = app.add_subcommand("debug-dump", "Write weights, a batch, logits, gradients and a 10-step "
                                                    "trajectory for the PyTorch parity test");
  dump_cmd->add_option("config", config_path)->required()->check(CLI::ExistingFile);
  dump_cmd->add_option("--set", sets);
  dump_cmd->add_option("--out", out)->required();

  auto* bench_cmd = app.add_subcommand("bench-step", "Time training steps (median ms) for bench/");
  bench_cmd->add_option("config", config_path)->required()->check(CLI::ExistingFile);
  bench_cmd->add_option("--set", sets);
  bench_cmd->add_option("--steps", steps);
  bench_cmd->add_option("--warmup", warmup);
  bench_cmd->add_option("--threads", threads);

  CLI11_PARSE(app, argc, argv);
  try {
    if (*train_cmd) return cmd_train(config_path, sets, out, resume, quiet);
    if (*eval_cmd) return cmd_eval(checkpoint, json_out);
    if (*dump_cmd) return cmd_debug_dump(config_path, sets, out);
    if (*bench_cmd) return cmd_bench_step(config_path, sets, steps, warmup, threads);
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 1;
}
