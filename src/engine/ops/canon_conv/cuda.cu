// Canon convolution kernels (cuda.h).
//
// Fused forward: one block per (sequence, kTileRows tokens), all channels. Phase 1: each thread takes channels
// and computes the causal conv down the tile, writing pre_act (and, without a norm, the output). Phase 2: a
// warp per token reduces the norm's statistics over act(pre_act) in double. Phase 3: each thread normalises its
// channels and adds the residual.
//
// Fused backward, in three kernels:
//   1. (with a norm) a warp per token reduces the two per-token sums the norm's dx needs (over all channels).
//   2. one block per (sequence, kTileRows tokens, 32 channels): threads (channel, row group) compute dconv (the
//      gradient at the conv output: norm backward, then activation backward) for the tile's tokens plus the K − 1
//      after it into shared memory; then din for the tile's tokens from K taps of that, and per-tile partial sums
//      of dweight (one tap per thread) and of the norm's dw/db (each row group's, combined in a fixed order).
//   3. partials summed over tiles in tile order, accumulated into the gradients.
// Grouped and dense convolutions (G < C) get plain kernels: one output per thread, and one weight gradient per
// thread summed over every token in order. Correct, and slow for large N; Canon layers are depthwise.
#include <cmath>
#include <string>

#include "engine/cuda/device_utils.cuh"
#include "engine/ops/activation/cuda_math.cuh"
#include "engine/ops/canon_conv/cuda.h"

namespace canonlab::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr int kTileRows = kCanonTileRows;  // tokens per tile
constexpr int kChannelTile = 32;   // channels per backward block (one warp's width: coalesced rows)
constexpr int kRowGroups = 8;      // backward block: kChannelTile × kRowGroups threads
constexpr size_t kDefaultSharedLimit = 48 << 10;  // static + dynamic shared memory a launch gets without opting in
// The longest kernel the fused backward takes: model.canon.kernel_size's limit (config/schema.cpp). Its block
// then needs (64 + 1023) × 32 floats of dynamic plus 4 KiB of static shared memory, 140 KiB: within sm_90's 227 KiB.
constexpr int kMaxTaps = 1024;

using Tiles = CanonTiles;
Tiles tiles_for(int B, int Tn) { return canon_tiles(B, Tn); }

__device__ __forceinline__ float activate(CanonActivation act, float x) {
  return act == CanonActivation::silu ? Silu::forward(x) : act == CanonActivation::elu ? Elu::forward(x) : x;
}
__device__ __forceinline__ float activate_backward(CanonActivation act, float d, float x) {
  return act == CanonActivation::silu ? Silu::backward(d, x) : act == CanonActivation::elu ? Elu::backward(d, x) : d;
}

// ---- fused forward ----

