// Regression tests for the bad inputs of issue 12 (fuzzing and fault injection): each one used to crash, hang,
// lose data or change results silently, and now gets a clear canonlab::Error naming the key or file, or works.
// The findings of issue 25's audit have theirs in test_run_integrity.cpp (helpers shared: bad_inputs_support.h).
// The size bounds of config keys and the resource estimate have their own tests (test_config_bounds.cpp,
// test_resource_estimate.cpp).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bad_inputs_support.h"
#include "cli_runner.h"
#include "config/config.h"
#include "data/cfg_grammar.h"
#include "data/task.h"
#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/directory_lock.h"
#include "io/safetensors.h"
#include "models/language_model.h"
#include "sweep/sweep_spec.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

using namespace canonlab;
namespace fs = std::filesystem;

using namespace canonlab::test_support;

// 1. A checkpoint whose config metadata is "[" x 200000 used to overflow the stack in eval, probe and resume.
TEST(BadInputs, DeeplyNestedCheckpointConfigIsRejected) {
  const std::string dir = temp_dir("nested");
  SafetensorsWriter w;
  w.add_metadata("canonlab.format_version", "2");
  w.add_metadata("canonlab.config", std::string(200000, '['));
  const float x = 1.f;
  w.add("tok_emb.weight", std::span<const float>(&x, 1), {1, 1});
  const std::string path = dir + "/step_00000001.model.safetensors";
  w.write_atomic(path);
  EXPECT_CONTAINS(error_of([&] { read_model_config(path); }), path);
  // The same nesting as valid JSON ("[[...]]"), which gets past the JSON parser to the config reader.
  EXPECT_CONTAINS(error_of([&] { config_from_json(nlohmann::json::parse(std::string(5000, '[') + std::string(5000, ']'))); }),
                  "nests more than");
  const test_support::CliResult r = run_cli("eval " + path);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, path);
}

// 1, 6. The header is checksummed too: metadata (the step, the update count, the config) cannot change unnoticed.
TEST(BadInputs, EditedCheckpointMetadataFailsTheHeaderChecksum) {
  const std::string dir = temp_dir("header");
  const RunConfig cfg = tiny_config();
  train_quietly(cfg, dir);
  const fs::path state = fs::path(dir) / "checkpoints/step_00000008.state.safetensors";
  RawFile f = split_file(state);
  const std::string from = "\"canonlab.adam_t\":\"8\"", to = "\"canonlab.adam_t\":\"1\"";
  const size_t at = f.header.find(from);
  ASSERT_NE(at, std::string::npos) << f.header.substr(0, 300);
  f.header.replace(at, from.size(), to);  // same length: only the checksum can tell
  join_file(state, f);
  EXPECT_CONTAINS(error_of([&] { read_safetensors(state.string()); }), "header checksum mismatch");
  auto model = build_model<float>(cfg.model, cfg.train.seed);
  AdamWState opt;
  EXPECT_CONTAINS(error_of([&] { load_latest_checkpoint(dir + "/checkpoints", cfg, model->params(), opt); }),
                  state.string());
}

// 6, 13. Metadata numbers are parsed strictly ("1e5x" is not 1), and a missing key is named, not "map::at".
TEST(BadInputs, MalformedStateMetadataIsNamed) {
  const RunConfig cfg = tiny_config();
  for (const auto& [key, value, expect] :
       std::vector<std::tuple<std::string, std::string, std::string>>{{"canonlab.adam_t", "1e5x", "'1e5x'"},
                                                                      {"canonlab.adam_t", "3", "one AdamW update per step"},
                                                                      {"canonlab.step", "abc", "'abc'"},
                                                                      {"canonlab.step", "", "is missing"}}) {
    const std::string dir = temp_dir("meta");
    train_quietly(cfg, dir);
    const std::string ckpts = dir + "/checkpoints";
    auto model = build_model<float>(cfg.model, cfg.train.seed);
    // Rewrite the state file with one metadata entry changed (or removed), with valid checksums.
    rewrite_checkpoint(ckpts + "/step_00000008.state.safetensors",
                       {{key, value.empty() ? std::nullopt : std::optional<std::string>(value)}});
    AdamWState opt;
    const std::string message = error_of([&] { load_latest_checkpoint(ckpts, cfg, model->params(), opt); });
    EXPECT_CONTAINS(message, key);
    EXPECT_CONTAINS(message, expect);
  }
}

