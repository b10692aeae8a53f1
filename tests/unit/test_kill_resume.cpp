// Fault injection on a whole training run: `canonlab train` is killed with SIGKILL at 30 pseudo-random moments
// (mid-step, mid-checkpoint, mid-metrics-write, during start-up) and resumed each time. The finished run must be
// bit-identical to an uninterrupted one (every metrics record's loss, every kept checkpoint file byte for byte),
// and nothing may be left behind: no temporary files of killed writers, no orphan checkpoint files.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kRunSettings = {
    "--set", "train.steps=240",           "--set", "train.checkpoint_every=3", "--set", "train.keep_checkpoints=3",
    "--set", "train.eval_every=40",       "--set", "train.log_every=1",        "--set", "train.threads=1",
    "--set", "model.d_model=32",          "--set", "model.n_layers=2",         "--set", "probe.n_sequences=16",
    "--quiet"};

// Starts `canonlab train` on dir (resuming when it holds a checkpoint) and returns its pid.
pid_t start_train(const fs::path& dir) {
  std::vector<std::string> args = {CANONLAB_BINARY, "train", std::string(CANONLAB_SOURCE_DIR) + "/configs/demo.yaml",
                                   "--out", dir.string()};
  args.insert(args.end(), kRunSettings.begin(), kRunSettings.end());
  if (fs::exists(dir / "checkpoints" / "latest.json")) args.push_back("--resume");
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

int wait_exit_code(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// metrics.jsonl without the wall-clock fields, one record per line.
std::vector<nlohmann::json> records(const fs::path& dir) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_text(dir / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    j.erase("tokens_per_s");
    j.erase("elapsed_s");
    out.push_back(j);
  }
  return out;
}

std::set<std::string> files_under(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) names.insert(fs::relative(e.path(), dir).string());
  return names;
}

}  // namespace

TEST(KillResume, ThirtyKillsAtRandomMomentsResumeBitExactlyAndLeaveNoOrphans) {
  const fs::path root = fs::temp_directory_path() / ("canonlab_kill_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const fs::path reference = root / "reference", killed = root / "killed";

  const auto started = std::chrono::steady_clock::now();
  ASSERT_EQ(wait_exit_code(start_train(reference)), 0);
  const double run_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  // Kill delays up to a twentieth of a whole run (start-up included), so 30 kills spread over the run and some
  // land during start-up and checkpoint loading.
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> delay(0.0, run_seconds / 20);
  int kills = 0, attempts = 0;
  for (; kills < 30 && attempts < 200; attempts++) {
    const pid_t pid = start_train(killed);
    std::this_thread::sleep_for(std::chrono::duration<double>(delay(rng)));
    ::kill(pid, SIGKILL);  // no effect if it already exited: its exit status then says so
    const int code = wait_exit_code(pid);
    if (code == -SIGKILL) {
      kills++;
      continue;
    }
    ASSERT_EQ(code, 0) << "a resumed run failed after " << kills << " kills";
    break;  // it finished before the kill
  }
  EXPECT_EQ(kills, 30) << "the run finished before 30 kills; make it longer";
  if (!fs::exists(killed / "summary.json")) ASSERT_EQ(wait_exit_code(start_train(killed)), 0);

  // Bit-exact: every loss, learning rate, gradient norm and eval metric of every step, and the kept checkpoints.
  const std::vector<nlohmann::json> a = records(reference), b = records(killed);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i++) EXPECT_EQ(a[i], b[i]) << "record " << i;
  const std::set<std::string> files = files_under(killed);
  EXPECT_EQ(files, files_under(reference)) << "orphan or missing files after " << kills << " kills";
  for (const std::string& f : files)
    if (f.starts_with("checkpoints/step_")) EXPECT_EQ(read_text(killed / f), read_text(reference / f)) << f;
  for (const std::string& f : files) EXPECT_EQ(f.find(".tmp."), std::string::npos) << f;
  fs::remove_all(root);
}