__global__ void canon_forward_kernel(float* out, float* pre_act, float* mean, float* rstd, const float* in,
                                     const float* weight, const float* norm_w, const float* norm_b, int Tn, int C,
                                     int K, CanonActivation act, CanonNorm norm, float eps, bool residual,
                                     int tiles_per_seq) {
  __shared__ float s_mean[kTileRows], s_rstd[kTileRows];
  const int b = blockIdx.x / tiles_per_seq, t0 = (blockIdx.x % tiles_per_seq) * kTileRows;
  const int t1 = min(t0 + kTileRows, Tn);
  const size_t base = size_t(b) * Tn * C;
  const float* inb = in + base;
  float* preb = pre_act + base;
  float* outb = out + base;

  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float* wc = weight + size_t(c) * K;
    for (int t = t0; t < t1; t++) {
      // taps i whose input time t − (K−1) + i is not before the sequence start, in ascending order as on the CPU
      float acc = 0.f;
      for (int i = max(0, K - 1 - t); i < K; i++) acc += wc[i] * inb[size_t(t - (K - 1) + i) * C + c];
      preb[size_t(t) * C + c] = acc;
      if (norm == CanonNorm::none) {
        const float a = activate(act, acc);
        outb[size_t(t) * C + c] = residual ? inb[size_t(t) * C + c] + a : a;
      }
    }
  }
  if (norm == CanonNorm::none) return;
  __syncthreads();  // pre_act of the tile is written (global writes are visible within the block after this)

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int t = t0 + warp; t < t1; t += kWarpsPerBlock) {
    const float* pr = preb + size_t(t) * C;
    float r, mt = 0.f;
    if (norm == CanonNorm::rmsnorm) {
      double ss = 0;
      for (int c = lane; c < C; c += kWarp) {
        const float a = activate(act, pr[c]);
        ss += double(a) * double(a);
      }
      ss = warp_sum(ss);
      r = float(1.0 / sqrt(ss / C + double(eps)));
    } else {
      double s = 0;
      for (int c = lane; c < C; c += kWarp) s += double(activate(act, pr[c]));
      const double m = warp_sum(s) / C;
      double var = 0;
      for (int c = lane; c < C; c += kWarp) {
        const double dv = double(activate(act, pr[c])) - m;
        var += dv * dv;
      }
      var = warp_sum(var);
      r = float(1.0 / sqrt(var / C + double(eps)));
      mt = float(m);
    }
    if (lane == 0) {
      s_mean[t - t0] = mt;
      s_rstd[t - t0] = r;
      rstd[size_t(b) * Tn + t] = r;
      if (norm == CanonNorm::layernorm) mean[size_t(b) * Tn + t] = mt;
    }
  }
  __syncthreads();

  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float wn = norm_w ? norm_w[c] : 1.f, bn = norm_b ? norm_b[c] : 0.f;
    for (int t = t0; t < t1; t++) {
      const size_t idx = size_t(t) * C + c;
      const float a = activate(act, preb[idx]), r = s_rstd[t - t0];
      float y;
      if (norm == CanonNorm::rmsnorm) {
        y = norm_w ? a * r * wn : a * r;
      } else {
        y = (a - s_mean[t - t0]) * r;
        if (norm_w) y *= wn;
        if (norm_b) y += bn;
      }
      outb[idx] = residual ? inb[idx] + y : y;
    }
  }
}

// ---- fused backward ----

// Per token: rmsnorm k = float(Σ (dy·w)·a / C) · r², layernorm gm = float(Σ g / C), gxm = float(Σ g·xhat / C),
// g = dy·w, a = act(pre_act), xhat = (a − mean)·r: the norm backward's row terms (norm/fast.h).
__global__ void canon_row_terms_kernel(float* terms, const float* dout, const float* pre_act, const float* norm_w,
                                       const float* mean, const float* rstd, int N, int C, CanonActivation act,
                                       CanonNorm norm) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* dy = dout + size_t(row) * C;
  const float* pr = pre_act + size_t(row) * C;
  const float r = rstd[row];
  if (norm == CanonNorm::rmsnorm) {
    double gx = 0;
    for (int c = lane; c < C; c += kWarp) {
      const float a = activate(act, pr[c]);
      gx += norm_w ? double(dy[c] * norm_w[c]) * double(a) : double(dy[c]) * double(a);
    }
    gx = warp_sum(gx);
    if (lane == 0) {
      terms[2 * size_t(row)] = float(gx / C) * r * r;
      terms[2 * size_t(row) + 1] = 0.f;
    }
  } else {
    const float m = mean[row];
    double gs = 0, gxs = 0;
    for (int c = lane; c < C; c += kWarp) {
      const float a = activate(act, pr[c]);
      const float g = norm_w ? dy[c] * norm_w[c] : dy[c];
      gs += double(g);
      gxs += double(g) * double((a - m) * r);
    }
    gs = warp_sum(gs);
    gxs = warp_sum(gxs);
    if (lane == 0) {
      terms[2 * size_t(row)] = float(gs / C);
      terms[2 * size_t(row) + 1] = float(gxs / C);
    }
  }
}

