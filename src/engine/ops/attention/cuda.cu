// Attention kernels (cuda.h).
//
// Flash kernels. A query (or key) row belongs to a group of TPQ adjacent threads, each holding DPT of its head
// dims in registers (head dim up to DPT · TPQ: 16·1, 32·1, 32·2, 32·4); a dot product is the group's partial sums
// combined with xor shuffles. Tiles of the other side's rows sit in shared memory, each DPT-chunk padded by 4
// floats so the chunks the group's threads read at once fall in different banks. Every sum runs in a fixed
// order (keys or queries ascending, fixed shuffle trees), so the results are the same bits on every run.
// Grid: x = (batch, head), y = 64-row block.
//   forward   block = 64 queries; per 32-key tile: scores into registers, one rescale of the running output per
//             tile (online softmax), then P·V
//   dk, dv    block = 64 keys; walks 32-query tiles from the first query that sees them to the last, one query at
//             a time: p = exp(s − lse), ds = p (dO·v − delta), dv += p dO, dk += ds q
//   dq        block = 64 queries; walks 32-key tiles like the forward: dq += ds k
// delta = rowsum(dO ⊙ O) per query comes first, from its own small kernel.
#include <cmath>
#include <string>

#include "engine/cuda/device_utils.cuh"
#include "engine/ops/attention/cuda.h"

namespace canonlab::cuda {

using namespace detail;

namespace {

constexpr int kRowsPerBlock = 64;  // queries (forward, dq) or keys (dk/dv) owned by one block
constexpr int kTileRows = 32;      // rows of the other side per shared-memory tile
constexpr int kPad = 4;            // floats after each DPT-chunk of a shared row

template <int DPT, int TPQ>
struct Flash {
  static constexpr int kHead = DPT * TPQ;          // head dims one group holds
  static constexpr int kChunk = DPT + kPad;        // a thread's chunk of a shared row, padded
  static constexpr int kRowStride = TPQ * kChunk;  // floats per shared row
  static constexpr int kThreads = kRowsPerBlock * TPQ;
};

// Sum over the TPQ adjacent lanes of a group (all of them get it: IEEE addition commutes).
template <int TPQ>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int off = TPQ / 2; off > 0; off /= 2) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}

// rows [row0, row0 + R) of one head of a (Tn, ·) token-row matrix (row stride ld, the head's first column at g)
// into shared memory, zero past Tn and past the head dim D
template <int DPT, int TPQ, int R>
__device__ void load_rows(float* sm, const float* g, int ld, int row0, int Tn, int D) {
  using F = Flash<DPT, TPQ>;
  for (int e = threadIdx.x; e < R * F::kHead; e += blockDim.x) {
    const int j = e / F::kHead, d = e % F::kHead, row = row0 + j;
    sm[j * F::kRowStride + (d / DPT) * F::kChunk + d % DPT] = row < Tn && d < D ? g[size_t(row) * ld + d] : 0.f;
  }
}

// this thread's DPT dims of one head row from global memory (zero past Tn or D)
template <int DPT>
__device__ __forceinline__ void load_own(float (&r)[DPT], const float* g, int ld, int row, int part, int Tn, int D) {
#pragma unroll
  for (int d = 0; d < DPT; d++) {
    const int dd = part * DPT + d;
    r[d] = row < Tn && dd < D ? g[size_t(row) * ld + dd] : 0.f;
  }
}

template <int DPT>
__device__ __forceinline__ float dot_shared(const float (&r)[DPT], const float* s) {
  const float4* s4 = reinterpret_cast<const float4*>(s);
  float acc = 0.f;
#pragma unroll
  for (int d4 = 0; d4 < DPT / 4; d4++) {
    const float4 x = s4[d4];
    acc += r[4 * d4] * x.x;
    acc += r[4 * d4 + 1] * x.y;
    acc += r[4 * d4 + 2] * x.z;
    acc += r[4 * d4 + 3] * x.w;
  }
  return acc;
}

template <int DPT>
__device__ __forceinline__ void axpy_shared(float (&acc)[DPT], float a, const float* s) {
  const float4* s4 = reinterpret_cast<const float4*>(s);
#pragma unroll
  for (int d4 = 0; d4 < DPT / 4; d4++) {
    const float4 x = s4[d4];
    acc[4 * d4] += a * x.x;
    acc[4 * d4 + 1] += a * x.y;
    acc[4 * d4 + 2] += a * x.z;
    acc[4 * d4 + 3] += a * x.w;
  }
}

