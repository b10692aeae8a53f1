// Regression tests for the reliability audit of issue 25, each reproducing a finding that used to lose data or change
// results without a word:
// F10 a dead writer's temp file stayed forever once its pid was in use again.

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>

#include "bad_inputs_support.h"
#include "cli_runner.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

using namespace canonlab;
using namespace canonlab::test_support;

// F10. A writer killed mid-checkpoint leaves <file>.tmp.<its pid>...; when a live process held that pid again at the
// next start (after a kill and a quick rerun), the file was kept forever. The reuse is simulated by giving the dead
// writer's file the pid of this (live) process: its start time in the name is still the dead writer's.
TEST(RunIntegrity, DeadWritersTempFileGoesEvenWhenItsPidLivesAgain) {
  const std::string dir = temp_dir("f10");
  const std::string path = dir + "/step_00000010.model.safetensors";
  // A live writer of this process: its temp file must stay.
  AtomicFileWriter live(dir + "/latest.json");
  live.write(std::as_bytes(std::span("{", 1)));
  const std::string live_owner = live.temp_path().substr(live.temp_path().rfind(".tmp.") + 5);

  std::string reused;  // the dead writer's temp file, renamed to carry this process's pid
  for (int attempt = 0; attempt < 100 && reused.empty(); attempt++) {
    std::fflush(nullptr);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      AtomicWriteOptions options;
      options.after_write = [](uint64_t) { ::raise(SIGKILL); };  // killed mid-write: no cleanup
      try {
        write_file_atomic(path, std::vector<std::byte>(1 << 16, std::byte{7}), options);
      } catch (...) {
      }
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer was not killed";
    const std::string prefix = path + ".tmp." + std::to_string(child);
    std::string left;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().string().starts_with(prefix)) left = e.path().string();
    ASSERT_FALSE(left.empty()) << "the killed writer left no temp file";
    const std::string owner = std::to_string(::getpid()) + left.substr(prefix.size());
    // A child forked within the clock tick this process started in has its start time: it names this process as
    // well as the writer, so try again a few ms later. (Names with a pid alone, as canonlab wrote them before, never
    // differ: this is the finding.)
    if (owner == live_owner && owner.find('.') != std::string::npos) {
      fs::remove(left);
      ::usleep(5000);
      continue;
    }
    reused = path + ".tmp." + owner;
    fs::rename(left, reused);
  }
  ASSERT_FALSE(reused.empty());
  EXPECT_EQ(remove_stale_temp_files(dir), 1);
  EXPECT_FALSE(fs::exists(reused)) << "the dead writer's temp file was kept";
  EXPECT_TRUE(fs::exists(live.temp_path())) << "the live writer's temp file was removed";
}
