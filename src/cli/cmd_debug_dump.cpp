// canonlab debug-dump CONFIG | --weights CHECKPOINT [--tokens FILE] [--set k=v]... --out DIR
// Everything an independent implementation needs to check itself against ours on one batch, as safetensors:
//   model.safetensors      the weights (freshly initialised from CONFIG, or the trained CHECKPOINT's) + config
//   batch.safetensors      tokens, targets, loss_mask (B, T): the task's training batch 0, or --tokens FILE
//   reference.safetensors  logits (B, T, V), loss, grad.<parameter> for every parameter, on that batch
//   trajectory.json        fresh weights only: the losses before each of 10 AdamW updates on that batch
// The PyTorch parity test (tests/torch_ref/test_parity.py) compares all of it with tests/torch_ref/canon_model.py.
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>

#include "cli/commands.h"
#include "config/config.h"
#include "engine/error.h"
#include "engine/threads.h"
#include "eval/probe.h"
#include "io/paths.h"
#include "io/safetensors.h"
#include "models/language_model.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/resource_estimate.h"
#include "train/schedule.h"
#include "train/step.h"

namespace fs = std::filesystem;

namespace canonlab::cli {

namespace {

constexpr int kTrajectorySteps = 10;
// A debug batch is inspected, not trained on: these bounds keep the dump (logits are B x T x V float32) and the
// arena a few hundred MB at most, and refuse a mistaken file (a whole corpus) before anything is allocated.
constexpr int64_t kMaxBatchTokens = int64_t(1) << 16;   // B x T
constexpr int64_t kMaxBatchLogits = int64_t(1) << 26;   // B x T x V: 256 MiB of float32 logits

struct DebugDumpArgs {
  std::string config_path, weights, tokens_path, out;
  std::vector<std::string> sets;
};

// What the model fixes about a batch it can run.
struct BatchLimits {
  int vocab = 0;
  std::optional<int> max_seq_len;  // only learned positions limit the length
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

// Checks the size before anything of size B x T is allocated.
void check_batch_shape(const std::string& path, int64_t B, int64_t T, const BatchLimits& lim) {
  const std::string where = "token file '" + path + "': ";
  CANONLAB_CHECK(B >= 1 && T >= 1, where + "the batch " + std::to_string(B) + " x " + std::to_string(T) +
                                       " is empty (need at least one sequence of at least one token)");
  CANONLAB_CHECK(B * T <= kMaxBatchTokens, where + "B x T = " + std::to_string(B) + " x " + std::to_string(T) + " = " +
                                               std::to_string(B * T) + " tokens; a debug batch holds at most " +
                                               std::to_string(kMaxBatchTokens));
  CANONLAB_CHECK(B * T * lim.vocab <= kMaxBatchLogits,
                 where + "B x T x vocab = " + std::to_string(B * T * lim.vocab) + " logits (vocab " +
                     std::to_string(lim.vocab) + "); a debug batch gives at most " + std::to_string(kMaxBatchLogits) +
                     " (256 MiB of float32): use fewer or shorter sequences");
  if (lim.max_seq_len)
    CANONLAB_CHECK(T <= *lim.max_seq_len, where + "sequences of " + std::to_string(T) +
                                              " tokens are longer than the model's learned positions allow "
                                              "(model.max_seq_len = " + std::to_string(*lim.max_seq_len) + ")");
}

// `what` = "tokens" or "targets": every id must be a token of the model's vocabulary.
std::vector<int> checked_ids(const std::string& path, const std::string& what, const std::vector<int64_t>& values,
                             int64_t T, const BatchLimits& lim) {
  std::vector<int> ids(values.size());
  for (size_t i = 0; i < values.size(); i++) {
    const int64_t v = values[i];
    CANONLAB_CHECK(v >= 0 && v < lim.vocab,
                   "token file '" + path + "': " + what + "[" + std::to_string(int64_t(i) / T) + ", " +
                       std::to_string(int64_t(i) % T) + "] = " + std::to_string(v) +
                       " is not a token id of this model (0.." + std::to_string(lim.vocab - 1) + ")" +
                       (what == "targets" ? "; leave a position out of the loss with loss_mask 0 instead" : ""));
    ids[i] = int(v);
  }
  return ids;
}

// Without targets the batch is language modelling on the tokens themselves: the target at t is the token at t + 1,
// and the last position, which has none, is left out of the loss. Given targets count everywhere unless masked.
Batch assemble_batch(const std::string& path, int B, int T, std::vector<int> tokens,
                     std::optional<std::vector<int>> targets, std::optional<std::vector<float>> loss_mask) {
  Batch batch;
  batch.resize(B, T);
  batch.tokens = std::move(tokens);
  if (targets) {
    batch.targets = std::move(*targets);
    if (!loss_mask) batch.loss_mask.assign(size_t(B) * T, 1.f);
  } else {
    for (int b = 0; b < B; b++)
      for (int t = 0; t + 1 < T; t++) {
        batch.targets[size_t(b) * T + t] = batch.tokens[size_t(b) * T + t + 1];
        batch.loss_mask[size_t(b) * T + t] = 1.f;
      }
  }
  if (loss_mask) {
    if (!targets)
      for (int b = 0; b < B; b++)
        CANONLAB_CHECK((*loss_mask)[size_t(b) * T + T - 1] == 0.f,
                       "token file '" + path + "': loss_mask[" + std::to_string(b) + ", " + std::to_string(T - 1) +
                           "] is 1, but without 'targets' the last position has no next token to predict");
    batch.loss_mask = std::move(*loss_mask);
  }
  bool any = false;
  for (float m : batch.loss_mask) any = any || m != 0.f;
  CANONLAB_CHECK(any, "token file '" + path + "': the loss covers no position (" +
                          (loss_mask ? std::string("loss_mask is all 0")
                                     : "without 'targets' the target of position t is token t + 1, so T must be "
                                       "at least 2") +
                          ")");
  return batch;
}

// Format 1: one sequence per line, token ids separated by spaces or tabs, every line the same length; blank lines
// are skipped. In PyTorch: np.savetxt("batch.txt", tokens.numpy(), fmt="%d").
Batch read_text_tokens(const std::string& path, const BatchLimits& lim) {
  std::ifstream in(path);
  CANONLAB_CHECK(in, "token file '" + path + "' cannot be read");
  std::vector<int64_t> values;
  int64_t B = 0, T = 0;
  std::string line;
  for (int line_no = 1; std::getline(in, line); line_no++) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string at = "token file '" + path + "' line " + std::to_string(line_no) + ": ";
    int64_t count = 0;
    for (size_t i = 0; i < line.size();) {
      if (line[i] == ' ' || line[i] == '\t') {
        i++;
        continue;
      }
      size_t end = line.find_first_of(" \t", i);
      if (end == std::string::npos) end = line.size();
      const std::string word = line.substr(i, end - i);
      int64_t v = 0;
      const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
      CANONLAB_CHECK(ec == std::errc() && ptr == word.data() + word.size(),
                     at + "'" + word +
                         "' is not a token id (expected integers separated by spaces, one sequence per line)");
      values.push_back(v);
      count++;
      CANONLAB_CHECK(int64_t(values.size()) <= kMaxBatchTokens,
                     "token file '" + path + "': more than " + std::to_string(kMaxBatchTokens) +
                         " tokens; a debug batch holds at most " + std::to_string(kMaxBatchTokens) + " (B x T)");
      i = end;
    }
    if (count == 0) continue;
    if (B == 0) T = count;
    CANONLAB_CHECK(count == T, at + "has " + std::to_string(count) + " tokens, the first sequence " +
                                   std::to_string(T) + " (every sequence of a batch has the same length)");
    B++;
  }
  CANONLAB_CHECK(B > 0, "token file '" + path + "' holds no sequence (expected one line of token ids per sequence)");
  check_batch_shape(path, B, T, lim);
  return assemble_batch(path, int(B), int(T), checked_ids(path, "tokens", values, T, lim), std::nullopt, std::nullopt);
}

std::vector<int64_t> integer_values(const std::string& path, const TensorEntry& e) {
  if (e.dtype == DType::I32) {
    const std::vector<int32_t> v = e.to_vector<int32_t>();
    return {v.begin(), v.end()};
  }
  CANONLAB_CHECK(e.dtype == DType::I64, "token file '" + path + "': tensor '" + e.name + "' is " + dtype_name(e.dtype) +
                                            "; token ids must be I32 or I64 (torch.int32 / torch.int64)");
  return e.to_vector<int64_t>();
}

std::vector<float> mask_values(const std::string& path, const TensorEntry& e) {
  std::vector<double> v;
  switch (e.dtype) {
    case DType::F32: { const auto x = e.to_vector<float>(); v.assign(x.begin(), x.end()); break; }
    case DType::F64: v = e.to_vector<double>(); break;
    case DType::I32: { const auto x = e.to_vector<int32_t>(); v.assign(x.begin(), x.end()); break; }
    case DType::I64: { const auto x = e.to_vector<int64_t>(); v.assign(x.begin(), x.end()); break; }
  }
  std::vector<float> mask(v.size());
  for (size_t i = 0; i < v.size(); i++) {
    CANONLAB_CHECK(v[i] == 0.0 || v[i] == 1.0, "token file '" + path + "': loss_mask holds " + std::to_string(v[i]) +
                                                   " at flat index " + std::to_string(i) +
                                                   "; it must be 0 (left out of the loss) or 1 (counted)");
    mask[i] = float(v[i]);
  }
  return mask;
}

// Format 2: a safetensors file with "tokens" (B, T) of I32 or I64 and, optionally, "targets" (B, T, I32/I64) and
// "loss_mask" (B, T, 0/1 of F32, F64, I32 or I64); nothing else. In PyTorch:
// safetensors.torch.save_file({"tokens": tokens.to(torch.int32)}, "batch.safetensors").
Batch read_safetensors_tokens(const std::string& path, const BatchLimits& lim) {
  SafetensorsFile file;
  try {
    file = read_safetensors(path);
  } catch (const Error& e) {
    throw Error("token file '" + path + "': " + e.what());
  }
  const std::set<std::string> known = {"tokens", "targets", "loss_mask"};
  for (const TensorEntry& e : file.tensors)
    CANONLAB_CHECK(known.contains(e.name),
                   "token file '" + path + "': unexpected tensor '" + e.name +
                       "' (a token file holds 'tokens' and optionally 'targets' and 'loss_mask')");
  const TensorEntry* tokens = file.find("tokens");
  CANONLAB_CHECK(tokens, "token file '" + path + "' has no tensor 'tokens' (token ids of shape (B, T), I32 or I64)");
  CANONLAB_CHECK(tokens->shape.size() == 2, "token file '" + path + "': 'tokens' has shape " +
                                                shape_text(tokens->shape) +
                                                "; it must be (B, T): a batch of B sequences of T tokens");
  const int64_t B = tokens->shape[0], T = tokens->shape[1];
  check_batch_shape(path, B, T, lim);
  for (const char* name : {"targets", "loss_mask"})
    if (const TensorEntry* e = file.find(name))
      CANONLAB_CHECK(e->shape == tokens->shape, "token file '" + path + "': '" + name + "' has shape " +
                                                    shape_text(e->shape) + ", 'tokens' " + shape_text(tokens->shape) +
                                                    " (they must be equal)");
  std::optional<std::vector<int>> targets;
  if (const TensorEntry* e = file.find("targets"))
    targets = checked_ids(path, "targets", integer_values(path, *e), T, lim);
  std::optional<std::vector<float>> loss_mask;
  if (const TensorEntry* e = file.find("loss_mask")) loss_mask = mask_values(path, *e);
  return assemble_batch(path, int(B), int(T), checked_ids(path, "tokens", integer_values(path, *tokens), T, lim),
                        std::move(targets), std::move(loss_mask));
}

Batch read_token_file(const std::string& path, const BatchLimits& lim) {
  try {
    require_regular_file(path, "--tokens: cannot read token file");
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (--tokens takes a .safetensors file or a text file of token ids, one "
                "sequence per line)");
  }
  return path.ends_with(".safetensors") ? read_safetensors_tokens(path, lim) : read_text_tokens(path, lim);
}

int run_debug_dump(const DebugDumpArgs& a) {
  CANONLAB_CHECK(a.config_path.empty() != a.weights.empty(),
                 a.weights.empty()
                     ? "debug-dump needs a CONFIG (fresh weights) or --weights CHECKPOINT (trained weights)"
                     : "debug-dump takes CONFIG or --weights CHECKPOINT, not both (the checkpoint holds its own "
                       "config; change task.*, train.* or probe.* keys with --set)");
  // Fresh weights: the config's model at its seed. Trained weights: the checkpoint's config and weights
  // (load_checkpoint refuses model.* overrides, which the weights fix).
  RunConfig cfg;
  std::unique_ptr<Task> task;
  std::unique_ptr<LanguageModel<float>> model;
  int step = 0;
  if (a.weights.empty()) {
    cfg = load_config(a.config_path, a.sets);
    check_resources(estimate_resources(cfg, Purpose::train), cfg);
    set_thread_count(cfg.train.threads);
    task = make_task(cfg.task);
    model = build_model(cfg);
  } else {
    LoadedCheckpoint c = load_checkpoint(a.weights, a.sets);
    cfg = std::move(c.cfg);
    task = std::move(c.task);
    model = std::move(c.model);
    step = c.step;
  }
  const int V = model->vocab_size();
  BatchLimits limits{V, std::nullopt};
  if (model->config().attention.position == "learned") limits.max_seq_len = model->config().max_seq_len;
  // Read and validate the batch before anything is written, so a bad token file leaves DIR as it was.
  const Batch batch = a.tokens_path.empty() ? task->make_batch(cfg.train.batch_size, cfg.train.data_seed, 0)
                                            : read_token_file(a.tokens_path, limits);
  const int B = batch.B, T = batch.T;

  create_directories_at(a.out, "--out: cannot create the dump directory");
  ParameterStore<float>& params = model->params();
  save_model(a.out + "/model.safetensors", cfg, params, step);
  {
    SafetensorsWriter w;
    w.add("tokens", std::span<const int32_t>(batch.tokens), {B, T});
    w.add("targets", std::span<const int32_t>(batch.targets), {B, T});
    w.add("loss_mask", std::span<const float>(batch.loss_mask), {B, T});
    w.write_atomic(a.out + "/batch.safetensors");
  }
  Arena arena(model->backend().memory());
  ActivationTrace<float> trace;
  {
    const ForwardBackwardResult fb = forward_backward(*model, arena, trace, batch, 0);
    SafetensorsWriter w;
    const float loss_value = float(fb.loss);
    std::vector<float> host_logits;
    w.add("logits", host_view(arena.memory(), fb.logits, size_t(B) * T * V, host_logits), {B, T, V});
    w.add("loss", std::span<const float>(&loss_value, 1), {1});
    const std::vector<float> host_grads = params.host_grads();
    const std::span<const float> grads = host_grads;
    for (const ParamInfo& p : params.infos()) w.add("grad." + p.name, grads.subspan(p.offset, p.numel), p.shape);
    w.write_atomic(a.out + "/reference.safetensors");
  }
  // The trajectory checks our AdamW from the initialisation the config defines. From trained weights a fresh
  // optimizer would follow neither the run's trajectory (its moments are in the .state file) nor anything else
  // a user can reproduce, so none is written, and one left by an earlier dump into DIR is removed.
  const std::string trajectory_path = a.out + "/trajectory.json";
  if (!a.weights.empty()) {
    remove_at(trajectory_path, "--out: cannot remove the earlier dump's");
  } else {
    AdamWState opt;
    const DeviceBuffer<uint8_t> decay = device_decay_mask(params, cfg.train.decay_on);
    SingleProcess single;
    TrainStep step(*model, arena, trace, opt, decay, cfg.train, single, BatchSplit{1, 0, 1, B}, T);
    const double weight = loss_mask_weight(batch);
    nlohmann::json losses = nlohmann::json::array();
    for (int s = 0; s < kTrajectorySteps; s++) {
      step.enqueue(std::span<const Batch>(&batch, 1), weight, s, learning_rate(cfg.train, s));
      const TrainStep::Scalars scalars = step.read();
      if (scalars.halted_at >= 0) step.report_halt(scalars, std::span<const Batch>(&batch, 1), weight, true);
      losses.push_back(scalars.loss());
    }
    std::ofstream(trajectory_path) << nlohmann::json{{"losses", losses}}.dump(2) << "\n";
  }
  const std::string weights = a.weights.empty() ? "fresh weights" : "weights of step " + std::to_string(step);
  const std::string source = a.tokens_path.empty() ? "the task" : a.tokens_path;
  std::cout << "wrote " << a.out << " (" << weights << ", batch " << B << " x " << T << " from " << source << ")\n";
  return 0;
}

}  // namespace

Command add_debug_dump_command(CLI::App& app) {
  auto a = std::make_shared<DebugDumpArgs>();
  CLI::App* sub = app.add_subcommand(
      "debug-dump", "Write weights, a batch, logits, loss and gradients (and, for fresh weights, a 10-step AdamW "
                    "trajectory) for checking another implementation, e.g. the PyTorch parity test");
  sub->add_option("config", a->config_path, "Config YAML: freshly initialised weights (omit with --weights)")
      ->check(CLI::ExistingFile);
  sub->add_option("--weights", a->weights,
                  "Trained weights instead: a .model.safetensors file, a run directory or its checkpoints/");
  sub->add_option("--tokens", a->tokens_path,
                  "The batch to run (default: the task's training batch 0): a .safetensors file with 'tokens' (B, T) "
                  "I32/I64 and optional 'targets', 'loss_mask'; or a text file, one sequence of token ids per line "
                  "(targets = the next token)");
  sub->add_option("--set", a->sets, "Override a config key (with --weights: task.*, train.*, probe.* only)");
  sub->add_option("--out", a->out, "Output directory")->required();
  return {sub, [a] { return run_debug_dump(*a); }};
}

}  // namespace canonlab::cli
