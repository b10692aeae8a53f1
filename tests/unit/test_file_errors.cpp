// Regression tests for issue 25: file system errors on paths a user named are canonlab::Errors that name the file
// or flag the path came from (never a bare std::filesystem::filesystem_error or std::ios_base::failure), a NUL
// in a name or path is refused instead of cutting the path short, and a thread count the process limits cannot
// start is reported by canonlab rather than by libgomp.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "expect_error.h"
#include "config/config.h"
#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/paths.h"
#include "sweep/sweep_spec.h"

using namespace canonlab;
namespace fs = std::filesystem;
using canonlab::test_support::error_of;
using canonlab::test_support::run_cli;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("canonlab_fserr_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string source_path(const std::string& relative) { return std::string(CANONLAB_SOURCE_DIR) + "/" + relative; }

// A sweep directory as `canonlab sweep` leaves it, with one finished run "seed=0" (status and summary written).
fs::path finished_sweep_dir(const std::string& name) {
  const fs::path dir = temp_dir(name);
  const nlohmann::json manifest = {
      {"format", "canonlab-sweep/1"},
      {"name", name},
      {"report", {{"metric", "final_train_loss"}}},
      {"axes", {{{"name", "seed"}, {"keys", {"train.seed"}}, {"labels", {"0"}}}}},
      {"runs", {{{"name", "seed=0"}, {"dir", "runs/seed=0"}, {"axes", {{"seed", "0"}}}, {"config", {{"train", {{"steps", 5}}}}}}}}};
  write_text(dir / "sweep.json", manifest.dump(1));
  fs::create_directories(dir / "runs" / "seed=0");
  write_text(dir / "runs" / "seed=0" / "status.json", R"({"state":"done","exit_code":0})");
  write_text(dir / "runs" / "seed=0" / "summary.json", R"({"steps":5,"final_train_loss":2.0})");
  return dir;
}

}  // namespace

// F6: a sweep whose base: is longer than a file name may be made std::filesystem::status throw out of
// load_sweep_spec; the CLI printed "error: status '<path>': File name too long" without the sweep file or the key.
TEST(FileErrors, ALongSweepBaseNamesTheSweepFileAndTheKey) {
  const fs::path dir = temp_dir("long_base");
  const std::string base = std::string(300, 'x') + ".yaml";
  write_text(dir / "sweep.yaml", "axes:\n  - key: seed\n    values: [0]\nbase: " + base + "\n");
  const std::string message = error_of([&] { load_sweep_spec((dir / "sweep.yaml").string()); });
  EXPECT_CONTAINS(message, (dir / "sweep.yaml").string() + ":4: base: cannot read config file '" + dir.string());
  EXPECT_CONTAINS(message, "...xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.yaml (");  // shortened, with its length
  EXPECT_CONTAINS(message, "': File name too long");
  const test_support::CliResult r = run_cli("sweep " + (dir / "sweep.yaml").string() + " --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "error: " + (dir / "sweep.yaml").string() + ":4: base: cannot read config file '");
}

// F4: a run's status.json replaced by a directory made `canonlab report` fail with "basic_filebuf::underflow error
// reading the file: Is a directory" and exit 1, naming no file; `sweep --status` failed the same way.
TEST(FileErrors, ARunFileThatIsADirectoryIsNamed) {
  const fs::path dir = finished_sweep_dir("status_dir");
  const fs::path status = dir / "runs" / "seed=0" / "status.json";
  ASSERT_EQ(run_cli("report " + dir.string()).exit_code, 0);
  fs::remove(status);
  fs::create_directory(status);
  for (const std::string& command : {"report " + dir.string(), "sweep --status " + dir.string()}) {
    const test_support::CliResult r = run_cli(command);
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "error: cannot read run status '" + status.string() + "': it is a directory");
  }
  // The same for the run's other files, and for what is missing: that is still "not written yet".
  fs::remove(status);
  write_text(status, R"({"state":"done","exit_code":0})");
  fs::create_directory(dir / "runs" / "seed=0" / "metrics.jsonl");
  test_support::CliResult r = run_cli("report " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "cannot read run metrics '" + (dir / "runs/seed=0/metrics.jsonl").string() +
                                "': it is a directory, not a regular file");
  EXPECT_EQ(read_text_if_exists((dir / "absent.json").string()), std::nullopt);
  EXPECT_EQ(read_text_if_exists((dir / "runs/seed=1/status.json").string()), std::nullopt);
  EXPECT_CONTAINS(error_of([&] { read_text_if_exists(dir.string(), "sweep manifest"); }),
                  "cannot read sweep manifest '" + dir.string() + "': it is a directory");
}

