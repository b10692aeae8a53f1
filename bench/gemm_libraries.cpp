// One float GEMM library per process, timed on the GEMMs one E1-Bk0 training step runs (docs/blas-choice.md,
// "Which library, per ISA path"). bench/gemm_libraries.py runs it for every library, ISA path and thread count
// and writes the tables; run it by hand to look at one library:
//
//   build/bench/gemm_libraries --lib onednn --threads 1            # JSON lines: an "info" line, then one per case
//   ONEDNN_MAX_CPU_ISA=AVX2 build/bench/gemm_libraries --lib onednn --threads 2 --cases linear
//   build/bench/gemm_libraries --lib mkl --path .venv/lib/libmkl_rt.so.3 --probe   # the info line and one GEMM only
//
// Nothing is linked but libdl and OpenMP: the library is dlopen()ed (RTLD_LOCAL) by --lib, so two BLAS libraries
// never resolve each other's symbols, and a machine without BLIS or MKL still builds it (it is a target of
// bench/CMakeLists.txt; by hand: g++ -O2 -std=c++17 -fopenmp bench/gemm_libraries.cpp -ldl -o gemm_libraries).
//   onednn    libdnnl.so.2                                              dnnl_sgemm (row-major)
//   openblas  /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0  cblas_sgemm (CblasRowMajor)
//   blis      /usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4        cblas_sgemm
//   mkl       libmkl_rt.so.3 (.so.2), e.g. from PyPI's `mkl` in .venv/lib  cblas_sgemm, MKL_THREADING_LAYER=GNU
// All four then run on the process's libgomp; threads are set with omp_set_num_threads and the library's own
// call where it has one (openblas_set_num_threads, bli_thread_set_num_threads, MKL_Set_Num_Threads).
//
// Cases (row-major float, alpha 1):
//   linear layers of E1-Bk0 (d_model 128: qkv 128->384, o 128->128, MLP 128->512 and 512->128, lm_head 128->65)
//   over N = B·T rows, B = 64, T in {49, 255}: fwd Y = X W^T (N x OUT x IN), dX = dY W (N x IN x OUT),
//   dW += dY^T X (OUT x IN x N, beta 1);
//   attention, one (batch, head) pair (T x T x 32), as src/engine/ops/attention/fast.h calls it: blocks of 64 query
//   rows, each GEMM stopping at the block's diagonal, q|k|v read in place from rows of stride 384:
//   S = Q K^T, O = P V, dP = dO V^T, dQ = dS K, dK = dS^T Q, dV = P^T dO (each the sum of its block calls).
// Each case: the best of --trials trials (default 7) that each repeat it for >= --min-ms ms (default 50), as
// GFLOP/s; before timing, every call of the case is checked against a double-precision reference on up to 2048
// sampled output entries plus the corners: max_rel_err is max |C - ref| / sum_k |a_mk b_kn| (+ |beta C0|),
// about 1e-7 for a correct float GEMM and O(1) for a wrong transpose or leading dimension. With beta = 0 the output
// starts as NaN, so a library that reads C there fails the check too.
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

// ---- the library, through dlsym -------------------------------------------------------------------------------
using cblas_sgemm_t = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                               float*, int);
using dnnl_sgemm_t = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                             int64_t, float, float*, int64_t);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

struct Lib {
  std::string name, path;
  void* handle = nullptr;
  cblas_sgemm_t cblas = nullptr;
  dnnl_sgemm_t dnnl = nullptr;

  void* sym(const char* s) const { return handle ? dlsym(handle, s) : nullptr; }

  void sgemm(char ta, char tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float beta,
             float* C, int ldc) const {
    if (dnnl) {
      int st = dnnl(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
      if (st != 0) {
        std::fprintf(stderr, "dnnl_sgemm failed: status %d\n", st);
        std::exit(1);
      }
    } else {
      cblas(kRowMajor, ta == 'T' ? kTrans : kNoTrans, tb == 'T' ? kTrans : kNoTrans, M, N, K, 1.0f, A, lda, B, ldb,
            beta, C, ldc);
    }
  }

  void set_threads(int n) const {
    omp_set_num_threads(n);
    if (auto f = (void (*)(int))sym("openblas_set_num_threads")) f(n);
    if (auto f = (void (*)(int64_t))sym("bli_thread_set_num_threads")) f(n);  // dim_t
    if (auto f = (void (*)(int))sym("MKL_Set_Num_Threads")) f(n);
  }
};

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else if ((unsigned char)c < 0x20) o += ' ';
    else o += c;
  }
  return o;
}