// partial: [tile][C][K + 2] doubles: the tile's dweight taps, then its dnorm_w and dnorm_b sums
__global__ void canon_backward_tile_kernel(float* din, double* partial, const float* dout, const float* in,
                                           const float* weight, const float* pre_act, const float* norm_w,
                                           const float* mean, const float* rstd, const float* terms, int Tn, int C,
                                           int K, CanonActivation act, CanonNorm norm, bool residual,
                                           int tiles_per_seq) {
  extern __shared__ float dconv[];  // [kTileRows + K − 1][kChannelTile]
  __shared__ double s_nw[kRowGroups][kChannelTile], s_nb[kRowGroups][kChannelTile];
  const int tile = blockIdx.x, b = tile / tiles_per_seq, t0 = (tile % tiles_per_seq) * kTileRows;
  const int t1 = min(t0 + kTileRows, Tn), te = min(t1 + K - 1, Tn);  // te: the last token whose dconv din needs + 1
  const int cx = threadIdx.x, ry = threadIdx.y, c = blockIdx.y * kChannelTile + cx;
  const bool active = c < C;
  const size_t base = size_t(b) * Tn * C;
  const bool need_pre = act != CanonActivation::none || norm != CanonNorm::none;
  const float wn = active && norm_w ? norm_w[c] : 1.f;

  // dconv for tokens [t0, te), and this row group's part of the norm parameter sums over tokens [t0, t1)
  double acc_nw = 0, acc_nb = 0;
  for (int t = t0 + ry; t < te; t += kRowGroups) {
    float dc = 0.f;
    if (active) {
      const size_t idx = base + size_t(t) * C + c;
      const float d = dout[idx];
      const float x = need_pre ? pre_act[idx] : 0.f;
      const float a = activate(act, x);
      float dact = d;
      if (norm != CanonNorm::none) {
        const size_t row = size_t(b) * Tn + t;
        const float r = rstd[row], ta = terms[2 * row];
        if (norm == CanonNorm::rmsnorm) {
          dact = norm_w ? r * (d * wn - a * ta) : r * (d - a * ta);
          if (t < t1) acc_nw += double(d) * double(a) * double(r);
        } else {
          const float m = mean[row], tb = terms[2 * row + 1];
          const float g = norm_w ? d * wn : d;
          dact = r * (g - ta - (a - m) * r * tb);
          if (t < t1) {
            acc_nw += double(d) * (double(a) - double(m)) * double(r);
            acc_nb += double(d);
          }
        }
      }
      dc = activate_backward(act, dact, x);
    }
    dconv[(t - t0) * kChannelTile + cx] = dc;
  }
  s_nw[ry][cx] = acc_nw;
  s_nb[ry][cx] = acc_nb;
  __syncthreads();
  if (!active) return;  // after the barrier: inactive channels only padded the tile

  // din[s] = Σ_i w[c, i] · dconv[s + K − 1 − i] (+ dout[s]); dconv is zero past the sequence end
  const float* wc = weight + size_t(c) * K;
  for (int s = t0 + ry; s < t1; s += kRowGroups) {
    float acc = 0.f;
    for (int i = 0; i < K; i++) {
      const int t = s + K - 1 - i;
      if (t < Tn) acc += wc[i] * dconv[(t - t0) * kChannelTile + cx];
    }
    const size_t idx = base + size_t(s) * C + c;
    din[idx] = residual ? acc + dout[idx] : acc;
  }
  // dweight[c, i] partial = Σ_{t in tile} dconv[t] · in[t − (K−1) + i]: one tap per thread at a time
  double* pc = partial + (size_t(tile) * C + c) * (K + 2);
  for (int i = ry; i < K; i += kRowGroups) {
    double acc = 0;
    for (int t = max(t0, K - 1 - i); t < t1; t++)
      acc += double(dconv[(t - t0) * kChannelTile + cx]) * double(in[base + size_t(t - (K - 1) + i) * C + c]);
    pc[i] = acc;
  }
  if (ry == 0) {
    double nw = 0, nb = 0;
    for (int g = 0; g < kRowGroups; g++) {
      nw += s_nw[g][cx];
      nb += s_nb[g][cx];
    }
    pc[K] = nw;
    pc[K + 1] = nb;
  }
}

// grad[c, slot] += Σ_tile partial[tile][c][slot], tiles in order; slot < K → dweight, K → dnorm_w, K + 1 → dnorm_b
__global__ void canon_reduce_kernel(float* dweight, float* dnorm_w, float* dnorm_b, const double* partial, int tiles,
                                    int C, int K) {
  const int slots = K + 2;
  const size_t n = size_t(C) * slots;
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const int c = int(e / slots), slot = int(e % slots);
    float* dst = slot < K ? (dweight ? dweight + size_t(c) * K + slot : nullptr)
                          : slot == K ? (dnorm_w ? dnorm_w + c : nullptr) : (dnorm_b ? dnorm_b + c : nullptr);
    if (!dst) continue;
    double s = 0;
    for (int k = 0; k < tiles; k++) s += partial[size_t(k) * n + e];
    *dst += float(s);
  }
}

