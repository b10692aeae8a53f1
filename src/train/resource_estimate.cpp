// The resource estimate (train/resource_estimate.h, docs/resources.md). Its device memory is counted, not tallied:
// the run's own model is built on a counting backend (engine/backend/counting_backend.h: the CPU's, or CudaBackend
// over the CUDA layer that launches nothing) and stepped once, evaluated and probed, so every allocation the modules,
// the arena, the optimizer and the backend make is the one the run will make, with no second copy of what they do.
// tests/unit/test_resource_estimate.cpp holds it against a real step's arena and a real process's peak RSS.
#include "train/resource_estimate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "config/model_shapes.h"
#include "data/copy_task.h"
#include "data/lano.h"
#include "data/task.h"
#include "data/text.h"
#include "engine/backend/counting_backend.h"
#include "engine/backend/make_backend.h"
#include "engine/comm/communicator.h"
#include "engine/cuda/cuda_provider.h"
#include "engine/cuda/gemm.h"
#include "engine/error.h"
#include "engine/ops/linear/fast.h"
#include "engine/params.h"
#include "engine/threads.h"
#include "eval/evaluate.h"
#include "eval/flops.h"
#include "models/decoder_model.h"
#include "models/mixers.h"
#include "train/adamw.h"
#include "train/step.h"

