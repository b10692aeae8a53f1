// Data-parallel training and gradient accumulation without a launcher: how a batch is split, that micro-batches
// fold their gradients left in order (the bits N MPI ranks must reproduce; tests/mpi/ checks the ranks themselves),
// that the split changes only the last bits of a run, and which launcher a process was started by. The graceful stop
// on SIGUSR1 / SIGTERM that Slurm's time-limit warning and scancel send is tested in test_stop_signals.cpp.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "run_records.h"
#include "config/config.h"
#include "engine/comm/launch.h"
#include "engine/comm/tcp_bootstrap.h"
#include "train/step.h"
#include "train/trainer.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;

RunConfig demo_config(std::vector<std::string> extra) {
  std::vector<std::string> sets = {"train.steps=12", "train.batch_size=8", "train.threads=1", "model.d_model=32",
                                   "model.n_layers=2", "train.log_every=1", "train.eval_every=0",
                                   "train.checkpoint_every=0", "probe.n_sequences=8"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return load_config(std::string(CANONLAB_SOURCE_DIR) + "/configs/demo.yaml", sets);
}

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("canonlab_dp_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void run(const RunConfig& cfg, const std::string& dir, bool resume = false) {
  TrainOptions o;
  o.out_dir = dir;
  o.resume = resume;
  o.progress = false;
  o.probe_at_end = false;
  train(cfg, o);
}

TEST(DataParallel, BatchSplitCoversTheGlobalBatchInRankThenMicroBatchOrder) {
  RunConfig cfg = demo_config({"train.batch_size=12", "train.micro_batches=2"});
  std::vector<int> rows_seen;
  for (int rank = 0; rank < 3; rank++) {
    const BatchSplit s = split_batch(cfg.train, 3, rank);
    EXPECT_EQ(s.rows, 2);
    for (int m = 0; m < s.micro_batches; m++)
      for (int i = 0; i < s.rows; i++) rows_seen.push_back(s.first_row(m) + i);
  }
  std::vector<int> expected(12);
  for (int i = 0; i < 12; i++) expected[size_t(i)] = i;
  EXPECT_EQ(rows_seen, expected);
  try {
    split_batch(cfg.train, 5, 0);
    FAIL() << "12 sequences over 5 ranks x 2 micro-batches must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.batch_size: 12"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("multiple of 10"), std::string::npos) << e.what();
  }
}

TEST(DataParallel, MicroBatchesThatDoNotDivideTheBatchAreRefusedNamingTheKey) {
  try {
    demo_config({"train.batch_size=8", "train.micro_batches=3"});
    FAIL() << "micro_batches=3 of a batch of 8 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.micro_batches: 3 does not divide train.batch_size = 8"),
              std::string::npos)
        << e.what();
  }
}

