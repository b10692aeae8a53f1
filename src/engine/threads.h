#pragma once
// Thread count is an explicit setting of each run (config `train.threads`), applied to OpenMP and so to
// OpenBLAS's OpenMP build. Results are bit-identical for a fixed thread count.
#include <omp.h>

namespace canonlab {

// Applies train.threads (n > 0; 0 leaves OpenMP's default of one thread per core). The first time a count is
// asked for, it is checked that that many threads can start here, and then OpenMP starts them: libgomp cannot
// report a thread it fails to create, it ends the process with its own message ("libgomp: Thread creation
// failed"), so a count the limits do not allow (1024 threads of 8 MiB stacks under `ulimit -v 6291456`) is a
// canonlab::Error naming train.threads, the value and the limits, before anything else runs.
void set_thread_count(int n);
inline int thread_count() { return omp_get_max_threads(); }
// The CPUs this process may run on (its affinity mask: a Slurm task's --cpus-per-task, a taskset).
inline int usable_cpu_count() { return omp_get_num_procs(); }

}  // namespace canonlab
