// Linear-time mixer kernels: forward + backward of the CHUNKED kernels (src/engine/ops/{ssd,gla,delta_rule}/
// chunked.h) on the training shapes, and the naive per-token C++ recurrence (naive.h) once for reference.
//
//   bench_mixers --threads 2 [--T 64,256] [--B 64] [--chunk 64] [--reps 9] [--warmup 2]
//                [--mixers ssd,gla,gdn,deltanet] [--ssd-groups 1] [--H 4] [--K 32] [--V 32] [--no-naive] [--no-sgemm]
//
// Mixers (float; by default H = 4 heads, head dims K = V = 32, the acceptance shapes; --H, --K, --V change them,
// e.g. to time a model's own shapes):
//   ssd       Mamba2 SSD scan: head dim P = V, state N = K, G = 1 group (--ssd-groups, a divisor of H)
//   gla       GLA: key dim K, value dim V, per-channel log forget gate
//   gdn       Gated DeltaNet: K, V, scalar log decay g per (token, head)
//   deltanet  DeltaNet: the same kernels with g = nullptr
//
// Inputs are drawn the way the models produce them (docs/linear-families.md), seed fixed:
//   ssd:  x, B, C ~ N(0, 1); dt = softplus(N(0, 1) − 4) (median ≈ 0.018, the range of the dt_bias init
//         [1e-3, 0.1]); A_h = −U[1, 16] (A_log = log U[1, 16])
//   gla:  q, k, v ~ N(0, 1); g = logsigmoid(N(0, 1)) / 16 (gate_logit_normalizer 16); scale K^−1/2
//   gdn:  q, k = L2-normalised silu(N(0, 1)) per head; v ~ N(0, 1); β = sigmoid(N(0, 1));
//         g = −exp(A_log_h) · softplus(N(0, 1) + dt_bias_h), exp(A_log) ~ U[0, 16], dt_bias = softplus⁻¹ of a
//         log-uniform dt in [1e-3, 0.1], clipped at −20 (e^−20 ≈ 2e−9: the state is forgotten either way)
//   deltanet: as gdn without g
//   dout (the gradient of the output) ~ N(0, 1) for all.
//
// Timing: `--warmup` untimed repetitions, then the median over `--reps` of the forward, of the backward and of
// their sum (each taken per repetition), in wall time (ms_*) and in process CPU time (cpu_ms_*: all threads
// together; on a loaded machine it still counts only our own running time). Threads: omp_set_num_threads(
// --threads); the kernels parallelise over (batch, head) pairs and run single-threaded GEMMs inside each.
//
// FLOP count (2 per multiply-add; elementwise work — exponentials, gating, masks — is not counted). Per
// (batch, head) and chunk of L tokens, with tri = L(L+1)/2 causal pairs, prev = "the chunk has an incoming
// state" (not the first chunk), next = "the chunk's state is passed on" (not the last chunk): the products the
// chunk form needs, with every causal L × L product counted over its triangle only (useful work):
//   ssd fwd: 2·tri·(N + P)          (C Bᵀ, M X)            + 2LNP·prev (C h_prevᵀ) + 2LNP·next (state update)
//   ssd bwd: 2·tri·(3N + 2P)        (C Bᵀ, dY Xᵀ, Mᵀ dY, dG B, dGᵀ C) + 4LNP·prev + 4LNP·next
//   gla fwd: 2·tri·(K + V)          (scores, A v)          + 2LKV·prev + 2LKV·next
//   gla bwd: 2·tri·(3K + 2V)        (do vᵀ, scores, dq, dk, Aᵀ do) + 4LKV·prev + 4LKV·next
//   delta fwd (WY form): 2·s·K (K Kᵀ, s = L(L−1)/2) + Σ_{r<L} r(r+1) ((I + A)⁻¹ by forward substitution)
//            + 2·tri·(K + V) (Tm [βK | βV]) + 2·tri·(K + V) (Q Kᵀ, P v_new) + 4LKV·prev + 2LKV·next
//            (the WY form as written in ../shared/reference/linear-mixers.md §3.3, Tm formed explicitly; a
//            kernel that skips forming Tm does less work than counted)
//   delta bwd: the chunked backward is the per-token recurrent backward over each chunk (recomputed from the
//            chunk-start checkpoint), so its work is per token, not per chunk: 20·K·V per token, i.e. 10
//            multiply-adds per state element (replay S' + k uᵀ and the next prediction: 2; reverse sweep: dS +=
//            q doᵀ, du, dS' = dS + k dpredᵀ, dk (2), dq, dg, dS <- a dS': 8).
// The counts are fixed formulas of the algorithm, not of one kernel version, so GFLOP/s stay comparable while
// the kernels change. GFLOP/s = count / median time. The naive recurrences are timed once each, one thread.
//
// Output: one JSON line per (mixer, T), plus one "sgemm" line (oneDNN 1024³ at 1 and --threads threads) and one
// "small_gemm" line (oneDNN on the per-chunk shapes, one thread: the ceiling of a single-threaded-GEMM kernel).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/blas.h"
#include "engine/ops/delta_rule/chunked.h"
#include "engine/ops/delta_rule/naive.h"
#include "engine/ops/gla/chunked.h"
#include "engine/ops/gla/naive.h"
#include "engine/ops/ssd/chunked.h"
#include "engine/ops/ssd/naive.h"