Lib open_lib(const std::string& name, std::string path) {
  std::vector<std::string> tries;
  if (!path.empty()) tries = {path};
  else if (name == "onednn") tries = {"libdnnl.so.2", "libdnnl.so.3"};
  else if (name == "openblas")
    tries = {"/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0", "libopenblas.so.0"};
  else if (name == "blis") tries = {"/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4", "libblis.so.4"};
  else if (name == "mkl") tries = {"libmkl_rt.so.3", "libmkl_rt.so.2"};
  else {
    std::fprintf(stderr, "--lib must be onednn, openblas, blis or mkl\n");
    std::exit(2);
  }
  // oneMKL: the GNU OpenMP layer (libmkl_gnu_thread over libgomp), like the others, unless the caller chose one
  if (name == "mkl") setenv("MKL_THREADING_LAYER", "GNU", 0);
  Lib lib;
  lib.name = name;
  std::string errs;
  for (const auto& p : tries) {
    lib.handle = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle) {
      lib.path = p;
      break;
    }
    errs += std::string(dlerror()) + "; ";
  }
  if (!lib.handle) {
    std::fprintf(stderr, "cannot load %s: %s\n", name.c_str(), errs.c_str());
    std::exit(3);
  }
  if (name == "onednn") lib.dnnl = (dnnl_sgemm_t)lib.sym("dnnl_sgemm");
  else lib.cblas = (cblas_sgemm_t)lib.sym("cblas_sgemm");
  if (!lib.dnnl && !lib.cblas) {
    std::fprintf(stderr, "%s: no %s in %s\n", name.c_str(), name == "onednn" ? "dnnl_sgemm" : "cblas_sgemm",
                 lib.path.c_str());
    std::exit(3);
  }
  if (name == "mkl") {  // MKL_THREADING_LAYER is read at the first call; set it explicitly as well
    if (auto f = (int (*)(int))lib.sym("MKL_Set_Threading_Layer")) f(3 /* MKL_THREADING_GNU */);
  }
  return lib;
}

// What the library says about the code path it runs (after one call, so lazy initialisation has happened).
std::string lib_info(const Lib& lib) {
  std::ostringstream o;
  if (lib.name == "onednn") {
    if (auto f = (int (*)())lib.sym("dnnl_get_effective_cpu_isa")) {
      const int isa = f();
      const char* n = "?";
      switch (isa) {  // dnnl_cpu_isa_t of oneDNN 2.x
        case 0x0: n = "all"; break;
        case 0x1: n = "sse41"; break;
        case 0x3: n = "avx"; break;
        case 0x7: n = "avx2"; break;
        case 0x27: n = "avx512_core"; break;
        case 0x67: n = "avx512_core_vnni"; break;
        case 0xe7: n = "avx512_core_bf16"; break;
        case 0x3e7: n = "avx512_core_amx"; break;
        case 0xf: n = "avx2_vnni"; break;
        default: break;
      }
      o << "effective ISA " << n << " (0x" << std::hex << isa << std::dec << ")";
    }
    struct V {
      int major, minor, patch;
      const char* hash;
      unsigned cpu_runtime, gpu_runtime;
    };
    if (auto f = (const V* (*)())lib.sym("dnnl_version")) {
      const V* v = f();
      o << "; oneDNN " << v->major << "." << v->minor << "." << v->patch << " runtime " << v->cpu_runtime;
    }
  } else if (lib.name == "openblas") {
    if (auto f = (char* (*)())lib.sym("openblas_get_corename")) o << "core " << f();
    if (auto f = (char* (*)())lib.sym("openblas_get_config")) o << "; " << f();
  } else if (lib.name == "blis") {
    auto q = (int (*)())lib.sym("bli_arch_query_id");
    auto s = (const char* (*)(int))lib.sym("bli_arch_string");
    if (q && s) o << "sub-config " << s(q());
    if (auto f = (const char* (*)())lib.sym("bli_info_get_version_str")) o << "; BLIS " << f();
  } else if (lib.name == "mkl") {
    struct MKLVersion {
      int major, minor, update;
      char *status, *build, *processor, *platform;
    } v{};
    if (auto f = (void (*)(MKLVersion*))lib.sym("MKL_Get_Version")) {
      f(&v);
      o << "oneMKL " << v.major << "." << v.minor << "." << v.update << " build " << (v.build ? v.build : "?")
        << "; processor: " << (v.processor ? v.processor : "?");
    }
    if (auto f = (int (*)())lib.sym("MKL_CBWR_Get_Auto_Branch")) o << "; cbwr auto branch " << f();
  }
  // which threading runtimes and BLAS libraries are mapped into this process
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> seen;
  for (std::string line; std::getline(maps, line);) {
    auto p = line.find('/');
    if (p == std::string::npos) continue;
    std::string f = line.substr(p);
    std::string base = f.substr(f.rfind('/') + 1);
    for (const char* k : {"gomp", "iomp", "mkl_", "blis", "openblas", "dnnl", "tbb"})
      if (base.find(k) != std::string::npos && std::find(seen.begin(), seen.end(), base) == seen.end())
        seen.push_back(base);
  }
  o << "; mapped:";
  for (auto& s : seen) o << " " << s;
  return o.str();
}

