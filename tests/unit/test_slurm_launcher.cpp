// The Slurm launcher without a Slurm: the sbatch script for given options (array range, throttle, runs per task,
// resources, quoting), the sweep file's slurm: section and its errors, flags over the file, squeue's answer mapped
// to runs, the status of every run read from its directory, and the array-task worker (`canonlab sweep-task`)
// training like the local launcher. tests/slurm/test_slurm_launcher.py runs the launcher on a real cluster.
#include <gtest/gtest.h>

#include "cli_runner.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "engine/error.h"
#include "sweep/manifest.h"
#include "sweep/runner.h"
#include "sweep/slurm_queue.h"
#include "sweep/slurm_script.h"
#include "sweep/sweep_spec.h"
#include "sweep/sweep_status.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kBase = std::string(CANONLAB_SOURCE_DIR) + "/configs/demo.yaml";

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("canonlab_slurm_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    if (!::testing::Test::HasFailure()) fs::remove_all(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

const std::string kTinySet =
    "set:\n"
    "  model.d_model: 32\n"
    "  model.n_layers: 4\n"
    "  model.n_heads: 2\n"
    "  train.steps: 40\n"
    "  train.eval_every: 20\n"
    "  train.checkpoint_every: 10\n"
    "  train.log_every: 1\n"
    "  train.batch_size: 16\n"
    "  probe.n_sequences: 32\n";
const std::string kSeedAxis = "axes:\n  - key: seed\n    values: [0, 1]\n";

std::string write_sweep(const TempDir& dir, const std::string& body, const std::string& file = "sweep.yaml") {
  const fs::path path = dir / file;
  write_text(path, "base: " + kBase + "\n" + body);
  return path.string();
}

// The script's "#SBATCH ..." lines, in order.
std::vector<std::string> directives(const std::string& script) {
  std::vector<std::string> lines;
  std::istringstream in(script);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("#SBATCH ")) lines.push_back(line.substr(8));
  return lines;
}

std::string last_line(const std::string& script) {
  std::string text = script;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text.substr(text.rfind('\n') + 1);
}

SlurmScriptInputs inputs(int tasks, SlurmSettings settings = {}) {
  SlurmScriptInputs in;
  in.sweep_name = "ks";
  in.executable = "/opt/canonlab/bin/canonlab";
  in.submission_file = "/shared/sweeps/ks/slurm/submit-3.json";
  in.log_dir = "/shared/sweeps/ks/slurm/logs";
  in.tasks = tasks;
  in.runs = tasks * settings.runs_per_task;
  in.cpus_per_task = 4;
  in.settings = settings;
  return in;
}

// ---------------------------------------------------------------------------------------------------------------
// The sbatch script

TEST(SlurmScript, DefaultsAskForTheWarningSignalRequeueAndAppendedLogs) {
  const std::string script = make_sbatch_script(inputs(6));
  EXPECT_TRUE(script.starts_with("#!/bin/bash\n")) << script;
  EXPECT_EQ(directives(script), (std::vector<std::string>{
                                    "--job-name=canonlab-ks",
                                    "--array=0-5",
                                    "--ntasks=1",
                                    "--cpus-per-task=4",
                                    "--signal=B:USR1@120",
                                    "--requeue",
                                    "--open-mode=append",
                                    "--output=\"/shared/sweeps/ks/slurm/logs/%A_%a.out\"",
                                }));
  EXPECT_EQ(last_line(script),
            "exec '/opt/canonlab/bin/canonlab' sweep-task '/shared/sweeps/ks/slurm/submit-3.json' \"$SLURM_ARRAY_TASK_ID\"");
  // sbatch stops reading directives at the first command: every #SBATCH line must come before the exec.
  EXPECT_LT(script.rfind("#SBATCH"), script.find("\nexec "));
}