namespace {

using namespace canonlab;
using Clock = std::chrono::steady_clock;
using Vec = std::vector<float>;

// heads and head dims, set from the command line (defaults H = 4, K = V = 32; for ssd N = K, P = V)
int kH = 4, kK = 32, kV = 32;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// CPU time of the whole process (all threads), ms: on a shared machine it counts only the time our threads
// ran, so it is robust to other load where wall time is not (OpenMP spin-waiting at the join is included).
double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }
float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
float logsigmoid(float x) { return -softplus(-x); }
float silu(float x) { return x * sigmoid(x); }

struct Rng {
  std::mt19937_64 gen;
  std::normal_distribution<float> nd{0.f, 1.f};
  explicit Rng(uint64_t seed) : gen(seed) {}
  float normal() { return nd(gen); }
  float uniform(float a, float b) { return std::uniform_real_distribution<float>(a, b)(gen); }
  Vec normals(size_t n) {
    Vec v(n);
    for (auto& e : v) e = normal();
    return v;
  }
};

// rows of length d, each scaled to unit L2 norm (as the delta-rule layers do, eps 1e-6 inside the sqrt)
void l2_normalise_rows(Vec& x, int d) {
  for (size_t r = 0; r < x.size() / d; r++) {
    float* p = x.data() + r * d;
    double s = 0;
    for (int i = 0; i < d; i++) s += double(p[i]) * p[i];
    const float inv = float(1.0 / std::sqrt(s + 1e-6));
    for (int i = 0; i < d; i++) p[i] *= inv;
  }
}

// max |a − b| over all elements, relative to max |b| (b the naive reference)
struct ErrAcc {
  double num = 0, den = 0;
  void add(const Vec& a, const Vec& b) {
    for (size_t i = 0; i < a.size(); i++) {
      num = std::max(num, double(std::fabs(a[i] - b[i])));
      den = std::max(den, double(std::fabs(b[i])));
    }
  }
  double rel() const { return num / std::max(den, 1e-30); }
};

// One mixer at one shape: inputs, outputs, and the four kernel calls.
struct Case {
  std::string name;
  int Bn = 0, Tn = 0, K = kK, V = kV;
  virtual ~Case() = default;
  virtual void fwd() = 0;  // chunked
  virtual void bwd() = 0;  // chunked (after fwd: reads its saved states)
  virtual void naive_fwd() = 0;
  virtual void naive_bwd() = 0;
  virtual double flops_fwd(int chunk) const = 0;
  virtual double flops_bwd(int chunk) const = 0;
  virtual double rel_err() const = 0;  // chunked vs naive, over the output and every gradient
};

// Σ over the chunks of one (b, h) of f(L, prev, next)
double over_chunks(int Tn, int chunk, const std::function<double(double, bool, bool)>& f) {
  double s = 0;
  const int nc = (Tn + chunk - 1) / chunk;
  for (int c = 0; c < nc; c++) s += f(double(std::min(chunk, Tn - c * chunk)), c > 0, c + 1 < nc);
  return s;
}
double tri(double L) { return L * (L + 1) / 2; }

