#pragma once
// Reference causal grouped Conv1d over time (the Canon layer's mixing). Plain loops, one thread, double
// accumulators. weight is PyTorch's Conv1d layout (C, C/G, K); tap i looks back K-1-i steps, so the last tap
// is the current token and times before 0 read as zero.
#include <algorithm>
#include <cstddef>

namespace canonlab {

// out, in: (B, Tn, C); weight: (C, C/G, K)
// out[t, c] = Σ_{j < C/G, i < K} weight[c, j, i] · in[t − (K−1) + i, g·(C/G) + j], g = c / (C/G)
template <class T>
void canon_conv_forward_naive(T* out, const T* in, const T* weight, int B, int Tn, int C, int K, int G) {
  const int cg = C / G;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tn; t++)
      for (int c = 0; c < C; c++) {
        const int g0 = (c / cg) * cg;
        double acc = 0;
        for (int j = 0; j < cg; j++)
          for (int i = 0; i < K; i++) {
            int s = t - (K - 1) + i;
            if (s < 0) continue;
            acc += double(weight[((size_t)c * cg + j) * K + i]) * double(in[((size_t)b * Tn + s) * C + g0 + j]);
          }
        out[((size_t)b * Tn + t) * C + c] = T(acc);
      }
}

// din: (B, Tn, C) written; dweight: (C, C/G, K) accumulated; dout, in: (B, Tn, C)
template <class T>
void canon_conv_backward_naive(T* din, T* dweight, const T* dout, const T* in, const T* weight, int B, int Tn, int C,
                               int K, int G) {
  const int cg = C / G;
  // din[s, g·cg + j] = Σ_{c in group g, i} weight[c, j, i] · dout[s + (K−1) − i, c]
  for (int b = 0; b < B; b++)
    for (int s = 0; s < Tn; s++)
      for (int ci = 0; ci < C; ci++) {
        const int g0 = (ci / cg) * cg, j = ci - g0;
        double acc = 0;
        for (int cl = 0; cl < cg; cl++)
          for (int i = 0; i < K; i++) {
            int t = s + (K - 1) - i;
            if (t >= Tn) continue;
            acc +=
                double(weight[((size_t)(g0 + cl) * cg + j) * K + i]) * double(dout[((size_t)b * Tn + t) * C + g0 + cl]);
          }
        din[((size_t)b * Tn + s) * C + ci] = T(acc);
      }
  // dweight[c, j, i] += Σ_{b, t} dout[t, c] · in[t − (K−1) + i, g·cg + j]
  for (int c = 0; c < C; c++) {
    const int g0 = (c / cg) * cg;
    for (int j = 0; j < cg; j++)
      for (int i = 0; i < K; i++) {
        double acc = 0;
        for (int b = 0; b < B; b++)
          for (int t = 0; t < Tn; t++) {
            int s = t - (K - 1) + i;
            if (s < 0) continue;
            acc += double(dout[((size_t)b * Tn + t) * C + c]) * double(in[((size_t)b * Tn + s) * C + g0 + j]);
          }
        dweight[((size_t)c * cg + j) * K + i] += T(acc);
      }
  }
}

// Decoding one token of one sequence: window (K, C) holds the inputs at t-K+1 .. t, oldest first. x_t is shifted
// in (the oldest row drops out) and out: (C) gets row t of canon_conv_forward. One code for reference and
// decoding, since a single token has nothing to parallelise.
template <class T>
void canon_conv_step(T* out, T* window, const T* x_t, const T* weight, int C, int K, int G) {
  const int cg = C / G;
  std::copy(window + C, window + size_t(K) * C, window);
  std::copy(x_t, x_t + C, window + size_t(K - 1) * C);
  for (int c = 0; c < C; c++) {
    const int g0 = (c / cg) * cg;
    double acc = 0;
    for (int j = 0; j < cg; j++)
      for (int i = 0; i < K; i++) acc += double(weight[((size_t)c * cg + j) * K + i]) * double(window[(size_t)i * C + g0 + j]);
    out[c] = T(acc);
  }
}

}  // namespace canonlab