// query t sees key s: t − window < s <= t (window 0: s <= t)
__device__ __forceinline__ bool sees(int t, int s, int window) { return s <= t && (window == 0 || t - s < window); }

template <int DPT, int TPQ>
__global__ void __launch_bounds__(Flash<DPT, TPQ>::kThreads)
    flash_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v, int ld,
                         const float* slopes, int window, int Tn, int H, int D, float scale) {
  using F = Flash<DPT, TPQ>;
  __shared__ __align__(16) float sk[kTileRows * F::kRowStride];
  __shared__ __align__(16) float sv[kTileRows * F::kRowStride];
  const int bh = blockIdx.x, b = bh / H, h = bh % H, q0 = blockIdx.y * kRowsPerBlock;
  const int part = threadIdx.x % TPQ, t = q0 + threadIdx.x / TPQ;
  const bool row_ok = t < Tn;
  const size_t head = size_t(b) * Tn * ld + size_t(h) * D;
  const float slope = slopes ? slopes[h] : 0.f;
  float qr[DPT], acc[DPT];
  load_own<DPT>(qr, q + head, ld, t, part, Tn, D);
#pragma unroll
  for (int d = 0; d < DPT; d++) acc[d] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int last = min(q0 + kRowsPerBlock, Tn) - 1;
  for (int k0 = window_start(q0, window) / kTileRows * kTileRows; k0 <= last; k0 += kTileRows) {
    __syncthreads();  // the previous tile has been read by everyone
    load_rows<DPT, TPQ, kTileRows>(sk, k + head, ld, k0, Tn, D);
    load_rows<DPT, TPQ, kTileRows>(sv, v + head, ld, k0, Tn, D);
    __syncthreads();
    float s[kTileRows];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTileRows; j++) {
      const float dot = group_sum<TPQ>(dot_shared<DPT>(qr, sk + j * F::kRowStride + part * F::kChunk));
      const int key = k0 + j;
      s[j] = row_ok && sees(t, key, window) ? scale * dot - slope * float(t - key) : -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -INFINITY) continue;  // this row sees none of these keys and none before
    const float alpha = expf(m - m_new);
#pragma unroll
    for (int d = 0; d < DPT; d++) acc[d] *= alpha;
    float psum = 0.f;
#pragma unroll
    for (int j = 0; j < kTileRows; j++) {
      const float p = expf(s[j] - m_new);
      psum += p;
      axpy_shared<DPT>(acc, p, sv + j * F::kRowStride + part * F::kChunk);
    }
    l = l * alpha + psum;
    m = m_new;
  }
  if (!row_ok) return;
  const float inv = 1.f / l;
  float* o = out + (size_t(b) * Tn + t) * (size_t(H) * D) + size_t(h) * D;
#pragma unroll
  for (int d = 0; d < DPT; d++) {
    const int dd = part * DPT + d;
    if (dd < D) o[dd] = acc[d] * inv;
  }
  if (part == 0) lse[size_t(bh) * Tn + t] = m + logf(l);
}

// delta[b, h, t] = Σ_d dout[b, t, h, d] · out[b, t, h, d]: a warp per (b, t, h)
__global__ void flash_delta_kernel(float* delta, const float* dout, const float* out, int Tn, int H, int D,
                                   size_t rows) {
  const size_t row = blockIdx.x * size_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float* a = dout + row * D;  // rows of (B, Tn, H) in memory order
  const float* o = out + row * D;
  float s = 0.f;
  for (int d = lane; d < D; d += kWarp) s += a[d] * o[d];
  s = warp_sum(s);
  const size_t h = row % H, bt = row / H, b = bt / Tn, t = bt % Tn;
  if (lane == 0) delta[(b * H + h) * Tn + t] = s;
}

