#include "engine/comm/launch.h"

#include <cstdlib>
#include <optional>

#include "engine/comm/mpi_communicator.h"
#include "engine/error.h"
#include "io/strict_number.h"

namespace canonlab {

namespace {

std::optional<int> integer_variable(const EnvironmentLookup& lookup, const char* name, int min_value) {
  const char* text = lookup(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  const std::optional<int64_t> value = parse_integer<int64_t>(text);
  if (!value || *value < min_value || *value > (1 << 20))
    throw Error(std::string("environment variable ") + name + "='" + text + "' is not a whole number from " +
                std::to_string(min_value) + " to 1048576; it tells a rank its place in a multi-process job "
                "(set by mpirun, srun or torchrun)");
  return int(*value);
}

}  // namespace

LaunchEnvironment detect_launch_environment(const EnvironmentLookup& lookup) {
  LaunchEnvironment env;
  // Open MPI's mpirun; then the PMI/PMIx variables any MPI launcher or `srun --mpi=pmix|pmi2` sets.
  const std::optional<int> ompi_size = integer_variable(lookup, "OMPI_COMM_WORLD_SIZE", 1);
  const std::optional<int> pmix_rank = integer_variable(lookup, "PMIX_RANK", 0);
  const std::optional<int> pmi_size = integer_variable(lookup, "PMI_SIZE", 1);
  const std::optional<int> srun_tasks = integer_variable(lookup, "SLURM_STEP_NUM_TASKS", 1);
  const std::optional<int> world_size = integer_variable(lookup, "WORLD_SIZE", 1);
  if (ompi_size || pmix_rank || pmi_size) {
    env.launcher = Launcher::mpi;
    env.size = ompi_size ? *ompi_size : pmi_size ? *pmi_size : srun_tasks.value_or(1);
    env.rank = integer_variable(lookup, "OMPI_COMM_WORLD_RANK", 0).value_or(
        pmix_rank ? *pmix_rank : integer_variable(lookup, "PMI_RANK", 0).value_or(0));
    env.local_rank = integer_variable(lookup, "OMPI_COMM_WORLD_LOCAL_RANK", 0).value_or(
        integer_variable(lookup, "SLURM_LOCALID", 0).value_or(0));
    env.description = std::string(ompi_size ? "mpirun" : srun_tasks ? "srun" : "an MPI launcher") + ", " +
                      std::to_string(env.size) + " rank" + (env.size == 1 ? "" : "s");
    // A singleton MPI launch (mpirun -np 1) is an ordinary single process.
    if (env.size == 1) env.launcher = Launcher::single_process;
    return env;
  }
  if (srun_tasks && *srun_tasks > 1) {
    env.launcher = Launcher::srun_without_mpi;
    env.size = *srun_tasks;
    env.rank = integer_variable(lookup, "SLURM_PROCID", 0).value_or(0);
    env.description = "srun, " + std::to_string(env.size) + " tasks, no MPI plugin";
    return env;
  }
  if (world_size && *world_size > 1) {
    env.launcher = Launcher::torchrun;
    env.size = *world_size;
    env.rank = integer_variable(lookup, "RANK", 0).value_or(0);
    env.local_rank = integer_variable(lookup, "LOCAL_RANK", 0).value_or(0);
    if (env.rank >= env.size)
      throw Error("environment variable RANK=" + std::to_string(env.rank) + " is not below WORLD_SIZE=" +
                  std::to_string(env.size));
    env.description = "torchrun, rank " + std::to_string(env.rank) + " of " + std::to_string(env.size);
  }
  return env;
}

LaunchEnvironment detect_launch_environment() {
  return detect_launch_environment([](const char* name) { return std::getenv(name); });
}

std::unique_ptr<Communicator> make_communicator(const LaunchEnvironment& env, const std::string& device) {
  const bool cuda = device.rfind("cuda", 0) == 0;
  switch (env.launcher) {
    case Launcher::single_process:
      return std::make_unique<SingleProcess>();
    case Launcher::srun_without_mpi:
      throw Error("srun started " + std::to_string(env.size) +
                  " tasks but no MPI plugin connects them (SLURM_STEP_NUM_TASKS is set, PMIX_RANK and PMI_RANK are "
                  "not): run `srun --mpi=pmix canonlab train ...` (or set MpiDefault=pmix in slurm.conf), or start the "
                  "ranks with mpirun inside the allocation; docs/cluster.md");
    case Launcher::torchrun:
      throw Error(std::string("a torchrun-style launch (") + env.description +
                  ": WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT) connects ranks through NCCL, which serves CUDA devices; " +
                  (cuda ? "this build has no CUDA training backend yet (docs/gpu.md)"
                        : "train.device is '" + device + "'") +
                  ". CPU processes are launched with `mpirun -np N canonlab train ...` or `srun --mpi=pmix ...`");
    case Launcher::mpi:
      if (cuda)
        throw Error("train.device: '" + device + "' across " + std::to_string(env.size) +
                    " ranks uses the NCCL backend (one GPU per rank), and this build has no CUDA training backend yet "
                    "(docs/gpu.md); CPU ranks: train.device=cpu");
      // A build without MPI has a make_mpi_communicator that refuses, saying what to install.
      return make_mpi_communicator(env);
  }
  return std::make_unique<SingleProcess>();
}

}  // namespace canonlab
