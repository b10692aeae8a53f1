// canonlab sweep: the grid a sweep file expands to (in-process), and the command end to end on a tiny 4-layer
// copy-task model: a 3-seed x 4-placement grid with --jobs 2 that is SIGKILLed mid-way and resumed must end
// bit-identical to an uninterrupted sweep; a failed run is isolated; a changed grid, a locked directory and
// foreign run directories are refused with messages that say why.
#include <gtest/gtest.h>

#include "text_presets_data.h"
#include "cli_runner.h"
#include "process_support.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "engine/error.h"
#include "report/report.h"
#include "report/sweep_results.h"
#include "sweep/manifest.h"
#include "sweep/sweep_spec.h"

extern char** environ;

namespace canonlab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::string kBase = std::string(CANONLAB_SOURCE_DIR) + "/configs/demo.yaml";
constexpr int kSteps = 40;

// ---------------------------------------------------------------------------------------------------------------
// Files and directories

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

json read_json(const fs::path& path) { return json::parse(read_text(path), nullptr, false); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A fresh directory named after the running test; kept when the test failed so its runs can be looked at.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("canonlab_sweep_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    if (!::testing::Test::HasFailure()) fs::remove_all(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  fs::path operator/(const std::string& name) const { return path_ / name; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The tiny model every end-to-end run trains: one run takes well under a second on one thread, and with
// checkpoints every 10 of 40 steps a kill mid-run reliably finds a checkpoint strictly inside the run. A metrics
// record every step means a killed run has usually logged steps past its checkpoint, which a resume must drop.
std::string tiny_set(int steps = kSteps, const std::string& extra = "") {
  return "set:\n"
         "  model.d_model: 32\n"
         "  model.n_layers: 4\n"
         "  model.n_heads: 2\n"
         "  train.steps: " + std::to_string(steps) + "\n"
         "  train.eval_every: 20\n"
         "  train.checkpoint_every: 10\n"
         "  train.log_every: 1\n"
         "  train.batch_size: 16\n"
         "  probe.n_sequences: 32\n" + extra;
}

// Writes DIR/sweep.yaml: the demo config as base, then `body` (set:, axes:, ...).
std::string write_sweep(const TempDir& dir, const std::string& body, const std::string& file = "sweep.yaml") {
  const fs::path path = dir / file;
  write_text(path, "base: " + kBase + "\n" + body);
  return path.string();
}

const std::string kPlacementAxes =
    "axes:\n"
    "  - name: layer\n"
    "    key: model.attention.key_shift.layers\n"
    "    values: [[0], [1], [2], [3]]\n"
    "    labels: [L0, L1, L2, L3]\n"
    "  - key: seed\n"
    "    values: [0, 1, 2]\n";

std::vector<std::string> placement_run_names() {
  std::vector<std::string> names;
  for (const char* layer : {"L0", "L1", "L2", "L3"})
    for (const char* seed : {"0", "1", "2"}) names.push_back(std::string("layer=") + layer + "__seed=" + seed);
  return names;
}

// path relative to root -> size and mtime of every file: equal snapshots mean nothing was written.
// Every file's size and time, lock files aside: a lock records the pid of whoever last held it.
std::map<std::string, std::string> tree_snapshot(const fs::path& root) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file() && e.path().extension() != ".lock")
      files[fs::relative(e.path(), root).string()] =
          std::to_string(e.file_size()) + "@" + std::to_string(e.last_write_time().time_since_epoch().count());
  return files;
}

std::string file_stamp(const fs::path& path) {
  return read_text(path) + "@" + std::to_string(fs::last_write_time(path).time_since_epoch().count());
}

// ---------------------------------------------------------------------------------------------------------------
// Running the binary

using Result = canonlab::test_support::CliResult;
Result run_canonlab(const std::string& args) { return canonlab::test_support::run_cli(args); }

// Every end-to-end sweep uses --jobs 2, so runs that are compared were trained with the same thread budget.
Result run_sweep(const std::string& sweep_file, const fs::path& out, const std::string& extra = "") {
  return run_canonlab("sweep " + sweep_file + " --jobs 2 --out " + out.string() + (extra.empty() ? "" : " " + extra));
}

std::string finished_line(int done, int total, int skipped, int failed) {
  return std::to_string(done) + "/" + std::to_string(total) + " runs finished (" + std::to_string(skipped) +
         " already were), " + std::to_string(failed) + " failed";
}

// Starts the binary without waiting, so the test can kill it; output goes to log_path.
pid_t spawn_canonlab(const std::vector<std::string>& args, const fs::path& log_path,
                     const std::vector<std::string>& env = {}) {
  return test_support::spawn_canonlab(args, log_path, env);
}

// Live (not zombie) processes whose command line mentions `needle`: a trainer left behind by a killed sweep.
std::vector<pid_t> live_processes_mentioning(const std::string& needle) {
  std::vector<pid_t> found;
  for (pid_t pid : test_support::processes_mentioning(needle)) {
    const char state = test_support::process_state(pid);
    if (state != 0 && state != 'Z') found.push_back(pid);
  }
  return found;
}

// ---------------------------------------------------------------------------------------------------------------
// A run directory as the tests see it

bool run_finished(const fs::path& run_dir) {
  const json summary = read_json(run_dir / "summary.json");
  return !summary.is_discarded() && summary.value("steps", -1) == kSteps;
}

int checkpoint_step(const fs::path& run_dir) {
  const json latest = read_json(run_dir / "checkpoints" / "latest.json");
  return latest.is_discarded() ? -1 : latest.value("step", -1);
}

bool between_checkpoints(const fs::path& run_dir) {
  const int step = checkpoint_step(run_dir);
  return step > 0 && step < kSteps && !run_finished(run_dir);
}

// The newest step in metrics.jsonl; past the checkpoint step, a resume has records to drop.
int last_logged_step(const fs::path& run_dir) {
  int step = -1;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_discarded()) step = std::max(step, j.value("step", -1));
  }
  return step;
}

std::string run_state(const fs::path& run_dir) {
  const json status = read_json(run_dir / "status.json");
  return status.is_discarded() ? "(no status.json)" : status.value("state", "(no state)");
}

// metrics.jsonl without wall-clock fields: what must be identical between an interrupted and a clean run.
std::vector<json> metrics_without_timing(const fs::path& run_dir) {
  std::vector<json> records;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      records.push_back("unparseable line: " + line);
      continue;
    }
    j.erase("elapsed_s");
    j.erase("tokens_per_s");
    records.push_back(j);
  }
  return records;
}