TEST(SlurmScript, ResourcesThrottleAndExtraLinesAppearAsGiven) {
  SlurmSettings s;
  s.partition = "gpu";
  s.account = "proj42";
  s.qos = "high";
  s.time = "4:00:00";
  s.mem = "8G";
  s.gpus_per_run = 2;
  s.runs_per_task = 3;
  s.max_running = 5;
  s.signal_lead = 300;
  s.sbatch = {"--constraint=a100", "--exclusive"};
  const std::string script = make_sbatch_script(inputs(4, s));
  EXPECT_EQ(directives(script), (std::vector<std::string>{
                                    "--job-name=canonlab-ks",
                                    "--array=0-3%5",
                                    "--ntasks=1",
                                    "--cpus-per-task=4",
                                    "--partition=gpu",
                                    "--account=proj42",
                                    "--qos=high",
                                    "--time=4:00:00",
                                    "--mem=8G",
                                    "--gres=gpu:2",
                                    "--signal=B:USR1@300",
                                    "--requeue",
                                    "--open-mode=append",
                                    "--output=\"/shared/sweeps/ks/slurm/logs/%A_%a.out\"",
                                    "--constraint=a100",
                                    "--exclusive",
                                }));
  EXPECT_TRUE(contains(script, "12 run(s) in 4 array task(s), 3 per task")) << script;
}

TEST(SlurmScript, PathsWithSpacesQuotesAndPercentSignsAreQuoted) {
  SlurmScriptInputs in = inputs(1);
  in.executable = "/home/o'neil/canonlab build/canonlab";
  in.submission_file = "/home/o'neil/my sweeps/100% ks/slurm/submit-1.json";
  in.log_dir = "/home/o'neil/my sweeps/100% ks/slurm/logs";
  const std::string script = make_sbatch_script(in);
  // sbatch takes a double-quoted value with spaces; '%' is Slurm's pattern character, so a literal one is %%.
  EXPECT_TRUE(contains(script, "#SBATCH --output=\"/home/o'neil/my sweeps/100%% ks/slurm/logs/%A_%a.out\"\n")) << script;
  EXPECT_EQ(last_line(script), "exec '/home/o'\\''neil/canonlab build/canonlab' sweep-task "
                               "'/home/o'\\''neil/my sweeps/100% ks/slurm/submit-1.json' \"$SLURM_ARRAY_TASK_ID\"");
  EXPECT_EQ(shell_quote("a'b c"), "'a'\\''b c'");
}