// ---- grouped / dense convolution ----

__global__ void conv_forward_kernel(float* out, const float* in, const float* weight, int Tn, int C, int K, int cg,
                                    size_t n) {
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const int c = int(e % C), t = int((e / C) % Tn);
    const size_t b = e / (size_t(C) * Tn);
    const int g0 = (c / cg) * cg;
    float acc = 0.f;
    for (int j = 0; j < cg; j++)
      for (int i = max(0, K - 1 - t); i < K; i++)
        acc += weight[(size_t(c) * cg + j) * K + i] * in[(b * Tn + (t - (K - 1) + i)) * C + g0 + j];
    out[e] = acc;
  }
}

__global__ void conv_din_kernel(float* din, const float* dout, const float* weight, int Tn, int C, int K, int cg,
                                size_t n) {
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const int ci = int(e % C), s = int((e / C) % Tn);
    const size_t b = e / (size_t(C) * Tn);
    const int g0 = (ci / cg) * cg, j = ci - g0;
    float acc = 0.f;
    for (int cl = 0; cl < cg; cl++)
      for (int i = 0; i < K; i++) {
        const int t = s + (K - 1) - i;
        if (t < Tn) acc += weight[(size_t(g0 + cl) * cg + j) * K + i] * dout[(b * Tn + t) * C + g0 + cl];
      }
    din[e] = acc;
  }
}

// one weight element per thread, summed over every (b, t) in order
__global__ void conv_dweight_kernel(float* dweight, const float* dout, const float* in, int BT, int Tn, int C, int K,
                                    int cg) {
  const size_t n = size_t(C) * cg * K;
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const int i = int(e % K), j = int((e / K) % cg), c = int(e / (size_t(K) * cg));
    const int g0 = (c / cg) * cg;
    double acc = 0;
    for (int bt = 0; bt < BT; bt++) {
      const int t = bt % Tn, s = t - (K - 1) + i;
      if (s < 0) continue;
      acc += double(dout[size_t(bt) * C + c]) * double(in[size_t(bt - t + s) * C + g0 + j]);
    }
    dweight[e] += float(acc);
  }
}

void check_conv(int C, int K, int G) {
  CANONLAB_CHECK(G > 0 && C % G == 0 && K > 0, "canon_conv: groups must divide channels and K must be positive (C=" +
                                                   std::to_string(C) + " K=" + std::to_string(K) +
                                                   " G=" + std::to_string(G) + ")");
}

size_t backward_shared_bytes(int K) { return size_t(kTileRows + K - 1) * kChannelTile * sizeof(float); }
// canon_backward_tile_kernel's static shared memory (s_nw, s_nb): counts against the same per-block limit
constexpr size_t kBackwardStaticShared = 2 * sizeof(double) * kRowGroups * kChannelTile;

void check_fused(int C, int K) {
  check_conv(C, K, C);
  CANONLAB_CHECK(K <= kMaxTaps, "canon (CUDA): kernel length K=" + std::to_string(K) + " is above the fused kernels' " +
                                    std::to_string(kMaxTaps) + " (model.canon.kernel_size's limit)");
}

}  // namespace

void canon_forward(CudaStream stream, float* out, float* pre_act, float* mean, float* rstd, const float* in,
                   const float* weight, const float* norm_w, const float* norm_b, int B, int Tn, int C, int K,
                   CanonActivation act, CanonNorm norm, float eps, bool residual) {
  check_fused(C, K);
  CANONLAB_CHECK(norm == CanonNorm::none || (rstd && (norm != CanonNorm::layernorm || mean)),
                 "canon_forward: a norm needs rstd (and mean for layernorm)");
  if (B <= 0 || Tn <= 0) return;
  const Tiles tl = tiles_for(B, Tn);
  canon_forward_kernel<<<tl.count, kThreads, 0, stream>>>(out, pre_act, mean, rstd, in, weight, norm_w, norm_b, Tn, C,
                                                          K, act, norm, eps, residual, tl.per_seq);
  CANONLAB_CUDA_CHECK_LAUNCH();
}


