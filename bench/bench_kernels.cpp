// Kernel benchmarks: naive vs fast for linear, attention and canon_conv on the training shapes
// (B = 64, T in {49, 256}, C = 128, H = 4, D = 32), and raw sgemm throughput on one and on all threads.
// Every benchmark reports GFLOP/s as a counter (useful flops: causal attention counts only s <= t).
//
//   OMP_NUM_THREADS=2 ./build/bench/bench_kernels --benchmark_filter=fast
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/blas.h"
#include "engine/ops/attention/fast.h"
#include "engine/ops/attention/naive.h"
#include "engine/ops/canon_conv/fast.h"
#include "engine/ops/canon_conv/naive.h"
#include "engine/ops/int8_linear/fast.h"
#include "engine/ops/int8_linear/quantize.h"
#include "engine/ops/linear/fast.h"
#include "engine/ops/linear/naive.h"
#include "bench_data.h"

namespace {

using namespace canonlab;

constexpr int kB = 64, kC = 128, kH = 4, kD = 32, kK = 4;

void set_gflops(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- linear: the fused qkv projection, (B·T, C) -> (B·T, 3C) ----

template <bool Fast>
void BM_linear_forward(benchmark::State& state) {
  const int N = kB * int(state.range(0)), IN = kC, OUT = 3 * kC;
  auto x = random_floats((size_t)N * IN, 1), w = random_floats((size_t)OUT * IN, 2), b = random_floats(OUT, 3);
  std::vector<float> y((size_t)N * OUT);
  for (auto _ : state) {
    if (Fast)
      linear_forward(y.data(), OUT, x.data(), IN, w.data(), b.data(), N, IN, OUT);
    else
      linear_forward_naive(y.data(), OUT, x.data(), IN, w.data(), b.data(), N, IN, OUT);
    benchmark::DoNotOptimize(y.data());
  }
  set_gflops(state, 2.0 * N * IN * OUT);
}

template <bool Fast>
void BM_linear_backward(benchmark::State& state) {
  const int N = kB * int(state.range(0)), IN = kC, OUT = 3 * kC;
  auto x = random_floats((size_t)N * IN, 1), w = random_floats((size_t)OUT * IN, 2);
  auto dy = random_floats((size_t)N * OUT, 3);
  std::vector<float> dx((size_t)N * IN), dw((size_t)OUT * IN), db(OUT);
  for (auto _ : state) {
    if (Fast)
      linear_backward(dx.data(), IN, dw.data(), db.data(), dy.data(), OUT, x.data(), IN, w.data(), N, IN, OUT);
    else
      linear_backward_naive(dx.data(), IN, dw.data(), db.data(), dy.data(), OUT, x.data(), IN, w.data(), N, IN, OUT);
    benchmark::DoNotOptimize(dw.data());
  }
  set_gflops(state, 4.0 * N * IN * OUT);  // dx and dw; db is noise
}

// ---- attention on a fused (B, T, 3C) qkv buffer ----

double attention_flops(int Tn) {
  // QK^T and PV over the causal triangle, per (b, h)
  return 2.0 * kB * kH * (double(Tn) * (Tn + 1) / 2) * kD * 2;
}

template <bool Fast>
void BM_attention_forward(benchmark::State& state) {
  const int Tn = int(state.range(0)), ld = 3 * kC;
  auto qkv = random_floats((size_t)kB * Tn * ld, 1);
  std::vector<float> out((size_t)kB * Tn * kC), probs((size_t)kB * kH * Tn * Tn);
  std::vector<float> softmax_state(attention_state_size(kB, Tn, kH));
  std::vector<float> scratch(attention_scratch_size(Tn, omp_get_max_threads()));
  const float scale = 1.0f / std::sqrt(float(kD));
  for (auto _ : state) {
    if (Fast)  // as in training: the softmax state only, no probabilities
      attention_forward(out.data(), softmax_state.data(), (float*)nullptr, qkv.data(), qkv.data() + kC,
                        qkv.data() + 2 * kC, ld, (const float*)nullptr, 0, kB, Tn, kH, kD, scale, scratch.data());
    else
      attention_forward_naive(out.data(), probs.data(), qkv.data(), qkv.data() + kC, qkv.data() + 2 * kC, ld,
                              (const float*)nullptr, 0, kB, Tn, kH, kD, scale);
    benchmark::DoNotOptimize(out.data());
  }
  set_gflops(state, attention_flops(Tn));
}

template <bool Fast>
void BM_attention_backward(benchmark::State& state) {
  const int Tn = int(state.range(0)), ld = 3 * kC;
  auto qkv = random_floats((size_t)kB * Tn * ld, 1), dout = random_floats((size_t)kB * Tn * kC, 2);
  std::vector<float> out((size_t)kB * Tn * kC), probs((size_t)kB * kH * Tn * Tn), dqkv((size_t)kB * Tn * ld);
  std::vector<float> scratch(attention_scratch_size(Tn, omp_get_max_threads()));
  std::vector<float> softmax_state(attention_state_size(kB, Tn, kH));
  const float scale = 1.0f / std::sqrt(float(kD));
  attention_forward(out.data(), softmax_state.data(), probs.data(), qkv.data(), qkv.data() + kC, qkv.data() + 2 * kC,
                    ld, (const float*)nullptr, 0, kB, Tn, kH, kD, scale, scratch.data());
  for (auto _ : state) {
    if (Fast)
      attention_backward(dqkv.data(), dqkv.data() + kC, dqkv.data() + 2 * kC, ld, dout.data(), softmax_state.data(),
                         qkv.data(), qkv.data() + kC, qkv.data() + 2 * kC, ld, (const float*)nullptr, 0, kB, Tn, kH,
                         kD, scale, scratch.data());
    else
      attention_backward_naive(dqkv.data(), dqkv.data() + kC, dqkv.data() + 2 * kC, ld, dout.data(), probs.data(),
                               qkv.data(), qkv.data() + kC, qkv.data() + 2 * kC, ld, 0, kB, Tn, kH, kD, scale,
                               scratch.data());
    benchmark::DoNotOptimize(dqkv.data());
  }
  set_gflops(state, 2 * attention_flops(Tn));  // dP, dV, dQ, dK
}

// ---- canon_conv: depthwise (G = C), K = 4, the Canon layer ----

template <bool Fast>
void BM_canon_conv_forward(benchmark::State& state) {
  const int Tn = int(state.range(0));
  const size_t n = (size_t)kB * Tn * kC;
  auto in = random_floats(n, 1), w = random_floats((size_t)kC * kK, 2);
  std::vector<float> out(n);
  for (auto _ : state) {
    if (Fast)
      canon_conv_forward(out.data(), in.data(), w.data(), kB, Tn, kC, kK, kC);
    else
      canon_conv_forward_naive(out.data(), in.data(), w.data(), kB, Tn, kC, kK, kC);
    benchmark::DoNotOptimize(out.data());
  }
  set_gflops(state, 2.0 * n * kK);
}

template <bool Fast>
void BM_canon_conv_backward(benchmark::State& state) {
  const int Tn = int(state.range(0));
  const size_t n = (size_t)kB * Tn * kC;
  auto in = random_floats(n, 1), w = random_floats((size_t)kC * kK, 2), dout = random_floats(n, 3);
  std::vector<float> din(n), dw((size_t)kC * kK);
  for (auto _ : state) {
    if (Fast)
      canon_conv_backward(din.data(), dw.data(), dout.data(), in.data(), w.data(), kB, Tn, kC, kK, kC);
    else
      canon_conv_backward_naive(din.data(), dw.data(), dout.data(), in.data(), w.data(), kB, Tn, kC, kK, kC);
    benchmark::DoNotOptimize(din.data());
  }
  set_gflops(state, 4.0 * n * kK);
}

// ---- sgemm: (M, K) @ (K, N), one thread or all of them ----

void BM_sgemm(benchmark::State& state) {
  const int M = int(state.range(0)), N = int(state.range(1)), K = int(state.range(2)), threads = int(state.range(3));
  const int all = omp_get_max_threads();
  omp_set_num_threads(threads == 0 ? all : threads);
  auto a = random_floats((size_t)M * K, 1), b = random_floats((size_t)K * N, 2);
  std::vector<float> c((size_t)M * N);
  for (auto _ : state) {
    gemm(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
    benchmark::DoNotOptimize(c.data());
  }
  omp_set_num_threads(all);
  state.SetLabel(threads == 0 ? "all threads" : "1 thread");
  set_gflops(state, 2.0 * M * N * K);
}

// ---- int8 weights (eval/generate --int8) against fp32 on the same shape: y (N, OUT) = x (N, IN) W^T + b ----
// The decode GEMV (N = 1) is where int8 can pay (a quarter of the weight bytes); batched rows are compute-bound.
// args: N, IN, OUT
template <bool Int8>
void BM_linear_int8_vs_fp32(benchmark::State& state) {
  const int N = int(state.range(0)), IN = int(state.range(1)), OUT = int(state.range(2));
  auto x = random_floats((size_t)N * IN, 1), w = random_floats((size_t)OUT * IN, 2), b = random_floats(OUT, 3);
  std::vector<int8_t> q((size_t)OUT * IN);
  std::vector<float> scale(OUT), y((size_t)N * OUT);
  quantize_int8_rows(q.data(), scale.data(), w.data(), OUT, IN);
  for (auto _ : state) {
    if (Int8)
      int8_linear_forward(y.data(), OUT, x.data(), IN, q.data(), scale.data(), b.data(), N, IN, OUT);
    else
      linear_forward(y.data(), OUT, x.data(), IN, w.data(), b.data(), N, IN, OUT);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(Int8 ? "int8 weights" : "fp32 weights");
  set_gflops(state, 2.0 * N * IN * OUT);
  state.counters["weight GB/s"] =
      benchmark::Counter(double(OUT) * IN * (Int8 ? 1.0 : 4.0) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
#define INT8_BENCH(fn)                                                                                  \
  BENCHMARK(fn)                                                                                         \
      ->Args({1, 1024, 1024})                                                                           \
      ->Args({1, 4096, 4096})                                                                           \
      ->Args({1, 128, 384})                                                                             \
      ->Args({4, 1024, 1024})                                                                           \
      ->Args({8, 1024, 1024})                                                                           \
      ->Args({16, 1024, 1024})                                                                          \
      ->Args({64 * 256, 128, 384})                                                                      \
      ->Args({64 * 256, 128, 512})                                                                      \
      ->UseRealTime()                                                                                   \
      ->Unit(benchmark::kMicrosecond)
INT8_BENCH(BM_linear_int8_vs_fp32<false>)->Name("BM_linear_int8_vs_fp32/fp32");
INT8_BENCH(BM_linear_int8_vs_fp32<true>)->Name("BM_linear_int8_vs_fp32/int8");

// Naive kernels at T = 256 take seconds per call: one iteration is enough to see the gap.
#define KERNEL_BENCH(fn)               \
  BENCHMARK(fn<false>)                 \
      ->Name(#fn "/naive")             \
      ->Arg(49)                        \
      ->Arg(256)                       \
      ->Iterations(1)                  \
      ->UseRealTime()                  \
      ->Unit(benchmark::kMillisecond); \
  BENCHMARK(fn<true>)->Name(#fn "/fast")->Arg(49)->Arg(256)->UseRealTime()->Unit(benchmark::kMillisecond)

KERNEL_BENCH(BM_linear_forward);
KERNEL_BENCH(BM_linear_backward);
KERNEL_BENCH(BM_attention_forward);
KERNEL_BENCH(BM_attention_backward);
KERNEL_BENCH(BM_canon_conv_forward);
KERNEL_BENCH(BM_canon_conv_backward);

// args: M, N, K, threads (1, or 0 = all)
BENCHMARK(BM_sgemm)
    ->Args({1024, 1024, 1024, 1})
    ->Args({1024, 1024, 1024, 0})
    ->Args({3136, 512, 128, 1})
    ->Args({3136, 512, 128, 0})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