// ---- cases -----------------------------------------------------------------------------------------------------
struct Call {
  char ta, tb;
  int M, N, K;
  const float* A;
  int lda;
  const float* B;
  int ldb;
  float beta;
  float* C;
  int ldc;
};

struct Case {
  std::string kind;     // "linear" or "attention"
  std::string layer;    // qkv, o, mlp_up, mlp_down, lm_head; attn
  std::string product;  // fwd, dX, dW; S, O, dP, dQ, dK, dV
  int T, N, M, Nn, K;   // nominal shape (M x Nn x K), for the tables
  int per_step;         // how often one training step runs the case (attention: per (b, h) pair of each layer)
  std::vector<Call> calls;
  double flops() const {
    double f = 0;
    for (auto& c : calls) f += 2.0 * c.M * c.N * c.K;
    return f;
  }
};

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& e : v) e = dist(gen);
  return v;
}

// Buffers live as long as the cases.
std::vector<std::vector<float>> g_buffers;
float* buffer(size_t n, unsigned seed) {
  g_buffers.push_back(random_floats(n, seed));
  return g_buffers.back().data();
}

void add_linear_cases(std::vector<Case>& cases, int T, int B) {
  const int N = B * T, L = 4;
  struct Layer {
    const char* name;
    int in, out, per_step;
  };
  const Layer layers[] = {{"qkv", 128, 384, L}, {"o", 128, 128, L}, {"mlp_up", 128, 512, L},
                          {"mlp_down", 512, 128, L}, {"lm_head", 128, 65, 1}};
  unsigned seed = 100 + T;
  for (const Layer& ly : layers) {
    const int IN = ly.in, OUT = ly.out;
    float* X = buffer((size_t)N * IN, seed++);
    float* W = buffer((size_t)OUT * IN, seed++);
    float* dY = buffer((size_t)N * OUT, seed++);
    float* Y = buffer((size_t)N * OUT, seed++);
    float* dX = buffer((size_t)N * IN, seed++);
    float* dW = buffer((size_t)OUT * IN, seed++);
    cases.push_back({"linear", ly.name, "fwd", T, N, N, OUT, IN, ly.per_step,
                     {{'N', 'T', N, OUT, IN, X, IN, W, IN, 0.f, Y, OUT}}});
    cases.push_back({"linear", ly.name, "dX", T, N, N, IN, OUT, ly.per_step,
                     {{'N', 'N', N, IN, OUT, dY, OUT, W, IN, 0.f, dX, IN}}});
    cases.push_back({"linear", ly.name, "dW", T, N, OUT, IN, N, ly.per_step,
                     {{'T', 'N', OUT, IN, N, dY, OUT, X, IN, 1.f, dW, IN}}});
  }
}