// ---- Mamba2 SSD ----
struct SsdCase : Case {
  int P = kV, N = kK, G, chunk;
  Vec x, dt, A, Bm, Cm, dy, y, states, dx, ddt, dA, dB, dC;
  Vec ny, ndx, nddt, ndA, ndB, ndC;  // naive results
  SsdCase(int Bn_, int Tn_, int chunk_, int G_, Rng& r) : G(G_), chunk(chunk_) {
    name = "ssd", Bn = Bn_, Tn = Tn_, K = N, V = P;
    const size_t nx = (size_t)Bn * Tn * kH * P, ng = (size_t)Bn * Tn * G * N, nt = (size_t)Bn * Tn * kH;
    x = r.normals(nx), Bm = r.normals(ng), Cm = r.normals(ng), dy = r.normals(nx);
    dt.resize(nt);
    for (auto& e : dt) e = softplus(r.normal() - 4.f);
    A.resize(kH);
    for (auto& e : A) e = -r.uniform(1.f, 16.f);
    y.resize(nx), dx.resize(nx), ddt.resize(nt), dA.resize(kH), dB.resize(ng), dC.resize(ng);
    states.resize(ssd_states_size(Bn, Tn, kH, P, N, chunk));
    ny = y, ndx = dx, nddt = ddt, ndA = dA, ndB = dB, ndC = dC;
  }
  void fwd() override {
    ssd_forward_chunked(y.data(), states.data(), x.data(), dt.data(), A.data(), Bm.data(), Cm.data(), Bn, Tn, kH,
                        P, G, N, chunk);
  }
  void bwd() override {
    ssd_backward_chunked(dx.data(), ddt.data(), dA.data(), dB.data(), dC.data(), dy.data(), states.data(), x.data(),
                         dt.data(), A.data(), Bm.data(), Cm.data(), Bn, Tn, kH, P, G, N, chunk);
  }
  void naive_fwd() override {
    ssd_forward_naive(ny.data(), x.data(), dt.data(), A.data(), Bm.data(), Cm.data(), Bn, Tn, kH, P, G, N);
  }
  void naive_bwd() override {
    ssd_backward_naive(ndx.data(), nddt.data(), ndA.data(), ndB.data(), ndC.data(), dy.data(), x.data(), dt.data(),
                       A.data(), Bm.data(), Cm.data(), Bn, Tn, kH, P, G, N);
  }
  double flops_fwd(int ch) const override {
    const double n = N, p = P;
    return double(Bn) * kH * over_chunks(Tn, ch, [&](double L, bool prev, bool next) {
             return 2 * tri(L) * (n + p) + 2 * L * n * p * (prev + next);
           });
  }
  double flops_bwd(int ch) const override {
    const double n = N, p = P;
    return double(Bn) * kH * over_chunks(Tn, ch, [&](double L, bool prev, bool next) {
             return 2 * tri(L) * (3 * n + 2 * p) + 4 * L * n * p * (prev + next);
           });
  }
  double rel_err() const override {
    ErrAcc e;
    for (auto [a, b] : {std::pair{&y, &ny}, {&dx, &ndx}, {&ddt, &nddt}, {&dA, &ndA}, {&dB, &ndB}, {&dC, &ndC}})
      e.add(*a, *b);
    return e.rel();
  }
};

// ---- GLA ----
struct GlaCase : Case {
  int chunk;
  float scale;
  Vec q, k, v, g, dout, o, states, dq, dk, dv, dg;
  Vec no, ndq, ndk, ndv, ndg;
  GlaCase(int Bn_, int Tn_, int chunk_, Rng& r) : chunk(chunk_) {
    name = "gla", Bn = Bn_, Tn = Tn_;
    scale = 1.f / std::sqrt(float(K));
    const size_t nk = (size_t)Bn * Tn * kH * K, nv = (size_t)Bn * Tn * kH * V;
    q = r.normals(nk), k = r.normals(nk), v = r.normals(nv), dout = r.normals(nv);
    g.resize(nk);
    for (auto& e : g) e = logsigmoid(r.normal()) / 16.f;
    o.resize(nv), dv.resize(nv), dq.resize(nk), dk.resize(nk), dg.resize(nk);
    states.resize(gla_states_size(Bn, Tn, kH, K, V, chunk));
    no = o, ndq = dq, ndk = dk, ndv = dv, ndg = dg;
  }
  void fwd() override {
    gla_forward_chunked(o.data(), states.data(), q.data(), k.data(), v.data(), g.data(), Bn, Tn, kH, K, V, scale,
                        chunk);
  }
  void bwd() override {
    gla_backward_chunked(dq.data(), dk.data(), dv.data(), dg.data(), dout.data(), states.data(), q.data(), k.data(),
                         v.data(), g.data(), Bn, Tn, kH, K, V, scale, chunk);
  }
  void naive_fwd() override {
    gla_forward_naive(no.data(), q.data(), k.data(), v.data(), g.data(), Bn, Tn, kH, K, V, scale);
  }
  void naive_bwd() override {
    gla_backward_naive(ndq.data(), ndk.data(), ndv.data(), ndg.data(), dout.data(), q.data(), k.data(), v.data(),
                       g.data(), Bn, Tn, kH, K, V, scale);
  }
  double flops_fwd(int ch) const override {
    const double kk = K, vv = V;
    return double(Bn) * kH * over_chunks(Tn, ch, [&](double L, bool prev, bool next) {
             return 2 * tri(L) * (kk + vv) + 2 * L * kk * vv * (prev + next);
           });
  }
  double flops_bwd(int ch) const override {
    const double kk = K, vv = V;
    return double(Bn) * kH * over_chunks(Tn, ch, [&](double L, bool prev, bool next) {
             return 2 * tri(L) * (3 * kk + 2 * vv) + 4 * L * kk * vv * (prev + next);
           });
  }
  double rel_err() const override {
    ErrAcc e;
    for (auto [a, b] : {std::pair{&o, &no}, {&dq, &ndq}, {&dk, &ndk}, {&dv, &ndv}, {&dg, &ndg}}) e.add(*a, *b);
    return e.rel();
  }
};

