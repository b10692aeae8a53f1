#pragma once
// Softmax cross entropy on the GPU: cross_entropy.h's ops with a leading stream, device pointers, plus the masked
// mean the trainer takes of the per-row losses (train/loss.h), so the loss never leaves the device during a step.
#include "engine/cuda/types.h"

namespace canonlab::cuda {

// losses: (N) written, −log softmax(logits[n])[targets[n]]; logits: (N, V); targets: (N). A target outside
// [0, V) gives a NaN loss (the CPU throws; a kernel cannot, and the NaN guard then stops the run).
void cross_entropy_forward(CudaStream stream, float* losses, const float* logits, const int* targets, int N, int V);
// dlogits: (N, V) written, (softmax(logits[n]) − onehot(targets[n])) · dlosses[n] (a row of NaN for a bad target)
void cross_entropy_backward(CudaStream stream, float* dlogits, const float* logits, const int* targets,
                            const float* dlosses, int N, int V);

// loss (one double on the device) = Σ mask·losses / W over rows with mask != 0, W = *denominator when that is
// given and > 0 (a micro-batch of a larger batch), else Σ mask (0 when W is 0); dlosses (N), when not null, =
// mask / W: what cross_entropy_backward takes. denominator: a device double or null. One block, fixed order.
void masked_mean_loss(CudaStream stream, double* loss, float* dlosses, const float* losses, const float* mask, int N,
                      const double* denominator);

}  // namespace canonlab::cuda
