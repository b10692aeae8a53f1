#pragma once
// Softmax cross entropy per row. Naive and fast are the same code: rows are independent, so threading over
// them changes nothing numerically. The log-sum-exp is max-shifted, with vectorised exponentials (vec_exp)
// summed in double; backward recomputes it rather than saving an (N) buffer, since one more pass over a row
// is cheap next to the logits GEMM.
#include <cmath>
#include <cstddef>
#include <string>

#include "engine/error.h"
#include "engine/ops/vec_math.h"

namespace canonlab {

namespace cross_entropy_detail {
// Row softmax statistics: max and Σ exp(x − max) (in double).
template <class T>
struct RowStats {
  T max;
  double sum;
};
template <class T>
RowStats<T> row_stats(const T* row, int V) {
  const T mx = vec_max(row, V);
  return {mx, vec_sum_exp(row, V, mx)};
}

// Below this many logits the fork/join costs more than the rows.
constexpr size_t kParallelMin = 1 << 15;

inline void check_targets(const int* targets, int N, int V) {
  for (int n = 0; n < N; n++)
    CANONLAB_CHECK(targets[n] >= 0 && targets[n] < V, "cross_entropy: target " + std::to_string(targets[n]) +
                                                          " outside the vocabulary [0, " + std::to_string(V) + ")");
}
}  // namespace cross_entropy_detail

// losses: (N) written, −log softmax(logits[n])[targets[n]]; logits: (N, V); targets: (N), each in [0, V)
template <class T>
void cross_entropy_forward(T* losses, const T* logits, const int* targets, int N, int V) {
  cross_entropy_detail::check_targets(targets, N, V);
#pragma omp parallel for schedule(static) if ((size_t)N * V >= cross_entropy_detail::kParallelMin)
  for (int n = 0; n < N; n++) {
    const T* row = logits + (size_t)n * V;
    const auto st = cross_entropy_detail::row_stats(row, V);
    losses[n] = T(double(st.max) + std::log(st.sum) - double(row[targets[n]]));
  }
}

// dlogits: (N, V) written, (softmax(logits[n]) − onehot(targets[n])) · dlosses[n]
template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const int* targets, const T* dlosses, int N, int V) {
  cross_entropy_detail::check_targets(targets, N, V);
#pragma omp parallel for schedule(static) if ((size_t)N * V >= cross_entropy_detail::kParallelMin)
  for (int n = 0; n < N; n++) {
    const T* row = logits + (size_t)n * V;
    T* drow = dlogits + (size_t)n * V;
    const auto st = cross_entropy_detail::row_stats(row, V);
    const T scale = T(double(dlosses[n]) / st.sum);
    for (int v = 0; v < V; v++) drow[v] = vec_exp(row[v] - st.max) * scale;
    drow[targets[n]] -= dlosses[n];
  }
}

}  // namespace canonlab
