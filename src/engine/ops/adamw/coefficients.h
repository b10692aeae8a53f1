#pragma once
// The per-step scalars of an AdamW update, computed once on the host (train/adamw.h's adamw_coefficients) and read by
// the update in device memory, so that a captured step replays while the schedule moves on. Plain data: the CPU op
// (adamw.h) and the CUDA kernel (cuda.h) read the same struct.
namespace canonlab {

struct AdamWCoefficients {
  float beta1, beta2;
  float step;           // lr / (1 − beta1^t)
  float rsqrt_bc2;      // 1 / sqrt(1 − beta2^t)
  float eps;
  float decay_shrink;   // 1 − lr · weight_decay
};

}  // namespace canonlab