TEST(SlurmScript, APathAnSbatchLineCannotCarryIsRefused) {
  SlurmScriptInputs in = inputs(1);
  in.log_dir = "/shared/say \"hi\"/slurm/logs";
  try {
    make_sbatch_script(in);
    ADD_FAILURE() << "a '\"' in the log directory was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "'/shared/say \"hi\"/slurm/logs' contains a '\"'")) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The slurm: section of a sweep file

TEST(SlurmSection, ValuesAreReadAndResourcesAreNotPartOfTheGrid) {
  TempDir dir;
  const std::string with = write_sweep(dir, kTinySet + kSeedAxis +
                                                "slurm:\n"
                                                "  partition: gpu\n"
                                                "  account: proj42\n"
                                                "  qos: normal\n"
                                                "  time: \"1-12:00\"\n"
                                                "  mem: 16G\n"
                                                "  cpus_per_run: 4\n"
                                                "  gpus_per_run: 1\n"
                                                "  runs_per_task: 3\n"
                                                "  max_running: 8\n"
                                                "  signal_lead: 300\n"
                                                "  sbatch: [\"--constraint=a100\", \"--exclusive\"]\n");
  const SweepSpec spec = load_sweep_spec(with);
  const SlurmSettings& s = spec.slurm;
  EXPECT_EQ(s.partition, "gpu");
  EXPECT_EQ(s.account, "proj42");
  EXPECT_EQ(s.qos, "normal");
  EXPECT_EQ(s.time, "1-12:00");
  EXPECT_EQ(s.mem, "16G");
  EXPECT_EQ(s.cpus_per_run, 4);
  EXPECT_EQ(s.gpus_per_run, 1);
  EXPECT_EQ(s.runs_per_task, 3);
  EXPECT_EQ(s.max_running, 8);
  EXPECT_EQ(s.signal_lead, 300);
  EXPECT_EQ(s.sbatch, (std::vector<std::string>{"--constraint=a100", "--exclusive"}));

  const SweepSpec plain = load_sweep_spec(write_sweep(dir, kTinySet + kSeedAxis, "plain.yaml"));
  EXPECT_EQ(plain.slurm.signal_lead, 120);  // the defaults
  EXPECT_EQ(plain.slurm.runs_per_task, 1);
  EXPECT_TRUE(plain.slurm.partition.empty());
  // Changing resources never makes a sweep directory "a different sweep".
  const std::optional<std::string> diff =
      sweep_difference(make_sweep_manifest(plain, expand_sweep(plain, 1)), make_sweep_manifest(spec, expand_sweep(spec, 1)));
  EXPECT_FALSE(diff.has_value()) << *diff;
}

void expect_slurm_error(const TempDir& dir, const std::string& section, const std::vector<std::string>& parts) {
  const std::string path = write_sweep(dir, kTinySet + kSeedAxis + section, "bad.yaml");
  try {
    load_sweep_spec(path);
    ADD_FAILURE() << "no error for:\n" << section;
  } catch (const Error& e) {
    for (const std::string& part : parts) {
      const std::string expected = part.starts_with(":") ? path + part : part;
      EXPECT_TRUE(contains(e.what(), expected)) << "missing '" << expected << "' in: " << e.what();
    }
  }
}

TEST(SlurmSection, ErrorsNameTheFileLineKeyValueAndWhatIsAllowed) {
  TempDir dir;
  // The section starts at line 15 of bad.yaml (base, 10 set lines, 3 axis lines).
  expect_slurm_error(dir, "slurm:\n  time: 1h\n",
                     {":16: slurm.time: '1h' is not a Slurm time; allowed: minutes, minutes:seconds, hours:minutes:seconds"});
  expect_slurm_error(dir, "slurm:\n  partition: gpu\n  mem: 8 GB\n",
                     {":17: slurm.mem: '8 GB' is not a Slurm memory size; allowed: a whole number with an optional unit"});
  expect_slurm_error(dir, "slurm:\n  runs_per_task: 0\n",
                     {":16: slurm.runs_per_task: '0' is not allowed; allowed: a whole number from 1 to 100000"});
  expect_slurm_error(dir, "slurm:\n  signal_lead: 2m\n", {":16: slurm.signal_lead: '2m' is not allowed; allowed: a whole number from 0 to 65535"});
  expect_slurm_error(dir, "slurm:\n  gpus_per_run: 1.5\n", {"slurm.gpus_per_run: '1.5' is not allowed"});
  expect_slurm_error(dir, "slurm:\n  partition: \"gpu; rm\"\n", {"slurm.partition: 'gpu; rm' is not a Slurm name; allowed: letters"});
  expect_slurm_error(dir, "slurm:\n  sbatch:\n    - --exclusive\n    - \"#SBATCH --mem=1G\"\n",
                     {":18: slurm.sbatch: '#SBATCH --mem=1G' is not an sbatch option; allowed: one option per line"});
  expect_slurm_error(dir, "slurm:\n  cpus: 4\n",
                     {":16: slurm.cpus: unknown key 'cpus'; allowed: partition, account, qos, time, mem, cpus_per_run"});
  expect_slurm_error(dir, "slurm:\n  time: [1, 2]\n", {":16: slurm.time: expected a single value"});
  expect_slurm_error(dir, "slurm: gpu\n", {":15: slurm: expected a mapping with any of partition, account"});
}

// ---------------------------------------------------------------------------------------------------------------
// The command line, without a cluster (--dry-run never calls sbatch; no earlier submission, so no squeue)

using Result = test_support::CliResult;

TEST(SlurmCli, DryRunPrintsTheScriptWithFlagsOverTheFileAndWritesNothing) {
  TempDir dir;
  const std::string file = write_sweep(dir, kTinySet + kSeedAxis +
                                                "slurm:\n  partition: cpu\n  time: \"2:00:00\"\n  cpus_per_run: 3\n"
                                                "  sbatch: [\"--exclusive\"]\n");
  const fs::path out = dir / "out dir";
  const Result r = test_support::run_cli("sweep " + file + " --launcher slurm --dry-run --out '" + out.string() +
                                         "' --partition gpu --runs-per-task 2 --sbatch=--nice=10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "#SBATCH --partition=gpu\n")) << r.output;       // the flag wins
  EXPECT_TRUE(contains(r.output, "#SBATCH --time=2:00:00\n")) << r.output;        // the file's value stays
  EXPECT_TRUE(contains(r.output, "#SBATCH --cpus-per-task=3\n")) << r.output;     // slurm.cpus_per_run
  EXPECT_TRUE(contains(r.output, "#SBATCH --array=0-0\n")) << r.output;           // 2 runs, 2 per task
  EXPECT_TRUE(contains(r.output, "#SBATCH --exclusive\n#SBATCH --nice=10\n")) << r.output;  // file's lines, then the flag's
  EXPECT_TRUE(contains(r.output, "sweep-task '" + (out / "slurm" / "submit-1.json").string() + "'")) << r.output;
  EXPECT_TRUE(contains(r.output, "would submit 2 run(s) in 1 array task(s)")) << r.output;
  EXPECT_FALSE(fs::exists(out));

  // --threads-per-run (alias --cpus-per-run) wins over slurm.cpus_per_run, and is train.threads.
  const Result t = test_support::run_cli("sweep " + file + " --launcher slurm --dry-run --out '" + out.string() +
                                         "' --cpus-per-run 2");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_TRUE(contains(t.output, "#SBATCH --cpus-per-task=2\n")) << t.output;
}

// --pack N: each array task is one pack of up to N compatible runs (one train-pack process), with a CPU per run.
TEST(SlurmCli, PackedDryRunMakesOneArrayTaskPerPackWithACpuPerRun) {
  TempDir dir;
  const std::string file = write_sweep(dir, kTinySet + "axes:\n  - key: seed\n    values: [0, 1, 2, 3, 4]\n");
  const Result r = test_support::run_cli("sweep " + file + " --launcher slurm --dry-run --out " +
                                         (dir / "out").string() + " --pack 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "#SBATCH --array=0-1\n")) << r.output;  // 5 runs: packs of 3 and 2
  EXPECT_TRUE(contains(r.output, "#SBATCH --cpus-per-task=3\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "5 run(s) in 2 array task(s), 3 per task")) << r.output;
  for (const std::string bad : {"--pack auto", "--pack 0", "--pack 2 --runs-per-task 2"}) {
    const Result b = test_support::run_cli("sweep " + file + " --launcher slurm --dry-run " + bad);
    EXPECT_EQ(b.exit_code, 2) << bad << ": " << b.output;
    EXPECT_TRUE(contains(b.output, "error: --pack")) << bad << ": " << b.output;
  }
  // The submission file keeps the flag, so the array task knows to train its runs as one pack.
  SlurmSubmission s{3, "/s", "41", 3, {{{"a", 40}, {"b", 40}}}, true};
  write_submission((dir / "submit-3.json").string(), s);
  EXPECT_TRUE(read_submission((dir / "submit-3.json").string()).pack);
  s.pack = false;
  write_submission((dir / "submit-3.json").string(), s);
  EXPECT_FALSE(read_submission((dir / "submit-3.json").string()).pack);
}

TEST(SlurmCli, MisusedFlagsAreErrorsThatNameTheFlag) {
  TempDir dir;
  const std::string file = write_sweep(dir, kTinySet + kSeedAxis);
  Result r = test_support::run_cli("sweep " + file + " --launcher slurm --dry-run --time 90min");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "error: --time: '90min' is not a Slurm time; allowed:")) << r.output;
  r = test_support::run_cli("sweep " + file + " --dry-run --partition gpu");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "error: --partition is for --launcher slurm")) << r.output;
  r = test_support::run_cli("sweep " + file + " --launcher pbs --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "error: --launcher: 'pbs' is not a launcher; allowed: local, slurm")) << r.output;
  r = test_support::run_cli("sweep " + file + " --launcher slurm --jobs 4 --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--jobs is for the local launcher")) << r.output;
  r = test_support::run_cli("sweep --status " + (dir / "nowhere").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "is not a sweep directory: it has no sweep.json")) << r.output;
}

// ---------------------------------------------------------------------------------------------------------------
// squeue's answer and the status of every run

TEST(SlurmQueue, SqueueLinesMapToTheRunsOfEachSubmissionsTasks) {
  const SlurmQueue queue = parse_squeue_output("41_0 RUNNING\n41_2 PENDING\n  \n57_1 COMPLETING\n99_0 RUNNING\n");
  EXPECT_EQ(queue, (SlurmQueue{{"41_0", "RUNNING"}, {"41_2", "PENDING"}, {"57_1", "COMPLETING"}, {"99_0", "RUNNING"}}));
  SlurmSubmission first{1, "/s", "41", 2, {{{"a", 40}, {"b", 40}}, {{"c", 40}, {"d", 40}}, {{"e", 40}}}};
  SlurmSubmission second{2, "/s", "57", 1, {{{"c", 40}}, {{"d", 40}}}};
  const auto runs = queued_runs({first, second}, queue);
  ASSERT_EQ(runs.size(), 4u);  // a, b (41_0), d (57_1 wins over 41_1, which squeue no longer lists), e (41_2)
  EXPECT_EQ(runs.at("a").task_id, "41_0");
  EXPECT_EQ(runs.at("b").state, "RUNNING");
  EXPECT_EQ(runs.at("d").task_id, "57_1");
  EXPECT_EQ(runs.at("e").state, "PENDING");
  EXPECT_FALSE(runs.count("c"));
  EXPECT_TRUE(is_running_state("COMPLETING"));
  EXPECT_FALSE(is_running_state("PENDING"));
  EXPECT_FALSE(is_running_state("REQUEUE_HOLD"));
}

TEST(SweepStatusRules, EachCombinationOfDiskStatusAndQueueHasOneAnswer) {
  auto classify = [](RunDiskState disk, const std::string& state, bool slurm, std::optional<std::string> queued,
                     bool queue_known, bool lock = false) {
    RunEvidence e;
    e.disk = disk;
    e.state = state;
    e.slurm = slurm;
    e.queue_known = queue_known;
    e.trainer_holds_lock = lock;
    if (queued) e.queued = QueuedRun{"7_0", *queued};
    return classify_run(e);
  };
  using D = RunDiskState;
  EXPECT_EQ(classify(D::finished, "running", true, "COMPLETING", true), RunStatus::done);
  EXPECT_EQ(classify(D::resumable, "running", true, "RUNNING", true), RunStatus::running);
  EXPECT_EQ(classify(D::resumable, "interrupted", true, "PENDING", true), RunStatus::pending);  // requeued
  EXPECT_EQ(classify(D::fresh, "", false, "PENDING", true), RunStatus::pending);                // submitted
  EXPECT_EQ(classify(D::resumable, "running", true, std::nullopt, true), RunStatus::stopped);   // job gone
  EXPECT_EQ(classify(D::resumable, "running", true, std::nullopt, false), RunStatus::running);  // squeue unknown
  EXPECT_EQ(classify(D::resumable, "interrupted", true, std::nullopt, true), RunStatus::stopped);
  EXPECT_EQ(classify(D::resumable, "", false, std::nullopt, true), RunStatus::stopped);
  EXPECT_EQ(classify(D::resumable, "failed", true, std::nullopt, true), RunStatus::failed);
  EXPECT_EQ(classify(D::fresh, "failed", false, "PENDING", true), RunStatus::pending);  // resubmitted
  EXPECT_EQ(classify(D::resumable, "running", false, std::nullopt, false, /*lock=*/true), RunStatus::running);
  EXPECT_EQ(classify(D::resumable, "running", false, std::nullopt, false, /*lock=*/false), RunStatus::stopped);
  EXPECT_EQ(classify(D::fresh, "", false, std::nullopt, true), RunStatus::not_started);
}

// A sweep directory made by hand, one run in each state; the status must read each from its files.
class SweepStatusFromDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string file = write_sweep(dir_, kTinySet + "axes:\n  - key: seed\n    values: [0, 1, 2, 3, 4, 5, 6, 7]\n");
    const SweepSpec spec = load_sweep_spec(file);
    runs_ = expand_sweep(spec, 1);
    sweep_ = (dir_ / "sweep").string();
    fs::create_directories(sweep_);
    prepare_sweep_directory(sweep_, spec, runs_, false);
    auto run = [&](int seed) { return fs::path(sweep_) / "runs" / ("seed=" + std::to_string(seed)); };
    auto status = [&](int seed, const json& j) { write_text(run(seed) / "status.json", j.dump()); };
    auto checkpoint = [&](int seed, int step) {  // the pointer `canonlab train` writes
      char name[32];
      std::snprintf(name, sizeof name, "step_%08d", step);
      write_text(run(seed) / "checkpoints" / "latest.json",
                 json{{"step", step}, {"model", std::string(name) + ".model.safetensors"},
                      {"state", std::string(name) + ".state.safetensors"}}.dump());
    };
    write_text(run(0) / "summary.json", json{{"steps", 40}}.dump());  // done
    status(0, {{"state", "done"}});
    status(1, {{"state", "running"}, {"slurm_job", "41_0"}, {"slurm_restarts", 2}});  // running in Slurm
    checkpoint(1, 20);
    write_text(run(1) / "metrics.jsonl", "{\"step\": 24, \"loss\": 1}\n{\"step\": 25, \"lo");
    status(2, {{"state", "running"}, {"slurm_job", "41_1"}});  // its job is gone: stopped
    checkpoint(2, 10);
    status(3, {{"state", "failed"}, {"error", "error: training stopped at step 7: non-finite loss"}, {"slurm_job", "41_2"}});
    status(4, {{"state", "interrupted"}, {"slurm_job", "41_3"}});  // requeued, waiting
    checkpoint(4, 30);
    status(5, {{"state", "running"}});  // a local run whose trainer holds its lock
    lock_fd_ = ::open((run(5) / ".train.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_EQ(::flock(lock_fd_, LOCK_EX | LOCK_NB), 0);
    // seed=6: nothing on disk, pending in the queue; seed=7: nothing at all.
    write_submission(submission_path(sweep_, 1),
                     {1, sweep_, "41", 1, {{{"seed=1", 40}}, {{"seed=2", 40}}, {{"seed=3", 40}}, {{"seed=4", 40}}, {{"seed=6", 40}}}});
  }
  void TearDown() override {
    if (lock_fd_ >= 0) ::close(lock_fd_);
  }

  TempDir dir_;
  std::vector<SweepRun> runs_;
  std::string sweep_;
  int lock_fd_ = -1;
};

TEST_F(SweepStatusFromDisk, EveryRunIsReadFromItsDirectoryAndTheQueue) {
  const SlurmQueue queue = {{"41_0", "RUNNING"}, {"41_3", "PENDING"}, {"41_4", "PENDING"}, {"12_0", "RUNNING"}};
  const SweepStatus status = read_sweep_status(sweep_, queue, "");
  ASSERT_EQ(status.runs.size(), 8u);
  const std::vector<RunStatus> expected = {RunStatus::done,   RunStatus::running, RunStatus::stopped, RunStatus::failed,
                                           RunStatus::pending, RunStatus::running, RunStatus::pending, RunStatus::not_started};
  for (size_t i = 0; i < expected.size(); i++)
    EXPECT_EQ(run_status_name(status.runs[i].status), std::string(run_status_name(expected[i]))) << status.runs[i].name;
  EXPECT_EQ(status.runs[1].step, 24);  // the last complete metrics record
  EXPECT_EQ(status.runs[1].detail, "job 41_0, 2 Slurm restart(s)");
  EXPECT_EQ(status.runs[2].step, 10);
  EXPECT_EQ(status.runs[2].detail, "resumes from step 10");
  EXPECT_TRUE(contains(status.runs[3].detail, "non-finite loss"));
  EXPECT_EQ(status.runs[4].detail, "job 41_3 PENDING");
  EXPECT_EQ(status.runs[5].detail, "local");
  const std::string text = format_sweep_status(status);
  EXPECT_TRUE(contains(text, "8 runs: 1 done, 2 running, 2 pending, 1 stopped, 1 failed, 1 not started\n")) << text;
  EXPECT_TRUE(contains(text, "  stopped     seed=2")) << text;

  // The local run's trainer is gone: its lock went with it.
  ::close(lock_fd_);
  lock_fd_ = -1;
  EXPECT_EQ(read_sweep_status(sweep_, queue, "").runs[5].status, RunStatus::stopped);
}

TEST_F(SweepStatusFromDisk, WithoutSqueueSubmittedRunsShowWhatTheirStatusJsonSays) {
  const SweepStatus status = read_sweep_status(sweep_, std::nullopt, "squeue cannot be run");
  EXPECT_EQ(status.runs[1].status, RunStatus::running);
  EXPECT_EQ(status.runs[2].status, RunStatus::running);  // no squeue: it may be running
  EXPECT_EQ(status.runs[2].detail, "job 41_1 (status.json; squeue unknown)");
  EXPECT_EQ(status.runs[4].status, RunStatus::stopped);
  EXPECT_EQ(status.runs[6].status, RunStatus::not_started);
  EXPECT_TRUE(contains(format_sweep_status(status), "note: squeue cannot be run\n"));
}

// ---------------------------------------------------------------------------------------------------------------
// The array-task worker, outside Slurm: it must train exactly what the local launcher trains.

std::string final_checkpoint(const std::string& kind) { return "checkpoints/step_00000040." + kind + ".safetensors"; }

TEST(SweepTask, TrainsItsRunsOneAfterAnotherLikeTheLocalLauncher) {
  TempDir dir;
  const std::string file = write_sweep(dir, kTinySet + kSeedAxis);
  const Result local = test_support::run_cli("sweep " + file + " --jobs 1 --out " + (dir / "local").string());
  ASSERT_EQ(local.exit_code, 0) << local.output;

  // What a submission leaves behind: the sweep directory, each run's run.yaml, submit-1.json with one task of 2.
  const SweepSpec spec = load_sweep_spec(file);
  const std::vector<SweepRun> runs = expand_sweep(spec, 1);
  const std::string sweep = (dir / "slurm sweep").string();
  fs::create_directories(sweep);
  prepare_sweep_directory(sweep, spec, runs, false);
  for (const SweepRun& run : runs) write_text(fs::path(sweep) / "runs" / run.name / "run.yaml", config_to_yaml(run.config));
  write_submission(submission_path(sweep, 1), {1, sweep, "77", 2, {{{"seed=0", 40}, {"seed=1", 40}}}});

  const std::string task = "sweep-task '" + submission_path(sweep, 1) + "' ";
  Result r = test_support::run_cli(task + "0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "seed=0: starting")) << r.output;
  for (const SweepRun& run : runs) {
    SCOPED_TRACE(run.name);
    const fs::path a = dir / "local" / "runs" / run.name, b = fs::path(sweep) / "runs" / run.name;
    for (const char* kind : {"model", "state"})
      EXPECT_TRUE(read_text(a / final_checkpoint(kind)) == read_text(b / final_checkpoint(kind))) << final_checkpoint(kind);
    EXPECT_EQ(json::parse(read_text(b / "status.json")).value("state", ""), "done");
  }

  // Run again: both are finished and skipped, nothing is trained.
  r = test_support::run_cli(task + "0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "seed=0: already finished") && contains(r.output, "seed=1: already finished")) << r.output;

  r = test_support::run_cli(task + "1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "error: task 1 is not in '" + submission_path(sweep, 1) + "', which has tasks 0-0")) << r.output;
}

}  // namespace
}  // namespace canonlab