std::string final_checkpoint(const std::string& kind) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoints/step_%08d.%s.safetensors", kSteps, kind.c_str());
  return name;
}

// ---------------------------------------------------------------------------------------------------------------
// Grid expansion, in-process

SweepSpec load_spec_text(const TempDir& dir, const std::string& body) { return load_sweep_spec(write_sweep(dir, body)); }

// Loading and expanding must fail with a message containing every part.
void expect_sweep_error(const std::string& sweep_path, const std::vector<std::string>& parts) {
  try {
    expand_sweep(load_sweep_spec(sweep_path), 1);
    ADD_FAILURE() << "no error for " << sweep_path << ":\n" << read_text(sweep_path);
  } catch (const Error& e) {
    for (const auto& part : parts) EXPECT_TRUE(contains(e.what(), part)) << "missing '" << part << "' in: " << e.what();
  }
}

const std::string kSmallModelSet =
    "set:\n"
    "  model.d_model: 32\n"
    "  model.n_layers: 4\n"
    "  model.n_heads: 2\n";

TEST(SweepGrid, RunsAreNamedAfterAxisValuesFirstAxisSlowest) {
  TempDir dir;
  const SweepSpec spec = load_spec_text(dir, kSmallModelSet +
                                                 "axes:\n"
                                                 "  - name: layer\n"
                                                 "    key: model.attention.key_shift.layers\n"
                                                 "    values: [[0], [1], [2, 3]]\n"
                                                 "    labels: [L0, L1, L23]\n"
                                                 "  - key: seed\n"
                                                 "    values: [0, 7]\n");
  ASSERT_EQ(spec.axes.size(), 2u);
  EXPECT_EQ(spec.name, "sweep");  // the file's stem
  EXPECT_EQ(spec.axes[1].name, "seed");
  EXPECT_EQ(spec.axes[1].keys, std::vector<std::string>{"train.seed"});  // `seed` is short for train.seed

  const std::vector<SweepRun> runs = expand_sweep(spec, 3);
  const std::vector<std::string> names = {"layer=L0__seed=0", "layer=L0__seed=7",  "layer=L1__seed=0",
                                          "layer=L1__seed=7", "layer=L23__seed=0", "layer=L23__seed=7"};
  const std::vector<std::vector<int>> layers = {{0}, {0}, {1}, {1}, {2, 3}, {2, 3}};
  const std::vector<uint64_t> seeds = {0, 7, 0, 7, 0, 7};
  ASSERT_EQ(runs.size(), names.size());
  for (size_t i = 0; i < runs.size(); i++) {
    SCOPED_TRACE(names[i]);
    const RunConfig& c = runs[i].config;
    EXPECT_EQ(runs[i].name, names[i]);
    EXPECT_EQ(c.model.attention.key_shift.layers, layers[i]);
    EXPECT_EQ(c.train.seed, seeds[i]);
    EXPECT_EQ(c.train.data_seed, seeds[i] + 1);  // derived after the axis value is applied
    EXPECT_EQ(c.train.threads, 3);               // threads_per_run
    EXPECT_EQ(c.model.d_model, 32);              // shared set:
    EXPECT_EQ(c.model.n_layers, 4);
    EXPECT_EQ(c.task.n_symbols, 12);             // untouched base values
    EXPECT_DOUBLE_EQ(c.train.lr, 3.0e-3);
  }
  EXPECT_EQ(runs[4].labels, (std::map<std::string, std::string>{{"layer", "L23"}, {"seed", "0"}}));
}

TEST(SweepGrid, RangesExcludeTheStopAndDefaultLabelsWriteTheValues) {
  TempDir dir;
  const SweepSpec spec = load_spec_text(dir,
                                        "axes:\n"
                                        "  - key: train.steps\n"
                                        "    range: [10, 40, 10]\n"
                                        "  - key: train.lr\n"
                                        "    range: {start: 0.001, stop: 0.004, step: 0.001}\n"
                                        "  - key: train.warmup_steps\n"
                                        "    range: [3, 0, -1]\n"
                                        "  - name: layer\n"
                                        "    key: model.attention.key_shift.layers\n"
                                        "    values: [[0], [0, 1], []]\n");
  ASSERT_EQ(spec.axes.size(), 4u);
  EXPECT_EQ(spec.axes[0].name, "steps");
  EXPECT_EQ(spec.axes[0].labels, (std::vector<std::string>{"10", "20", "30"}));
  EXPECT_EQ(spec.axes[1].name, "lr");
  EXPECT_EQ(spec.axes[1].labels, (std::vector<std::string>{"0.001", "0.002", "0.003"}));
  EXPECT_EQ(spec.axes[2].name, "warmup-steps");  // '_' would clash with the "__" between axes in run names
  EXPECT_EQ(spec.axes[2].labels, (std::vector<std::string>{"3", "2", "1"}));
  EXPECT_EQ(spec.axes[3].labels, (std::vector<std::string>{"0", "0-1", "none"}));

  const std::vector<SweepRun> runs = expand_sweep(spec, 1);
  ASSERT_EQ(runs.size(), 81u);
  EXPECT_EQ(runs.front().name, "steps=10__lr=0.001__warmup-steps=3__layer=0");
  EXPECT_EQ(runs[1].name, "steps=10__lr=0.001__warmup-steps=3__layer=0-1");
  EXPECT_EQ(runs.back().name, "steps=30__lr=0.003__warmup-steps=1__layer=none");
  EXPECT_EQ(runs.back().config.train.steps, 30);
  EXPECT_DOUBLE_EQ(runs.back().config.train.lr, 0.003);
  EXPECT_EQ(runs.back().config.train.warmup_steps, 1);
  EXPECT_TRUE(runs.back().config.model.attention.key_shift.layers.empty());
  EXPECT_EQ(runs[1].config.model.attention.key_shift.layers, (std::vector<int>{0, 1}));
}