// The accumulated gradient is exactly g(rows 0..3) + g(rows 4..7), each divided by the whole batch's mask sum:
// recomputed here by hand from two plain forward_backward calls.
TEST(DataParallel, MicroBatchGradientsFoldLeftInOrderWithTheGlobalDenominator) {
  RunConfig cfg = demo_config({"train.micro_batches=2", "train.grad_clip=0"});  // the step's gradients, unclipped
  auto model = build_model(cfg);
  auto task = make_task(cfg.task);
  Arena arena(model->backend().memory());
  ActivationTrace<float> trace;
  const BatchSplit split = split_batch(cfg.train, 1, 0);
  std::vector<Batch> micro(2);
  for (int m = 0; m < 2; m++) {
    micro[size_t(m)].resize(split.rows, task->seq_len());
    for (int i = 0; i < split.rows; i++) task->sample(micro[size_t(m)], i, 5, 3, uint64_t(split.first_row(m) + i));
  }
  SingleProcess single;
  AdamWState opt;
  const DeviceBuffer<uint8_t> decay = device_decay_mask(model->params(), cfg.train.decay_on);
  const std::vector<float> initial = model->params().host_values();
  TrainStep step(*model, arena, trace, opt, decay, cfg.train, single, split, task->seq_len());
  const double weight = loss_mask_weight(micro[0]) + loss_mask_weight(micro[1]);
  step.enqueue(micro, weight, 3, 0.0);  // the learning rate 0 keeps the weights (no decay at lr 0)
  const TrainStep::Scalars sc = step.read();
  struct {
    double loss;
    int stop_signal;
  } r{sc.loss(), 0};
  const std::vector<float> accumulated = model->params().host_grads();
  ASSERT_EQ(model->params().host_values(), initial);

  const double l0 = forward_backward(*model, arena, trace, micro[0], 3, weight).loss;
  const std::vector<float> g0 = model->params().host_grads();
  const double l1 = forward_backward(*model, arena, trace, micro[1], 3, weight).loss;
  const std::vector<float> g1 = model->params().host_grads();
  ASSERT_EQ(accumulated.size(), g0.size());
  size_t differing = 0;
  for (size_t i = 0; i < g0.size(); i++) differing += accumulated[i] != g0[i] + g1[i];
  EXPECT_EQ(differing, 0u) << "of " << g0.size() << " gradient elements";
  EXPECT_EQ(r.loss, (0.0 + l0) + l1);
  EXPECT_EQ(r.stop_signal, 0);

  // And it is the gradient of the whole batch, up to rounding: one pass over all 8 rows.
  Batch whole;
  whole.resize(cfg.train.batch_size, task->seq_len());
  for (int b = 0; b < cfg.train.batch_size; b++) task->sample(whole, b, 5, 3, uint64_t(b));
  const double l = forward_backward(*model, arena, trace, whole, 3).loss;
  const std::vector<float> g = model->params().host_grads();
  EXPECT_NEAR(r.loss, l, 1e-6 * l);
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < g.size(); i++) {
    max_diff = std::max(max_diff, double(std::abs(g[i] - accumulated[i])));
    max_abs = std::max(max_abs, double(std::abs(g[i])));
  }
  EXPECT_LT(max_diff, 1e-5 * max_abs);
  EXPECT_GT(max_abs, 0);
}

// One micro-batch is today's step; two change only the last bits of a run: the losses agree to 1e-4 and the runs
// are not the same bits (the fold really happens). (tests/mpi/ resumes a 2-rank job on one process.)
TEST(DataParallel, TwoMicroBatchesTrackOne) {
  const std::string one = temp_dir("one"), two = temp_dir("two");
  run(demo_config({}), one);
  run(demo_config({"train.micro_batches=2"}), two);
  const auto a = test_support::metrics_records(one), b = test_support::metrics_records(two);
  ASSERT_EQ(a.size(), b.size());
  bool any_difference = false;
  for (size_t i = 0; i < a.size(); i++) {
    if (a[i]["split"] != "train") continue;
    const double la = a[i]["loss"], lb = b[i]["loss"];
    EXPECT_NEAR(la, lb, 1e-4) << "step " << a[i]["step"];
    any_difference |= la != lb;
  }
  EXPECT_TRUE(any_difference) << "two micro-batches gave the bits of one: no accumulation happened";
  for (const std::string& d : {one, two}) fs::remove_all(d);
}

