#pragma once
// Which launcher started this process, from the environment it leaves, and the communicator that goes with it:
//   mpirun / mpiexec (Open MPI: OMPI_COMM_WORLD_SIZE; others: PMI_SIZE, PMIX_RANK)  -> MPI
//   srun --mpi=pmix (PMIX_RANK beside SLURM_STEP_NUM_TASKS)                         -> MPI
//   srun without an MPI plugin (SLURM_STEP_NUM_TASKS > 1 only)                      -> refused: the tasks could not
//                                                                                      find each other
//   torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)               -> NCCL (CUDA devices only)
//   nothing of that                                                                 -> one process
// One rank of a multi-process job is a data-parallel shard of one run (docs/cluster.md).
#include <functional>
#include <memory>
#include <string>

#include "engine/comm/communicator.h"

namespace canonlab {

enum class Launcher { single_process, mpi, srun_without_mpi, torchrun };

struct LaunchEnvironment {
  Launcher launcher = Launcher::single_process;
  int rank = 0, size = 1, local_rank = 0;  // as the launcher's variables say (MPI's own view is checked later)
  std::string description;                 // "mpirun, 2 ranks", "torchrun, rank 1 of 4"
};

using EnvironmentLookup = std::function<const char*(const char*)>;

// Reads the launcher variables; throws an Error naming the variable when one is malformed.
LaunchEnvironment detect_launch_environment(const EnvironmentLookup& lookup);
LaunchEnvironment detect_launch_environment();  // the process environment

// The communicator of this process for a run on `device` (train.device): SingleProcess when no launcher started
// several ranks; otherwise the backend the launcher and the device call for, with an error that says how to launch
// when this build or device cannot serve it.
std::unique_ptr<Communicator> make_communicator(const LaunchEnvironment& env, const std::string& device);

}  // namespace canonlab