TEST(SweepGrid, ZippedKeysMoveTogetherAndLabelsAreDirectorySafe) {
  TempDir dir;
  const SweepSpec spec = load_spec_text(dir,
                                        "axes:\n"
                                        "  - zip:\n"
                                        "      - {key: train.lr, values: [1.0e-3, 2.0e-3]}\n"
                                        "      - {key: seed, values: [5, 6]}\n"
                                        "  - name: shape\n"
                                        "    zip:\n"
                                        "      - {key: model.d_model, values: [32, 64]}\n"
                                        "      - {key: model.n_heads, values: [2, 4]}\n"
                                        "    labels: [\"s/m\", \"big one\"]\n");
  ASSERT_EQ(spec.axes.size(), 2u);
  EXPECT_EQ(spec.axes[0].name, "lr+seed");
  EXPECT_EQ(spec.axes[0].keys, (std::vector<std::string>{"train.lr", "train.seed"}));
  EXPECT_EQ(spec.axes[0].labels, (std::vector<std::string>{"1.0e-3-5", "2.0e-3-6"}));  // values joined by '-'
  EXPECT_EQ(spec.axes[1].labels, (std::vector<std::string>{"s_m", "big_one"}));

  const std::vector<SweepRun> runs = expand_sweep(spec, 1);
  ASSERT_EQ(runs.size(), 4u);  // 2 x 2, not 2 x 2 x 2 x 2
  EXPECT_EQ(runs[0].name, "lr+seed=1.0e-3-5__shape=s_m");
  EXPECT_EQ(runs[3].name, "lr+seed=2.0e-3-6__shape=big_one");
  const RunConfig& c1 = runs[1].config;
  EXPECT_DOUBLE_EQ(c1.train.lr, 1.0e-3);
  EXPECT_EQ(c1.train.seed, 5u);
  EXPECT_EQ(c1.model.d_model, 64);
  EXPECT_EQ(c1.model.n_heads, 4);
  const RunConfig& c2 = runs[2].config;
  EXPECT_DOUBLE_EQ(c2.train.lr, 2.0e-3);
  EXPECT_EQ(c2.train.seed, 6u);
  EXPECT_EQ(c2.train.data_seed, 7u);
  EXPECT_EQ(c2.model.d_model, 32);
  EXPECT_EQ(c2.model.n_heads, 2);
}

TEST(SweepSpecErrors, UnknownAxisFieldNamesFileAndLine) {
  TempDir dir;
  const std::string path = write_sweep(dir, "axes:\n  - key: seed\n    value: [1]\n");
  expect_sweep_error(path, {path + ":4: unknown axis field 'value'; allowed: name, key, values, range, labels, zip"});
}

TEST(SweepSpecErrors, ZipMembersNeedTheSameNumberOfValues) {
  TempDir dir;
  expect_sweep_error(write_sweep(dir, "axes:\n"
                                      "  - name: shape\n"
                                      "    zip:\n"
                                      "      - {key: model.d_model, values: [32, 64]}\n"
                                      "      - {key: model.n_heads, values: [2, 4, 8]}\n"),
                     {"zip: every key needs the same number of values (2 for model.d_model, 3 for model.n_heads)"});
}

TEST(SweepSpecErrors, LabelsThatCollideAsDirectoryNamesAreRefused) {
  TempDir dir;  // "a/b" becomes "a_b" in a directory name, the same as the second label
  expect_sweep_error(write_sweep(dir, "axes:\n  - key: train.lr\n    values: [1.0e-3, 2.0e-3]\n    labels: [\"a/b\", a_b]\n"),
                     {"axis 'lr' has the label 'a_b' twice"});
}

TEST(SweepSpecErrors, TwoAxesOnTheSameKeyAreRefusedThroughTheSeedAlias) {
  TempDir dir;
  expect_sweep_error(
      write_sweep(dir, "axes:\n  - key: seed\n    values: [1]\n  - name: s2\n    key: train.seed\n    values: [2]\n"),
      {"two axes set the same key 'train.seed'"});
}

TEST(SweepSpecErrors, AnInvalidValueAtOneGridPointNamesTheRunAndTheKey) {
  TempDir dir;
  const std::string path = write_sweep(dir, kSmallModelSet +
                                                "axes:\n"
                                                "  - key: model.attention.key_shift.layers\n"
                                                "    values: [[0], [4]]\n"
                                                "  - key: seed\n"
                                                "    values: [1]\n");
  EXPECT_NO_THROW(load_sweep_spec(path));  // the file itself is fine; the grid point layers=4 is not
  expect_sweep_error(path, {"sweep run 'layers=4__seed=1': ", "model.attention.key_shift.layers"});
}

TEST(SweepSpecErrors, ConfigSectionsAtTheTopLevelGetAHintAboutSet) {
  TempDir dir;
  expect_sweep_error(write_sweep(dir, "model:\n  d_model: 32\naxes:\n  - key: seed\n    values: [1]\n"),
                     {":2: unknown sweep field 'model'", "as key paths under set:"});
}

TEST(SweepSpecErrors, MissingBaseAndMissingFileAreReported) {
  TempDir dir;
  const fs::path path = dir / "s.yaml";
  write_text(path, "base: nowhere.yaml\naxes:\n  - key: seed\n    values: [1]\n");
  expect_sweep_error(path.string(), {"base: cannot read config file '" + (dir / "nowhere.yaml").string() + "'"});
  expect_sweep_error((dir / "absent.yaml").string(), {"cannot read sweep file '" + (dir / "absent.yaml").string() + "'"});
}

TEST(SweepSpecErrors, EmptyRangeIsRefused) {
  TempDir dir;
  expect_sweep_error(write_sweep(dir, "axes:\n  - key: train.steps\n    range: [5, 5]\n"),
                     {"range is empty (stop is excluded)"});
}

TEST(SweepManifest, NameDescriptionAndReportMayChangeButConfigsMayNot) {
  TempDir dir;
  const std::string axes = "axes:\n  - key: seed\n    values: [0, 1]\n";
  const SweepSpec a = load_spec_text(dir, "name: a\ndescription: one\n" + axes);
  const SweepSpec b = load_sweep_spec(write_sweep(dir, "name: b\ndescription: two\nreport: {metric: x}\n" + axes, "b.yaml"));
  const SweepSpec c = load_sweep_spec(write_sweep(dir, "set:\n  train.lr: 2.0e-3\n" + axes, "c.yaml"));
  const json before = make_sweep_manifest(a, expand_sweep(a, 1));
  const std::optional<std::string> same = sweep_difference(before, make_sweep_manifest(b, expand_sweep(b, 1)));
  EXPECT_FALSE(same.has_value()) << *same;
  EXPECT_EQ(sweep_difference(before, make_sweep_manifest(c, expand_sweep(c, 1))),
            std::optional<std::string>("run 'seed=0': train.lr was 0.003, now 0.002"));
  EXPECT_EQ(sweep_difference(before, make_sweep_manifest(a, expand_sweep(a, 2))),
            std::optional<std::string>("run 'seed=0': train.threads was 1, now 2"));
}