// 2. A base: chain is bounded (5000 files used to overflow the stack); a cycle is named as one.
TEST(BadInputs, LongBaseChainsAndCyclesAreNamed) {
  const std::string dir = temp_dir("base");
  auto chain = [&](int files) {
    for (int i = 0; i < files; i++)
      write_text(fs::path(dir) / ("c" + std::to_string(i) + ".yaml"),
                 i + 1 < files ? "base: c" + std::to_string(i + 1) + ".yaml\n" : "train: {steps: 3}\n");
  };
  chain(32);
  EXPECT_EQ(load_config(dir + "/c0.yaml", {}).train.steps, 3);
  chain(5000);
  EXPECT_CONTAINS(error_of([&] { load_config(dir + "/c0.yaml", {}); }), "base chain longer than 32");
  write_text(fs::path(dir) / "a.yaml", "base: b.yaml\n");
  write_text(fs::path(dir) / "b.yaml", "base: a.yaml\n");
  EXPECT_CONTAINS(error_of([&] { load_config(dir + "/a.yaml", {}); }), "config base cycle");
  // 13. An over-long base name used to end in a bare filesystem error.
  write_text(fs::path(dir) / "long.yaml", "base: " + std::string(5000, 'x') + ".yaml\n");
  EXPECT_CONTAINS(error_of([&] { load_config(dir + "/long.yaml", {}); }), "base: cannot read config file");
}

// 11, 13. YAML size, nesting and alias expansion are bounded before anything walks the document.
TEST(BadInputs, HugeDeepOrAliasBombYamlIsRefusedQuickly) {
  const std::string dir = temp_dir("yaml");
  write_text(fs::path(dir) / "big.yaml", "train:\n  steps: 3\n" + std::string(2 << 20, '#'));
  EXPECT_CONTAINS(error_of([&] { load_config(dir + "/big.yaml", {}); }), "allowed: at most 1048576 bytes");
  write_text(fs::path(dir) / "deep.yaml", "model: " + std::string(3000, '[') + std::string(3000, ']') + "\n");
  EXPECT_CONTAINS(error_of([&] { load_config(dir + "/deep.yaml", {}); }), "nested more than 64");
  // The billion laughs: 9 levels of 10 aliases each, about 1 KB that expands to 10^9 values.
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; i++) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; k++) bomb += (k ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  write_text(fs::path(dir) / "base.yaml", "train: {steps: 3}\n");
  write_text(fs::path(dir) / "bomb.yaml", bomb + "base: base.yaml\naxes:\n  - key: seed\n    values: [*a9]\n");
  EXPECT_CONTAINS(error_of([&] { load_sweep_spec(dir + "/bomb.yaml"); }), "aliases");
  write_text(fs::path(dir) / "bomb-report.yaml", bomb + "base: base.yaml\naxes:\n  - {key: seed, values: [1]}\nreport: {x: *a9}\n");
  EXPECT_CONTAINS(error_of([&] { load_sweep_spec(dir + "/bomb-report.yaml"); }), "aliases");
}

// 9. The run count cannot overflow past the limit (2^64 runs used to read as 0), and the name stays a name.
TEST(BadInputs, SweepGridSizeAndNameAreChecked) {
  const std::string dir = temp_dir("grid");
  write_text(fs::path(dir) / "base.yaml", read_text(source_path("configs/demo.yaml")));
  // 8 axes of 1999 values: 1999^8 > 2^64 runs, which used to wrap around to a small count.
  std::string axes;
  const char* keys[] = {"train.lr", "train.seed", "train.data_seed", "train.warmup_steps", "train.weight_decay",
                        "train.beta1", "train.beta2", "train.eps"};
  for (const char* k : keys) axes += std::string("  - {key: ") + k + ", range: [1, 2000]}\n";
  write_text(fs::path(dir) / "huge.yaml", "base: base.yaml\naxes:\n" + axes);
  const SweepSpec spec = load_sweep_spec(dir + "/huge.yaml");
  EXPECT_CONTAINS(error_of([&] { expand_sweep(spec, 1); }), "allowed: at most 100000");
  write_text(fs::path(dir) / "escape.yaml", "name: ../../../../elsewhere\nbase: base.yaml\naxes:\n  - {key: seed, values: [1]}\n");
  EXPECT_CONTAINS(error_of([&] { load_sweep_spec(dir + "/escape.yaml"); }), "plain directory name");
}