void canon_backward(CudaStream stream, float* din, float* dweight, float* dnorm_w, float* dnorm_b, const float* dout,
                    const float* in, const float* weight, const float* pre_act, const float* norm_w, const float* mean,
                    const float* rstd, int B, int Tn, int C, int K, CanonActivation act, CanonNorm norm, bool residual,
                    double* scratch) {
  check_fused(C, K);
  if (B <= 0 || Tn <= 0) return;
  CANONLAB_CHECK(scratch, "canon_backward: scratch is null");
  const Tiles tl = tiles_for(B, Tn);
  double* partial = scratch;
  float* terms = reinterpret_cast<float*>(scratch + size_t(tl.count) * C * (K + 2));
  if (norm != CanonNorm::none) {
    const int N = B * Tn;
    canon_row_terms_kernel<<<(N + kWarpsPerBlock - 1) / kWarpsPerBlock, kThreads, 0, stream>>>(
        terms, dout, pre_act, norm_w, mean, rstd, N, C, act, norm);
    CANONLAB_CUDA_CHECK_LAUNCH();
  }
  const size_t shared = backward_shared_bytes(K);
  if (shared + kBackwardStaticShared > kDefaultSharedLimit)
    CANONLAB_CUDA_CHECK(
        cudaFuncSetAttribute(canon_backward_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)));
  const dim3 grid(unsigned(tl.count), unsigned((C + kChannelTile - 1) / kChannelTile));
  canon_backward_tile_kernel<<<grid, dim3(kChannelTile, kRowGroups), shared, stream>>>(
      din, partial, dout, in, weight, pre_act, norm_w, mean, rstd, terms, Tn, C, K, act, norm, residual, tl.per_seq);
  CANONLAB_CUDA_CHECK_LAUNCH();
  const bool want_norm = norm != CanonNorm::none;
  float* dnw = want_norm ? dnorm_w : nullptr;
  float* dnb = norm == CanonNorm::layernorm ? dnorm_b : nullptr;
  if (dweight || dnw || dnb) {
    canon_reduce_kernel<<<grid_for(size_t(C) * (K + 2), kThreads), kThreads, 0, stream>>>(dweight, dnw, dnb, partial,
                                                                                          tl.count, C, K);
    CANONLAB_CUDA_CHECK_LAUNCH();
  }
}

void canon_conv_forward(CudaStream stream, float* out, const float* in, const float* weight, int B, int Tn, int C,
                        int K, int G) {
  check_conv(C, K, G);
  if (G == C) {
    // the fused kernel with nothing after the conv: out doubles as pre_act (both get the conv output)
    canon_forward(stream, out, out, nullptr, nullptr, in, weight, nullptr, nullptr, B, Tn, C, K, CanonActivation::none,
                  CanonNorm::none, 0.f, false);
    return;
  }
  const size_t n = size_t(B) * Tn * C;
  if (!n) return;
  conv_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, in, weight, Tn, C, K, C / G, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
}


void canon_conv_backward(CudaStream stream, float* din, float* dweight, const float* dout, const float* in,
                         const float* weight, int B, int Tn, int C, int K, int G, double* scratch) {
  check_conv(C, K, G);
  if (G == C) {
    canon_backward(stream, din, dweight, nullptr, nullptr, dout, in, weight, nullptr, nullptr, nullptr, nullptr, B, Tn,
                   C, K, CanonActivation::none, CanonNorm::none, false, scratch);
    return;
  }
  const size_t n = size_t(B) * Tn * C;
  if (!n) return;
  const int cg = C / G;
  conv_din_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(din, dout, weight, Tn, C, K, cg, n);
  CANONLAB_CUDA_CHECK_LAUNCH();
  const size_t nw = size_t(C) * cg * K;
  conv_dweight_kernel<<<grid_for(nw, kThreads), kThreads, 0, stream>>>(dweight, dout, in, B * Tn, Tn, C, K, cg);
  CANONLAB_CUDA_CHECK_LAUNCH();
}

}  // namespace canonlab::cuda
