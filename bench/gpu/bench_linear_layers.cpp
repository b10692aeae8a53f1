// canonlab_gpu_bench: one layer's scan of each linear family on the GPU, forward and backward, at the shapes of the
// paper's 12L768D models (issue 27): GLA and Gated DeltaNet with B 16, T 2048, 6 heads, key dim 128, value dim
// 256; Mamba2's SSD with 24 heads of 64 channels, state 128, one group. fp32 (the element kernels have no bf16 path
// yet), chunk 64. Per op: one untimed warm-up (module load), then the median of `--reps` timed forward and backward
// passes (device events), and whether two backward passes gave the same bits. Inputs are random, never zeros.
// Rows are printed as they are measured.
//
//   canonlab_gpu_bench [--reps N] [--seconds S] [--small]
//
// --small runs B 2, T 256 (a quick check that everything launches). Prints one markdown table; bench/gpu-bench.sh
// runs it on the GPU machine next to fla's kernels (bench/gpu/bench_fla.py) at the same shapes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/cuda/buffer.h"
#include "engine/cuda/runtime.h"
#include "engine/ops/delta_rule/cuda.h"
#include "engine/ops/delta_rule/naive.h"
#include "engine/ops/gla/cuda.h"
#include "engine/ops/gla/naive.h"
#include "engine/ops/ssd/cuda.h"
#include "engine/ops/ssd/naive.h"

namespace {

using canonlab::cuda::DeviceBuffer;

// splitmix64: fast enough to fill a few hundred million floats
struct Random {
  uint64_t s;
  float uniform(float lo, float hi) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * float(double(z >> 11) * 0x1.0p-53);
  }
};

DeviceBuffer<float> random_device(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> host(n);
  Random r{seed};
  for (float& x : host) x = r.uniform(lo, hi);
  return DeviceBuffer<float>(std::span<const float>(host));
}

