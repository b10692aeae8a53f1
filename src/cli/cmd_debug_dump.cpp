// canonlab debug-dump CONFIG --out DIR: weights, a batch, logits, gradients and a 10-step trajectory for the
// PyTorch parity test (tests/torch_ref/test_parity.py).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/config.h"
#include "engine/threads.h"
#include "io/safetensors.h"
#include "models/language_model.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/schedule.h"
#include "train/step.h"

namespace canonlab::cli {

namespace {

struct DebugDumpArgs {
  std::string config_path, out;
  std::vector<std::string> sets;
};

int run_debug_dump(const DebugDumpArgs& a) {
  RunConfig cfg = load_config(a.config_path, a.sets);
  set_thread_count(cfg.train.threads);
  std::filesystem::create_directories(a.out);
  auto task = make_task(cfg.task);
  auto model = build_model<float>(cfg.model, cfg.train.seed);
  ParameterStore<float>& params = model->params();
  save_model(a.out + "/model.safetensors", cfg, params, 0);

  const int B = cfg.train.batch_size, T = task->seq_len(), V = model->vocab_size();
  Batch batch = task->make_batch(B, cfg.train.data_seed, 0);
  {
    SafetensorsWriter w;
    w.add("tokens", std::span<const int32_t>(batch.tokens), {B, T});
    w.add("targets", std::span<const int32_t>(batch.targets), {B, T});
    w.add("loss_mask", std::span<const float>(batch.loss_mask), {B, T});
    w.write_atomic(a.out + "/batch.safetensors");
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
      w.write_atomic(a.out + "/reference.safetensors");
    }
    losses.push_back(fb.loss);
    apply_update(params, opt, decay, cfg.train, learning_rate(cfg.train, s), s);
  }
  std::ofstream(a.out + "/trajectory.json") << nlohmann::json{{"losses", losses}}.dump(2) << "\n";
  std::cout << "wrote " << a.out << "\n";
  return 0;
}

}  // namespace

Command add_debug_dump_command(CLI::App& app) {
  auto a = std::make_shared<DebugDumpArgs>();
  CLI::App* sub = app.add_subcommand("debug-dump", "Write weights, a batch, logits, gradients and a 10-step "
                                                   "trajectory for the PyTorch parity test");
  sub->add_option("config", a->config_path)->required()->check(CLI::ExistingFile);
  sub->add_option("--set", a->sets);
  sub->add_option("--out", a->out)->required();
  return {sub, [a] { return run_debug_dump(*a); }};
}

}  // namespace canonlab::cli