namespace canonlab {
namespace {

constexpr double kFloat = sizeof(float);
constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;

// What the process holds whatever the model: the binary and its libraries (oneDNN, OpenBLAS, libstdc++, yaml-cpp)
// and, per OpenMP worker, its stack and the malloc arena its kernel scratch and GEMM packing buffers come from.
// Measured as peak RSS on the development machine: 16 MiB for a tiny model at 1 to 8 threads; E1-Bk0 grows by
// 0.3 MiB and the Gated DeltaNet preset by about 1 MiB per thread (docs/resources.md#calibration).
constexpr double kProcessBaseBytes = 16 * kMiB;
constexpr double kPerThreadBytes = 1 * kMiB;
// What a CUDA context holds on the GPU before anything is allocated (the driver's state, the loaded kernels, cuBLASLt's
// handles): some hundreds of MiB on an H100 with CUDA 13. Not counted (no GPU here to ask); stated as such.
constexpr double kCudaContextBytes = 512 * kMiB;

// Fraction of the GEMM rate a whole training step reaches, by mixer, from BENCHMARKS.md: model GFLOP/s of
// `bench-step` (4 layers, d_model 128, T = 255, 2 threads) over oneDNN's sgemm rate there (199 GFLOP/s):
// transformer 136-147 (E1-Bk0 at T = 49: 129), Mamba2 138, GLA 108, Gated DeltaNet 123, DeltaNet 117 with the
// family's own conv only; Canon layers (A, B, C, D) cost about a fifth more time (docs/resources.md#time).
double step_efficiency(char letter) {
  switch (letter) {
    case 'A': case 'S': return 0.65;
    case 'M': return 0.65;
    case 'G': return 0.5;
    case 'D': return 0.6;
    default: return 0.55;  // N
  }
}
constexpr double kCanonEfficiency = 0.8;

bool has_canon(const ModelConfig& m, char letter) { return m.canon.set.find(letter) != std::string::npos; }

// One run of the model on a counting backend, in the order a training process goes: built (parameters, gradients,
// the bf16 shadow), the step's state (AdamW moments, the decay mask, the step's inputs and scalars, the micro-batches'
// gradient sum), one step (the arena; a GPU's workspace), an evaluation pass of a whole batch on the same arena, and
// the IPMR probe's forward, probabilities kept, in an arena of its own. Nothing is computed and nothing is allocated
// but the counts.
struct CountedRun {
  double model = 0;           // parameters, gradients (and the bf16 shadow; a GPU's packed bf16 copy)
  double step_state = 0;      // 0 unless training
  double arena = 0;           // the step's arena: training and evaluation share it
  double probe_arena = 0;     // the probe's arena (0 without a probe)
  double other = 0;           // the rest of the device peak: the backend's own buffers, module constants, arena slack
  double peak = 0;            // the counting memory's peak over the whole sequence
};

struct CountPlan {
  std::string device = "cpu";
  Precision precision = Precision::fp32;
  int threads = 1;
  bool train = false;
  int micro_batches = 1, micro_rows = 0;  // training: the step's micro-batches of micro_rows sequences
  int eval_rows = 0;                      // an evaluation pass of eval_rows sequences (0: none)
  int probe_rows = 0;                     // a probe's forward of probe_rows sequences with probabilities (0: none)
  int T = 0;
};

// The engine indexes a step's tokens with int (check_resources refuses more); beyond this a count would first build
// batches of that size on the host, and a run that large is refused for its memory anyway.
constexpr double kMaxCountedTokens = double(1 << 26);

CountedRun count_run(const ModelConfig& m, uint64_t seed, const TrainConfig& train_cfg, const CountPlan& plan) {
  CountingMemory memory(parse_device(plan.device).value_or(DeviceSpec{}).device);
  CountedRun r;
  const std::shared_ptr<Backend<float>> backend =
      make_counting_backend(plan.device, plan.precision, memory, plan.threads,
                            parse_attention_kernel(train_cfg.attention_kernel));
  const std::unique_ptr<LanguageModel<float>> model = build_model<float>(m, seed, backend);
  r.model = memory.live_bytes();
  Arena arena(memory);
  ActivationTrace<float> trace;
  AdamWState opt;
  SingleProcess single;
  std::optional<DeviceBuffer<uint8_t>> decay;
  std::optional<TrainStep> step;
  if (plan.train) {
    decay.emplace(memory, model->params().total());
    step.emplace(*model, arena, trace, opt, *decay, train_cfg, single,
                 BatchSplit{1, 0, plan.micro_batches, plan.micro_rows}, plan.T);
    r.step_state = memory.live_bytes() - r.model;
    step->enqueue_on_current_inputs();
  }
  if (plan.eval_rows > 0) {
    Batch batch;
    batch.resize(plan.eval_rows, plan.T);
    evaluation_pass(*model, arena, batch);
  }
  r.arena = double(arena.high_water_bytes());
  if (plan.probe_rows > 0) {  // the IPMR probe: tokens uploaded, forward with each attention layer's probabilities
    Arena probe(memory);
    Batch batch;
    batch.resize(plan.probe_rows, plan.T);
    StepContext<float> ctx{probe, *backend};
    ctx.on_attention_probs = [](int, const float*, int, int, int) {};
    model->forward(ctx, ctx.upload(std::span<const int>(batch.tokens)), plan.probe_rows, plan.T);
    r.probe_arena = double(probe.high_water_bytes());
  }
  r.peak = memory.peak_bytes();
  r.other = std::max(0.0, r.peak - r.model - r.step_state - r.arena - r.probe_arena);
  return r;
}

CountPlan plan_for(const RunConfig& cfg, int threads) {
  CountPlan plan;
  plan.device = cfg.train.device;
  plan.precision = parse_precision(cfg.train.precision);
  plan.threads = threads;
  return plan;
}

double batch_bytes(double B, double T) {
  return B * T * (3 * sizeof(int) + 2 * sizeof(float));  // Batch: tokens, targets, score_tag; loss and score masks
}

std::string format_bytes(double bytes) {
  char buf[64];
  if (bytes >= 1024 * 1024 * kGiB) std::snprintf(buf, sizeof buf, "%.1f PiB", bytes / (1024 * 1024 * kGiB));
  else if (bytes >= 1024 * kGiB) std::snprintf(buf, sizeof buf, "%.1f TiB", bytes / (1024 * kGiB));
  else if (bytes >= kGiB) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / kGiB);
  else if (bytes >= kMiB) std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / kMiB);
  else std::snprintf(buf, sizeof buf, "%.0f KiB", bytes / 1024);
  return buf;
}