// 4. Integers where integers are meant in the grammar JSON (1e68 used to be undefined behaviour, 1.9 read as 1).
TEST(BadInputs, GrammarJsonNeedsWholeNumbers) {
  const nlohmann::json good = nlohmann::json::parse(read_text(source_path("data/physicslm4/lano-cfg/cfg3f.json")));
  ASSERT_NO_THROW(parse_grammar_json(good.dump(), "cfg3f"));
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    return error_of([&] { parse_grammar_json(j.dump(), "edited cfg3f"); });
  };
  EXPECT_CONTAINS(with([](nlohmann::json& j) { j["idx"][1][0] = 1e68; }), "idx[1][0]");
  EXPECT_CONTAINS(with([](nlohmann::json& j) { j["depth"] = 1e300; }), "depth is 1e+300");
  EXPECT_CONTAINS(with([](nlohmann::json& j) { j["depth"] = 1.9; }), "allowed: a whole number");
  EXPECT_CONTAINS(with([](nlohmann::json& j) { j["all"][0][0]["children"][0][0] = 0.7; }), "rule index is 0.7");
  EXPECT_CONTAINS(with([](nlohmann::json& j) { j["sizes"] = true; }), "sizes");
  // 13. A grammar "file" that is a device used to be read until memory ran out.
  EXPECT_CONTAINS(error_of([&] { load_grammar_json("/dev/zero"); }), "not a regular file");
}

// 12. Sampling stops once a sentence outgrows the window; a generated depth-20 grammar used to sample forever.
TEST(BadInputs, LanoSamplingIsBounded) {
  LanoConfig lano;
  lano.depth = 20;
  lano.num_sym = 3;
  lano.deg_min = 2;
  lano.deg_max = 3;
  lano.len_min = 2;
  lano.len_max = 3;
  const Grammar g = generate_grammar(lano);
  CounterRng rng(1, 2);
  std::vector<int> out;
  EXPECT_FALSE(sample_sentence(g, rng, out, 1000));  // sentences of this grammar have >= 2^20 terminals
  EXPECT_EQ(out.size(), 1000u);
  // With the default rule lengths (2..3) the shortest sentence cannot fit, which the task says at once; with
  // rules of length 1 some sentences fit and are found by bounded redraws, or the redraw limit names the key.
  EXPECT_CONTAINS(error_of([] {
    config_from_yaml_string("{}", {"task.name=lano", "task.lano.grammar=generate", "task.lano.depth=20"});
  }), "task.context");
  try {
    RunConfig cfg = config_from_yaml_string("{}", {"task.name=lano", "task.lano.grammar=generate", "task.lano.depth=20",
                                                   "task.lano.len_min=1", "task.context=512"});
    make_task(cfg.task)->make_batch(4, 1, 0);
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), "task.context");
  }
}

// 5. A failed resume never truncates metrics.jsonl: records are read and checked first, then rewritten atomically.
TEST(BadInputs, ResumeKeepsEveryMetricsRecord) {
  const RunConfig cfg = tiny_config({"train.log_every=1"});
  const std::string reference = temp_dir("metrics_ref");
  train_quietly(cfg, reference);

  // The same run as if killed after logging step 8 but before its checkpoint: latest.json still points at step
  // 6. Its log also has a record with a null loss, and a half-written last line.
  const std::string dir = temp_dir("metrics");
  train_quietly(cfg, dir);
  const fs::path ckpts = fs::path(dir) / "checkpoints";
  fs::remove(ckpts / "step_00000008.model.safetensors");
  fs::remove(ckpts / "step_00000008.state.safetensors");
  write_text(ckpts / "latest.json", R"({"step": 6, "model": "step_00000006.model.safetensors", "state": "step_00000006.state.safetensors"})");
  fs::remove(fs::path(dir) / "summary.json");
  const fs::path metrics = fs::path(dir) / "metrics.jsonl";
  std::string text = read_text(metrics);
  text.insert(0, "{\"step\":0,\"split\":\"note\",\"loss\":null}\n");

  // First a line that is not a record: the resume stops, naming the file and the line, and changes nothing.
  const std::string broken = "{\"step\":0,\"split\":\"note\",\"loss\":null}\nnot json\n" + text.substr(text.find('\n') + 1);
  write_text(metrics, broken);
  const std::string message = error_of([&] { train_quietly(cfg, dir, /*resume=*/true); });
  EXPECT_CONTAINS(message, metrics.string());
  EXPECT_CONTAINS(message, "line 2");
  EXPECT_EQ(read_text(metrics), broken) << "a failed resume must leave metrics.jsonl as it was";

  // Then the null loss and the half-written last line: both are handled, and every record is kept.
  write_text(metrics, text + "{\"step\":7,\"split\":\"tr");
  ASSERT_NO_THROW(train_quietly(cfg, dir, /*resume=*/true));
  std::vector<std::string> lines;
  std::istringstream in(read_text(metrics));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front(), "{\"loss\":null,\"split\":\"note\",\"step\":0}");
  std::vector<std::string> ref_lines;
  std::istringstream ref_in(read_text(fs::path(reference) / "metrics.jsonl"));
  for (std::string line; std::getline(ref_in, line);) ref_lines.push_back(line);
  ASSERT_EQ(lines.size(), ref_lines.size() + 1);
  // Same records as the uninterrupted run, apart from timings.
  for (size_t i = 0; i < ref_lines.size(); i++) {
    nlohmann::json a = nlohmann::json::parse(lines[i + 1]), b = nlohmann::json::parse(ref_lines[i]);
    for (auto* j : {&a, &b}) j->erase("tokens_per_s"), j->erase("elapsed_s");
    EXPECT_EQ(a, b) << "record " << i;
  }
}