// One (batch, head) pair's GEMMs as attention_forward / attention_backward (fast.h, no window) issue them.
void add_attention_cases(std::vector<Case>& cases, int T, int B) {
  const int D = 32, C = 128, ld = 3 * C, TB = 64;
  unsigned seed = 900 + T;
  float* qkv = buffer((size_t)T * ld, seed++);  // q | k | v of one sequence; head 0's columns
  const float *Q = qkv, *K = qkv + C, *V = qkv + 2 * C;
  float* P = buffer((size_t)T * T, seed++);
  float* dS = buffer((size_t)T * T, seed++);
  float* dO = buffer((size_t)T * C, seed++);
  float* O = buffer((size_t)T * C, seed++);
  float* dqkv = buffer((size_t)T * ld, seed++);
  float *dQ = dqkv, *dK = dqkv + C, *dV = dqkv + 2 * C;
  const int pairs = 4 /* layers */ * B * 4 /* heads */;  // (b, h) pairs one training step runs
  Case S{"attention", "attn", "S", T, B * T, T, T, D, 2 * pairs, {}};  // forward, and recomputed in backward
  Case Oc{"attention", "attn", "O", T, B * T, T, D, T, pairs, {}};
  Case dP{"attention", "attn", "dP", T, B * T, T, T, D, pairs, {}};
  Case dQc{"attention", "attn", "dQ", T, B * T, T, D, T, pairs, {}};
  Case dKc{"attention", "attn", "dK", T, B * T, T, D, T, pairs, {}};
  Case dVc{"attention", "attn", "dV", T, B * T, T, D, T, pairs, {}};
  for (int t0 = 0; t0 < T; t0 += TB) {
    const int t1 = std::min(t0 + TB, T), tb = t1 - t0, kn = t1;
    S.calls.push_back({'N', 'T', tb, kn, D, Q + (size_t)t0 * ld, ld, K, ld, 0.f, P + (size_t)t0 * T, T});
    Oc.calls.push_back({'N', 'N', tb, D, kn, P + (size_t)t0 * T, T, V, ld, 0.f, O + (size_t)t0 * C, C});
    dP.calls.push_back({'N', 'T', tb, kn, D, dO + (size_t)t0 * C, C, V, ld, 0.f, dS + (size_t)t0 * T, T});
    dQc.calls.push_back({'N', 'N', tb, D, kn, dS + (size_t)t0 * T, T, K, ld, 0.f, dQ + (size_t)t0 * ld, ld});
  }
  for (int s0 = 0; s0 < T; s0 += TB) {
    const int s1 = std::min(s0 + TB, T), sb = s1 - s0, rows = T - s0;
    dKc.calls.push_back({'T', 'N', sb, D, rows, dS + (size_t)s0 * T + s0, T, Q + (size_t)s0 * ld, ld, 0.f,
                         dK + (size_t)s0 * ld, ld});
    dVc.calls.push_back({'T', 'N', sb, D, rows, P + (size_t)s0 * T + s0, T, dO + (size_t)s0 * C, C, 0.f,
                         dV + (size_t)s0 * ld, ld});
  }
  for (Case* c : {&S, &Oc, &dP, &dQc, &dKc, &dVc}) cases.push_back(*c);
}

// ---- check and time ----------------------------------------------------------------------------------------------
double check_call(const Lib& lib, const Call& c, std::mt19937& gen) {
  auto a = [&](int m, int k) { return (double)(c.ta == 'T' ? c.A[(size_t)k * c.lda + m] : c.A[(size_t)m * c.lda + k]); };
  auto b = [&](int k, int n) { return (double)(c.tb == 'T' ? c.B[(size_t)n * c.ldb + k] : c.B[(size_t)k * c.ldb + n]); };
  std::vector<std::pair<int, int>> idx = {{0, 0}, {0, c.N - 1}, {c.M - 1, 0}, {c.M - 1, c.N - 1}};
  if ((size_t)c.M * c.N <= 2048) {
    idx.clear();
    for (int m = 0; m < c.M; m++)
      for (int n = 0; n < c.N; n++) idx.push_back({m, n});
  } else {
    std::uniform_int_distribution<int> dm(0, c.M - 1), dn(0, c.N - 1);
    for (int i = 0; i < 2048; i++) idx.push_back({dm(gen), dn(gen)});
  }
  // beta = 0: C starts as NaN (it must not be read); beta = 1: C keeps its values, remembered for the reference
  std::vector<double> c0(idx.size(), 0.0);
  if (c.beta == 0.f) {
    for (int m = 0; m < c.M; m++)
      for (int n = 0; n < c.N; n++) c.C[(size_t)m * c.ldc + n] = std::numeric_limits<float>::quiet_NaN();
  } else {
    for (size_t i = 0; i < idx.size(); i++) c0[i] = c.C[(size_t)idx[i].first * c.ldc + idx[i].second];
  }
  lib.sgemm(c.ta, c.tb, c.M, c.N, c.K, c.A, c.lda, c.B, c.ldb, c.beta, c.C, c.ldc);
  double worst = 0;
  for (size_t i = 0; i < idx.size(); i++) {
    const int m = idx[i].first, n = idx[i].second;
    double ref = c.beta * c0[i], mag = std::abs(c.beta * c0[i]);
    for (int k = 0; k < c.K; k++) {
      ref += a(m, k) * b(k, n);
      mag += std::abs(a(m, k) * b(k, n));
    }
    const double got = c.C[(size_t)m * c.ldc + n];
    const double err = std::isfinite(got) ? std::abs(got - ref) / std::max(mag, 1e-30) : INFINITY;
    worst = std::max(worst, err);
  }
  return worst;
}