// 1.23 G, 804.2 k: a number with its SI prefix and a space, ready for a unit ("FLOP") or a noun.
std::string format_count(double value) {
  char buf[64];
  if (value >= 1e18) std::snprintf(buf, sizeof buf, "%.3g E", value / 1e18);
  else if (value >= 1e15) std::snprintf(buf, sizeof buf, "%.2f P", value / 1e15);
  else if (value >= 1e12) std::snprintf(buf, sizeof buf, "%.2f T", value / 1e12);
  else if (value >= 1e9) std::snprintf(buf, sizeof buf, "%.2f G", value / 1e9);
  else if (value >= 1e6) std::snprintf(buf, sizeof buf, "%.2f M", value / 1e6);
  else if (value >= 1e3) std::snprintf(buf, sizeof buf, "%.1f k", value / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f ", value);
  return buf;
}

std::string format_seconds(double s) {
  char buf[64];
  if (s < 120) std::snprintf(buf, sizeof buf, "%.0f s", s);
  else if (s < 7200) std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  else if (s < 3 * 86400) std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  else if (s < 365 * 86400) std::snprintf(buf, sizeof buf, "%.1f days", s / 86400);
  else std::snprintf(buf, sizeof buf, "%.3g years", s / (365.25 * 86400));
  return buf;
}

// The model keys that set the parameter count, the one that dominates first.
std::string parameter_keys(const ModelConfig& m) {
  const double C = m.d_model;
  const double embedding = double(m.vocab_size) * C * (m.tie_embeddings ? 1 : 2);
  const std::string letters = mixer_letters(m);
  std::string widths;
  if (std::ranges::any_of(letters, [&](char l) { return layer_has_mlp(m, l); })) widths += ", model.mlp.hidden_dim";
  if (letters.find('M') != std::string::npos) widths += ", model.mamba2.expand";
  if (letters.find('G') != std::string::npos) widths += ", model.gla.expand_k, model.gla.expand_v";
  if (letters.find_first_of("DN") != std::string::npos) widths += ", model.delta.expand_k, model.delta.expand_v";
  const double per_layer_guess = 12 * C * C;
  if (embedding > per_layer_guess * m.n_layers) return "model.vocab_size, model.d_model, model.n_layers" + widths;
  return "model.d_model, model.n_layers" + widths + ", model.vocab_size";
}

// The keys behind the activation arena, with the one that makes it large named first where one does.
std::string arena_keys(const ModelConfig& m, double B, double T, int threads, const std::string& seq_key,
                       double arena) {
  const std::string letters = mixer_letters(m);
  // Attention keeps T numbers per head and query row; its (T, T) panels exist per thread, one layer at a time.
  const bool attention = std::ranges::any_of(letters, is_attention_letter);
  const double scores = attention ? 2.0 * threads * T * T * kFloat : 0;
  const double logits = 2 * B * T * double(m.vocab_size) * kFloat;
  std::string keys = "train.batch_size, " + seq_key;
  if (scores > 0.25 * arena) keys += " (attention's per-thread panels grow with T^2)";
  if (logits > 0.25 * arena) keys += ", model.vocab_size";
  keys += ", model.d_model, model.n_layers";
  if (std::ranges::any_of(letters, [&](char l) { return layer_has_mlp(m, l); })) keys += ", model.mlp.hidden_dim";
  return keys;
}

int resolved_threads(const RunConfig& cfg) { return cfg.train.threads > 0 ? cfg.train.threads : thread_count(); }

int evaluation_count(const TrainConfig& t) {
  if (t.eval_every <= 0) return 1;
  return t.steps / t.eval_every + (t.steps % t.eval_every != 0 ? 1 : 0);
}

double read_number_file(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  try {
    return std::stod(text);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

namespace {
// bf16 precision: Bf16Gemm (engine/ops/linear/bf16.h) converts both operands of each GEMM into two scratch buffers
// that grow to the largest operand they have held, and (native path) computes a strided output in a dense one. The
// first operand is x or dy (N rows of in or out values), the second w (out, in) or, for dw, x (N, in). Consecutive 2-D weights with the same input width are counted as one
// fused GEMM (q|k|v, gate|up: Linear::followed_in_memory_by), which can only overstate. Elements, for N rows.
double bf16_gemm_scratch_elements(const ModelConfig& m, double N) {
  double first = 0, second = 0, output = 0, fused_out = 0, fused_in = -1;
  for (const ParamInfo& p : parameter_layout(m)) {
    if (p.shape.size() != 2) {
      fused_in = -1;
      continue;
    }
    const double out = double(p.shape[0]), in = double(p.shape[1]);
    fused_out = in == fused_in ? fused_out + out : out;
    fused_in = in;
    first = std::max(first, N * std::max(in, fused_out));
    second = std::max(second, std::max(fused_out * in, N * in));
    output = std::max(output, N * std::max(in, out));  // dx (N, in) or y (N, out), when written into a wider buffer
  }
  return first + second + output;
}
}  // namespace

// The model's modules registered (models/decoder_model.h), never allocated.
std::vector<ParamInfo> parameter_layout(const ModelConfig& m) {
  ParameterStore<float> store;
  const DecoderModules<float> modules(store, m);
  return store.infos();
}

uint64_t count_parameters(const ModelConfig& m) {
  uint64_t total = 0;
  for (const ParamInfo& p : parameter_layout(m)) total += p.numel;
  return total;
}

double training_arena_bytes(const ModelConfig& model, int batch, int seq_len, int threads, bool fp32) {
  CountPlan plan;
  plan.precision = fp32 ? Precision::fp32 : Precision::bf16;
  plan.threads = threads;
  plan.train = true;
  plan.micro_rows = batch;
  plan.T = seq_len;
  TrainConfig train;
  train.batch_size = batch;
  return count_run(model, 1, train, plan).arena;
}

double forward_arena_bytes(const ModelConfig& model, int batch, int seq_len, int threads, bool with_loss, bool fp32) {
  CountPlan plan;
  plan.precision = fp32 ? Precision::fp32 : Precision::bf16;
  plan.threads = threads;
  plan.T = seq_len;
  (with_loss ? plan.eval_rows : plan.probe_rows) = batch;  // the probes' forwards: no loss, probabilities kept
  const CountedRun c = count_run(model, 1, TrainConfig{}, plan);
  return with_loss ? c.arena : c.probe_arena;
}

ResourceEstimate estimate_resources(const RunConfig& cfg, Purpose purpose) {
  const ModelConfig& m = cfg.model;
  const TrainConfig& t = cfg.train;
  ResourceEstimate e;
  e.purpose = purpose;
  e.threads = resolved_threads(cfg);
  const DeviceSpec device = parse_device(t.device).value_or(DeviceSpec{});
  e.device = device.device;
  e.device_name = t.device;
  const bool gpu = e.device == Device::cuda;
  // A generated Lano grammar is not built here (at the limits that takes seconds, and --dry-run is to be instant):
  // its size is the most its keys allow, and the rest the estimate asks of the task follows from the config.
  const bool generated_grammar = cfg.task.name == "lano" && cfg.task.lano.grammar == "generate";
  const std::unique_ptr<Task> task = generated_grammar ? nullptr : make_task(cfg.task);
  const TaskShape shape = task ? TaskShape{task->vocab_size(), task->seq_len()} : task_shape(cfg.task);
  const double B = t.batch_size, T = shape.seq_len;
  e.batch = t.batch_size;
  e.seq_len = shape.seq_len;
  e.seq_len_key = cfg.task.name == "copy" ? "task.n_symbols (T = 2n + 1)" : "task.context";
  e.parameters = count_parameters(m);
  e.tokens_per_step = B * T;
  const double P = double(e.parameters);
  const bool training = purpose == Purpose::train || purpose == Purpose::resume;
  const std::string model_keys = parameter_keys(m);
  const std::string seq_key = cfg.task.name == "copy" ? "task.n_symbols" : "task.context";
  const std::string batch_keys = "train.batch_size, " + seq_key;

  using enum MemoryPhase;
  std::vector<MemoryItem>& items = e.items;
  // on_device: in the run's device memory (a GPU's; for the CPU, host RAM all the same)
  auto add = [&](std::string what, double bytes, std::string keys, MemoryPhase phase, bool on_device) {
    if (bytes > 0) items.push_back({std::move(what), bytes, std::move(keys), phase, gpu && on_device});
  };
  add("process: binary, libraries, " + std::to_string(e.threads) + " OpenMP thread stacks and GEMM buffers",
      kProcessBaseBytes + kPerThreadBytes * e.threads, "train.threads", whole_run, false);
  if (purpose == Purpose::resume)
    add("resume: the model and optimizer checkpoint files, read whole", 3 * P * kFloat, model_keys, loading, false);
  if (purpose == Purpose::eval || purpose == Purpose::probe)
    add("checkpoint: the model file, read whole", P * kFloat, model_keys, loading, false);
  // A plain text file is held in memory whole; a data directory's shards are memory-mapped (page cache the kernel
  // reclaims, not resident memory), so only its tokenizer's tables count.
  if (const auto* text = dynamic_cast<const TextTask*>(task.get()))
    add(text->from_data_directory() ? "task data: the tokenizer's tables (token shards are memory-mapped, not resident)"
                                    : "task data: the text file, read whole",
        text->resident_bytes(), "task.text.path", whole_run, false);

  if (cfg.task.name == "lano") {
    const auto* lano = dynamic_cast<const LanoTask*>(task.get());
    const GrammarSize size = lano ? grammar_size(lano->grammar()) : generated_grammar_bound(cfg.task.lano);
    const std::string grammar_keys =
        lano ? "task.lano.grammar" : "task.lano.num_sym, task.lano.deg_max, task.lano.len_max, task.lano.depth";
    add(std::string("task data: the Lano grammar and its parser's productions") +
            (lano ? "" : " (generated: the most its keys allow)"),
        grammar_bytes(size), grammar_keys, whole_run, false);
    // lano_acc parses one generated sentence at a time; the sampler never goes past model.max_seq_len.
    const int sentence = std::min(lano_max_sentence(cfg.task), m.max_seq_len - 1);
    add("lano_acc: the parser's table for one generated sentence of up to " + std::to_string(sentence) + " tokens",
        parse_table_bytes(size, sentence), "task.lano.max_sentence, " + seq_key + ", " + grammar_keys, running, false);
  }

  // The IPMR probe (copy task, models with attention) runs in an arena of its own, while the training or
  // evaluation arena is still held.
  const bool ipmr =
      dynamic_cast<const CopyTask*>(task.get()) && std::ranges::any_of(mixer_letters(m), is_attention_letter);
  const int probe_rows = int(std::min(B, double(cfg.probe.n_sequences)));

  // ---- counted: the run's own model on the counting backend of train.device (see count_run) ----
  if (e.tokens_per_step <= kMaxCountedTokens) {
    CountPlan plan = plan_for(cfg, e.threads);
    plan.T = e.seq_len;
    plan.train = training;
    plan.micro_batches = std::max(1, t.micro_batches);
    plan.micro_rows = t.batch_size / plan.micro_batches;
    plan.eval_rows = t.batch_size;  // training evaluates a whole batch on its arena
    plan.probe_rows = ipmr ? probe_rows : 0;
    const CountedRun c = count_run(m, t.seed, t, plan);
    (training ? e.training_arena_bytes : e.eval_arena_bytes) = c.arena;
    const bool bf16 = t.precision == "bf16";
    add(std::string("parameters and gradients (fp32)") +
            (bf16 ? ", the bf16 shadow of the weights" + std::string(gpu ? " and their packed bf16 copy" : "") : ""),
        c.model, model_keys, whole_run, true);
    if (training)
      add(std::string("AdamW moments m, v (fp32), the weight-decay mask, the step's inputs and scalars") +
              (t.micro_batches > 1 ? ", the micro-batches' gradient sum" : ""),
          c.step_state, model_keys + (t.micro_batches > 1 ? ", train.micro_batches" : ""), whole_run, true);
    const std::string arena_what =
        !training ? "activation arena: one evaluation forward pass"
        : t.micro_batches > 1 ? "activation arena: one micro-batch's forward + backward (evaluation reuses it)"
                              : "activation arena: one training step, forward + backward (evaluation reuses it)";
    add(arena_what, c.arena,
        arena_keys(m, B, T, e.threads, seq_key, c.arena) + (training && t.micro_batches > 1 ? ", train.micro_batches" : ""),
        running, true);
    if (ipmr)
      add("IPMR probe: its own forward arena (each attention layer's probabilities kept)", c.probe_arena,
          "train.batch_size, probe.n_sequences, " + seq_key + ", model.d_model, model.n_layers", running, true);
    add(gpu ? "CudaBackend's own buffers: the ops' workspace and the modules' constants"
            : "the modules' constants and the arena's slack",
        c.other, batch_keys + ", model.d_model", running, true);
    if (purpose == Purpose::probe && ipmr) {
      // canonlab probe's pictures: the default 2 examples x 5 heads of T x T maps, kept as floats and as JSON
      CountPlan pictures = plan_for(cfg, e.threads);
      pictures.T = e.seq_len;
      pictures.probe_rows = 2;
      add("attention maps of the probe (2 examples x 5 heads) and their forward pass",
          2.0 * 5 * T * T * (kFloat + 48), seq_key, running, false);
      add("the probe's forward arena for its pictures (2 examples)", count_run(m, t.seed, t, pictures).probe_arena,
          seq_key + ", model.d_model, model.n_layers", running, true);
    }
  }
  if (gpu) {
    add("cuBLASLt workspace", double(cuda::Gemm::kDefaultWorkspaceBytes), "", whole_run, true);
    add("CUDA context: the driver's state, the kernels and cuBLASLt's (typical; not counted)", kCudaContextBytes, "",
        whole_run, true);
    if (ipmr)  // each attention layer's probabilities come to the host, one layer at a time
      add("IPMR probe: one layer's attention probabilities read on the host",
          double(probe_rows) * m.n_heads * T * T * kFloat, "probe.n_sequences, " + seq_key + ", model.n_heads",
          running, false);
  }
  if (t.precision == "bf16" && !gpu)  // inputs as floats: the emulated path's size, twice the native path's bf16 storage
    add("bf16 GEMM scratch (the largest GEMM's two inputs, converted, and a dense output)",
        bf16_gemm_scratch_elements(m, B * T) * kFloat, batch_keys + ", model.d_model, model.vocab_size", running,
        false);
  const double suites = task ? double(task->eval_suites().size()) : 1.0;  // LanoTask: one suite
  if (training) add("training batch", batch_bytes(B, T), batch_keys, running, false);
  const int eval_batches = task ? task->eval_batch_count(t.eval_batches, t.batch_size) : t.eval_batches;
  add("held-out eval batches (" + std::to_string(int(suites)) + " suite" + (suites > 1 ? "s" : "") + " x " +
          std::to_string(eval_batches) + ")",
      suites * eval_batches * batch_bytes(B, T), "train.eval_batches, " + batch_keys, running, false);
  if (m.vocab_size > shape.vocab_size || gpu)  // a GPU's logits are read on the host to be scored
    add(gpu ? "eval logits read on the host" : "eval logits cut to the task's vocabulary",
        B * T * (gpu ? m.vocab_size : shape.vocab_size) * kFloat, "model.vocab_size, " + batch_keys, running, false);
  if (ipmr) add("IPMR probe: its batch", batch_bytes(probe_rows, T), "probe.n_sequences, " + seq_key, running, false);
  std::ranges::stable_sort(items, [](const MemoryItem& a, const MemoryItem& b) { return a.bytes > b.bytes; });

  // The peak: what is held for the whole run, plus the larger of reading a checkpoint (before the arenas exist) and
  // computing; on a GPU, the host's and the device's apart.
  double host[3] = {}, dev[3] = {};
  for (const MemoryItem& item : items) (item.on_device ? dev : host)[size_t(item.phase)] += item.bytes;
  e.peak_bytes = host[size_t(whole_run)] + std::max(host[size_t(loading)], host[size_t(running)]);
  e.device_peak_bytes = dev[size_t(whole_run)] + std::max(dev[size_t(loading)], dev[size_t(running)]);

  e.flops_per_step = model_train_flops(m, t.batch_size, e.seq_len);
  const double forward_flops = e.flops_per_step / 3;  // one forward pass of a batch
  const double probe_forwards = ipmr ? double(cfg.probe.n_sequences) / B : 0;
  e.evaluations = training ? evaluation_count(t) : 1;
  e.total_flops = (training ? double(t.steps) * e.flops_per_step : 0) +
                  forward_flops * (e.evaluations * suites * eval_batches + probe_forwards);
  return e;
}

double available_memory_bytes() {
  double available = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
    meminfo.ignore(1 << 10, '\n');
  }
  // cgroup v2: "0::/some/path" in /proc/self/cgroup names the group whose memory.max applies.
  std::ifstream groups("/proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    if (!line.starts_with("0::")) continue;
    const std::string dir = "/sys/fs/cgroup" + (line.size() > 3 && line.substr(3) != "/" ? line.substr(3) : "");
    const double max = read_number_file(dir + "/memory.max"), current = read_number_file(dir + "/memory.current");
    if (max > 0) {
      const double left = std::max(0.0, max - current);
      available = available > 0 ? std::min(available, left) : left;
    }
  }
  return available;
}

namespace {
// The largest items of `where` (the device's or the host's), for a refusal.
std::string largest_items(const ResourceEstimate& e, bool on_device) {
  std::string parts;
  int shown = 0;
  for (const MemoryItem& item : e.items)
    if (item.on_device == on_device && shown++ < 3)
      parts += "\n  " + format_bytes(item.bytes) + "  " + item.what + (item.keys.empty() ? "" : "  <- " + item.keys);
  return parts;
}
}  // namespace

void check_resources(const ResourceEstimate& e, const RunConfig& cfg) {
  // Token positions of a step are indexed with int throughout the engine (B * T rows of every activation).
  if (e.tokens_per_step > 2147483647.0)
    throw Error("train.batch_size: " + std::to_string(e.batch) + " sequences of " + std::to_string(e.seq_len) +
                " tokens are " + format_count(e.tokens_per_step) + "tokens per step, more than the 2^31 - 1 the engine "
                "indexes; lower train.batch_size or " + e.seq_len_key);
  if (e.tokens_per_step > kMaxCountedTokens)
    throw Error("train.batch_size: " + std::to_string(e.batch) + " sequences of " + std::to_string(e.seq_len) +
                " tokens are " + format_count(e.tokens_per_step) + "tokens per step, more than the " +
                format_count(kMaxCountedTokens) + "the resource estimate counts a step of; lower train.batch_size or " +
                e.seq_len_key);
  // The GPU's memory against its capacity, where the machine has the GPU (elsewhere train.device is refused anyway).
  if (e.device == Device::cuda) {
    const std::optional<DeviceSpec> spec = parse_device(cfg.train.device);
    const std::optional<CudaDeviceFacts> facts = spec ? cuda_device_facts(spec->index, false) : std::nullopt;
    if (facts && facts->memory_bytes > 0 && e.device_peak_bytes > facts->memory_bytes)
      throw Error("this run needs an estimated " + format_bytes(e.device_peak_bytes) + " of GPU memory at its peak, "
                  "more than the " + format_bytes(facts->memory_bytes) + " of " + cfg.train.device + " (" +
                  facts->name + "). The largest parts and the keys that drive them:" + largest_items(e, true) +
                  "\nLower those keys (canonlab train CONFIG --dry-run prints the whole estimate; docs/resources.md)");
  }
  const double available = available_memory_bytes();
  const double configured = cfg.train.max_memory_gb * kGiB;
  double limit = 0;
  std::string against;
  if (available > 0) {
    limit = available;
    against = "the " + format_bytes(available) + " this machine has available (MemAvailable)";
  }
  if (configured > 0 && (limit == 0 || configured < limit)) {
    limit = configured;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", cfg.train.max_memory_gb);
    against = std::string("train.max_memory_gb = ") + buf + " (" + format_bytes(configured) + ")";
  }
  if (limit == 0 || e.peak_bytes <= limit) return;
  throw Error("this run needs an estimated " + format_bytes(e.peak_bytes) + " of " +
              (e.device == Device::cuda ? "host " : "") + "memory at its peak, more than " + against +
              ". The largest parts and the keys that drive them:" + largest_items(e, false) +
              "\nLower those keys (canonlab train CONFIG --dry-run prints the whole estimate; docs/resources.md)" +
              (configured > 0 ? "" : ", or free memory"));
}

namespace {
// Nominal dense matrix rates of an H100 SXM (NVIDIA's data sheet), for a GPU estimate made where no GPU can be asked.
constexpr double kNominalBf16Tflops = 989, kNominalFp32Tflops = 67;
// The fraction of the matrix rate a whole GPU step reaches: assumed (the GPU benchmark, bench/gpu-bench.sh, measures
// it; the 75M config's notes assume 40%) until BENCHMARKS.md has the measurement.
constexpr double kGpuStepEfficiency = 0.4;
}  // namespace

TimeEstimate estimate_time(const ResourceEstimate& e, const RunConfig& cfg) {
  TimeEstimate time;
  if (e.device == Device::cuda) {
    const bool bf16 = cfg.train.precision == "bf16";
    const std::optional<DeviceSpec> spec = parse_device(cfg.train.device);
    const std::optional<CudaDeviceFacts> facts = spec ? cuda_device_facts(spec->index, true) : std::nullopt;
    const double measured = facts ? (bf16 ? facts->bf16_tflops : facts->fp32_tflops) : 0;
    time.gemm_gflops = 1e3 * (measured > 0 ? measured : bf16 ? kNominalBf16Tflops : kNominalFp32Tflops);
    time.source = measured > 0 ? std::string(bf16 ? "bf16" : "fp32") + " GEMM of " + facts->name + ", measured"
                               : std::string("nominal ") + (bf16 ? "bf16" : "fp32") + " rate of an H100 SXM (" +
                                     (facts ? facts->name + " has no GEMM rate to measure" : "no GPU here") + ")";
    time.efficiency = kGpuStepEfficiency;
    time.seconds = e.total_flops / (time.gemm_gflops * 1e9 * time.efficiency);
    return time;
  }
  set_thread_count(cfg.train.threads);
  // A GEMM the shape of the model's q|k|v projection over the step's rows, capped (2 GFLOP a call) so that a huge
  // config is measured as quickly as a small one.
  const int rows = int(std::clamp(e.tokens_per_step, 256.0, 2048.0));
  const int in = std::clamp(cfg.model.d_model, 64, 512), out = std::clamp(3 * cfg.model.d_model, 64, 1024);
  std::vector<float> x(size_t(rows) * in, 0.5f), w(size_t(out) * in, 0.25f), y(size_t(rows) * out);
  linear_forward(y.data(), out, x.data(), in, w.data(), static_cast<const float*>(nullptr), rows, in, out);  // warm up
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  int reps = 0;
  double elapsed = 0;
  while (reps < 1 || elapsed < 0.2) {
    linear_forward(y.data(), out, x.data(), in, w.data(), static_cast<const float*>(nullptr), rows, in, out);
    reps++;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  }
  time.gemm_gflops = 2.0 * rows * in * out * reps / elapsed / 1e9;
  time.source = "this machine's GEMM, measured";
  const std::string letters = mixer_letters(cfg.model);
  double efficiency = 0;
  for (char letter : letters) efficiency += step_efficiency(letter);
  time.efficiency = efficiency / double(letters.size());
  if (cfg.model.canon.set.find_first_of("ABCD") != std::string::npos) time.efficiency *= kCanonEfficiency;
  time.seconds = e.total_flops / (time.gemm_gflops * 1e9 * time.efficiency);
  return time;
}

std::string format_estimate(const ResourceEstimate& e, const RunConfig& cfg, const TimeEstimate* time) {
  const ModelConfig& m = cfg.model;
  std::ostringstream os;
  char buf[256];
  os << "model: " << m.family << (m.family == "hybrid" ? " " + m.layer_pattern : "") << ", " << m.n_layers
     << " layers, d_model " << m.d_model << ", " << m.n_heads << " heads"
     << (attention_kv_heads(m) != m.n_heads ? " (" + std::to_string(attention_kv_heads(m)) + " key/value)" : "")
     << ", vocab " << m.vocab_size
     << (m.canon.set.empty() ? "" : ", Canon " + m.canon.set) << "\n";
  std::string short_count = format_count(double(e.parameters));
  while (short_count.ends_with(' ')) short_count.pop_back();
  os << "parameters: " << e.parameters << " (" << short_count << ")\n";
  std::snprintf(buf, sizeof buf, "step: %d sequences x %d tokens = %.0f tokens, %sFLOP (forward + backward)\n", e.batch,
                e.seq_len, e.tokens_per_step, format_count(e.flops_per_step).c_str());
  os << buf;
  auto list = [&](bool on_device) {
    for (const MemoryItem& item : e.items) {
      if (item.on_device != on_device) continue;
      std::snprintf(buf, sizeof buf, "  %10s  ", format_bytes(item.bytes).c_str());
      os << buf << item.what
         << (item.phase == MemoryPhase::loading ? " [while the checkpoint is read, before the arenas]" : "");
      if (!item.keys.empty()) os << "\n      <- " << item.keys;
      os << "\n";
    }
  };
  if (e.device == Device::cuda) {
    const std::optional<DeviceSpec> spec = parse_device(cfg.train.device);
    const std::optional<CudaDeviceFacts> facts = spec ? cuda_device_facts(spec->index, false) : std::nullopt;
    os << "GPU memory at the peak (" << cfg.train.device << ", " << cfg.train.precision
       << "; counted from the run's own allocations):\n";
    list(true);
    os << "  total: " << format_bytes(e.device_peak_bytes);
    if (facts && facts->memory_bytes > 0) os << " of the " << format_bytes(facts->memory_bytes) << " of " << facts->name;
    else os << " (no GPU here to compare with: an H100 has 80 GB, an H200 141 GB)";
    os << "\nhost memory at the peak (estimated resident set, " << e.threads << " thread" << (e.threads > 1 ? "s" : "")
       << "):\n";
  } else {
    os << "memory at the peak (estimated resident set, " << e.threads << " thread" << (e.threads > 1 ? "s" : "")
       << "):\n";
  }
  list(false);
  os << "  total: " << format_bytes(e.peak_bytes);
  const double available = available_memory_bytes();
  if (available > 0) os << " of " << format_bytes(available) << " available";
  if (cfg.train.max_memory_gb > 0) os << " (train.max_memory_gb " << cfg.train.max_memory_gb << ")";
  os << "\n";
  if (time) {
    const bool training = e.purpose == Purpose::train || e.purpose == Purpose::resume;
    os << "time (an estimate): " << (training ? std::to_string(cfg.train.steps) + " steps and " : "")
       << e.evaluations << " evaluation" << (e.evaluations > 1 ? "s" : "") << ", " << format_count(e.total_flops)
       << "FLOP in all, ";
    if (time->gemm_gflops >= 1e4)
      std::snprintf(buf, sizeof buf, "at %.0f TFLOP/s (%s: %.0f TFLOP/s, x %.2f step efficiency%s)",
                    time->gemm_gflops * time->efficiency / 1e3, time->source.c_str(), time->gemm_gflops / 1e3,
                    time->efficiency, e.device == Device::cuda ? ", assumed" : "");
    else
      std::snprintf(buf, sizeof buf, "at %.0f GFLOP/s (%s: %.0f GFLOP/s, x %.2f step efficiency)",
                    time->gemm_gflops * time->efficiency, time->source.c_str(), time->gemm_gflops, time->efficiency);
    os << buf << ": about " << format_seconds(time->seconds) << "\n";
  }
  return os.str();
}

}  // namespace canonlab