template <int DPT, int TPQ>
__global__ void __launch_bounds__(Flash<DPT, TPQ>::kThreads)
    flash_dkdv_kernel(float* dk, float* dv, int ld_d, const float* dout, const float* lse, const float* delta,
                      const float* q, const float* k, const float* v, int ld, const float* slopes, int window, int Tn,
                      int H, int D, float scale) {
  using F = Flash<DPT, TPQ>;
  __shared__ __align__(16) float sq[kTileRows * F::kRowStride];
  __shared__ __align__(16) float sdo[kTileRows * F::kRowStride];
  __shared__ float slse[kTileRows], sdelta[kTileRows];
  const int bh = blockIdx.x, b = bh / H, h = bh % H, s0 = blockIdx.y * kRowsPerBlock;
  const int part = threadIdx.x % TPQ, key = s0 + threadIdx.x / TPQ;
  const bool key_ok = key < Tn;
  const int C = H * D;
  const size_t head = size_t(b) * Tn * ld + size_t(h) * D;
  const size_t ohead = size_t(b) * Tn * C + size_t(h) * D;
  const float slope = slopes ? slopes[h] : 0.f;
  float kr[DPT], vr[DPT], dkr[DPT], dvr[DPT];
  load_own<DPT>(kr, k + head, ld, key, part, Tn, D);
  load_own<DPT>(vr, v + head, ld, key, part, Tn, D);
#pragma unroll
  for (int d = 0; d < DPT; d++) dkr[d] = dvr[d] = 0.f;
  // the queries that see keys [s0, s_last]: s0 <= t < s_last + window (every t >= s0 without a window)
  const int s_last = min(s0 + kRowsPerBlock, Tn) - 1;
  const int q_end = window > 0 ? min(Tn, s_last + window) : Tn;
  for (int t0 = s0 / kTileRows * kTileRows; t0 < q_end; t0 += kTileRows) {
    __syncthreads();
    load_rows<DPT, TPQ, kTileRows>(sq, q + head, ld, t0, Tn, D);
    load_rows<DPT, TPQ, kTileRows>(sdo, dout + ohead, C, t0, Tn, D);
    for (int i = threadIdx.x; i < kTileRows; i += blockDim.x) {
      const int t = t0 + i;
      slse[i] = t < Tn ? lse[size_t(bh) * Tn + t] : 0.f;
      sdelta[i] = t < Tn ? delta[size_t(bh) * Tn + t] : 0.f;
    }
    __syncthreads();
#pragma unroll 1  // four register-resident rows already: unrolling only spills
    for (int i = 0; i < kTileRows; i++) {
      const float* qi = sq + i * F::kRowStride + part * F::kChunk;
      const float* doi = sdo + i * F::kRowStride + part * F::kChunk;
      const float qk = group_sum<TPQ>(dot_shared<DPT>(kr, qi));
      const float dov = group_sum<TPQ>(dot_shared<DPT>(vr, doi));
      const int t = t0 + i;
      const bool ok = key_ok && t < Tn && sees(t, key, window);
      const float p = ok ? expf(scale * qk - slope * float(t - key) - slse[i]) : 0.f;
      const float ds = p * (dov - sdelta[i]);
      axpy_shared<DPT>(dvr, p, doi);
      axpy_shared<DPT>(dkr, ds, qi);
    }
  }
  if (!key_ok) return;
  float* dkrow = dk + (size_t(b) * Tn + key) * ld_d + size_t(h) * D;
  float* dvrow = dv + (size_t(b) * Tn + key) * ld_d + size_t(h) * D;
#pragma unroll
  for (int d = 0; d < DPT; d++) {
    const int dd = part * DPT + d;
    if (dd < D) {
      dkrow[dd] = dkr[d] * scale;
      dvrow[dd] = dvr[d];
    }
  }
}