// ---- Gated DeltaNet (gated = true) and DeltaNet ----
struct DeltaCase : Case {
  int chunk;
  bool gated;
  float scale;
  Vec q, k, v, beta, g, dout, o, states, dq, dk, dv, dbeta, dg;
  Vec no, ndq, ndk, ndv, ndbeta, ndg;
  DeltaCase(int Bn_, int Tn_, int chunk_, bool gated_, Rng& r) : chunk(chunk_), gated(gated_) {
    name = gated ? "gdn" : "deltanet", Bn = Bn_, Tn = Tn_;
    scale = 1.f / std::sqrt(float(K));
    const size_t nk = (size_t)Bn * Tn * kH * K, nv = (size_t)Bn * Tn * kH * V, nt = (size_t)Bn * Tn * kH;
    q = r.normals(nk), k = r.normals(nk), v = r.normals(nv), dout = r.normals(nv);
    for (auto* t : {&q, &k}) {
      for (auto& e : *t) e = silu(e);
      l2_normalise_rows(*t, K);
    }
    beta.resize(nt);
    for (auto& e : beta) e = sigmoid(r.normal());
    if (gated) {
      std::vector<float> a_h(kH), dtb_h(kH);
      for (int h = 0; h < kH; h++) {
        a_h[h] = r.uniform(0.f, 16.f);  // exp(A_log), A_log = log U[0, 16]
        const float dt0 = std::exp(r.uniform(std::log(1e-3f), std::log(0.1f)));
        dtb_h[h] = dt0 + std::log(-std::expm1(-dt0));  // softplus⁻¹(dt0)
      }
      g.resize(nt);
      for (size_t i = 0; i < nt; i++) {
        const int h = int(i % kH);
        g[i] = std::max(-20.f, -a_h[h] * softplus(r.normal() + dtb_h[h]));
      }
      dg.resize(nt);
    }
    o.resize(nv), dv.resize(nv), dq.resize(nk), dk.resize(nk), dbeta.resize(nt);
    states.resize(delta_rule_states_size(Bn, Tn, kH, K, V, chunk));
    no = o, ndq = dq, ndk = dk, ndv = dv, ndbeta = dbeta, ndg = dg;
  }
  const float* gp() const { return gated ? g.data() : nullptr; }
  void fwd() override {
    delta_rule_forward_chunked(o.data(), states.data(), q.data(), k.data(), v.data(), beta.data(), gp(), Bn, Tn, kH,
                               K, V, scale, chunk);
  }
  void bwd() override {
    delta_rule_backward_chunked(dq.data(), dk.data(), dv.data(), dbeta.data(), gated ? dg.data() : nullptr,
                                dout.data(), states.data(), q.data(), k.data(), v.data(), beta.data(), gp(), Bn, Tn,
                                kH, K, V, scale, chunk);
  }
  void naive_fwd() override {
    delta_rule_forward_naive(no.data(), q.data(), k.data(), v.data(), beta.data(), gp(), Bn, Tn, kH, K, V, scale);
  }
  void naive_bwd() override {
    delta_rule_backward_naive(ndq.data(), ndk.data(), ndv.data(), ndbeta.data(), gated ? ndg.data() : nullptr,
                              dout.data(), q.data(), k.data(), v.data(), beta.data(), gp(), Bn, Tn, kH, K, V, scale);
  }
  double flops_fwd(int ch) const override {
    const double kk = K, vv = V;
    return double(Bn) * kH * over_chunks(Tn, ch, [&](double L, bool prev, bool next) {
             double inv = 0;  // forward substitution: row r costs Σ_{m<r} (m + 1) multiply-adds
             for (int r = 0; r < int(L); r++) inv += double(r) * (r + 1);
             return 2 * (L * (L - 1) / 2) * kk + inv + 4 * tri(L) * (kk + vv) + 4 * L * kk * vv * prev +
                    2 * L * kk * vv * next;
           });
  }
  double flops_bwd(int) const override { return 20.0 * Bn * kH * Tn * K * V; }
  double rel_err() const override {
    ErrAcc e;
    for (auto [a, b] : {std::pair{&o, &no}, {&dq, &ndq}, {&dk, &ndk}, {&dv, &ndv}, {&dbeta, &ndbeta}, {&dg, &ndg}})
      e.add(*a, *b);
    return e.rel();
  }
};

