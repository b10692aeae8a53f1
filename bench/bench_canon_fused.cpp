// The fused Canon op (engine/ops/canon_conv/fused.h) against the separate passes CanonLayer runs without it
// (canon_conv, silu/elu, layernorm/rmsnorm, residual add, each through a full (B, T, C) buffer), forward and
// backward, depthwise K = 4. One JSON line per (epilogue, shape, threads, direction): median milliseconds over
// --rounds rounds (each the mean of --reps calls), and the modelled bytes each version moves through memory:
// every (B, T, C) float buffer a pass reads or writes counts once (rows re-read while still in cache do not).
// BENCHMARKS.md, "Fused Canon on the CPU"; bench/bench_canon_torch.py times PyTorch on the same shapes.
//
//   build/bench/bench_canon_fused [--rounds 7] [--reps 3] [--threads 1,2] [--T 128,512] [--C 64,128,512]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/ops/activation/activation.h"
#include "engine/ops/canon_conv/fast.h"
#include "engine/ops/canon_conv/fused.h"
#include "engine/ops/elementwise/elementwise.h"
#include "engine/ops/norm/fast.h"
#include "bench_data.h"

namespace {

using namespace canonlab;

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::atoi(item.c_str()));
  return v;
}

struct Buffers {
  int B, Tn, C, K;
  CanonEpilogue ep;
  size_t n;
  int N;
  std::vector<float> in, w, nw, nb, dout, out, conv, act, normed, mean, rstd, din, dw, dnw, dnb, dact, dconv, scratch;
  Buffers(int B_, int Tn_, int C_, int K_, CanonEpilogue ep_) : B(B_), Tn(Tn_), C(C_), K(K_), ep(ep_) {
    N = B * Tn;
    n = (size_t)N * C;
    in = random_floats(n, 1), w = random_floats((size_t)C * K, 2), dout = random_floats(n, 3);
    nw = random_floats(C, 4), nb = random_floats(C, 5);
    for (auto* v : {&out, &conv, &act, &normed, &din, &dact, &dconv}) v->assign(n, 0.f);
    mean.assign(N, 0.f), rstd.assign(N, 0.f), dw.assign((size_t)C * K, 0.f), dnw.assign(C, 0.f), dnb.assign(C, 0.f);
    scratch.assign(canon_fused_scratch_size(B, Tn, C, K, C, ep), 0.f);
  }
  const float* norm_w() const { return ep.norm != CanonNorm::none ? nw.data() : nullptr; }
  const float* norm_b() const { return ep.norm == CanonNorm::layernorm ? nb.data() : nullptr; }
  const float* norm_in() const { return ep.activation != CanonActivation::none ? act.data() : conv.data(); }

  // CanonLayer's separate passes (nn/canon.h without the fused op)
  void separate_forward() {
    canon_conv_forward(conv.data(), in.data(), w.data(), B, Tn, C, K, C);
    const float* branch = conv.data();
    if (ep.activation == CanonActivation::silu) silu_forward(act.data(), conv.data(), n), branch = act.data();
    if (ep.activation == CanonActivation::elu) elu_forward(act.data(), conv.data(), n), branch = act.data();
    if (ep.norm == CanonNorm::rmsnorm) rmsnorm_forward(normed.data(), rstd.data(), branch, nw.data(), N, C, 1e-5f);
    if (ep.norm == CanonNorm::layernorm)
      layernorm_forward(normed.data(), mean.data(), rstd.data(), branch, nw.data(), nb.data(), N, C, 1e-5f);
    if (ep.norm != CanonNorm::none) branch = normed.data();
    if (ep.residual) add(out.data(), in.data(), branch, n);
    else copy(out.data(), branch, n);
  }
  void separate_backward() {
    const float* d = dout.data();
    if (ep.norm == CanonNorm::rmsnorm)
      rmsnorm_backward(dact.data(), dnw.data(), d, norm_in(), nw.data(), rstd.data(), N, C), d = dact.data();
    if (ep.norm == CanonNorm::layernorm)
      layernorm_backward(dact.data(), dnw.data(), dnb.data(), d, norm_in(), nw.data(), mean.data(), rstd.data(), N, C),
          d = dact.data();
    if (ep.activation == CanonActivation::silu) silu_backward(dconv.data(), d, conv.data(), n), d = dconv.data();
    if (ep.activation == CanonActivation::elu) elu_backward(dconv.data(), d, conv.data(), n), d = dconv.data();
    canon_conv_backward(din.data(), dw.data(), d, in.data(), w.data(), B, Tn, C, K, C);
    if (ep.residual) add_into(din.data(), dout.data(), n);
  }
  void fused_forward() {
    canon_fused_forward(out.data(), ep.saves_conv() ? conv.data() : nullptr, mean.data(), rstd.data(), in.data(),
                        w.data(), norm_w(), norm_b(), B, Tn, C, K, C, ep, 1e-5f);
  }
  void fused_backward() {
    canon_fused_backward(din.data(), dw.data(), dnw.data(), ep.norm == CanonNorm::layernorm ? dnb.data() : nullptr,
                         scratch.data(), dout.data(), in.data(), conv.data(), w.data(), norm_w(), mean.data(),
                         rstd.data(), B, Tn, C, K, C, ep);
  }