template <int DPT, int TPQ>
__global__ void __launch_bounds__(Flash<DPT, TPQ>::kThreads)
    flash_dq_kernel(float* dq, int ld_d, const float* dout, const float* lse, const float* delta, const float* q,
                    const float* k, const float* v, int ld, const float* slopes, int window, int Tn, int H, int D,
                    float scale) {
  using F = Flash<DPT, TPQ>;
  __shared__ __align__(16) float sk[kTileRows * F::kRowStride];
  __shared__ __align__(16) float sv[kTileRows * F::kRowStride];
  const int bh = blockIdx.x, b = bh / H, h = bh % H, q0 = blockIdx.y * kRowsPerBlock;
  const int part = threadIdx.x % TPQ, t = q0 + threadIdx.x / TPQ;
  const bool row_ok = t < Tn;
  const int C = H * D;
  const size_t head = size_t(b) * Tn * ld + size_t(h) * D;
  const float slope = slopes ? slopes[h] : 0.f;
  float qr[DPT], dor[DPT], dqr[DPT];
  load_own<DPT>(qr, q + head, ld, t, part, Tn, D);
  load_own<DPT>(dor, dout + size_t(b) * Tn * C + size_t(h) * D, C, t, part, Tn, D);
#pragma unroll
  for (int d = 0; d < DPT; d++) dqr[d] = 0.f;
  const float lse_t = row_ok ? lse[size_t(bh) * Tn + t] : 0.f;
  const float delta_t = row_ok ? delta[size_t(bh) * Tn + t] : 0.f;
  const int last = min(q0 + kRowsPerBlock, Tn) - 1;
  for (int k0 = window_start(q0, window) / kTileRows * kTileRows; k0 <= last; k0 += kTileRows) {
    __syncthreads();
    load_rows<DPT, TPQ, kTileRows>(sk, k + head, ld, k0, Tn, D);
    load_rows<DPT, TPQ, kTileRows>(sv, v + head, ld, k0, Tn, D);
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < kTileRows; j++) {
      const float* kj = sk + j * F::kRowStride + part * F::kChunk;
      const float qk = group_sum<TPQ>(dot_shared<DPT>(qr, kj));
      const float dov = group_sum<TPQ>(dot_shared<DPT>(dor, sv + j * F::kRowStride + part * F::kChunk));
      const int key = k0 + j;
      const bool ok = row_ok && sees(t, key, window);
      const float p = ok ? expf(scale * qk - slope * float(t - key) - lse_t) : 0.f;
      axpy_shared<DPT>(dqr, p * (dov - delta_t), kj);
    }
  }
  if (!row_ok) return;
  float* row = dq + (size_t(b) * Tn + t) * ld_d + size_t(h) * D;
#pragma unroll
  for (int d = 0; d < DPT; d++) {
    const int dd = part * DPT + d;
    if (dd < D) row[dd] = dqr[d] * scale;
  }
}

// Calls f with the smallest configuration whose DPT · TPQ holds the head dim.
template <class Fn>
void with_head_dim(int D, Fn&& f) {
  CANONLAB_CHECK(D >= 1 && D <= kFlashMaxHeadDim, "flash attention supports head dims 1.." +
                                                      std::to_string(kFlashMaxHeadDim) + ", got " + std::to_string(D));
  if (D <= 16) f(Flash<16, 1>{});
  else if (D <= 32) f(Flash<32, 1>{});
  else if (D <= 64) f(Flash<32, 2>{});
  else f(Flash<32, 4>{});
}
template <class>
struct FlashParams;
template <int DPT, int TPQ>
struct FlashParams<Flash<DPT, TPQ>> {
  static constexpr int kDpt = DPT, kTpq = TPQ;
};

// ---- materialising path (probes) ----

constexpr int kProbThreads = 128;

// Dynamic shared memory for a row of D floats, rounded up to whole 16-byte quads, in case the compiler reads the row
// in 4-float vector loads: memcheck on an H200 reported a 12-byte read out of bounds at the row's first byte
// (0x580: 1 KiB reserved + this kernel's 384 static bytes) under a D = 1 test case (issue 26; to be confirmed there).
inline size_t row_shared_bytes(int D) { return size_t((D + 3) / 4 * 4) * sizeof(float); }

// one block per (query t, b·h): scores, softmax and the P·V row, each loop over keys in a fixed assignment
__global__ void probs_forward_kernel(float* out, float* probs, const float* q, const float* k, const float* v, int ld,
                                     const float* slopes, int window, int Tn, int H, int D, float scale) {
  extern __shared__ float sq[];  // the query row
  __shared__ float smax[kWarp];
  __shared__ double ssum[kWarp];
  const int t = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H;
  const size_t head = size_t(b) * Tn * ld + size_t(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) sq[d] = q[head + size_t(t) * ld + d];
  __syncthreads();
  float* row = probs + (size_t(bh) * Tn + t) * Tn;
  const int lo = window_start(t, window);
  const float slope = slopes ? slopes[h] : 0.f;
  float mx = -INFINITY;
  for (int s = lo + threadIdx.x; s <= t; s += blockDim.x) {
    const float* ks = k + head + size_t(s) * ld;
    float dot = 0.f;
    for (int d = 0; d < D; d++) dot += sq[d] * ks[d];
    const float sc = scale * dot - slope * float(t - s);
    row[s] = sc;
    mx = fmaxf(mx, sc);
  }
  mx = block_max(mx, smax);
  double sum = 0;
  for (int s = lo + threadIdx.x; s <= t; s += blockDim.x) {
    const float e = expf(row[s] - mx);
    row[s] = e;
    sum += double(e);
  }
  sum = block_sum(sum, ssum);  // its barriers also order the writes above before the reads below
  const float inv = float(1.0 / sum);
  for (int s = threadIdx.x; s < Tn; s += blockDim.x) row[s] = s < lo || s > t ? 0.f : row[s] * inv;
  __syncthreads();
  float* o = out + (size_t(b) * Tn + t) * (size_t(H) * D) + size_t(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f;
    for (int s = lo; s <= t; s++) acc += row[s] * v[head + size_t(s) * ld + d];
    o[d] = acc;
  }
}