// F5: a NUL in an axis name passed the parser; the run directories were then cut short at the NUL, so every run's
// status.json was runs/<prefix>, a directory, and `canonlab report` failed as in F4. The name is refused now.
TEST(FileErrors, ANulInAnAxisNameIsRefused) {
  const fs::path dir = temp_dir("nul_axis");
  write_text(dir / "base.yaml", "train: {steps: 3}\n");
  write_text(dir / "sweep.yaml", "base: base.yaml\naxes:\n  - name: \"se\\0ed\"\n    key: seed\n    values: [0, 1]\n");
  const std::string message = error_of([&] { load_sweep_spec((dir / "sweep.yaml").string()); });
  EXPECT_CONTAINS(message, (dir / "sweep.yaml").string() + ":3: axis name 'se\\x00ed' must be non-empty without");
  EXPECT_CONTAINS(message, "control characters");
  const test_support::CliResult r = run_cli("sweep " + (dir / "sweep.yaml").string() + " --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "axis name 'se\\x00ed'");
}

// A NUL in a path made the system call act on the path up to the NUL: `base: "demo.yaml\0x"` loaded demo.yaml,
// and a data path loaded the file its prefix names. Such paths are refused, naming the file and key.
TEST(FileErrors, ANulInAPathIsRefused) {
  const fs::path dir = temp_dir("nul_path");
  write_text(dir / "demo.yaml", "train: {steps: 3}\n");
  write_text(dir / "config.yaml", "base: \"demo.yaml\\0x\"\n");
  EXPECT_CONTAINS(error_of([&] { load_config((dir / "config.yaml").string(), {}); }),
                  (dir / "config.yaml").string() + ": base: cannot read config file '" + (dir / "demo.yaml").string() +
                      "\\x00x': the path contains a NUL character");
  write_text(dir / "sweep.yaml", "base: \"demo.yaml\\0x\"\naxes:\n  - {key: seed, values: [0]}\n");
  EXPECT_CONTAINS(error_of([&] { load_sweep_spec((dir / "sweep.yaml").string()); }),
                  ":1: base: cannot read config file '" + (dir / "demo.yaml").string() + "\\x00x': the path contains");
  const std::string grammar = source_path("data/physicslm4/lano-cfg/cfg3f.json");
  EXPECT_CONTAINS(error_of([&] {
                    config_from_yaml_string("task: {name: lano, lano: {grammar: \"" + grammar + "\\0x\"}}");
                  }),
                  "cannot read grammar file '" + grammar + "\\x00x': the path contains a NUL character");
}

// `--tokens /dev/zero` was reported as "does not exist"; a path that is there but not a regular file is described.
TEST(FileErrors, ATokenFileThatIsNotARegularFileIsDescribed) {
  const fs::path dir = temp_dir("tokens");
  const std::string dump = "debug-dump " + source_path("configs/demo.yaml") + " --out " + (dir / "dump").string();
  test_support::CliResult r = run_cli(dump + " --tokens /dev/zero");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "--tokens: cannot read token file '/dev/zero': it is a character device, not a regular file");
  r = run_cli(dump + " --tokens " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "'" + dir.string() + "': it is a directory, not a regular file");
  r = run_cli(dump + " --tokens " + (dir / "absent.txt").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "'" + (dir / "absent.txt").string() + "': no such file or directory");
  EXPECT_FALSE(fs::exists(dir / "dump")) << "nothing is written before the batch is read";
}

// F7: train.threads = 1024 (the allowed maximum) under `ulimit -v 6291456` ended in libgomp's "Thread creation
// failed", exit 1. 1024 stacks of 8 MiB need 8 GiB of the 6 GiB address space; canonlab says so, exit 2.
TEST(FileErrors, AThreadCountTheLimitsCannotStartIsNamed) {
  const fs::path dir = temp_dir("threads");
  const std::string command = "ulimit -S -s 8192 && ulimit -S -v 6291456 && exec env -u OMP_STACKSIZE -u GOMP_STACKSIZE " +
                              std::string(CANONLAB_BINARY) + " train " + source_path("configs/demo.yaml") +
                              " --set train.threads=1024 --set train.steps=1 --quiet --out " + (dir / "run").string() +
                              " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) output.append(buf, n);
  const int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 2) << output;
  EXPECT_CONTAINS(output, "error: train.threads: 1024 threads cannot run here: only ");
  EXPECT_CONTAINS(output, "Each reserves a stack of 8 MiB (OMP_STACKSIZE, else ulimit -s), 8.0 GiB for 1024; this "
                          "process may map at most 6.0 GiB (ulimit -v)");
  EXPECT_CONTAINS(output, "; allowed here: train.threads below ");
  EXPECT_EQ(output.find("libgomp"), std::string::npos) << output;
}

// Output directories that cannot be made are named with their flag (they used to reach the CLI as bare
// filesystem_errors, or as "cannot create '<dir>'" without the flag).
TEST(FileErrors, OutputDirectoriesThatCannotBeMadeNameTheirFlag) {
  const fs::path dir = finished_sweep_dir("out_dirs");
  write_text(dir / "a-file", "x");
  test_support::CliResult r = run_cli("report " + dir.string() + " --out " + (dir / "a-file").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "cannot create the report directory (--out, default SWEEP_DIR/report) '" +
                                (dir / "a-file").string() + "': it is a regular file, not a directory");
  write_text(dir / "sweep.yaml", "base: " + source_path("configs/demo.yaml") + "\naxes:\n  - {key: seed, values: [0]}\n");
  const std::string long_out = (dir / std::string(300, 'o')).string();
  r = run_cli("sweep " + (dir / "sweep.yaml").string() + " --out " + long_out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "error: sweep directory (--out): cannot create '" + dir.string());
  EXPECT_CONTAINS(r.output, "': File name too long");
  r = run_cli("data show " + std::string(300, 'c'));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "error: TASK|CONFIG: cannot read config file 'ccccc");
}

TEST(FileErrors, PathsInMessagesArePrintable) {
  EXPECT_EQ(printable_path("a\nb\x01"), "a\\x0ab\\x01");
  EXPECT_EQ(printable_path(std::string("a\0b", 3)), "a\\x00b");
  const std::string long_path = "/" + std::string(150, 'a') + "/" + std::string(150, 'b');
  EXPECT_EQ(printable_path(long_path), "/" + std::string(99, 'a') + "..." + std::string(50, 'b') + " (302 bytes)");
  // A cut never splits a UTF-8 character.
  std::string utf8;
  for (int i = 0; i < 120; i++) utf8 += "\xc3\xa9";
  const std::string shown = printable_path(utf8);
  EXPECT_EQ(shown.substr(0, 100), utf8.substr(0, 100));
  EXPECT_EQ(shown.substr(100, 3), "...");
}
