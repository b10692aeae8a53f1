// canonlab bench-step CONFIG: median time of full training steps (forward, loss, backward, clip, AdamW), for
// the benchmark scripts in bench/.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/config.h"
#include "engine/ops/linear/bf16.h"
#include "engine/threads.h"
#include "eval/flops.h"
#include "models/language_model.h"
#include "train/adamw.h"
#include "train/step.h"

namespace canonlab::cli {

namespace {

struct BenchStepArgs {
  std::string config_path;
  std::vector<std::string> sets;
  int steps = 20, warmup = 3, threads = 0;
};

int run_bench_step(const BenchStepArgs& a) {
  std::vector<std::string> all = a.sets;
  if (a.threads > 0) all.push_back("train.threads=" + std::to_string(a.threads));
  RunConfig cfg = load_config(a.config_path, all);
  set_thread_count(cfg.train.threads);
  auto task = make_task(cfg.task);
  auto model = build_model(cfg);
  ParameterStore<float>& params = model->params();
  const int B = cfg.train.batch_size, T = task->seq_len();
  Batch batch = task->make_batch(B, cfg.train.data_seed, 0);
  Arena arena(model->backend().memory());
  ActivationTrace<float> trace;
  AdamWState opt;
  const DeviceBuffer<uint8_t> decay = device_decay_mask(params, cfg.train.decay_on);
  SingleProcess single;
  TrainStep step(*model, arena, trace, opt, decay, cfg.train, single, BatchSplit{1, 0, 1, B}, T);
  const double weight = loss_mask_weight(batch);
  std::vector<double> ms;
  for (int s = 0; s < a.warmup + a.steps; s++) {
    auto t0 = std::chrono::steady_clock::now();
    step.enqueue(std::span<const Batch>(&batch, 1), weight, s, cfg.train.lr);
    model->backend().synchronize();  // each step timed to its end (on a GPU the host would otherwise run ahead)
    auto t1 = std::chrono::steady_clock::now();
    if (s >= a.warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  const TrainStep::Scalars last = step.read();
  if (last.halted_at >= 0) step.report_halt(last, std::span<const Batch>(&batch, 1), weight, last.halted_at == a.warmup + a.steps - 1);
  std::sort(ms.begin(), ms.end());
  const double median = ms.empty() ? 0 : ms[ms.size() / 2];
  nlohmann::json j = {{"ms_per_step", median},
                      {"tokens_per_step", B * T},
                      {"model_gflop_per_step", model_train_flops(cfg.model, B, T) / 1e9},
                      {"threads", thread_count()},
                      {"device", model->backend().name()},
                      {"precision", cfg.train.precision},
                      {"arena_mib", double(arena.high_water_bytes()) / (1 << 20)}};
  if (cfg.train.precision == "bf16" && cfg.train.device == "cpu") j["bf16_gemm"] = bf16_path_description();
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace

Command add_bench_step_command(CLI::App& app) {
  auto a = std::make_shared<BenchStepArgs>();
  CLI::App* sub = app.add_subcommand("bench-step", "Time training steps (median ms) for bench/");
  sub->add_option("config", a->config_path)->required()->check(CLI::ExistingFile);
  sub->add_option("--set", a->sets);
  sub->add_option("--steps", a->steps);
  sub->add_option("--warmup", a->warmup);
  sub->add_option("--threads", a->threads);
  return {sub, [a] { return run_bench_step(*a); }};
}

}  // namespace canonlab::cli