  // Modelled traffic in (B, T, C) buffers, see the header comment.
  double separate_forward_buffers() const {
    double b = 2;                                        // conv: in -> conv
    if (ep.activation != CanonActivation::none) b += 2;  // conv -> act
    if (ep.norm != CanonNorm::none) b += 2;              // act -> normed
    b += ep.residual ? 3 : 2;                            // in + branch -> out
    return b;
  }
  double fused_forward_buffers() const { return 2 + (ep.saves_conv() ? 1 : 0); }  // in -> [conv,] out
  double separate_backward_buffers() const {
    double b = 0;
    if (ep.norm != CanonNorm::none) b += 3 + 2;          // dout, x -> dact; dout, x -> dw/db
    if (ep.activation != CanonActivation::none) b += 3;  // dact, conv -> dconv
    b += 2 + 2;                                          // dconv -> din; dconv, in -> dweight
    if (ep.residual) b += 3;                             // din += dout
    return b;
  }
  double fused_backward_buffers() const {
    double b = 3;                                  // dout, in -> din
    if (ep.saves_conv()) b += 1;                   // conv
    if (ep.norm != CanonNorm::none) b += 2;        // dout, conv -> dw/db
    return b;
  }
};

template <class F>
double median_ms(F&& f, int rounds, int reps) {
  f();  // warm up (first touch, caches)
  std::vector<double> ms;
  for (int r = 0; r < rounds; r++) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; i++) f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7, reps = 3;
  std::vector<int> threads = {1, 2}, Ts = {128, 512}, Cs = {64, 128, 512};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = parse_list(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--T")) Ts = parse_list(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--C")) Cs = parse_list(argv[i + 1]);
  }
  const int B = 32, K = 4;
  struct Named {
    const char* name;
    CanonEpilogue ep;
  };
  std::vector<Named> epilogues = {{"none,none,residual", {CanonActivation::none, CanonNorm::none, true}},
                                  {"silu,layernorm,residual", {CanonActivation::silu, CanonNorm::layernorm, true}}};
  if (std::getenv("CANON_BENCH_ALL")) {  // the other mixes, to see which stage costs what
    epilogues.push_back({"silu,none,residual", {CanonActivation::silu, CanonNorm::none, true}});
    epilogues.push_back({"none,layernorm,residual", {CanonActivation::none, CanonNorm::layernorm, true}});
    epilogues.push_back({"none,rmsnorm,residual", {CanonActivation::none, CanonNorm::rmsnorm, true}});
  }
  const char* only = std::getenv("CANON_BENCH_ONLY");  // one epilogue by name, e.g. for perf
  for (const Named& e : epilogues)
    if (!only || !std::strcmp(only, e.name))
    for (int Tn : Ts)
      for (int C : Cs)
        for (int th : threads) {
          omp_set_num_threads(th);
          Buffers buf(B, Tn, C, K, e.ep);
          const double bytes = 4.0 * double(buf.n);
          const double sf = median_ms([&] { buf.separate_forward(); }, rounds, reps);
          const double ff = median_ms([&] { buf.fused_forward(); }, rounds, reps);
          buf.separate_forward();
          const double sb = median_ms([&] { buf.separate_backward(); }, rounds, reps);
          buf.fused_forward();
          const double fb = median_ms([&] { buf.fused_backward(); }, rounds, reps);
          auto line = [&](const char* dir, double sep, double fus, double sep_buf, double fus_buf) {
            std::printf(
                "{\"epilogue\": \"%s\", \"B\": %d, \"T\": %d, \"C\": %d, \"K\": %d, \"threads\": %d, \"dir\": \"%s\", "
                "\"separate_ms\": %.3f, \"fused_ms\": %.3f, \"speedup\": %.2f, \"separate_MB\": %.1f, "
                "\"fused_MB\": %.1f, \"separate_GBps\": %.2f, \"fused_GBps\": %.2f}\n",
                e.name, B, Tn, C, K, th, dir, sep, fus, sep / fus, sep_buf * bytes / 1e6, fus_buf * bytes / 1e6,
                sep_buf * bytes / (sep * 1e6), fus_buf * bytes / (fus * 1e6));
            std::fflush(stdout);
          };
          line("forward", sf, ff, buf.separate_forward_buffers(), buf.fused_forward_buffers());
          line("backward", sb, fb, buf.separate_backward_buffers(), buf.fused_backward_buffers());
        }
  return 0;
}
