#pragma once
// Element kernels: an op written as a sequence of kernels, each a function of one output element's index that
// reads only what earlier kernels wrote. The same code runs on the GPU (engine/cuda/launch.cuh: one thread per
// element, one CUDA kernel each) and on the host (HostLaunch below: a loop), so the CPU suite checks a GPU
// algorithm's index arithmetic and mathematics against the CPU references without a GPU.
//
// Rules for an element kernel (a struct with `CANONLAB_HD void operator()(size_t i) const`): it writes only element
// i's outputs, reads nothing another element of the same kernel writes, and sums in a fixed order inside the
// element. So it has no races and no atomics, and its bits do not depend on how the elements are scheduled.
#include <cmath>
#include <cstddef>

#if defined(__CUDACC__)
#define CANONLAB_HD __host__ __device__
#else
#define CANONLAB_HD
#endif

namespace canonlab {

// exp with the accuracy of the libraries on both sides (expf / exp on the device, never the fast intrinsics).
CANONLAB_HD inline float hd_exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}
CANONLAB_HD inline double hd_exp(double x) {
#if defined(__CUDA_ARCH__)
  return exp(x);
#else
  return std::exp(x);
#endif
}

CANONLAB_HD inline double hd_log1p(double x) {
#if defined(__CUDA_ARCH__)
  return log1p(x);
#else
  return std::log1p(x);
#endif
}
CANONLAB_HD inline double hd_sqrt(double x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}

// σ(x) = 1 / (1 + e^−x), activation.h's formula (with the library exp)
template <class T>
CANONLAB_HD inline T hd_sigmoid(T x) {
  return T(1) / (T(1) + hd_exp(-x));
}
// softplus(x) = log(1 + e^x), = x above 20 (activation.h's softplus, PyTorch's threshold)
CANONLAB_HD inline double hd_softplus(double x) { return x > 20 ? x : hd_log1p(hd_exp(x)); }
// silu'(x) = σ(x) (1 + x (1 − σ(x)))
template <class T>
CANONLAB_HD inline T hd_silu_grad(T x) {
  const T s = hd_sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}

// The chunk grid of a chunked scan over (Bn, Tn, H) tokens: nch chunks of `chunk` tokens (the last may be shorter);
// Lc = min(chunk, Tn), the stride of per-chunk (Lc, Lc) matrices.
struct ChunkGrid {
  int Bn = 0, Tn = 0, H = 0, chunk = 1, nch = 0, Lc = 0;
  CANONLAB_HD int length(int c) const { return chunk < Tn - c * chunk ? chunk : Tn - c * chunk; }
  CANONLAB_HD int last(int c) const { return c * chunk + length(c) - 1; }
  CANONLAB_HD size_t chunk_id(int b, int h, int c) const { return ((size_t)b * H + h) * nch + c; }
  void set_grid(int Bn_, int Tn_, int H_, int chunk_) {
    Bn = Bn_, Tn = Tn_, H = H_, chunk = chunk_;
    nch = Tn > 0 ? (Tn + chunk - 1) / chunk : 0;
    Lc = chunk < Tn ? chunk : Tn;
  }
};

// One state entry carried from chunk to chunk when a chunk scales it by one factor, decay(c). Forward (the states):
// out[0] = 0, out[c + 1] = decay(c) out[c] + in[c]. Backward (their gradients): out[nch − 1] = 0,
// out[c − 1] = decay(c) out[c] + in[c]. out and in point at the entry of chunk 0, chunks `stride` apart.
template <class T, class Decay>
CANONLAB_HD void pass_through_chunks(T* out, const T* in, size_t stride, int nch, bool forward, const Decay& decay) {
  T s = T(0);
  for (int step = 0; step < nch; step++) {
    const int c = forward ? step : nch - 1 - step;
    out[c * stride] = s;
    if (forward ? c + 1 < nch : c > 0) s = decay(c) * s + in[c * stride];
  }
}

// Column sums over rows that do not depend on the schedule, as row_ops::row_block_sums on the CPU: rows cut into
// kRowBlocks fixed blocks; ColumnPartials sums block b's rows in order into partial[b, j] (one element per (block,
// column)); ColumnTotals adds the partials in block order into out[j] (one element per column). term(n, j) is row
// n's contribution to column j, in double.
constexpr int kRowBlocks = 64;

template <class Term>
struct ColumnPartials {
  Term term;
  double* partial;  // (kRowBlocks, J)
  int N, J;
  CANONLAB_HD void operator()(size_t i) const {
    const int j = int(i % J), blk = int(i / J);
    const int n0 = int((long long)N * blk / kRowBlocks), n1 = int((long long)N * (blk + 1) / kRowBlocks);
    double s = 0;
    for (int n = n0; n < n1; n++) s += term(n, j);
    partial[i] = s;
  }
};

template <class T>
struct ColumnTotals {
  const double* partial;
  T* out;  // (J), accumulated
  int J;
  CANONLAB_HD void operator()(size_t j) const {
    double s = 0;
    for (int blk = 0; blk < kRowBlocks; blk++) s += partial[(size_t)blk * J + j];
    out[j] += T(s);
  }
};

// out[j] += Σ_n term(n, j) through the fixed blocks; partial: kRowBlocks · J doubles of scratch.
template <class T, class Launch, class Term>
void column_sums(const Launch& launch, T* out, double* partial, int N, int J, const Term& term) {
  launch((size_t)kRowBlocks * J, ColumnPartials<Term>{term, partial, N, J});
  launch((size_t)J, ColumnTotals<T>{partial, out, J});
}

// Runs a kernel's elements on the host, threaded; the elements are independent, so the bits do not depend on it.
struct HostLaunch {
  template <class Kernel>
  void operator()(size_t n, const Kernel& kernel) const {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
    for (size_t i = 0; i < n; i++) kernel(i);
  }
};

// The scratch of a sequence of kernels: named regions of one buffer, each aligned to 256 bytes.
class ScratchLayout {
 public:
  // Reserves n elements of T; returns the region's byte offset.
  template <class T>
  size_t reserve(size_t n) {
    const size_t at = bytes_;
    bytes_ += (n * sizeof(T) + 255) / 256 * 256;
    return at;
  }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
};

template <class T>
T* scratch_at(void* base, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

}  // namespace canonlab
