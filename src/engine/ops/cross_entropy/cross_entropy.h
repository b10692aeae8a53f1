#pragma once
// Softmax cross entropy per row. Naive and fast are the same code: rows are independent, so threading over
// them changes nothing numerically. The log-sum-exp is max-shifted and summed in double; backward recomputes
// it rather than saving an (N) buffer, since one extra pass over a row is cheap next to the logits GEMM.
#include <cmath>
#include <cstddef>
#include <string>

#include "engine/error.h"

namespace canonlab {

namespace cross_entropy_detail {
template <class T>
double row_logsumexp(const T* row, int V) {
  T mx = row[0];
  for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
  double sum = 0;
  for (int v = 0; v < V; v++) sum += double(std::exp(row[v] - mx));
  return double(mx) + std::log(sum);
}

// Below this many logits the fork/join costs more than the rows.
constexpr size_t kParallelMin = 1 << 15;

inline void check_targets(const int* targets, int N, int V) {
  for (int n = 0; n < N; n++)
    CANONLAB_CHECK(targets[n] >= 0 && targets[n] < V,
                   "cross_entropy: target " + std::to_string(targets[n]) + " outside the vocabulary [0, " +
                       std::to_string(V) + ")");
}
}  // namespace cross_entropy_detail

// losses: (N) written, −log softmax(logits[n])[targets[n]]; logits: (N, V); targets: (N), each in [0, V)
template <class T>
void cross_entropy_forward(T* losses, const T* logits, const int* targets, int N, int V) {
  cross_entropy_detail::check_targets(targets, N, V);
#pragma omp parallel for schedule(static) if ((size_t)N * V >= cross_entropy_detail::kParallelMin)
  for (int n = 0; n < N; n++) {
    const T* row = logits + (size_t)n * V;
    losses[n] = T(cross_entropy_detail::row_logsumexp(row, V) - double(row[targets[n]]));
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
    const double lse = cross_entropy_detail::row_logsumexp(row, V);
    const double dl = dlosses[n];
    for (int v = 0; v < V; v++) drow[v] = T(std::exp(double(row[v]) - lse) * dl);
    drow[targets[n]] -= T(dl);
  }
}

}  // namespace canonlab
