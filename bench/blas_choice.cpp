// OpenBLAS (OpenMP build) against oneDNN's dnnl_sgemm on the GEMMs a training step actually runs: a linear
// layer over N = B·T rows with IN = 128 and OUT in {128, 384, 512}, forward (Y = X W^T) and the two backward
// products (dX = dY W, dW += dY^T X), on 1 and 2 threads. Both libraries use libgomp, so
// omp_set_num_threads drives both. Not part of the build; see docs/blas-choice.md for the command line.
//
// Each case is timed as the best of 7 trials per library (each trial repeats the GEMM for >= 50 ms, trials
// alternate between the libraries): the minimum is the least disturbed by whatever else shares the machine.
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <utility>
#include <vector>
#include "bench_data.h"

namespace {

struct Gemm {
  char ta, tb;
  int M, N, K, lda, ldb, ldc;
  float beta;
};

void run_openblas(const Gemm& g, const float* A, const float* B, float* C) {
  cblas_sgemm(CblasRowMajor, g.ta == 'T' ? CblasTrans : CblasNoTrans, g.tb == 'T' ? CblasTrans : CblasNoTrans, g.M, g.N,
              g.K, 1.0f, A, g.lda, B, g.ldb, g.beta, C, g.ldc);
}

void run_onednn(const Gemm& g, const float* A, const float* B, float* C) {
  // dnnl_sgemm takes row-major operands, like cblas with CblasRowMajor
  dnnl_status_t st = dnnl_sgemm(g.ta, g.tb, g.M, g.N, g.K, 1.0f, A, g.lda, B, g.ldb, g.beta, C, g.ldc);
  if (st != dnnl_success) {
    std::fprintf(stderr, "dnnl_sgemm failed: %d\n", int(st));
    std::exit(1);
  }
}

// Best time per call of a and of b. Trials alternate between the two so that both see the same background load.
std::pair<double, double> best_seconds(const std::function<void()>& a, const std::function<void()>& b) {
  using clock = std::chrono::steady_clock;
  auto trial = [](const std::function<void()>& f) {
    int reps = 0;
    auto t0 = clock::now();
    double dt = 0;
    do {
      f();
      reps++;
      dt = std::chrono::duration<double>(clock::now() - t0).count();
    } while (dt < 0.05);
    return dt / reps;
  };
  a();  // warm-up: first-call setup, page faults, thread pool start
  b();
  double best_a = 1e30, best_b = 1e30;
  for (int t = 0; t < 7; t++) {
    best_a = std::min(best_a, trial(a));
    best_b = std::min(best_b, trial(b));
  }
  return {best_a, best_b};
}

}  // namespace

int main() {
  const int IN = 128;
  std::printf("| rows N | OUT | product | threads | OpenBLAS GFLOP/s | oneDNN GFLOP/s | oneDNN / OpenBLAS |\n");
  std::printf("|---:|---:|---|---:|---:|---:|---:|\n");
  double log_ratio_sum = 0;
  int cases = 0;
  for (int N : {3136, 16384})
    for (int OUT : {128, 384, 512}) {
      auto X = random_floats((size_t)N * IN, 1), W = random_floats((size_t)OUT * IN, 2);
      auto dY = random_floats((size_t)N * OUT, 3);
      struct Case {
        const char* name;
        Gemm g;
        const float *A, *B;
        size_t c_size;
      };
      const Case products[] = {
          {"Y = X W^T", {'N', 'T', N, OUT, IN, IN, IN, OUT, 0.0f}, X.data(), W.data(), (size_t)N * OUT},
          {"dX = dY W", {'N', 'N', N, IN, OUT, OUT, IN, IN, 0.0f}, dY.data(), W.data(), (size_t)N * IN},
          {"dW += dY^T X", {'T', 'N', OUT, IN, N, OUT, IN, IN, 1.0f}, dY.data(), X.data(), (size_t)OUT * IN},
      };
      for (const Case& c : products)
        for (int threads : {1, 2}) {
          omp_set_num_threads(threads);
          std::vector<float> C1(c.c_size, 0.f), C2(c.c_size, 0.f);
          // same result from both (beta = 0 cases; the dW case accumulates, so compare one call from zero)
          run_openblas(c.g, c.A, c.B, C1.data());
          run_onednn(c.g, c.A, c.B, C2.data());
          double maxdiff = 0;
          for (size_t i = 0; i < c.c_size; i++) maxdiff = std::max(maxdiff, (double)std::abs(C1[i] - C2[i]));
          if (maxdiff > 1e-2) std::fprintf(stderr, "results differ by %g\n", maxdiff);
          const double flops = 2.0 * c.g.M * c.g.N * c.g.K;
          const auto [t_ob, t_dn] = best_seconds([&] { run_openblas(c.g, c.A, c.B, C1.data()); },
                                                 [&] { run_onednn(c.g, c.A, c.B, C2.data()); });
          std::printf("| %d | %d | %s | %d | %.1f | %.1f | %.2f |\n", N, OUT, c.name, threads, flops / t_ob * 1e-9,
                      flops / t_dn * 1e-9, t_ob / t_dn);
          std::fflush(stdout);
          log_ratio_sum += std::log(t_ob / t_dn);
          cases++;
        }
    }
  std::printf("\ngeometric mean oneDNN / OpenBLAS throughput over %d cases: %.2f\n", cases,
              std::exp(log_ratio_sum / cases));
}