// ---- GEMM reference rates ----
double sgemm_gflops(int n, int threads, int reps = 5) {
  const int old = omp_get_max_threads();
  omp_set_num_threads(threads);
  Rng r(7);
  Vec a = r.normals((size_t)n * n), b = r.normals((size_t)n * n), c((size_t)n * n);
  gemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
  double best = 1e30;
  for (int i = 0; i < reps; i++) {
    auto t0 = Clock::now();
    gemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    best = std::min(best, ms_since(t0));
  }
  omp_set_num_threads(old);
  return 2.0 * n * n * n / (best * 1e-3) / 1e9;
}

// One thread (inside a one-thread parallel region, as the kernels call it), shape (M, N, K), op(A) = A or Aᵀ.
double small_gemm_gflops(int M, int N, int K, bool ta, bool tb) {
  Rng r(11);
  Vec a = r.normals((size_t)M * K), b = r.normals((size_t)K * N), c((size_t)M * N);
  const int lda = ta ? M : K, ldb = tb ? K : N;
  double best = 1e30;
#pragma omp parallel num_threads(1)
  {
    const int iters = std::max(50, int(2e8 / (2.0 * M * N * K)));
    for (int rep = 0; rep < 4; rep++) {
      auto t0 = Clock::now();
      for (int i = 0; i < iters; i++)
        gemm(ta, tb, M, N, K, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), N);
      best = std::min(best, ms_since(t0) / iters);
    }
  }
  return 2.0 * M * N * K / (best * 1e-3) / 1e9;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) out.push_back(t);
  return out;
}

