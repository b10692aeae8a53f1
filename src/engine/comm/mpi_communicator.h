#pragma once
// The MPI backend of the communicator (Open MPI from Debian; any MPI-3 library works): CPU ranks started by
// mpirun, mpiexec or `srun --mpi=pmix`, host buffers. Built when CMake finds MPI (CANONLAB_WITH_MPI).
#include <memory>

#include "engine/comm/communicator.h"

namespace canonlab {

struct LaunchEnvironment;

// Initialises MPI (once per process; finalised when the communicator is destroyed) on a duplicate of
// MPI_COMM_WORLD whose errors come back as canonlab::Error naming the rank and the call. Checks that MPI sees the
// rank count the launcher announced (a `srun` without `--mpi=pmix` gives each task a world of its own).
std::unique_ptr<Communicator> make_mpi_communicator(const LaunchEnvironment& env);

}  // namespace canonlab
