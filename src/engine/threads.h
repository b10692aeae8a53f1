#pragma once
// Thread count is an explicit setting of each run (config `train.threads`), applied to OpenMP and so to
// OpenBLAS's OpenMP build. Results are bit-identical for a fixed thread count.
#include <omp.h>

namespace canonlab {

inline void set_thread_count(int n) {
  if (n > 0) omp_set_num_threads(n);
}
inline int thread_count() { return omp_get_max_threads(); }

}  // namespace canonlab