int usage() {
  std::fprintf(stderr,
               "usage: bench_mixers [--threads P] [--T 64,256] [--B 64] [--chunk 64] [--reps 9] [--warmup 2]\n"
               "                    [--mixers ssd,gla,gdn,deltanet] [--ssd-groups 1] [--H 4] [--K 32] [--V 32]\n"
               "                    [--no-naive] [--no-sgemm]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = omp_get_max_threads(), Bn = 64, chunk = 64, reps = 9, warmup = 2, ssd_groups = 1;
  bool naive = true, sgemm = true;
  std::vector<int> Ts = {64, 256};
  std::vector<std::string> mixers = {"ssd", "gla", "gdn", "deltanet"};
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) std::exit(usage());
      return argv[++i];
    };
    if (a == "--threads") threads = std::stoi(next());
    else if (a == "--B") Bn = std::stoi(next());
    else if (a == "--chunk") chunk = std::stoi(next());
    else if (a == "--ssd-groups") ssd_groups = std::stoi(next());
    else if (a == "--H") kH = std::stoi(next());
    else if (a == "--K") kK = std::stoi(next());
    else if (a == "--V") kV = std::stoi(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--warmup") warmup = std::stoi(next());
    else if (a == "--T") {
      Ts.clear();
      for (auto& t : split(next())) Ts.push_back(std::stoi(t));
    } else if (a == "--mixers") mixers = split(next());
    else if (a == "--no-naive") naive = false;
    else if (a == "--no-sgemm") sgemm = false;
    else return usage();
  }
  if (threads < 1 || Bn < 1 || chunk < 1 || reps < 1 || warmup < 0 || ssd_groups < 1 || kH < 1 || kK < 1 || kV < 1 ||
      kH % ssd_groups)
    return usage();
  omp_set_num_threads(threads);

  if (sgemm) {
    const double g1 = sgemm_gflops(1024, 1), gp = sgemm_gflops(1024, threads);
    std::printf("{\"kind\":\"sgemm\",\"n\":1024,\"library\":\"oneDNN\",\"gflops_1thread\":%.2f,\"threads\":%d,"
                "\"gflops_threads\":%.2f}\n",
                g1, threads, gp);
    // the shapes inside one chunk (L = 64, head dim 32): scores (64x64x32, A·B), A·V-type (64x32x64),
    // state updates (32x32x64, Aᵀ·B), state reads (64x32x32)
    std::printf("{\"kind\":\"small_gemm\",\"threads\":1,\"gflops_64x64x32_NN\":%.2f,\"gflops_64x64x32_NT\":%.2f,"
                "\"gflops_64x32x64_NN\":%.2f,\"gflops_32x32x64_TN\":%.2f,\"gflops_64x32x32_NN\":%.2f}\n",
                small_gemm_gflops(64, 64, 32, false, false), small_gemm_gflops(64, 64, 32, false, true),
                small_gemm_gflops(64, 32, 64, false, false), small_gemm_gflops(32, 32, 64, true, false),
                small_gemm_gflops(64, 32, 32, false, false));
    std::fflush(stdout);
  }

  for (const auto& m : mixers)
    for (int Tn : Ts) {
      Rng r(1234 + Tn);
      std::unique_ptr<Case> c;
      if (m == "ssd") c = std::make_unique<SsdCase>(Bn, Tn, chunk, ssd_groups, r);
      else if (m == "gla") c = std::make_unique<GlaCase>(Bn, Tn, chunk, r);
      else if (m == "gdn") c = std::make_unique<DeltaCase>(Bn, Tn, chunk, true, r);
      else if (m == "deltanet") c = std::make_unique<DeltaCase>(Bn, Tn, chunk, false, r);
      else {
        std::fprintf(stderr, "bench_mixers: unknown mixer %s\n", m.c_str());
        return 2;
      }
      std::vector<double> tf, tb, tt, cf, cb, ct;
      for (int rep = 0; rep < warmup + reps; rep++) {
        const double c0 = cpu_ms();
        const auto t0 = Clock::now();
        c->fwd();
        const double f = ms_since(t0), c1 = cpu_ms();
        const auto t1 = Clock::now();
        c->bwd();
        const double b = ms_since(t1), c2 = cpu_ms();
        if (rep >= warmup) {
          tf.push_back(f), tb.push_back(b), tt.push_back(f + b);
          cf.push_back(c1 - c0), cb.push_back(c2 - c1), ct.push_back(c2 - c0);
        }
      }
      const double mf = median(tf), mb = median(tb), mt = median(tt);
      const double ff = c->flops_fwd(chunk), fb = c->flops_bwd(chunk);
      std::printf("{\"kind\":\"mixer\",\"mixer\":\"%s\",\"G\":%d,\"T\":%d,\"B\":%d,\"H\":%d,\"K\":%d,\"V\":%d,\"chunk\":%d,"
                  "\"threads\":%d,\"reps\":%d,\"ms_fwd\":%.4f,\"ms_bwd\":%.4f,\"ms_total\":%.4f,"
                  "\"spread\":%.3f,\"gflop_fwd\":%.5f,\"gflop_bwd\":%.5f,\"gflops_fwd\":%.2f,\"gflops_bwd\":%.2f,"
                  "\"gflops\":%.2f,\"cpu_ms_fwd\":%.4f,\"cpu_ms_bwd\":%.4f,\"cpu_ms_total\":%.4f",
                  c->name.c_str(), m == "ssd" ? ssd_groups : 0, Tn, Bn, kH, c->K, c->V, chunk, threads, reps, mf, mb, mt,
                  *std::max_element(tt.begin(), tt.end()) / *std::min_element(tt.begin(), tt.end()), ff * 1e-9,
                  fb * 1e-9, ff / (mf * 1e-3) / 1e9, fb / (mb * 1e-3) / 1e9, (ff + fb) / (mt * 1e-3) / 1e9, median(cf),
                  median(cb), median(ct));
      if (naive) {
        const auto t0 = Clock::now();
        c->naive_fwd();
        const double nf = ms_since(t0);
        const auto t1 = Clock::now();
        c->naive_bwd();
        const double nb = ms_since(t1);
        std::printf(",\"naive_ms_fwd\":%.2f,\"naive_ms_bwd\":%.2f,\"naive_ms_total\":%.2f,\"max_rel_err\":%.3g", nf,
                    nb, nf + nb, c->rel_err());
      }
      std::printf("}\n");
      std::fflush(stdout);
    }
  return 0;
}
