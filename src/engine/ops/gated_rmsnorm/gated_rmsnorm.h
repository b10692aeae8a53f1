#pragma once
// RMSNorm over groups of channels combined with a SiLU gate, the output stage of the linear-time mixers:
//   norm_then_gate (GLA, Gated DeltaNet):  y = x · rstd(x) · w ⊙ silu(z)          (fla FusedRMSNormGated)
//   gate_then_norm (Mamba2):               u = x ⊙ silu(z);  y = u · rstd(u) · w   (norm_before_gate=False)
// rstd is taken over each group of Cg consecutive channels; w: (Cw) is indexed by channel modulo Cw, so a per-head
// norm passes Cw = Cg (one weight shared by the heads) and Mamba2's grouped norm passes Cw = G·Cg. z may be
// nullptr (no gate). One code path serves float and double: the elementwise math runs in T (vec_exp, so float
// loops vectorise; double stays exact for gradient checks), the per-group sums of squares and dot products in
// double lanes combined in a fixed order. Rows are independent and dw goes through a fixed number of row-block
// partials summed in block order, so results do not depend on the thread count or the schedule.
//
// Also here, for the mixer modules that use this op (src/nn/mamba2.h, gla.h, delta_net.h, gated_output.h):
// small deterministic row-parallel helpers (row_ops::*).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/ops/activation/activation.h"
#include "engine/ops/gated_rmsnorm/gate_order.h"
#include "engine/ops/row_ops.h"
#include "engine/ops/vec_math.h"

namespace canonlab {

namespace gated_rmsnorm_detail {
// The weights of the Cg channels of group g: a pointer into w when they are contiguous there (Cw a multiple of
// Cg, the only layouts the models use), else gathered into buf.
template <class T>
const T* group_weight(const T* w, int g, int Cg, int Cw, T* buf) {
  const int off = int((int64_t(g) * Cg) % Cw);
  if (off + Cg <= Cw) return w + off;
  for (int c = 0; c < Cg; c++) buf[c] = w[(off + c) % Cw];
  return buf;
}
}  // namespace gated_rmsnorm_detail

// x, z, y: (N, G·Cg); rstd: (N, G) written; w: (Cw)
template <class T>
void gated_rmsnorm_forward(T* y, T* rstd, const T* x, const T* z, const T* w, int N, int G, int Cg, int Cw, T eps,
                           GateOrder order) {
  const int C = G * Cg;
  const bool gate_first = z && order == GateOrder::gate_then_norm, gate_last = z && order == GateOrder::norm_then_gate;
#pragma omp parallel if (size_t(N) * C >= (1 << 13))
  {
    std::vector<T> gate(Cg), u(Cg), wbuf(Cg);
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++)
      for (int g = 0; g < G; g++) {
        const size_t base = size_t(n) * C + size_t(g) * Cg;
        const T* xr = x + base;
        T* yr = y + base;
        const T* wr = gated_rmsnorm_detail::group_weight(w, g, Cg, Cw, wbuf.data());
        T* gt = gate.data();
        if (z) {
          const T* zr = z + base;
          for (int c = 0; c < Cg; c++) gt[c] = zr[c] * sigmoid(zr[c]);
        }
        const T* ur = xr;
        if (gate_first) {
          T* uu = u.data();
          for (int c = 0; c < Cg; c++) uu[c] = xr[c] * gt[c];
          ur = uu;
        }
        const double ss = row_ops::dot_d(ur, ur, Cg);
        const T r = T(1.0 / std::sqrt(ss / Cg + double(eps)));
        rstd[size_t(n) * G + g] = r;
        if (gate_last)
          for (int c = 0; c < Cg; c++) yr[c] = ur[c] * r * wr[c] * gt[c];
        else
          for (int c = 0; c < Cg; c++) yr[c] = ur[c] * r * wr[c];
      }
  }
}

