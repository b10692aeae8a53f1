// The resource estimate (train/resource_estimate.h) against what really happens: the parameter count against the
// built model, the arena the counting backend counts against Arena::high_water_bytes() after a real step on the CPU
// backend for every family and Canon placement (the counting backend must answer every size as the CPU backend does),
// the refusal of a run over train.max_memory_gb, a far too large config refused at once, and the predicted peak
// memory against the measured peak RSS of the canonlab binary on E1-Bk0 and a linear preset. The GPU's count is held
// against what the host stand-in of the CUDA layer allocates (tests/cuda_host/test_cuda_estimate.cpp).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "config/config.h"
#include "data/lano.h"
#include "data/task.h"
#include "engine/backend/cpu_backend.h"
#include "engine/error.h"
#include "engine/threads.h"
#include "eval/evaluate.h"
#include "models/language_model.h"
#include "train/loss.h"
#include "train/resource_estimate.h"
#include "train/step.h"

extern char** environ;

namespace canonlab {
namespace {

namespace fs = std::filesystem;

// Small shapes on the copy task (T = 25) with chunks shorter than T, so that every code path runs in milliseconds.
const std::string kSmall =
    "model: {d_model: 32, n_layers: 2, n_heads: 2, recurrent: {chunk_size: 8}, mamba2: {d_state: 8}}\n"
    "task: {name: copy, vocab: 16, n_symbols: 12}\n"
    "train: {batch_size: 3, threads: 2}\n";

struct Variant {
  std::string name;
  std::vector<std::string> sets;
};

// Every family, with and without Canon (ABCD, the family's own conv b, none), key shift, the options that change
// what the modules allocate (RoPE, sign-STE, learned positions, layernorm, Canon activation and norm, biases,
// SwiGLU, tied embeddings, naive kernels) and a hybrid with sliding-window attention.
std::vector<Variant> variants() {
  return {
      {"transformer_rope", {}},
      {"transformer_e1", {"model.attention.position=alibi", "model.attention.scoring=sign_ste",
                          "model.attention.key_shift.layers=[0]"}},
      {"transformer_abcd_keyshift", {"model.canon.set=ABCD", "model.attention.key_shift.layers=[1]",
                                     "model.attention.key_shift.offset=2"}},
      {"transformer_everything", {"model.canon.set=ABCD", "model.canon.activation=silu", "model.canon.norm=rmsnorm",
                                  "model.norm=layernorm", "model.mlp.kind=swiglu", "model.mlp.bias=true",
                                  "model.attention.qkv_bias=true", "model.attention.position=learned"}},
      {"transformer_tied_relu2", {"model.tie_embeddings=true", "model.mlp.kind=relu2", "model.canon.set=AC",
                                  "model.canon.groups=4", "model.canon.norm=layernorm"}},
      {"transformer_abcd_dynamic", {"model.canon.set=ABCD", "model.canon.dynamic=4", "model.canon.activation=silu",
                                    "model.canon.norm=rmsnorm"}},
      {"mamba2", {"model.family=mamba2", "model.canon.set=b"}},
      {"mamba2_noconv", {"model.family=mamba2", "model.canon.set="}},
      {"mamba2_mlp_abcd", {"model.family=mamba2", "model.mamba2.mlp=true", "model.canon.set=AbBCD"}},
      {"mamba2_naive_groups", {"model.family=mamba2", "model.canon.set=b", "model.recurrent.kernel=naive",
                               "model.mamba2.ngroups=2"}},
      {"gla", {"model.family=gla", "model.canon.set=b"}},
      {"gla_abcd", {"model.family=gla", "model.canon.set=AbBCD", "model.mlp.kind=swiglu"}},
      {"gla_AbCD_dynamic", {"model.family=gla", "model.canon.set=AbCD", "model.canon.dynamic=3"}},
      {"gla_noconv_nogate", {"model.family=gla", "model.canon.set=", "model.gla.output_gate=false"}},
      {"gdn", {"model.family=gdn", "model.canon.set=b"}},
      {"gdn_abcd", {"model.family=gdn", "model.canon.set=AbBCD"}},
      {"gdn_noconv_naive", {"model.family=gdn", "model.canon.set=", "model.recurrent.kernel=naive"}},
      {"deltanet", {"model.family=deltanet", "model.canon.set=b"}},
      {"deltanet_abcd_nogate", {"model.family=deltanet", "model.canon.set=AbCD", "model.delta.output_gate=false"}},
      {"transformer_cross_layer_nores_silu_layernorm",
       {"model.canon.set=BD", "model.canon.cross_layer.layers=[0]", "model.canon.cross_layer.residual=false",
        "model.canon.cross_layer.activation=silu", "model.canon.cross_layer.norm=layernorm"}},
      {"mamba2_cross_layer_rmsnorm", {"model.family=mamba2", "model.canon.set=b", "model.canon.cross_layer.layers=[0]",
                                      "model.canon.cross_layer.norm=rmsnorm", "model.canon.cross_layer.kernel_size=2"}},
      {"gla_cross_layer", {"model.family=gla", "model.canon.set=b", "model.canon.cross_layer.layers=[0]"}},
      {"hybrid", {"model.family=hybrid", "model.n_layers=6", "model.layer_pattern=MASGDN", "model.canon.set=AbBCD",
                  "model.attention.window=7", "model.attention.key_shift.layers=[1, 2]"}},
  };
}

RunConfig variant_config(const Variant& v) { return config_from_yaml_string(kSmall, v.sets); }

TEST(ResourceEstimate, ParameterCountAndLayoutAreExactForEveryFamily) {
  for (const Variant& v : variants()) {
    const RunConfig cfg = variant_config(v);
    const auto model = build_model<float>(cfg.model, cfg.train.seed);
    EXPECT_EQ(count_parameters(cfg.model), model->params().total()) << v.name;
    EXPECT_EQ(estimate_resources(cfg).parameters, model->params().total()) << v.name;
    // the layout a pack's signature compares: the built model's names and shapes, in order
    const std::vector<ParamInfo> layout = parameter_layout(cfg.model), built = model->params().infos();
    ASSERT_EQ(layout.size(), built.size()) << v.name;
    for (size_t i = 0; i < layout.size(); i++) {
      EXPECT_EQ(layout[i].name, built[i].name) << v.name;
      EXPECT_EQ(layout[i].shape, built[i].shape) << v.name << " " << built[i].name;
    }
  }
}

double relative_error(double estimate, double measured) { return std::abs(estimate - measured) / measured; }

// One real forward_backward (what the trainer does each step) and one evaluation pass, against the count.
TEST(ResourceEstimate, ArenaMatchesTheHighWaterOfARealStep) {
  set_thread_count(2);
  double worst = 0;
  for (const Variant& v : variants()) {
    const RunConfig cfg = variant_config(v);
    const auto model = build_model<float>(cfg.model, cfg.train.seed);
    const auto task = make_task(cfg.task);
    const Batch batch = task->make_batch(cfg.train.batch_size, 7, 0);
    Arena train_arena;
    ActivationTrace<float> trace;
    forward_backward(*model, train_arena, trace, batch, 0);
    const double predicted = training_arena_bytes(cfg.model, batch.B, batch.T, thread_count());
    worst = std::max(worst, relative_error(predicted, double(train_arena.high_water_bytes())));
    EXPECT_LT(relative_error(predicted, double(train_arena.high_water_bytes())), 0.01)
        << v.name << ": predicted " << predicted << " bytes, measured " << train_arena.high_water_bytes();

    Arena eval_arena;
    evaluation_pass(*model, eval_arena, batch);  // what evaluate() does per batch
    const double eval_predicted = forward_arena_bytes(cfg.model, batch.B, batch.T, thread_count(), true);
    worst = std::max(worst, relative_error(eval_predicted, double(eval_arena.high_water_bytes())));
    EXPECT_LT(relative_error(eval_predicted, double(eval_arena.high_water_bytes())), 0.01)
        << v.name << ": predicted " << eval_predicted << " bytes, measured " << eval_arena.high_water_bytes();

    // Dynamic Canon on a backend without the low-rank op (as in bf16): Δ and dΔ are materialised.
    if (cfg.model.canon.dynamic > 0) {
      auto be = std::make_shared<CpuBackend<float>>();
      be->set_lowrank_dynamic_conv(false);
      const auto gemm_model = build_model<float>(cfg.model, cfg.train.seed, be);
      Arena gemm_arena;
      forward_backward(*gemm_model, gemm_arena, trace, batch, 0);
      const double gemm_predicted = training_arena_bytes(cfg.model, batch.B, batch.T, thread_count(), false);
      EXPECT_GT(gemm_predicted, predicted) << v.name;
      EXPECT_LT(relative_error(gemm_predicted, double(gemm_arena.high_water_bytes())), 0.01)
          << v.name << " without the low-rank op: predicted " << gemm_predicted << " bytes, measured "
          << gemm_arena.high_water_bytes();
    }
  }
  std::printf("[ arena    ] %zu variants, largest relative error %.2g\n", variants().size(), worst);
}

TEST(ResourceEstimate, ARunOverMaxMemoryIsRefusedNamingTheBiggestKeys) {
  const RunConfig cfg = config_from_yaml_string(
      "model: {d_model: 128, n_layers: 4, n_heads: 4}\ntask: {name: copy, vocab: 64, n_symbols: 24}\n"
      "train: {batch_size: 64, max_memory_gb: 0.05}\n");
  const ResourceEstimate e = estimate_resources(cfg);
  ASSERT_GT(e.peak_bytes, 0.05 * (1 << 30));  // the config is meant to exceed 50 MiB (its arena alone does)
  try {
    check_resources(e, cfg);
    FAIL() << "a run over train.max_memory_gb was accepted";
  } catch (const Error& err) {
    const std::string message = err.what();
    for (const std::string part : {"needs an estimated", "train.max_memory_gb = 0.05", "activation arena",
                                   "train.batch_size", "task.n_symbols", "model.d_model"})
      EXPECT_NE(message.find(part), std::string::npos) << part << " missing from: " << message;
  }
  RunConfig roomy = cfg;
  roomy.train.max_memory_gb = 0;  // only the machine's MemAvailable: a 4-layer d=128 model fits any test machine
  EXPECT_NO_THROW(check_resources(estimate_resources(roomy), roomy));
}

// Far beyond any machine (~ 10^15 bytes of activations): estimated without allocating (a run would take hours),
// and refused by check_resources with the keys to lower.
TEST(ResourceEstimate, AFarTooLargeConfigIsRefusedAtOnce) {
  const RunConfig cfg = config_from_yaml_string(
      "", {"model.d_model=16384", "model.n_layers=1024", "train.batch_size=65536", "model.n_heads=128"});
  const ResourceEstimate e = estimate_resources(cfg);
  EXPECT_GT(e.peak_bytes, 1e15);
  EXPECT_GT(e.parameters, uint64_t(3e12));  // 1024 layers of 12 * 16384^2
  try {
    check_resources(e, cfg);
    FAIL() << "accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("train.batch_size"), std::string::npos) << err.what();
  }
}

// The engine indexes a step's token positions with int: more than 2^31 - 1 per step is refused by name even where
// the memory would exist.
TEST(ResourceEstimate, MoreTokensPerStepThanTheEngineIndexesAreRefused) {
  const RunConfig cfg = config_from_yaml_string(
      "model: {d_model: 8, n_layers: 1, n_heads: 1}\ntask: {name: copy, vocab: 32767, n_symbols: 32767}\n"
      "train: {batch_size: 65536}\n");
  const ResourceEstimate e = estimate_resources(cfg);
  EXPECT_EQ(e.tokens_per_step, 65536.0 * 65535);
  try {
    check_resources(e, cfg);
    FAIL() << "accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("train.batch_size: 65536 sequences of 65535 tokens"), std::string::npos)
        << err.what();
  }
}

// What is resident depends on the command: training holds the AdamW moments, a resume also reads both checkpoint
// files first (before the arenas exist: the peak takes the larger phase), evaluation holds neither moments nor a
// training arena.
TEST(ResourceEstimate, ThePurposeDecidesWhatIsResident) {
  const RunConfig cfg = config_from_yaml_string(kSmall);
  const ResourceEstimate train = estimate_resources(cfg, Purpose::train);
  const ResourceEstimate resume = estimate_resources(cfg, Purpose::resume);
  const ResourceEstimate eval = estimate_resources(cfg, Purpose::eval);
  auto bytes_of = [](const ResourceEstimate& e, const std::string& prefix, MemoryPhase phase) {
    double sum = 0;
    for (const MemoryItem& item : e.items)
      if (item.what.starts_with(prefix) && item.phase == phase) sum += item.bytes;
    return sum;
  };
  const double P = double(train.parameters);
  // m and v in fp32 and the decay mask's byte per parameter, then the step's inputs (3 x 4 bytes per token) and scalars
  EXPECT_GE(bytes_of(train, "AdamW", MemoryPhase::whole_run), 9 * P);
  EXPECT_LE(bytes_of(train, "AdamW", MemoryPhase::whole_run), 9 * P + 12.0 * 3 * 25 + 1024);
  EXPECT_EQ(bytes_of(resume, "resume", MemoryPhase::loading), 12 * P);
  EXPECT_EQ(bytes_of(eval, "AdamW", MemoryPhase::whole_run), 0.0);
  EXPECT_EQ(bytes_of(eval, "checkpoint", MemoryPhase::loading), 4 * P);
  EXPECT_GT(train.training_arena_bytes, eval.eval_arena_bytes);
  // This small model's arena outweighs its checkpoint files, so resuming peaks where training does.
  EXPECT_EQ(resume.peak_bytes, train.peak_bytes);
  EXPECT_LT(eval.peak_bytes, train.peak_bytes);
}

TEST(ResourceEstimate, FlopsAndTokensFollowTheStep) {
  const RunConfig cfg = config_from_yaml_string(kSmall, {"train.steps=10", "train.eval_every=5"});
  const ResourceEstimate e = estimate_resources(cfg);
  EXPECT_EQ(e.tokens_per_step, 3.0 * 25);
  EXPECT_GT(e.flops_per_step, 6.0 * e.tokens_per_step * double(e.parameters) * 0.5);
  EXPECT_EQ(e.evaluations, 2);
  // 10 steps, 2 evaluations of 4 batches and the IPMR probe (256 sequences in batches of 3), forward = 1/3 step
  EXPECT_NEAR(e.total_flops, e.flops_per_step * (10 + (2 * 4 + 256.0 / 3) / 3), 1e-6 * e.total_flops);
}

// ---------------------------------------------------------------------------------------------- the binary

struct MeasuredRun {
  int exit_code = -1;
  double peak_rss_bytes = 0;  // ru_maxrss of the child
  double seconds = 0;
  std::string output;
};

// Runs the canonlab binary directly (no shell in between, so wait4's ru_maxrss is canonlab's own).
MeasuredRun run_measured(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> argv_text = {CANONLAB_BINARY};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  MeasuredRun r;
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return r;
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.peak_rss_bytes = double(usage.ru_maxrss) * 1024;
  std::ifstream in(log);
  r.output.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("canonlab_estimate_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string source_config(const std::string& name) { return std::string(CANONLAB_SOURCE_DIR) + "/configs/" + name; }

// Two steps reach the peak: the arena is sized in the first step and used whole from the second; the evaluation
// and the IPMR probe (two batches, so that its arena is merged once as in a full run) follow at the end.
void expect_peak_rss_within(const std::string& config, double tolerance) {
  const std::vector<std::string> sets = {"train.steps=2", "train.threads=2", "train.checkpoint_every=0",
                                         "probe.n_sequences=128"};
  const fs::path dir = fresh_dir(fs::path(config).stem().string());
  std::vector<std::string> args = {"train", source_config(config), "--quiet", "--out", (dir / "run").string()};
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  const MeasuredRun run = run_measured(args, dir / "log.txt");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const RunConfig cfg = load_config(source_config(config), sets);
  const ResourceEstimate e = estimate_resources(cfg);
  std::printf("[ peak RSS ] %s: estimated %.1f MiB, measured %.1f MiB (%+.1f%%), %.1f s\n", config.c_str(),
              e.peak_bytes / (1 << 20), run.peak_rss_bytes / (1 << 20),
              100 * (e.peak_bytes - run.peak_rss_bytes) / run.peak_rss_bytes, run.seconds);
  EXPECT_LT(relative_error(e.peak_bytes, run.peak_rss_bytes), tolerance)
      << config << ": estimated " << e.peak_bytes << " bytes, measured peak RSS " << run.peak_rss_bytes;
  // No bound on run.seconds: the time is printed, never asserted (a loaded CI machine is slow, not wrong).
  fs::remove_all(dir);
}

TEST(ResourceEstimate, PeakRssOfE1Bk0IsPredicted) { expect_peak_rss_within("E1-Bk0.yaml", 0.25); }

TEST(ResourceEstimate, PeakRssOfALinearPresetIsPredicted) { expect_peak_rss_within("linear/gdn-4L128.yaml", 0.25); }

TEST(ResourceEstimateCli, DryRunPrintsTheEstimateAndCreatesNothing) {
  const fs::path dir = fresh_dir("dry_run");
  const auto r = test_support::run_cli("train " + source_config("E1-Bk0.yaml") + " --dry-run --out " +
                                       (dir / "run").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const RunConfig cfg = load_config(source_config("E1-Bk0.yaml"), {});
  for (const std::string& part : {"parameters: " + std::to_string(count_parameters(cfg.model)),
                                 std::string("64 sequences x 49 tokens = 3136 tokens"), std::string("activation arena"),
                                 std::string("total: "), std::string("time (an estimate): 3000 steps"),
                                 std::string("no run directory was created")})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << " missing from:\n" << r.output;
  EXPECT_FALSE(fs::exists(dir / "run"));
  fs::remove_all(dir);
}

// The far too large config of the issue: the estimate prints at once and the run is refused (exit 2, no directory),
// with and without --dry-run.
TEST(ResourceEstimateCli, AFarTooLargeRunIsRefusedBeforeAnythingIsAllocated) {
  const fs::path dir = fresh_dir("too_large");
  const std::string sets = " --set model.d_model=16384 --set model.n_layers=1024 --set train.batch_size=65536"
                           " --out " + (dir / "run").string();
  for (const std::string flag : {" --dry-run", ""}) {
    const auto r = test_support::run_cli("train " + source_config("E1-Bk0.yaml") + flag + sets);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("error: this run needs an estimated"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("train.batch_size"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "run"));
  }
  fs::remove_all(dir);
}

// Issue 25 F3: generated Lano grammars. At the keys' maxima (depth 2, num_sym = deg_min = deg_max = 4096, rules of
// 1..16 symbols) config resolution built the grammar, and the estimate built it again: 300+ s and 5.1 GB, also
// under --dry-run, while the estimate said 33 MiB. The keys now bound the grammar's size before anything is built.
const std::vector<std::string> kLanoAtTheMaxima = {"task.name=lano",       "task.lano.grammar=generate",
                                                   "task.lano.depth=2",    "task.lano.num_sym=4096",
                                                   "task.lano.deg_min=4096", "task.lano.deg_max=4096",
                                                   "task.lano.len_min=1",  "task.lano.len_max=16"};
// The largest such grammar allowed: (1 + 4096) * 15 * 16 = 983280 rule symbols of the 1048576 a grammar may hold.
const std::vector<std::string> kLanoNearTheLimit = {"task.name=lano",      "task.lano.grammar=generate",
                                                    "task.lano.depth=2",   "task.lano.num_sym=4096",
                                                    "task.lano.deg_min=15", "task.lano.deg_max=15",
                                                    "task.lano.len_min=1", "task.lano.len_max=16",
                                                    "task.context=64"};
const std::string kLanoModel = "model: {d_model: 32, n_layers: 2, n_heads: 2}\ntrain: {batch_size: 3, threads: 2}\n";

double item_bytes(const ResourceEstimate& e, const std::string& what_starts) {
  for (const MemoryItem& item : e.items)
    if (item.what.starts_with(what_starts)) return item.bytes;
  ADD_FAILURE() << "no memory item '" << what_starts << "'";
  return 0;
}

TEST(ResourceEstimate, AGeneratedGrammarOverTheLimitIsRefusedBeforeItIsBuilt) {
  const uint64_t built = generated_grammar_count();
  std::vector<std::string> at_1024 = kLanoAtTheMaxima;
  at_1024[3] = "task.lano.num_sym=1024", at_1024[4] = "task.lano.deg_min=1024", at_1024[5] = "task.lano.deg_max=1024";
  for (const auto& [sets, symbols] : {std::pair{kLanoAtTheMaxima, std::string("268500992")},  // 4097 * 4096 * 16
                                      std::pair{at_1024, std::string("16793600")}}) {           // 1025 * 1024 * 16
    try {
      config_from_yaml_string(kLanoModel, sets);
      FAIL() << "accepted";
    } catch (const Error& err) {
      const std::string message = err.what();
      for (const std::string& part : std::vector<std::string>{"task.lano.depth", "task.lano.num_sym",
                                                              "task.lano.deg_max", "task.lano.len_max",
                                                              "= " + symbols + " rule symbols",
                                                              "allowed: at most 1048576"})
        EXPECT_NE(message.find(part), std::string::npos) << part << " missing from: " << message;
    }
  }
  EXPECT_EQ(generated_grammar_count(), built);
}

// --dry-run (load_config, estimate_resources, format_estimate, check_resources) of a large valid grammar builds
// nothing: its memory is the most its keys allow, and the task's vocabulary and window come from the keys.
TEST(ResourceEstimate, AGeneratedGrammarIsEstimatedFromItsKeysNotBuilt) {
  const uint64_t built = generated_grammar_count();
  const RunConfig cfg = config_from_yaml_string(kLanoModel, kLanoNearTheLimit);
  const ResourceEstimate e = estimate_resources(cfg);
  EXPECT_NE(format_estimate(e, cfg, nullptr).find("task data: the Lano grammar"), std::string::npos);
  EXPECT_NO_THROW(check_resources(e, cfg));
  EXPECT_EQ(generated_grammar_count(), built) << "config resolution or the estimate built the grammar";
  EXPECT_EQ(cfg.model.vocab_size, 4097);  // 4096 terminals and <bos>
  EXPECT_EQ(e.seq_len, 64);
  const GrammarSize bound = generated_grammar_bound(cfg.task.lano);
  EXPECT_EQ(bound.rule_symbols, 983280);
  EXPECT_EQ(item_bytes(e, "task data: the Lano grammar"), grammar_bytes(bound));
  EXPECT_EQ(item_bytes(e, "lano_acc: the parser's table"), parse_table_bytes(bound, 63));

  // The task builds it, within the bound the estimate used.
  const auto task = make_task(cfg.task);
  EXPECT_EQ(generated_grammar_count(), built + 1);
  const auto& lano = dynamic_cast<const LanoTask&>(*task);
  const GrammarSize size = grammar_size(lano.grammar());
  EXPECT_LE(size.rules, bound.rules);
  EXPECT_LE(size.rule_symbols, bound.rule_symbols);
  EXPECT_EQ(size.symbols, bound.symbols);
  EXPECT_LE(size.parser_symbols, bound.parser_symbols);
  EXPECT_LE(CfgParser(lano.grammar()).num_symbols(), size.parser_symbols);
  EXPECT_EQ(task->vocab_size(), cfg.model.vocab_size);
}

// A grammar file is read and measured exactly; the parser's table for lano_acc grows with the longest sentence
// (task.lano.max_sentence), and a run whose table does not fit is refused naming that key.
TEST(ResourceEstimate, TheLanoParserTableIsCounted) {
  const RunConfig cfg = config_from_yaml_string(kLanoModel, {"task.name=lano", "task.context=128"});
  const ResourceEstimate e = estimate_resources(cfg);
  const GrammarSize size = grammar_size(dynamic_cast<const LanoTask&>(*make_task(cfg.task)).grammar());
  EXPECT_EQ(item_bytes(e, "task data: the Lano grammar"), grammar_bytes(size));
  EXPECT_EQ(item_bytes(e, "lano_acc: the parser's table"), parse_table_bytes(size, 127));

  RunConfig long_samples = config_from_yaml_string(
      kLanoModel, {"task.name=lano", "task.context=128", "model.max_seq_len=65536", "task.lano.max_sentence=65535",
                   "train.max_memory_gb=4"});
  const ResourceEstimate big = estimate_resources(long_samples);
  EXPECT_EQ(item_bytes(big, "lano_acc: the parser's table"), parse_table_bytes(size, 65535));
  try {
    check_resources(big, long_samples);
    FAIL() << "accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("task.lano.max_sentence"), std::string::npos) << err.what();
  }
}

TEST(ResourceEstimateCli, TheIssuesLanoGrammarIsRefusedAndALargeOneDryRuns) {
  const fs::path dir = fresh_dir("lano");
  std::string sets;
  for (const std::string& set : kLanoAtTheMaxima) sets += " --set " + set;
  for (const std::string flag : {" --dry-run", ""}) {
    const auto r = test_support::run_cli("train " + source_config("demo.yaml") + flag + sets + " --out " +
                                         (dir / "run").string());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("268500992 rule symbols; allowed: at most 1048576"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "run"));
  }
  sets.clear();
  for (const std::string& set : kLanoNearTheLimit) sets += " --set " + set;
  const auto r = test_support::run_cli("train " + source_config("demo.yaml") + " --dry-run" + sets);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("task data: the Lano grammar and its parser's productions (generated: the most its keys "
                          "allow)"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace canonlab