// A sweep.json written before canonlab had a key (here model.canon.dynamic, removed from the old manifest) still
// matches when the grid holds that key's default, and does not when the grid sets another value.
TEST(SweepManifest, AKeyNewerThanTheManifestMatchesAtItsDefault) {
  TempDir dir;
  const std::string axes = "axes:\n  - key: seed\n    values: [0, 1]\n";
  const SweepSpec plain = load_spec_text(dir, "name: a\n" + axes);
  const SweepSpec dynamic = load_sweep_spec(write_sweep(dir, "set:\n  model.canon.dynamic: 4\n" + axes, "d.yaml"));
  json before = make_sweep_manifest(plain, expand_sweep(plain, 1));
  for (json& run : before["runs"]) run["config"]["model"]["canon"].erase("dynamic");
  const std::optional<std::string> same = sweep_difference(before, make_sweep_manifest(plain, expand_sweep(plain, 1)));
  EXPECT_FALSE(same.has_value()) << *same;
  EXPECT_EQ(sweep_difference(before, make_sweep_manifest(dynamic, expand_sweep(dynamic, 1))),
            std::optional<std::string>("run 'seed=0': model.canon.dynamic is new (4)"));
  before["runs"][0]["config"]["model"]["canon"]["kernel_size"] = 3;  // a changed value still differs
  EXPECT_EQ(sweep_difference(before, make_sweep_manifest(plain, expand_sweep(plain, 1))),
            std::optional<std::string>("run 'seed=0': model.canon.kernel_size was 3, now 4"));
}

// ---------------------------------------------------------------------------------------------------------------
// End to end: the 3-seed x 4-placement grid. Dir A is the uninterrupted reference, trained once for the suite.

class SweepPlacementGrid : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("canonlab_sweep_placement_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    sweep_file_ = (root_ / "sweep.yaml").string();
    write_text(sweep_file_, "base: " + kBase + "\n" + tiny_set() + kPlacementAxes);
    reference_ = run_sweep(sweep_file_, root_ / "A");
  }
  static void TearDownTestSuite() {
    reference_.reset();
    if (::testing::UnitTest::GetInstance()->failed_test_count() == 0) fs::remove_all(root_);
  }
  void SetUp() override { ASSERT_EQ(reference_->exit_code, 0) << "the reference sweep failed:\n" << reference_->output; }

  static fs::path dir_a() { return root_ / "A"; }
  static inline fs::path root_;
  static inline std::string sweep_file_;
  static inline std::optional<Result> reference_;
};

TEST_F(SweepPlacementGrid, UninterruptedSweepFinishesEveryRunAndWritesTheManifest) {
  EXPECT_TRUE(contains(reference_->output, finished_line(12, 12, 0, 0))) << reference_->output;
  const std::vector<std::string> names = placement_run_names();
  for (const auto& name : names) {
    const fs::path run = dir_a() / "runs" / name;
    EXPECT_EQ(run_state(run), "done") << name;
    EXPECT_TRUE(run_finished(run)) << name;
    EXPECT_TRUE(fs::exists(run / final_checkpoint("model"))) << name;
  }
  const json manifest = read_json(dir_a() / "sweep.json");
  ASSERT_FALSE(manifest.is_discarded());
  EXPECT_EQ(manifest["format"], "canonlab-sweep/1");
  ASSERT_EQ(manifest["runs"].size(), names.size());
  for (size_t i = 0; i < names.size(); i++) {
    const json& run = manifest["runs"][i];
    EXPECT_EQ(run["name"], names[i]);
    EXPECT_EQ(run["dir"], "runs/" + names[i]);
    EXPECT_EQ(run["axes"]["layer"], "L" + std::to_string(i / 3));
    EXPECT_EQ(run["config"]["model"]["attention"]["key_shift"]["layers"], json::array({int(i / 3)}));
    EXPECT_EQ(run["config"]["train"]["seed"], i % 3);
    EXPECT_EQ(run["config"]["train"]["threads"], 1);
  }
}