// 7. train locks its run directory: a second train or --resume on it stops at once with the holder named.
TEST(BadInputs, TrainLocksItsRunDirectory) {
  const std::string dir = temp_dir("lock");
  const DirectoryLock held(dir, ".train.lock", "canonlab train");
  const std::string config = source_path("configs/demo.yaml");
  const test_support::CliResult r = run_cli("train " + config + " --resume --quiet --out " + dir);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "another canonlab train is already running in '" + dir + "' (pid " + std::to_string(::getpid()));
}

// 8. Pruning also removes orphans (a state file whose model file is gone), and dead writers' temp files go.
TEST(BadInputs, PruningAndStaleTempFiles) {
  const std::string dir = temp_dir("prune");
  for (const char* name : {"step_00000001.state.safetensors", "step_00000002.model.safetensors",
                           "step_00000002.state.safetensors", "step_00000003.model.safetensors",
                           "step_00000003.state.safetensors", "step_00000004.model.safetensors"})
    write_text(fs::path(dir) / name, "x");
  prune_checkpoints(dir, "step_00000003", 2);
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"step_00000003.model.safetensors", "step_00000003.state.safetensors",
                                         "step_00000004.model.safetensors"}));

  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // now a pid with no process behind it
  write_text(fs::path(dir) / ("latest.json.tmp." + std::to_string(child)), "{");
  write_text(fs::path(dir) / ("status.json.tmp." + std::to_string(::getppid())), "{");  // a live writer: kept
  EXPECT_EQ(remove_stale_temp_files(dir), 1);
  EXPECT_FALSE(fs::exists(fs::path(dir) / ("latest.json.tmp." + std::to_string(child))));
  EXPECT_TRUE(fs::exists(fs::path(dir) / ("status.json.tmp." + std::to_string(::getppid()))));
}

// 13. Inputs that are not files, run directories that cannot be made, and checkpoints with non-finite weights.
TEST(BadInputs, PathsAndWeightsThatCannotBeUsedAreNamed) {
  const std::string config = source_path("configs/demo.yaml");
  test_support::CliResult r = run_cli("eval /dev/zero");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "'/dev/zero': not a regular file");

  const std::string dir = temp_dir("paths");
  write_text(fs::path(dir) / "a-file", "x");
  r = run_cli("train " + config + " --quiet --out " + dir + "/a-file");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "is a file, not a directory");
  // /sys refuses new entries ("Operation not permitted") the way a read-only file system does.
  r = run_cli("train " + config + " --quiet --out /sys/canonlab-cannot-be-here");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "cannot create run directory (--out) '/sys/canonlab-cannot-be-here'");
  const fs::path ro = fs::path(dir) / "read-only";
  fs::create_directories(ro);
  if (std::system(("mount -t tmpfs -o ro,size=1m tmpfs " + ro.string() + " 2>/dev/null").c_str()) == 0) {
    r = run_cli("train " + config + " --quiet --out " + (ro / "run").string());
    std::system(("umount " + ro.string()).c_str());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_CONTAINS(r.output, "Read-only file system");
  } else {
    std::cout << "NOTE: cannot mount a read-only tmpfs here; tested with /sys only\n";
  }

  // A checkpoint holding a NaN: eval used to print "loss: null" and exit 0.
  const RunConfig cfg = tiny_config();
  auto model = build_model<float>(cfg.model, cfg.train.seed);
  model->params().values()[5] = std::nanf("");
  save_model(dir + "/nan.model.safetensors", cfg, model->params(), 0);
  r = run_cli("eval " + dir + "/nan.model.safetensors");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "holds nan at index 5");
}