// dy: (N, G·Cg) -> dx, dz written (dz skipped when z is nullptr); dw: (Cw) accumulated through per-row-block
// partial sums in a fixed order.
template <class T>
void gated_rmsnorm_backward(T* dx, T* dz, T* dw, const T* dy, const T* x, const T* z, const T* w, const T* rstd,
                            int N, int G, int Cg, int Cw, GateOrder order) {
  const int C = G * Cg;
  const bool gate_first = z && order == GateOrder::gate_then_norm, gate_last = z && order == GateOrder::norm_then_gate;
  // dw partials per static block of rows, summed in block order afterwards.
  const int blocks = row_ops::kBlocks;
  std::vector<double> dw_part(size_t(blocks) * Cw, 0.0);
#pragma omp parallel if (size_t(N) * C >= (1 << 13))
  {
    std::vector<T> gate(Cg), dgate(Cg), u(Cg), dyn(Cg), t(Cg), wbuf(Cg);
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
      const int n0 = int(int64_t(N) * blk / blocks), n1 = int(int64_t(N) * (blk + 1) / blocks);
      double* dwp = dw_part.data() + size_t(blk) * Cw;
      for (int n = n0; n < n1; n++)
        for (int g = 0; g < G; g++) {
          const size_t base = size_t(n) * C + size_t(g) * Cg;
          const T* xr = x + base;
          const T* dyr = dy + base;
          T* dxr = dx + base;
          const T* wr = gated_rmsnorm_detail::group_weight(w, g, Cg, Cw, wbuf.data());
          const T r = rstd[size_t(n) * G + g];
          T *gt = gate.data(), *dgt = dgate.data();
          if (z) {
            const T* zr = z + base;
            for (int c = 0; c < Cg; c++) {
              const T s = sigmoid(zr[c]);
              gt[c] = zr[c] * s;
              dgt[c] = s * (T(1) + zr[c] * (T(1) - s));  // silu'
            }
          }
          // u is the normalised input (x, or x ⊙ silu(z)); dyn = d(loss)/d(u·r·w), the gradient at the norm's
          // output before the gate (dy, or dy ⊙ silu(z)).
          const T* ur = xr;
          if (gate_first) {
            T* uu = u.data();
            for (int c = 0; c < Cg; c++) uu[c] = xr[c] * gt[c];
            ur = uu;
          }
          const T* dynr = dyr;
          if (gate_last) {
            T* dd = dyn.data();
            for (int c = 0; c < Cg; c++) dd[c] = dyr[c] * gt[c];
            dynr = dd;
          }
          // t = dyn · u_hat (u_hat = u·r): the per-channel dw contribution; dot = Σ t·w
          T* tt = t.data();
          for (int c = 0; c < Cg; c++) tt[c] = dynr[c] * ur[c] * r;
          const int off = int((int64_t(g) * Cg) % Cw);
          if (off + Cg <= Cw) {
            double* dwo = dwp + off;
            for (int c = 0; c < Cg; c++) dwo[c] += double(tt[c]);
          } else {
            for (int c = 0; c < Cg; c++) dwp[(off + c) % Cw] += double(tt[c]);
          }
          const double dot = row_ops::dot_d(tt, wr, Cg);
          // y = w·u·r, r = (mean u² + eps)^-1/2  ->  du = r·w·dyn − u·(r²·mean(w·dyn·u_hat)/r)
          const T a = T(double(r) * dot / Cg);
          if (gate_first) {
            T* dzr = dz ? dz + base : nullptr;
            for (int c = 0; c < Cg; c++) {
              const T du = r * (dynr[c] * wr[c] - ur[c] * a);
              dxr[c] = du * gt[c];
            }
            if (dzr)
              for (int c = 0; c < Cg; c++) dzr[c] = r * (dynr[c] * wr[c] - ur[c] * a) * xr[c] * dgt[c];
          } else {
            for (int c = 0; c < Cg; c++) dxr[c] = r * (dynr[c] * wr[c] - ur[c] * a);
            if (gate_last && dz) {
              T* dzr = dz + base;
              for (int c = 0; c < Cg; c++) dzr[c] = dyr[c] * ur[c] * r * wr[c] * dgt[c];
            }
          }
        }
    }
  }
  for (int blk = 0; blk < blocks; blk++)
    for (int c = 0; c < Cw; c++) dw[c] += T(dw_part[size_t(blk) * Cw + c]);
}

}  // namespace canonlab