TEST_F(SweepPlacementGrid, KilledMidwayAndResumedEqualsTheUninterruptedSweep) {
  const fs::path dir_b = root_ / "B";
  fs::remove_all(dir_b);
  const std::vector<std::string> names = placement_run_names();

  // Kill the sweep (SIGKILL: no chance to clean up) once some runs are finished and another has logged steps
  // past its last checkpoint, so the re-run has to skip, resume (dropping those records) and start afresh.
  const pid_t sweep = spawn_canonlab({"sweep", sweep_file_, "--jobs", "2", "--out", dir_b.string()}, root_ / "killed.log");
  ASSERT_GT(sweep, 0);
  bool killed = false;
  std::vector<std::string> unfinished_at_kill;
  for (const auto deadline = Clock::now() + std::chrono::minutes(3); Clock::now() < deadline;) {
    int status = 0;
    if (::waitpid(sweep, &status, WNOHANG) == sweep) break;  // ended on its own
    int finished = 0, midway = 0;
    for (const auto& name : names) {
      const fs::path run = dir_b / "runs" / name;
      finished += run_finished(run);
      midway += between_checkpoints(run) && last_logged_step(run) > checkpoint_step(run);
    }
    if (finished >= 2 && midway >= 1) {
      ::kill(sweep, SIGKILL);
      ::waitpid(sweep, &status, 0);
      killed = true;
      for (const auto& name : names)
        if (!run_finished(dir_b / "runs" / name)) unfinished_at_kill.push_back(name);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!killed) std::cout << "NOTE: the sweep ended before a run was caught mid-way; only the skip path was tested\n";

  // The trainers die with the sweep (PR_SET_PDEATHSIG); give the kernel a moment to deliver it (the bound only
  // guards against a hang: they are gone within milliseconds).
  std::vector<pid_t> orphans;
  for (int i = 0; i < 3000; i++) {
    orphans = live_processes_mentioning(dir_b.string() + "/runs/");
    if (orphans.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(orphans.empty()) << orphans.size() << " trainer(s) outlived the killed sweep, e.g. pid " << orphans.front();
  // An orphan that finished its run while we waited is gone from /proc too, but it left a summary behind.
  for (const auto& name : unfinished_at_kill)
    EXPECT_FALSE(run_finished(dir_b / "runs" / name)) << name << " trained on after the sweep was killed";

  std::set<std::string> finished_before;
  std::map<std::string, int> resumable_at;  // run -> checkpoint step it must resume from
  std::map<std::string, std::string> summaries_before;
  for (const auto& name : names) {
    const fs::path run = dir_b / "runs" / name;
    if (run_finished(run)) {
      finished_before.insert(name);
      summaries_before[name] = file_stamp(run / "summary.json");
    } else if (between_checkpoints(run)) {
      resumable_at[name] = checkpoint_step(run);
    }
  }
  std::cout << "killed: " << (killed ? "yes" : "no") << ", " << finished_before.size() << " runs finished, "
            << resumable_at.size() << " between checkpoints\n";
  if (killed && resumable_at.empty()) std::cout << "NOTE: no run was left between checkpoints by the kill\n";

  const Result rerun = run_sweep(sweep_file_, dir_b);
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_TRUE(contains(rerun.output, finished_line(12, 12, int(finished_before.size()), 0))) << rerun.output;

  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const fs::path a = dir_a() / "runs" / name, b = dir_b / "runs" / name;
    EXPECT_EQ(run_state(b), "done");
    for (const char* kind : {"model", "state"})
      EXPECT_TRUE(read_text(a / final_checkpoint(kind)) == read_text(b / final_checkpoint(kind)))
          << final_checkpoint(kind) << " differs from the uninterrupted sweep's";
    const json summary_a = read_json(a / "summary.json"), summary_b = read_json(b / "summary.json");
    EXPECT_EQ(summary_a["eval"], summary_b["eval"]);
    EXPECT_EQ(summary_a["ipmr"], summary_b["ipmr"]);
    EXPECT_EQ(summary_a["threads"], summary_b["threads"]);
    EXPECT_EQ(metrics_without_timing(a), metrics_without_timing(b)) << "metrics.jsonl has lost or repeated records";
    const std::string log = read_text(b / "train.log");
    if (finished_before.count(name)) {
      EXPECT_EQ(file_stamp(b / "summary.json"), summaries_before[name]) << "a finished run was trained again";
      EXPECT_FALSE(contains(log, "resuming")) << log;
    }
    if (resumable_at.count(name)) {
      EXPECT_TRUE(contains(log, "resuming from step " + std::to_string(resumable_at[name]))) << log;
    }
  }
}

TEST_F(SweepPlacementGrid, RerunOfAFinishedSweepSkipsEveryRunAndWritesNothing) {
  const auto before = tree_snapshot(dir_a());
  const Result rerun = run_sweep(sweep_file_, dir_a());
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  EXPECT_TRUE(contains(rerun.output, finished_line(12, 12, 12, 0))) << rerun.output;
  EXPECT_EQ(tree_snapshot(dir_a()), before);
}

// --pack: the same grid trained in packs of up to 5 runs (5, 5 and 2 here, each one process whose runs step two at a
// time) gives every run the bits and records of the one-process-per-run sweep, and the same report; the sweep's
// state reads the same (status, --status, a re-run that skips every run).
TEST_F(SweepPlacementGrid, PackedSweepGivesEveryRunTheBitsOfTheOneProcessPerRunSweep) {
  const fs::path packed = root_ / "packed";
  const Result dry = run_sweep(sweep_file_, packed, "--pack 5 --dry-run");
  EXPECT_TRUE(contains(dry.output, "12 runs, 2 at a time, 1 thread(s) each, in 3 pack(s) of up to 5 runs")) << dry.output;
  const Result r = run_sweep(sweep_file_, packed, "--pack 5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, finished_line(12, 12, 0, 0))) << r.output;
  for (const std::string& name : placement_run_names()) {
    SCOPED_TRACE(name);
    const fs::path run = packed / "runs" / name, alone = dir_a() / "runs" / name;
    EXPECT_EQ(run_state(run), "done");
    EXPECT_EQ(metrics_without_timing(run), metrics_without_timing(alone));
    for (const std::string kind : {"model", "state"})
      EXPECT_EQ(read_text(run / final_checkpoint(kind)), read_text(alone / final_checkpoint(kind))) << kind;
    EXPECT_EQ(read_text(run / "config.resolved.yaml"), read_text(alone / "config.resolved.yaml"));
  }
  EXPECT_EQ(read_json(packed / "runs" / "layer=L0__seed=0" / "status.json").value("pack", ""), "pack-layer=L0__seed=0");
  EXPECT_EQ(read_json(packed / "runs" / "layer=L3__seed=2" / "status.json").value("pack", ""), "pack-layer=L3__seed=1");
  const Result report_packed = run_canonlab("report " + packed.string() + " --out " + (root_ / "report_packed").string());
  const Result report_alone = run_canonlab("report " + dir_a().string() + " --out " + (root_ / "report_alone").string());
  ASSERT_EQ(report_packed.exit_code, 0) << report_packed.output;
  // Every line but the one naming the command and the directory.
  auto report_body = [](const fs::path& path) {
    std::string body;
    std::istringstream in(read_text(path));
    for (std::string line; std::getline(in, line);)
      if (!line.starts_with("Generated by `canonlab report")) body += line + "\n";
    return body;
  };
  EXPECT_EQ(report_body(root_ / "report_packed" / "report.md"), report_body(root_ / "report_alone" / "report.md"));
  EXPECT_TRUE(contains(report_body(root_ / "report_packed" / "report.md"), "| 0 |")) << "an empty report cannot differ";
  const Result status = run_canonlab("sweep --status " + packed.string());
  EXPECT_TRUE(contains(status.output, "12 done")) << status.output;
  const Result rerun = run_sweep(sweep_file_, packed, "--pack 5");
  EXPECT_TRUE(contains(rerun.output, finished_line(12, 12, 12, 0))) << rerun.output;
}

TEST_F(SweepPlacementGrid, DryRunListsTheRunDirectoriesAndWritesNothing) {
  const fs::path out = root_ / "dry";
  const Result r = run_sweep(sweep_file_, out, "--dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string expected;
  for (const auto& name : placement_run_names()) expected += out.string() + "/runs/" + name + "\n";
  expected += "12 runs, 2 at a time, 1 thread(s) each\n";
  EXPECT_EQ(r.output, expected);
  EXPECT_FALSE(fs::exists(out));
}

// ---------------------------------------------------------------------------------------------------------------
// End to end: failures, changed grids, locks, adoption

// The same with --pack 2: the failing run ends alone in its pack, recorded as a `train` child's failure would be.
TEST(SweepFailure, AFailedRunIsRecordedAndDoesNotStopTheOthers) {
  TempDir dir;
  const std::string file = write_sweep(dir, tiny_set() + "axes:\n  - key: train.lr\n    values: [1.0e-3, 1.0e+30]\n");
  for (const std::string packed : {"", "--pack 2"}) {
    SCOPED_TRACE(packed);
    const fs::path out = dir / (packed.empty() ? "out" : "out_packed");
    const Result r = run_sweep(file, out, packed);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(contains(r.output, finished_line(1, 2, 0, 1))) << r.output;
    EXPECT_TRUE(contains(r.output, "failed: lr=1.0e+30: error: training stopped")) << r.output;

    const fs::path good = out / "runs" / "lr=1.0e-3", bad = out / "runs" / "lr=1.0e+30";
    EXPECT_EQ(run_state(good), "done");
    EXPECT_TRUE(run_finished(good));
    const json status = read_json(bad / "status.json");
    EXPECT_EQ(status.value("state", ""), "failed");
    EXPECT_EQ(status.value("exit_code", -1), 2);
    EXPECT_EQ(status.value("pack", ""), packed.empty() ? "" : "pack-lr=1.0e-3");
    const std::string error = status.value("error", "");
    EXPECT_TRUE(contains(error, "training stopped") && contains(error, "non-finite")) << error;

    // Re-running keeps the finished run and tries the failed one again (which fails again).
    const Result again = run_sweep(file, out, packed);
    EXPECT_EQ(again.exit_code, 1) << again.output;
    EXPECT_TRUE(contains(again.output, finished_line(1, 2, 1, 1))) << again.output;
  }
}

// A run that recorded metrics but has no checkpoint to continue from (killed before its first one, or its checkpoints
// and summary removed) is trained afresh with `train --force`, which keeps the earlier files in RUN_DIR/superseded/
// (a plain `train` refuses a directory that holds a run: issue 25, F1).
TEST(SweepFailure, ARunWithMetricsButNoCheckpointIsTrainedAfreshAndItsFilesKept) {
  TempDir dir;
  const std::string file = write_sweep(dir, tiny_set() + "axes:\n  - key: seed\n    values: [0]\n");
  const fs::path out = dir / "out", run = out / "runs" / "seed=0";
  ASSERT_EQ(run_sweep(file, out).exit_code, 0);
  fs::remove_all(run / "checkpoints");
  fs::remove(run / "summary.json");
  const std::string metrics = read_text(run / "metrics.jsonl");

  const Result r = run_sweep(file, out);
  EXPECT_EQ(r.exit_code, 0) << r.output << read_text(run / "train.log");
  EXPECT_EQ(run_state(run), "done");
  EXPECT_TRUE(run_finished(run));
  EXPECT_TRUE(contains(read_text(run / "train.log"), "--force: moved the earlier run's metrics.jsonl, metrics.csv, "
                                                     "config.resolved.yaml, tb from '" + run.string() + "'"))
      << read_text(run / "train.log");
  ASSERT_TRUE(fs::is_directory(run / "superseded"));
  std::vector<fs::path> aside;
  for (const auto& e : fs::directory_iterator(run / "superseded")) aside.push_back(e.path());
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(read_text(aside[0] / "metrics.jsonl"), metrics);
}

// A stop signal to the sweep while a run trains: the trainer is stopped with a checkpoint after the step in progress
// (even one that was itself stopped, SIGSTOP, when the signal came), the run is recorded interrupted, and the sweep
// exits 128 + the signal's number as a shell reports it (SIGTERM 143, SIGINT 130, SIGHUP 129); run again, it
// resumes the run from that checkpoint. The trainer waits paused at step 5 (CANONLAB_PAUSE_AT) for the signal.
TEST(SweepSignal, EachStopSignalEndsTheSweepWith128PlusItsNumberAndTheRunResumes) {
  TempDir dir;
  const std::string sweep_file = write_sweep(dir, tiny_set() + "axes:\n  - key: seed\n    values: [0]\n");
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    SCOPED_TRACE(sigabbrev_np(sig));
    const fs::path out = dir / ("out_" + std::string(sigabbrev_np(sig)));
    const pid_t sweep = spawn_canonlab({"sweep", sweep_file, "--jobs", "1", "--out", out.string()}, out.string() + ".log",
                                       {"CANONLAB_PAUSE_AT=after-step:5"});
    ASSERT_GT(sweep, 0);
    const std::vector<pid_t> trainers = test_support::wait_for_stopped_processes((out / "runs").string());
    ASSERT_EQ(trainers.size(), 1u) << "the run never paused at step 5:\n" << read_text(out.string() + ".log");
    ::kill(sweep, sig);
    EXPECT_EQ(test_support::wait_exit_code(sweep), 128 + sig) << read_text(out.string() + ".log");
    const fs::path run = out / "runs" / "seed=0";
    EXPECT_EQ(run_state(run), "interrupted");
    EXPECT_EQ(checkpoint_step(run), 6) << "the trainer stops after the step in progress, with a checkpoint";
    EXPECT_TRUE(contains(read_text(run / "train.log"), "stopped by SIGTERM: checkpoint at step 6"))
        << read_text(run / "train.log");
    if (sig == SIGTERM) {
      const Result rerun = run_sweep(sweep_file, out);
      ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
      EXPECT_TRUE(contains(read_text(run / "train.log"), "resuming from step 6")) << read_text(run / "train.log");
      EXPECT_TRUE(run_finished(run));
    }
  }
}

// A stop signal to a sweep while a pack trains: every run of the pack stops after its step in progress with a
// checkpoint (run seed=0 was paused after step 5 and finishes step 6; seed=1 had step 5 to take), both are recorded
// interrupted, and the re-run resumes them to the bits of the sweep trained without packs. With --jobs 1 the pack
// steps its runs in turn, so which step each run stops at is fixed.
TEST(SweepPack, AStopSignalStopsEveryRunOfThePackWithACheckpointAndTheRerunResumesThem) {
  TempDir dir;
  const std::string file = write_sweep(dir, tiny_set() + "axes:\n  - key: seed\n    values: [0, 1]\n");
  const fs::path out = dir / "out", reference = dir / "reference";
  ASSERT_EQ(run_sweep(file, reference).exit_code, 0);
  const pid_t sweep = spawn_canonlab({"sweep", file, "--jobs", "1", "--pack", "2", "--out", out.string()},
                                     out.string() + ".log", {"CANONLAB_PAUSE_AT=after-step:5"});
  ASSERT_GT(sweep, 0);
  ASSERT_EQ(test_support::wait_for_stopped_processes((out / "runs").string()).size(), 1u)
      << "the pack never paused at step 5:\n" << read_text(out.string() + ".log");
  ::kill(sweep, SIGTERM);
  EXPECT_EQ(test_support::wait_exit_code(sweep), 128 + SIGTERM) << read_text(out.string() + ".log");
  EXPECT_EQ(run_state(out / "runs" / "seed=0"), "interrupted");
  EXPECT_EQ(run_state(out / "runs" / "seed=1"), "interrupted");
  EXPECT_EQ(checkpoint_step(out / "runs" / "seed=0"), 6);
  EXPECT_EQ(checkpoint_step(out / "runs" / "seed=1"), 5);
  const Result rerun = run_sweep(file, out, "--pack 2");
  ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  for (const std::string name : {"seed=0", "seed=1"}) {
    SCOPED_TRACE(name);
    const fs::path run = out / "runs" / name;
    EXPECT_TRUE(run_finished(run));
    EXPECT_EQ(metrics_without_timing(run), metrics_without_timing(reference / "runs" / name));
    EXPECT_EQ(read_text(run / final_checkpoint("model")), read_text(reference / "runs" / name / final_checkpoint("model")));
  }
}

// A pack's run whose run.yaml does not load, or that the machine (here train.max_memory_gb) cannot hold, fails alone:
// the others train, the report names each end, and the failed runs' train.log carry the error the sweep reads.
TEST(SweepPack, ARunThatCannotLoadOrFitFailsAloneAndItsPackMatesTrain) {
  TempDir dir;
  const fs::path good = dir / "good", broken = dir / "broken", huge = dir / "huge", report = dir / "report.json";
  for (const fs::path& d : {good, broken, huge}) fs::create_directories(d);
  const std::string run = "base: " + kBase + "\ntrain:\n  steps: 12\n  threads: 1\n  batch_size: 8\n  log_every: 4\n";
  write_text(good / "run.yaml", run);
  write_text(broken / "run.yaml", run + "  no_such_key: 1\n");
  write_text(huge / "run.yaml", run + "  max_memory_gb: 0.000001\n");
  const Result r = run_canonlab("train-pack " + good.string() + " " + broken.string() + " " + huge.string() +
                                " --width 1 --report " + report.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(read_json(good / "summary.json").value("steps", -1), 12) << r.output;
  const json ends = read_json(report);
  ASSERT_EQ(ends.size(), 3u) << ends.dump();
  EXPECT_EQ(ends[0].value("end", ""), "done");
  EXPECT_EQ(ends[0].value("steps_done", 0), 12);
  EXPECT_EQ(ends[1].value("end", ""), "failed");
  EXPECT_TRUE(contains(ends[1].value("error", ""), "train.no_such_key")) << ends[1].dump();
  EXPECT_EQ(ends[2].value("end", ""), "failed");
  EXPECT_TRUE(contains(ends[2].value("error", ""), "train.max_memory_gb")) << ends[2].dump();
  EXPECT_TRUE(contains(read_text(broken / "train.log"), "error: ")) << "the sweep reads a failed run's reason there";
  EXPECT_TRUE(contains(read_text(huge / "train.log"), "error: this run needs an estimated"));
}

TEST(SweepGridChange, AChangedGridIsRefusedUnlessForcedAndForceRedoesOnlyTheChangedRuns) {
  TempDir dir;
  auto lr_axis = [](const std::string& hi) {
    return "axes:\n  - key: train.lr\n    values: [1.0e-3, " + hi + "]\n    labels: [lo, hi]\n";
  };
  const std::string file = write_sweep(dir, tiny_set() + lr_axis("2.0e-3"));
  const fs::path out = dir / "out", lo = out / "runs" / "lr=lo", hi = out / "runs" / "lr=hi";
  ASSERT_EQ(run_sweep(file, out).exit_code, 0);
  const std::string manifest = read_text(out / "sweep.json");
  const std::string lo_summary = file_stamp(lo / "summary.json");

  write_sweep(dir, tiny_set(50) + lr_axis("2.0e-3"));  // a changed shared setting
  Result r = run_sweep(file, out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "'" + out.string() + "' holds a different sweep: run 'lr=lo': train.steps was 40, now 50"))
      << r.output;

  write_sweep(dir, tiny_set() + lr_axis("3.0e-3"));  // one axis value changed under the same label
  r = run_sweep(file, out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "holds a different sweep: run 'lr=hi': train.lr was 0.002, now 0.003")) << r.output;
  EXPECT_EQ(read_text(out / "sweep.json"), manifest) << "a refused sweep rewrote sweep.json";
  EXPECT_FALSE(fs::exists(out / "superseded"));

  r = run_sweep(file, out, "--force");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, finished_line(2, 2, 1, 0))) << r.output;
  EXPECT_EQ(file_stamp(lo / "summary.json"), lo_summary) << "the unchanged run was trained again";
  EXPECT_DOUBLE_EQ(load_config((hi / "run.yaml").string(), {}).train.lr, 3.0e-3);
  EXPECT_EQ(run_state(hi), "done");
  std::vector<fs::path> superseded;  // DIR/superseded/<time>/<run>: only the changed run, with its old files
  for (const auto& when : fs::directory_iterator(out / "superseded"))
    for (const auto& run : fs::directory_iterator(when.path())) superseded.push_back(run.path());
  ASSERT_EQ(superseded.size(), 1u);
  EXPECT_EQ(superseded[0].filename(), "lr=hi");
  EXPECT_DOUBLE_EQ(load_config((superseded[0] / "run.yaml").string(), {}).train.lr, 2.0e-3);
  EXPECT_TRUE(run_finished(superseded[0]));

  // The directory now holds the new grid: the same command without --force is accepted and skips both.
  r = run_sweep(file, out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, finished_line(2, 2, 2, 0))) << r.output;
}