// rows of D values scaled to unit length (the delta rule's q and k)
DeviceBuffer<float> unit_rows_device(size_t rows, int D, uint64_t seed) {
  std::vector<float> host(rows * D);
  Random r{seed};
  for (size_t i = 0; i < rows; i++) {
    double ss = 0;
    for (int c = 0; c < D; c++) ss += double(host[i * D + c] = r.uniform(-1, 1)) * host[i * D + c];
    for (int c = 0; c < D; c++) host[i * D + c] = float(host[i * D + c] / std::sqrt(ss + 1e-6));
  }
  return DeviceBuffer<float>(std::span<const float>(host));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Row {
  std::string op, shape;
  double fwd_ms = 0, bwd_ms = 0;
  long long tokens = 0;
  bool same_bits = false;
};

// Times forward and backward `reps` times after one warm-up; `grads` names the buffers whose bits two backward
// passes must repeat.
Row time_op(const std::string& op, const std::string& shape, long long tokens, int reps, canonlab::cuda::Stream& stream,
            const std::function<void()>& forward, const std::function<void()>& backward,
            const std::vector<const DeviceBuffer<float>*>& grads) {
  Row row{op, shape};
  row.tokens = tokens;
  canonlab::cuda::EventTimer timer;
  forward();
  backward();
  stream.synchronize();
  std::vector<std::vector<float>> first;
  for (const auto* g : grads) first.push_back(g->download());
  std::vector<double> f, b;
  bool same = true;
  for (int rep = 0; rep < reps; rep++) {
    timer.start(stream.get());
    forward();
    f.push_back(timer.stop(stream.get()));
    timer.start(stream.get());
    backward();
    b.push_back(timer.stop(stream.get()));
    for (size_t i = 0; i < grads.size(); i++) {
      const std::vector<float> again = grads[i]->download();
      same = same && std::memcmp(again.data(), first[i].data(), again.size() * sizeof(float)) == 0;
    }
  }
  row.fwd_ms = median(f);
  row.bwd_ms = median(b);
  row.same_bits = same;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 3;
  double seconds = 300;
  bool small = false;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--small") small = true;
    else {
      std::fprintf(stderr, "usage: canonlab_gpu_bench [--reps N] [--seconds S] [--small]\n");
      return 2;
    }
  }
  if (canonlab::cuda::device_count() == 0) {
    std::fprintf(stderr, "no CUDA device: %s\n", canonlab::cuda::no_device_reason().c_str());
    return 3;
  }
  const auto info = canonlab::cuda::device_info(0);
  std::printf("device: %s (sm_%d%d, %d SMs, %.0f GiB)\n", info.name.c_str(), info.major, info.minor,
              info.multiprocessors, double(info.memory_bytes) / (1 << 30));
  const auto t_start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(); };

  const int B = small ? 2 : 16, T = small ? 256 : 2048, chunk = 64;
  const long long tokens = (long long)B * T;
  canonlab::cuda::Stream stream;
  // each row as soon as it is measured: a budget that runs out still leaves the rows before it
  std::printf("\n| kernel (fp32, chunk 64) | shape | forward ms | backward ms | fwd+bwd tokens/s | same bits twice |\n");
  std::printf("|---|---|---:|---:|---:|---|\n");
  std::fflush(stdout);
  struct Rows {
    void push_back(const Row& r) {
      std::printf("| canonlab %s | %s | %.2f | %.2f | %.3g | %s |\n", r.op.c_str(), r.shape.c_str(), r.fwd_ms, r.bwd_ms,
                  double(r.tokens) / ((r.fwd_ms + r.bwd_ms) / 1e3), r.same_bits ? "yes" : "NO");
      std::fflush(stdout);
    }
  } rows;

  try {
    {  // GLA: 6 heads, K 128, V 256
      const int H = 6, K = 128, V = 256;
      const size_t nk = size_t(tokens) * H * K, nv = size_t(tokens) * H * V;
      const auto q = random_device(nk, 1, -1, 1), k = random_device(nk, 2, -1, 1), v = random_device(nv, 3, -1, 1);
      const auto g = random_device(nk, 4, -0.3f, -0.01f), dout = random_device(nv, 5, -1, 1);
      DeviceBuffer<float> o(nv), states(canonlab::gla_states_size(B, T, H, K, V, chunk)), dq(nk), dk(nk), dv(nv),
          dg(nk);
      DeviceBuffer<double> scratch(canonlab::cuda::gla_scratch_bytes(B, T, H, K, V, chunk, true) / 8 + 1);
      const float scale = 1.0f / std::sqrt(float(K));
      rows.push_back(time_op(
          "GLA (chunk_gla)", "B" + std::to_string(B) + " T" + std::to_string(T) + " H6 K128 V256", tokens, reps, stream,
          [&] {
            canonlab::cuda::gla_forward(stream.get(), o.data(), states.data(), q.data(), k.data(), v.data(), g.data(),
                                        B, T, H, K, V, scale, chunk, scratch.data());
          },
          [&] {
            canonlab::cuda::gla_backward(stream.get(), dq.data(), dk.data(), dv.data(), dg.data(), dout.data(),
                                         states.data(), q.data(), k.data(), v.data(), g.data(), B, T, H, K, V, scale,
                                         chunk, scratch.data());
          },
          {&dq, &dk, &dv, &dg}));
    }
    if (elapsed() < seconds) {  // Gated DeltaNet: 6 heads, K 128, V 256
      const int H = 6, K = 128, V = 256;
      const size_t nk = size_t(tokens) * H * K, nv = size_t(tokens) * H * V, nh = size_t(tokens) * H;
      const auto q = unit_rows_device(size_t(tokens) * H, K, 11), k = unit_rows_device(size_t(tokens) * H, K, 12);
      const auto v = random_device(nv, 13, -1, 1), beta = random_device(nh, 14, 0.05f, 0.95f);
      const auto g = random_device(nh, 15, -0.3f, -0.001f), dout = random_device(nv, 16, -1, 1);
      DeviceBuffer<float> o(nv), states(canonlab::delta_rule_states_size(B, T, H, K, V, chunk)), dq(nk), dk(nk),
          dv(nv), dbeta(nh), dg(nh);
      DeviceBuffer<double> scratch(canonlab::cuda::delta_rule_scratch_bytes(B, T, H, K, V, chunk, true) / 8 + 1);
      const float scale = 1.0f / std::sqrt(float(K));
      rows.push_back(time_op(
          "Gated DeltaNet (chunk_gated_delta_rule)", "B" + std::to_string(B) + " T" + std::to_string(T) + " H6 K128 V256",
          tokens, reps, stream,
          [&] {
            canonlab::cuda::delta_rule_forward(stream.get(), o.data(), states.data(), q.data(), k.data(), v.data(),
                                               beta.data(), g.data(), B, T, H, K, V, scale, chunk, scratch.data());
          },
          [&] {
            canonlab::cuda::delta_rule_backward(stream.get(), dq.data(), dk.data(), dv.data(), dbeta.data(), dg.data(),
                                                dout.data(), states.data(), q.data(), k.data(), v.data(), beta.data(),
                                                g.data(), B, T, H, K, V, scale, chunk, scratch.data());
          },
          {&dq, &dk, &dv, &dbeta, &dg}));
    }
    if (elapsed() < seconds) {  // Mamba2's SSD: 24 heads of 64, state 128, one group
      const int H = 24, P = 64, G = 1, N = 128;
      const size_t nx = size_t(tokens) * H * P, nt = size_t(tokens) * H, nb = size_t(tokens) * G * N;
      const auto x = random_device(nx, 21, -1, 1), dt = random_device(nt, 22, 0.001f, 0.1f);
      const auto A = random_device(H, 23, -8, -1), Bm = random_device(nb, 24, -1, 1), Cm = random_device(nb, 25, -1, 1);
      const auto dy = random_device(nx, 26, -1, 1);
      DeviceBuffer<float> y(nx), states(canonlab::ssd_states_size(B, T, H, P, N, chunk)), dx(nx), ddt(nt), dA(H),
          dB(nb), dC(nb);
      DeviceBuffer<double> scratch(canonlab::cuda::ssd_scratch_bytes(B, T, H, P, G, N, chunk, true) / 8 + 1);
      rows.push_back(time_op(
          "Mamba2 SSD (mamba_chunk_scan)", "B" + std::to_string(B) + " T" + std::to_string(T) + " H24 P64 N128", tokens,
          reps, stream,
          [&] {
            canonlab::cuda::ssd_forward(stream.get(), y.data(), states.data(), x.data(), dt.data(), A.data(), Bm.data(),
                                        Cm.data(), B, T, H, P, G, N, chunk, scratch.data());
          },
          [&] {
            canonlab::cuda::ssd_backward(stream.get(), dx.data(), ddt.data(), dA.data(), dB.data(), dC.data(),
                                         dy.data(), states.data(), x.data(), dt.data(), A.data(), Bm.data(), Cm.data(),
                                         B, T, H, P, G, N, chunk, scratch.data());
          },
          {&dx, &ddt, &dA, &dB, &dC}));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "canonlab_gpu_bench: %s\n", e.what());
    return 1;
  }

  std::printf("(%d timed repetitions each, median; %.0f s in all)\n", reps, elapsed());
  return 0;
}