// one block per (query t, b·h): dS[t, s] = scale · P (dO·v_s − Σ_s' P dO·v_s') into scratch, then dq[t]
__global__ void probs_dq_kernel(float* dq, int ld_d, float* dS, const float* dout, const float* probs, const float* k,
                                const float* v, int ld, int window, int Tn, int H, int D, float scale) {
  extern __shared__ float sdo[];  // dO row
  __shared__ double ssum[kWarp];
  const int t = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H;
  const size_t head = size_t(b) * Tn * ld + size_t(h) * D;
  const float* dorow = dout + (size_t(b) * Tn + t) * (size_t(H) * D) + size_t(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) sdo[d] = dorow[d];
  __syncthreads();
  const float* P = probs + (size_t(bh) * Tn + t) * Tn;
  float* G = dS + (size_t(bh) * Tn + t) * Tn;
  const int lo = window_start(t, window);
  double rowdot = 0;
  for (int s = lo + threadIdx.x; s <= t; s += blockDim.x) {
    const float* vs = v + head + size_t(s) * ld;
    float dp = 0.f;
    for (int d = 0; d < D; d++) dp += sdo[d] * vs[d];
    G[s] = dp;
    rowdot += double(dp) * double(P[s]);
  }
  const float rd = float(block_sum(rowdot, ssum));
  for (int s = lo + threadIdx.x; s <= t; s += blockDim.x) G[s] = scale * P[s] * (G[s] - rd);
  __syncthreads();
  float* dqrow = dq + (size_t(b) * Tn + t) * ld_d + size_t(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f;
    for (int s = lo; s <= t; s++) acc += G[s] * k[head + size_t(s) * ld + d];
    dqrow[d] = acc;
  }
}

// one block per (key s, b·h): dk[s] = Σ_t dS[t, s] q_t, dv[s] = Σ_t P[t, s] dO_t over the queries that see s
__global__ void probs_dkdv_kernel(float* dk, float* dv, int ld_d, const float* dS, const float* dout,
                                  const float* probs, const float* q, int ld, int window, int Tn, int H, int D) {
  const int s = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H;
  const int C = H * D;
  const size_t head = size_t(b) * Tn * ld + size_t(h) * D;
  const int t_end = window > 0 ? min(Tn, s + window) : Tn;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc_k = 0.f, acc_v = 0.f;
    for (int t = s; t < t_end; t++) {
      const size_t pt = (size_t(bh) * Tn + t) * Tn + s;
      acc_k += dS[pt] * q[head + size_t(t) * ld + d];
      acc_v += probs[pt] * dout[(size_t(b) * Tn + t) * C + size_t(h) * D + d];
    }
    dk[(size_t(b) * Tn + s) * ld_d + size_t(h) * D + d] = acc_k;
    dv[(size_t(b) * Tn + s) * ld_d + size_t(h) * D + d] = acc_v;
  }
}

// A window of Tn or more masks nothing: the full-causal path, as on the CPU.
int effective_window(int window, int Tn) { return window >= Tn || window < 0 ? 0 : window; }

// The probe kernels put (b, h) on the grid's y axis, which holds at most 65535.
void check_probe_grid(int B, int H) {
  CANONLAB_CHECK(size_t(B) * H <= 65535, "attention probes: batch × heads = " + std::to_string(size_t(B) * H) +
                                             " exceeds 65535; probe fewer sequences at a time");
}

}  // namespace

