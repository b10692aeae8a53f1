#pragma once
// What the fused Canon op (fused.h) applies after the convolution: out = [in +] norm(act(conv(in))).
namespace canonlab {

enum class CanonActivation { none, silu, elu };
enum class CanonNorm { none, rmsnorm, layernorm };

struct CanonEpilogue {
  CanonActivation activation = CanonActivation::none;
  CanonNorm norm = CanonNorm::none;
  bool residual = true;
  // Backward needs the convolution's output when something nonlinear follows it; conv + residual alone needs
  // nothing but the input.
  bool saves_conv() const { return activation != CanonActivation::none || norm != CanonNorm::none; }
  // Whether the fused op is the faster one (BENCHMARKS.md, "Fused Canon on the CPU"): with an activation and a norm
  // both, its backward recomputes the activation twice and runs about 2x slower than the separate passes, so
  // CanonLayer keeps those on the separate path; every other epilogue is 1.0-3.6x faster fused.
  bool fusion_pays() const { return activation == CanonActivation::none || norm == CanonNorm::none; }
};

}  // namespace canonlab