TEST(SweepLock, ASecondSweepOnALockedDirectoryIsRefused) {
  TempDir dir;
  const std::string file = write_sweep(dir, tiny_set() + "axes:\n  - key: seed\n    values: [0]\n");
  const fs::path out = dir / "out";
  fs::create_directories(out);
  // The lock a running sweep holds; flock locks belong to the open file, so the child's own open conflicts.
  const int fd = ::open((out / ".sweep.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  Result r = run_sweep(file, out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "another canonlab sweep is already running in '" + out.string() + "'")) << r.output;
  EXPECT_FALSE(fs::exists(out / "sweep.json"));
  EXPECT_FALSE(fs::exists(out / "runs" / "seed=0"));

  ::close(fd);  // released: the same command now runs
  r = run_sweep(file, out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(run_state(out / "runs" / "seed=0"), "done");
}

// Trains `config` by hand into run_dir, the way a user would before turning their runs into a sweep.
void train_by_hand(const RunConfig& config, const fs::path& yaml_path, const fs::path& run_dir) {
  write_text(yaml_path, config_to_yaml(config));
  const Result r = run_canonlab("train " + yaml_path.string() + " --quiet --out " + run_dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

TEST(SweepAdoption, RunsWithoutSweepJsonAreAdoptedOnlyWithForceAndOnlyIfTheirConfigMatches) {
  TempDir dir;
  const std::string file = write_sweep(dir, tiny_set() + "axes:\n  - key: seed\n    values: [0, 1]\n");
  const std::vector<SweepRun> runs = expand_sweep(load_sweep_spec(file), 1);
  const fs::path out = dir / "out", seed0 = out / "runs" / "seed=0", seed1 = out / "runs" / "seed=1";
  train_by_hand(runs[0].config, dir / "hand0.yaml", seed0);
  RunConfig other = runs[1].config;
  other.train.steps = 2;
  train_by_hand(other, dir / "hand1.yaml", seed1);
  const std::string seed0_summary = file_stamp(seed0 / "summary.json");

  Result r = run_sweep(file, out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "has runs/ but no sweep.json")) << r.output;

  r = run_sweep(file, out, "--force");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "run directory '" + seed1.string() +
                                     "' was trained with another config than this grid's run 'seed=1'"))
      << r.output;

  fs::rename(seed1, dir / "moved-away");
  r = run_sweep(file, out, "--force");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, finished_line(2, 2, 1, 0))) << r.output;
  EXPECT_EQ(file_stamp(seed0 / "summary.json"), seed0_summary) << "the adopted run was trained again";
  EXPECT_EQ(run_state(seed0), "done");
  EXPECT_EQ(run_state(seed1), "done");
}