void flash_attention_forward(CudaStream stream, float* out, float* lse, const float* q, const float* k, const float* v,
                             int ld_qkv, const float* alibi_slopes, int window, int B, int Tn, int H, int D,
                             float scale) {
  if (B <= 0 || Tn <= 0 || H <= 0) return;
  window = effective_window(window, Tn);
  with_head_dim(D, [&](auto cfg) {
    using P = FlashParams<decltype(cfg)>;
    using F = Flash<P::kDpt, P::kTpq>;
    const dim3 grid(unsigned(B * H), unsigned((Tn + kRowsPerBlock - 1) / kRowsPerBlock));
    flash_forward_kernel<P::kDpt, P::kTpq><<<grid, F::kThreads, 0, stream>>>(out, lse, q, k, v, ld_qkv, alibi_slopes,
                                                                             window, Tn, H, D, scale);
  });
  CANONLAB_CUDA_CHECK_LAUNCH();
}


void flash_attention_backward(CudaStream stream, float* dq, float* dk, float* dv, int ld_dqkv, const float* dout,
                              const float* out, const float* lse, const float* q, const float* k, const float* v,
                              int ld_qkv, const float* alibi_slopes, int window, int B, int Tn, int H, int D,
                              float scale, float* scratch) {
  if (B <= 0 || Tn <= 0 || H <= 0) return;
  CANONLAB_CHECK(scratch, "flash_attention_backward: scratch is null");
  window = effective_window(window, Tn);
  float* delta = scratch;
  const size_t rows = size_t(B) * Tn * H;
  constexpr int kDeltaThreads = 256;
  flash_delta_kernel<<<unsigned((rows + kDeltaThreads / kWarp - 1) / (kDeltaThreads / kWarp)), kDeltaThreads, 0,
                       stream>>>(delta, dout, out, Tn, H, D, rows);
  CANONLAB_CUDA_CHECK_LAUNCH();
  with_head_dim(D, [&](auto cfg) {
    using P = FlashParams<decltype(cfg)>;
    using F = Flash<P::kDpt, P::kTpq>;
    const dim3 grid(unsigned(B * H), unsigned((Tn + kRowsPerBlock - 1) / kRowsPerBlock));
    flash_dkdv_kernel<P::kDpt, P::kTpq><<<grid, F::kThreads, 0, stream>>>(
        dk, dv, ld_dqkv, dout, lse, delta, q, k, v, ld_qkv, alibi_slopes, window, Tn, H, D, scale);
    CANONLAB_CUDA_CHECK_LAUNCH();
    flash_dq_kernel<P::kDpt, P::kTpq><<<grid, F::kThreads, 0, stream>>>(dq, ld_dqkv, dout, lse, delta, q, k, v, ld_qkv,
                                                                        alibi_slopes, window, Tn, H, D, scale);
    CANONLAB_CUDA_CHECK_LAUNCH();
  });
}

void attention_forward(CudaStream stream, float* out, float* probs, const float* q, const float* k, const float* v,
                       int ld_qkv, const float* alibi_slopes, int window, int B, int Tn, int H, int D, float scale) {
  if (B <= 0 || Tn <= 0 || H <= 0) return;
  window = effective_window(window, Tn);
  check_probe_grid(B, H);
  const dim3 grid(unsigned(Tn), unsigned(B * H));
  probs_forward_kernel<<<grid, kProbThreads, row_shared_bytes(D), stream>>>(out, probs, q, k, v, ld_qkv,
                                                                                  alibi_slopes, window, Tn, H, D,
                                                                                  scale);
  CANONLAB_CUDA_CHECK_LAUNCH();
}


void attention_backward(CudaStream stream, float* dq, float* dk, float* dv, int ld_dqkv, const float* dout,
                        const float* probs, const float* q, const float* k, const float* v, int ld_qkv, int window,
                        int B, int Tn, int H, int D, float scale, float* scratch) {
  if (B <= 0 || Tn <= 0 || H <= 0) return;
  CANONLAB_CHECK(scratch, "attention_backward: scratch is null");
  window = effective_window(window, Tn);
  check_probe_grid(B, H);
  const dim3 grid(unsigned(Tn), unsigned(B * H));
  probs_dq_kernel<<<grid, kProbThreads, row_shared_bytes(D), stream>>>(dq, ld_dqkv, scratch, dout, probs, k, v,
                                                                             ld_qkv, window, Tn, H, D, scale);
  CANONLAB_CUDA_CHECK_LAUNCH();
  probs_dkdv_kernel<<<grid, kProbThreads, 0, stream>>>(dk, dv, ld_dqkv, scratch, dout, probs, q, ld_qkv, window, Tn, H,
                                                       D);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

}  // namespace canonlab::cuda