TEST(DataParallel, LaunchersAreRecognisedFromTheirVariables) {
  auto detect = [](std::map<std::string, std::string> vars) {
    return detect_launch_environment([vars](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
  };
  EXPECT_EQ(detect({}).launcher, Launcher::single_process);
  LaunchEnvironment mpirun =
      detect({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}});
  EXPECT_EQ(mpirun.launcher, Launcher::mpi);
  EXPECT_EQ(mpirun.size, 4);
  EXPECT_EQ(mpirun.rank, 2);
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}}).launcher, Launcher::single_process);
  LaunchEnvironment srun = detect({{"PMIX_RANK", "1"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_LOCALID", "1"}});
  EXPECT_EQ(srun.launcher, Launcher::mpi);
  EXPECT_EQ(srun.size, 2);
  EXPECT_EQ(srun.rank, 1);
  EXPECT_EQ(detect({{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "1"}}).launcher, Launcher::srun_without_mpi);
  EXPECT_EQ(detect({{"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_PROCID", "0"}}).launcher, Launcher::single_process);
  LaunchEnvironment torchrun = detect({{"WORLD_SIZE", "8"}, {"RANK", "5"}, {"LOCAL_RANK", "1"},
                                       {"MASTER_ADDR", "node1"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(torchrun.launcher, Launcher::torchrun);
  EXPECT_EQ(torchrun.rank, 5);
  EXPECT_EQ(torchrun.local_rank, 1);
  try {
    detect({{"OMPI_COMM_WORLD_SIZE", "two"}});
    FAIL() << "a malformed launcher variable must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_SIZE='two'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(detect({{"WORLD_SIZE", "2"}, {"RANK", "2"}}), Error);
}

TEST(DataParallel, LaunchesThatCannotWorkAreRefusedSayingHowToLaunch) {
  LaunchEnvironment srun;
  srun.launcher = Launcher::srun_without_mpi;
  srun.size = 2;
  try {
    make_communicator(srun, "cpu");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("srun --mpi=pmix"), std::string::npos) << e.what();
  }
  LaunchEnvironment torchrun;
  torchrun.launcher = Launcher::torchrun;
  torchrun.size = 2;
  try {
    make_communicator(torchrun, "cpu");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun -np N"), std::string::npos) << e.what();
  }
  EXPECT_EQ(make_communicator(LaunchEnvironment{}, "cpu")->size(), 1);
}

TEST(DataParallel, ChunksPartitionAnyBufferAndTheReferenceFoldsInRankOrder) {
  for (size_t n : {0, 1, 2, 3, 7, 1000, 1001}) {
    for (int ranks : {1, 2, 3, 4}) {
      size_t next = 0;
      for (int r = 0; r < ranks; r++) {
        const Chunk c = chunk_of(n, ranks, r);
        EXPECT_EQ(c.begin, next);
        EXPECT_LE(c.size(), n / size_t(ranks) + 1);
        next = c.end;
      }
      EXPECT_EQ(next, n);
    }
  }
  // 1 + 1e8 - 1e8: the bracketing matters in float ((1 + 1e8) - 1e8 = 0, 1 + (1e8 - 1e8) = 1), and the reference
  // folds left in rank order.
  const std::vector<float> sum = sum_in_rank_order_reference({{1.f}, {1e8f}, {-1e8f}});
  EXPECT_EQ(sum[0], 0.f);
  EXPECT_EQ(1.f + (1e8f + -1e8f), 1.f);
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// torchrun's rendezvous, as the NCCL backend uses it to share its unique id: rank 0 hands its blob to ranks 1 and
// 2 (separate processes, started before rank 0 listens); a rank that finds nobody stops with host:port named.
TEST(DataParallel, RendezvousHandsRankZerosBlobToEveryRank) {
  const int port = free_port();
  std::vector<std::byte> blob(128);
  for (size_t i = 0; i < blob.size(); i++) blob[i] = std::byte(i * 37 + 5);
  std::vector<pid_t> peers;
  for (int r = 1; r <= 2; r++) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        const auto got = share_from_rank_zero({"localhost", port, r, 3, 20}, {});
        ::_exit(got == blob ? 0 : 1);
      } catch (...) {
        ::_exit(2);
      }
    }
    peers.push_back(pid);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the peers retry until rank 0 listens
  EXPECT_EQ(share_from_rank_zero({"localhost", port, 0, 3, 20}, blob), blob);
  for (pid_t pid : peers) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a peer did not receive rank 0's blob";
  }
  try {
    share_from_rank_zero({"127.0.0.1", free_port(), 1, 2, 0.5}, {});
    FAIL() << "a rank that cannot reach rank 0 must stop";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not reach rank 0 at 127.0.0.1:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace canonlab