double best_seconds(const std::function<void()>& f, int trials, double min_s) {
  using clock = std::chrono::steady_clock;
  f();  // warm-up: first-call setup, page faults, thread pool start
  double best = 1e30;
  for (int t = 0; t < trials; t++) {
    int reps = 0;
    const auto t0 = clock::now();
    double dt = 0;
    do {
      f();
      reps++;
      dt = std::chrono::duration<double>(clock::now() - t0).count();
    } while (dt < min_s);
    best = std::min(best, dt / reps);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string name, path, which = "all";
  int threads = 1, trials = 7;
  double min_ms = 50;
  bool probe = false;
  std::vector<int> Ts = {49, 255};
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--lib") name = next();
    else if (a == "--path") path = next();
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--trials") trials = std::stoi(next());
    else if (a == "--min-ms") min_ms = std::stod(next());
    else if (a == "--cases") which = next();  // all, linear, attention
    else if (a == "--T") {
      Ts.clear();
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');) Ts.push_back(std::stoi(t));
    } else if (a == "--probe") probe = true;
    else {
      std::fprintf(stderr,
                   "usage: gemm_libraries --lib onednn|openblas|blis|mkl [--path LIB.so] [--threads N] [--trials 7]\n"
                   "                      [--min-ms 50] [--cases all|linear|attention] [--T 49,255] [--probe]\n");
      return 2;
    }
  }
  if (name.empty()) {
    std::fprintf(stderr, "--lib is required (onednn, openblas, blis or mkl)\n");
    return 2;
  }
  Lib lib = open_lib(name, path);
  lib.set_threads(threads);
  {  // one call, so that the library has picked its code path before it is asked which
    std::vector<float> a(64 * 64, 1.f), b(64 * 64, 1.f), c(64 * 64, 0.f);
    lib.sgemm('N', 'N', 64, 64, 64, a.data(), 64, b.data(), 64, 0.f, c.data(), 64);
  }
  std::printf("{\"info\": true, \"lib\": \"%s\", \"path\": \"%s\", \"threads\": %d, \"omp_max_threads\": %d, "
              "\"detail\": \"%s\"}\n",
              name.c_str(), json_escape(lib.path).c_str(), threads, omp_get_max_threads(),
              json_escape(lib_info(lib)).c_str());
  std::fflush(stdout);
  if (probe) return 0;

  const int B = 64;
  std::vector<Case> cases;
  for (int T : Ts) {
    if (which == "all" || which == "linear") add_linear_cases(cases, T, B);
    if (which == "all" || which == "attention") add_attention_cases(cases, T, B);
  }
  std::mt19937 gen(7);
  bool all_ok = true;
  for (const Case& c : cases) {
    double err = 0;
    for (const Call& call : c.calls) err = std::max(err, check_call(lib, call, gen));
    if (!(err < 1e-5)) all_ok = false;
    const double s = best_seconds(
        [&] {
          for (const Call& k : c.calls) lib.sgemm(k.ta, k.tb, k.M, k.N, k.K, k.A, k.lda, k.B, k.ldb, k.beta, k.C, k.ldc);
        },
        trials, min_ms * 1e-3);
    std::printf("{\"lib\": \"%s\", \"threads\": %d, \"kind\": \"%s\", \"T\": %d, \"rows\": %d, \"layer\": \"%s\", "
                "\"product\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"calls\": %zu, \"per_step\": %d, "
                "\"flops\": %.0f, \"seconds\": %.9g, \"gflops\": %.3f, \"max_rel_err\": %.3g}\n",
                name.c_str(), threads, c.kind.c_str(), c.T, c.N, c.layer.c_str(), c.product.c_str(), c.M, c.Nn, c.K,
                c.calls.size(), c.per_step, c.flops(), s, c.flops() / s * 1e-9, err);
    std::fflush(stdout);
  }
  if (!all_ok) {
    std::fprintf(stderr, "%s: some product differs from the double-precision reference (max_rel_err >= 1e-5)\n",
                 name.c_str());
    return 4;
  }
  return 0;
}