// A runs/ directory left by another sweep (its sweep.json lost or not copied) holds run.yaml files; adopting it
// with --force must still compare configs, or finished runs of another grid would be counted as this one's.
TEST(SweepAdoption, RunsLeftByAnotherSweepAreCheckedToo) {
  TempDir dir;
  const std::string file = write_sweep(dir, tiny_set() + "axes:\n  - key: seed\n    values: [0]\n");
  const fs::path out = dir / "out";
  ASSERT_EQ(run_sweep(file, out).exit_code, 0);
  fs::remove(out / "sweep.json");

  write_sweep(dir, tiny_set(kSteps, "  train.lr: 2.0e-3\n") + "axes:\n  - key: seed\n    values: [0]\n");
  const Result r = run_sweep(file, out, "--force");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "was trained with another config than this grid's run 'seed=0'")) << r.output;
}

// A sweep finished by an earlier canonlab, which lacked a key (model.canon.dynamic: removed here from sweep.json and
// from the run's config.resolved.yaml), is resumed by this one as finished, not retrained or refused.
TEST(SweepAdoption, RunsWrittenBeforeAKeyExistedStayFinished) {
  TempDir dir;
  const std::string file = write_sweep(dir, tiny_set() + "axes:\n  - key: seed\n    values: [0]\n");
  const fs::path out = dir / "out", run = out / "runs" / "seed=0";
  ASSERT_EQ(run_sweep(file, out).exit_code, 0);
  const std::string summary = file_stamp(run / "summary.json");
  json manifest = json::parse(read_text(out / "sweep.json"));
  for (json& r : manifest["runs"]) r["config"]["model"]["canon"].erase("dynamic");
  write_text(out / "sweep.json", manifest.dump(1) + "\n");
  std::string resolved = read_text(run / "config.resolved.yaml");
  const size_t at = resolved.find("    dynamic: 0\n");
  ASSERT_NE(at, std::string::npos) << resolved;
  write_text(run / "config.resolved.yaml", resolved.erase(at, std::string("    dynamic: 0\n").size()));

  const Result r = run_sweep(file, out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(file_stamp(run / "summary.json"), summary) << "the finished run was trained again";
  EXPECT_EQ(run_state(run), "done");
}

// Every study shipped in configs/sweeps/ and configs/text/sweeps/ and every paper grid in configs/paper/sweeps/ must
// stay loadable (each of its runs resolves) as the config schema evolves, and its report defaults (pivot, metric,
// compare) must plan as `canonlab report` plans them: a misspelt label would otherwise only fail once the study's
// hours of training were done.
TEST(SweepGrid, EveryShippedSweepFileExpands) {
  test_support::ensure_text_presets_data();
  int files = 0;
  for (const std::string folder : {"/configs/sweeps", "/configs/paper/sweeps", "/configs/text/sweeps"}) {
    for (const auto& entry : fs::directory_iterator(std::string(CANONLAB_SOURCE_DIR) + folder)) {
      if (entry.path().extension() != ".yaml") continue;
      SCOPED_TRACE(entry.path().string());
      const SweepSpec spec = load_sweep_spec(entry.path().string());
      const std::vector<SweepRun> runs = expand_sweep(spec, 1);
      EXPECT_FALSE(runs.empty());
      TempDir dir;  // the sweep's manifest alone: every run pending, as right after `canonlab sweep` starts
      write_text(dir.path() / "sweep.json", make_sweep_manifest(spec, runs).dump(1));
      EXPECT_NO_THROW(report::plan_report(report::with_sweep_column(report::load_sweep(dir.path())), {}));
      files++;
    }
  }
  EXPECT_GE(files, 21);
}

}  // namespace
}  // namespace canonlab
