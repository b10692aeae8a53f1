#pragma once
// gated_rmsnorm.h as element kernels (engine/ops/element_kernels.h), for the GPU (gated_rmsnorm/cuda.cu) and checked
// on the host against gated_rmsnorm.h (tests/unit/test_ops_linear_glue_elements.cpp). One element per (row, group)
// for the outputs, its sums in double in channel order; dw through the fixed row blocks of column_sums.
#include <cstddef>

#include "engine/ops/element_kernels.h"
#include "engine/ops/gated_rmsnorm/gate_order.h"

namespace canonlab {

namespace gated_rmsnorm_elements {

// Shapes and pointers; the channel values of one (row, group) are recomputed where needed (gate, u, dyn).
template <class T>
struct View {
  T *y, *rstd, *dx, *dz;
  const T *x, *z, *w, *dy, *rstd_in;
  int N, G, Cg, Cw;
  T eps;
  bool gate_first, gate_last;

  CANONLAB_HD T gate(size_t at) const { return z ? z[at] * hd_sigmoid(z[at]) : T(1); }
  CANONLAB_HD T weight(int g, int c) const { return w[(size_t)((long long)g * Cg + c) % Cw]; }
  // the normalised input u (x, or x ⊙ silu(z)) and the gradient at the norm's output dyn (dy, or dy ⊙ silu(z))
  CANONLAB_HD T u(size_t at) const { return gate_first ? x[at] * gate(at) : x[at]; }
  CANONLAB_HD T dyn(size_t at) const { return gate_last ? dy[at] * gate(at) : dy[at]; }
};

template <class T>
struct Forward {
  View<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const int g = int(i % v.G);
    const size_t base = i / v.G * ((size_t)v.G * v.Cg) + (size_t)g * v.Cg;
    double ss = 0;
    for (int c = 0; c < v.Cg; c++) {
      const T u = v.u(base + c);
      ss += double(u) * double(u);
    }
    const T r = T(1.0 / hd_sqrt(ss / v.Cg + double(v.eps)));
    v.rstd[i] = r;
    for (int c = 0; c < v.Cg; c++) {
      const size_t at = base + c;
      const T y = v.u(at) * r * v.weight(g, c);
      v.y[at] = v.gate_last ? y * v.gate(at) : y;
    }
  }
};

template <class T>
struct Backward {
  View<T> v;
  CANONLAB_HD void operator()(size_t i) const {
    const int g = int(i % v.G);
    const size_t base = i / v.G * ((size_t)v.G * v.Cg) + (size_t)g * v.Cg;
    const T r = v.rstd_in[i];
    double dot = 0;  // Σ (dyn u r) w
    for (int c = 0; c < v.Cg; c++) {
      const size_t at = base + c;
      dot += double(v.dyn(at) * v.u(at) * r) * double(v.weight(g, c));
    }
    const T a = T(double(r) * dot / v.Cg);
    for (int c = 0; c < v.Cg; c++) {
      const size_t at = base + c;
      const T wc = v.weight(g, c), du = r * (v.dyn(at) * wc - v.u(at) * a);
      if (v.gate_first) {
        v.dx[at] = du * v.gate(at);
        if (v.dz) v.dz[at] = du * v.x[at] * hd_silu_grad(v.z[at]);
      } else {
        v.dx[at] = du;
        if (v.gate_last && v.dz) v.dz[at] = v.dy[at] * v.u(at) * r * wc * hd_silu_grad(v.z[at]);
      }
    }
  }
};

// dw[col] collects (dyn u r) of every channel ≡ col (mod Cw) of row n.
template <class T>
struct WeightTerm {
  View<T> v;
  CANONLAB_HD double operator()(int n, int col) const {
    const int C = v.G * v.Cg;
    double s = 0;
    for (int ch = col; ch < C; ch += v.Cw) {
      const size_t at = (size_t)n * C + ch;
      s += double(v.dyn(at) * v.u(at) * v.rstd_in[(size_t)n * v.G + ch / v.Cg]);
    }
    return s;
  }
};

}  // namespace gated_rmsnorm_elements

// gated_rmsnorm_forward's contract.
template <class T, class Launch>
void gated_rmsnorm_forward_elements(const Launch& launch, T* y, T* rstd, const T* x, const T* z, const T* w, int N,
                                    int G, int Cg, int Cw, T eps, GateOrder order) {
  gated_rmsnorm_elements::View<T> v{};
  v.y = y, v.rstd = rstd, v.x = x, v.z = z, v.w = w, v.N = N, v.G = G, v.Cg = Cg, v.Cw = Cw, v.eps = eps;
  v.gate_first = z && order == GateOrder::gate_then_norm, v.gate_last = z && order == GateOrder::norm_then_gate;
  launch((size_t)N * G, gated_rmsnorm_elements::Forward<T>{v});
}

// gated_rmsnorm_backward's contract (dx, dz written, dw accumulated); partial: kRowBlocks · Cw doubles of scratch.
template <class T, class Launch>
void gated_rmsnorm_backward_elements(const Launch& launch, T* dx, T* dz, T* dw, const T* dy, const T* x, const T* z,
                                     const T* w, const T* rstd, int N, int G, int Cg, int Cw, GateOrder order,
                                     double* partial) {
  gated_rmsnorm_elements::View<T> v{};
  v.dx = dx, v.dz = dz, v.dy = dy, v.x = x, v.z = z, v.w = w, v.rstd_in = rstd, v.N = N, v.G = G, v.Cg = Cg, v.Cw = Cw;
  v.gate_first = z && order == GateOrder::gate_then_norm, v.gate_last = z && order == GateOrder::norm_then_gate;
  launch((size_t)N * G, gated_rmsnorm_elements::Backward<T>{v});
  column_sums(launch, dw, partial, N, Cw, gated_rmsnorm_elements::WeightTerm<T>{v});
}

}  // namespace canonlab
