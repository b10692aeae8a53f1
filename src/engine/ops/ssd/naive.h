#pragma once
// Reference Mamba2 SSD scan: the plain per-token recurrence, one thread, double state and accumulators.
// Per batch element b and head h (group g = h / (H/G)), with state h_t: (P, N) and h_0 = 0:
//   h_t = exp(dt_t · A_h) · h_{t−1} + dt_t · x_t ⊗ B_t        (B_t, C_t: the N-vectors of group g)
//   y_t = h_t C_t                                              (no D skip: the module adds D·x)
// dt is already softplus'ed (> 0) and A is negative, so every decay exp(dt·A) lies in (0, 1].
#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/error.h"

namespace canonlab {

// Elements of the saved chunk-start states: (Bn, H, ceil(Tn / chunk), P, N)
// (ssd_forward_chunked and the GPU scan save them for backward).
inline size_t ssd_states_size(int Bn, int Tn, int H, int P, int N, int chunk) {
  const size_t nchunks = chunk > 0 ? (size_t)(Tn + chunk - 1) / chunk : 0;
  return (size_t)Bn * H * nchunks * P * N;
}

namespace ssd_detail {

inline void check_shapes(int H, int G) {
  CANONLAB_CHECK(H > 0 && G > 0 && H % G == 0, "ssd: groups must divide heads");
}

// One token for one batch element, with the state held in S: double inside the naive loops, T for decoding.
// y_t: (H, P) written; state: (H, P, N) updated in place; x_t: (H, P); dt_t, A: (H); B_t, C_t: (G, N)
template <class T, class S>
void ssd_step_impl(T* y_t, S* state, const T* x_t, const T* dt_t, const T* A, const T* B_t, const T* C_t, int H, int P,
                   int G, int N) {
  const int hg = H / G;
  for (int h = 0; h < H; h++) {
    const int g = h / hg;
    const double dt = double(dt_t[h]);
    const double a = std::exp(dt * double(A[h]));
    const T* x = x_t + (size_t)h * P;
    const T* Bv = B_t + (size_t)g * N;
    const T* Cv = C_t + (size_t)g * N;
    S* st = state + (size_t)h * P * N;  // (P, N)
    for (int p = 0; p < P; p++) {
      const double dtx = dt * double(x[p]);
      double acc = 0;
      for (int n = 0; n < N; n++) {
        S& s = st[(size_t)p * N + n];
        s = S(a * double(s) + dtx * double(Bv[n]));
        acc += double(s) * double(Cv[n]);
      }
      y_t[(size_t)h * P + p] = T(acc);
    }
  }
}

}  // namespace ssd_detail

// One decoding step for one batch element: state (H, P, N) updated in place (start from zeros);
// x_t: (H, P); dt_t: (H); A: (H); B_t, C_t: (G, N); y_t: (H, P) written.
template <class T>
void ssd_step(T* y_t, T* state, const T* x_t, const T* dt_t, const T* A, const T* B_t, const T* C_t, int H, int P,
              int G, int N) {
  ssd_detail::check_shapes(H, G);
  ssd_detail::ssd_step_impl<T, T>(y_t, state, x_t, dt_t, A, B_t, C_t, H, P, G, N);
}

// y, x: (Bn, Tn, H, P); dt: (Bn, Tn, H); A: (H); Bm, Cm: (Bn, Tn, G, N). y written.
template <class T>
void ssd_forward_naive(T* y, const T* x, const T* dt, const T* A, const T* Bm, const T* Cm, int Bn, int Tn, int H,
                       int P, int G, int N) {
  ssd_detail::check_shapes(H, G);
  std::vector<double> state((size_t)H * P * N);
  for (int b = 0; b < Bn; b++) {
    for (auto& s : state) s = 0;
    for (int t = 0; t < Tn; t++) {
      const size_t bt = (size_t)b * Tn + t;
      ssd_detail::ssd_step_impl<T, double>(y + bt * H * P, state.data(), x + bt * H * P, dt + bt * H, A,
                                           Bm + bt * G * N, Cm + bt * G * N, H, P, G, N);
    }
  }
}

// All gradients written: dx: (Bn, Tn, H, P); ddt: (Bn, Tn, H); dA: (H) summed over batch and time;
// dB, dC: (Bn, Tn, G, N) summed over the heads of each group. dy: (Bn, Tn, H, P); the rest as in forward.
//
// Per (b, h), the states h_0..h_Tn are recomputed and kept, then the recurrence is run backwards with
// dh = ∂loss/∂h_t (a_t = exp(dt_t A)):
//   dh    += dy_t C_tᵀ                        dC_t += h_tᵀ dy_t
//   da     = <dh, h_{t−1}>                    (a_t multiplies h_{t−1})
//   ddt_t  = da · a_t · A + x_tᵀ dh B_t       (dt enters the decay and the input scale)
//   dA    += da · a_t · dt_t
//   dx_t   = dt_t · dh B_t                    dB_t += dt_t · dhᵀ x_t
//   dh     = a_t · dh                         (on to h_{t−1})
template <class T>
void ssd_backward_naive(T* dx, T* ddt, T* dA, T* dB, T* dC, const T* dy, const T* x, const T* dt, const T* A,
                        const T* Bm, const T* Cm, int Bn, int Tn, int H, int P, int G, int N) {
  ssd_detail::check_shapes(H, G);
  const int hg = H / G;
  const size_t PN = (size_t)P * N;
  std::vector<double> dBacc((size_t)Bn * Tn * G * N, 0.0), dCacc((size_t)Bn * Tn * G * N, 0.0), dAacc(H, 0.0);
  std::vector<double> hs((size_t)(Tn + 1) * PN);  // hs[t]: state after t tokens
  std::vector<double> dh(PN), dhB(P);
  for (int b = 0; b < Bn; b++)
    for (int h = 0; h < H; h++) {
      const int g = h / hg;
      const double Ah = double(A[h]);
      // forward, keeping every state
      for (size_t i = 0; i < PN; i++) hs[i] = 0;
      for (int t = 0; t < Tn; t++) {
        const size_t bt = (size_t)b * Tn + t;
        const double dtv = double(dt[bt * H + h]), a = std::exp(dtv * Ah);
        const T* xv = x + (bt * H + h) * P;
        const T* Bv = Bm + (bt * G + g) * N;
        const double* hp = hs.data() + (size_t)t * PN;
        double* hn = hs.data() + (size_t)(t + 1) * PN;
        for (int p = 0; p < P; p++)
          for (int n = 0; n < N; n++)
            hn[(size_t)p * N + n] = a * hp[(size_t)p * N + n] + dtv * double(xv[p]) * double(Bv[n]);
      }
      // backward
      for (auto& v : dh) v = 0;
      for (int t = Tn - 1; t >= 0; t--) {
        const size_t bt = (size_t)b * Tn + t;
        const double dtv = double(dt[bt * H + h]), a = std::exp(dtv * Ah);
        const T* xv = x + (bt * H + h) * P;
        const T* dyv = dy + (bt * H + h) * P;
        const T* Bv = Bm + (bt * G + g) * N;
        const T* Cv = Cm + (bt * G + g) * N;
        const double* hp = hs.data() + (size_t)t * PN;        // h_{t−1}
        const double* hc = hs.data() + (size_t)(t + 1) * PN;  // h_t
        double* dCv = dCacc.data() + (bt * G + g) * N;
        double* dBv = dBacc.data() + (bt * G + g) * N;
        for (int p = 0; p < P; p++)
          for (int n = 0; n < N; n++) {
            dh[(size_t)p * N + n] += double(dyv[p]) * double(Cv[n]);
            dCv[n] += hc[(size_t)p * N + n] * double(dyv[p]);
          }
        double da = 0, dscale = 0;
        for (int p = 0; p < P; p++) {
          double s = 0;
          for (int n = 0; n < N; n++) {
            da += dh[(size_t)p * N + n] * hp[(size_t)p * N + n];
            s += dh[(size_t)p * N + n] * double(Bv[n]);
          }
          dhB[p] = s;
          dscale += double(xv[p]) * s;
        }
        ddt[bt * H + h] = T(da * a * Ah + dscale);
        dAacc[h] += da * a * dtv;
        for (int p = 0; p < P; p++) dx[(bt * H + h) * P + p] = T(dtv * dhB[p]);
        for (int n = 0; n < N; n++) {
          double s = 0;
          for (int p = 0; p < P; p++) s += dh[(size_t)p * N + n] * double(xv[p]);
          dBv[n] += dtv * s;
        }
        for (auto& v : dh) v *= a;
      }
    }
  for (size_t i = 0; i < dBacc.size(); i++) {
    dB[i] = T(dBacc[i]);
    dC[i] = T(dCacc[i]);
  }
  for (int h = 0; h < H; h++) dA[h] = T(dAacc[h]);
}

}  // namespace canonlab
