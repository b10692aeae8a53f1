#include "engine/comm/mpi_communicator.h"

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/comm/launch.h"
#include "engine/error.h"

#ifdef CANONLAB_WITH_MPI
// The C API only: the deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

namespace canonlab {

namespace {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const LaunchEnvironment& env) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      // FUNNELED: only the thread that runs the training loop calls MPI; OpenMP workers never do.
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        throw Error("MPI_Init_thread failed (" + env.description + ")");
      owns_mpi_ = true;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string v(version, size_t(length));
    name_ = "MPI (" + v.substr(0, v.find_first_of(",\n")) + ")";
    if (size_ != env.size) {
      const std::string message = env.description + " announced " + std::to_string(env.size) +
                                  " ranks, but MPI sees " + std::to_string(size_) +
                                  (size_ == 1 ? ": the tasks did not find each other; with srun pass --mpi=pmix "
                                                "(`srun --mpi=list` shows the plugins)"
                                              : "");
      release();  // the destructor does not run for a constructor that throws
      throw Error(message);
    }
  }
  ~MpiCommunicator() override { release(); }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  // Reduce-scatter by all-to-all: rank r receives chunk r of every rank's buffer, folds them in rank order, and the
  // folded chunks are all-gathered. Every element is summed by exactly one rank, in the order 0, 1, ..., N-1.
  void sum_in_rank_order(float* data, size_t n) override {
    if (size_ == 1 || n == 0) return;
    const Chunk mine = chunk_of(n, size_, rank_);
    const size_t ranks = size_t(size_);
    std::vector<int> send_counts(ranks), send_offsets(ranks), recv_counts(ranks), recv_offsets(ranks);
    for (int r = 0; r < size_; r++) {
      const Chunk c = chunk_of(n, size_, r);
      CANONLAB_CHECK(c.end <= size_t(INT_MAX), "MPI sum: the buffer of " + std::to_string(n) +
                                                   " floats is too large for MPI's int counts");
      send_counts[size_t(r)] = int(c.size());
      send_offsets[size_t(r)] = int(c.begin);
      recv_counts[size_t(r)] = int(mine.size());
      recv_offsets[size_t(r)] = int(mine.size() * size_t(r));
    }
    received_.resize(mine.size() * size_t(size_));
    check(MPI_Alltoallv(data, send_counts.data(), send_offsets.data(), MPI_FLOAT, received_.data(), recv_counts.data(),
                        recv_offsets.data(), MPI_FLOAT, comm_),
          "MPI_Alltoallv (gradient reduce-scatter)");
    float* out = data + mine.begin;
    for (size_t i = 0; i < mine.size(); i++) out[i] = received_[i];
    for (int r = 1; r < size_; r++) {
      const float* from = received_.data() + mine.size() * size_t(r);
      for (size_t i = 0; i < mine.size(); i++) out[i] = out[i] + from[i];
    }
    for (int r = 0; r < size_; r++) {
      recv_counts[size_t(r)] = send_counts[size_t(r)];
      recv_offsets[size_t(r)] = send_offsets[size_t(r)];
    }
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, recv_counts.data(), recv_offsets.data(), MPI_FLOAT,
                         comm_),
          "MPI_Allgatherv (gradient all-gather)");
  }

  std::vector<double> all_gather(std::span<const double> mine) override {
    std::vector<double> all(mine.size() * size_t(size_));
    check(MPI_Allgather(mine.data(), int(mine.size()), MPI_DOUBLE, all.data(), int(mine.size()), MPI_DOUBLE, comm_),
          "MPI_Allgather");
    return all;
  }
  std::vector<uint64_t> all_gather(std::span<const uint64_t> mine) override {
    std::vector<uint64_t> all(mine.size() * size_t(size_));
    check(MPI_Allgather(mine.data(), int(mine.size()), MPI_UINT64_T, all.data(), int(mine.size()), MPI_UINT64_T,
                        comm_),
          "MPI_Allgather");
    return all;
  }
  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }
  [[noreturn]] void abort(int exit_code) override {
    std::fflush(nullptr);
    MPI_Abort(comm_, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; this is for the compiler
  }

 private:
  void release() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_mpi_ && !finalized) MPI_Finalize();
    owns_mpi_ = false;
  }
  void check(int code, const char* what) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw Error(std::string(what) + " failed on rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " +
                std::string(text, size_t(length)) + " (another rank may have died; the launcher's message names it)");
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  bool owns_mpi_ = false;
  std::string name_;
  std::vector<float> received_;  // N chunks of this rank's part, reused every step
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const LaunchEnvironment& env) {
  return std::make_unique<MpiCommunicator>(env);
}

}  // namespace canonlab

#else  // built without MPI

namespace canonlab {
std::unique_ptr<Communicator> make_mpi_communicator(const LaunchEnvironment& env) {
  throw Error(env.description + " started this process, but this canonlab was built without MPI: install Debian's "
              "libopenmpi-dev (scripts/install-deps.sh) and rebuild");
}
}  // namespace canonlab

#endif
