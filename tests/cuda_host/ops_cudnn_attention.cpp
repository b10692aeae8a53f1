// The stand-in of cuDNN's fused attention (engine/ops/attention/cudnn.h): the CPU attention kernel on operands
// rounded to bf16, as cuDNN takes them, with its results rounded to bf16, as cuDNN returns them; the statistics in
// fp32. So the CPU suite runs CudaBackend's cuDNN path (the workspace it sizes, the strides it passes, the log-sum-exp
// it keeps for the backward) and a bf16 run's loss moves as it will on a GPU.
//
// CANONLAB_HOST_CUDNN_MISSING=1 in the environment makes the stand-in answer as a machine without libcudnn.so.9 does:
// every case unsupported, so the tests see train.attention_kernel's fall-back and its refusal.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "device.h"
#include "engine/ops/attention/fast.h"
#include "engine/ops/linear/bf16.h"
#include "engine/threads.h"
#include "host_cuda.h"

namespace canonlab::cuda_host {

namespace {

bool cudnn_missing() {
  const char* v = std::getenv("CANONLAB_HOST_CUDNN_MISSING");
  return v && std::string(v) == "1";
}

// (B·Tn, H·D) rows of stride ld, rounded to bf16 into a dense copy.
std::vector<float> dense_bf16(const float* x, int rows, int cols, int ld) {
  std::vector<float> out(size_t(rows) * cols);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) out[size_t(r) * cols + c] = canonlab::round_to_bf16(x[size_t(r) * ld + c]);
  return out;
}

void round_rows_to_bf16(float* x, int rows, int cols, int ld) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) x[size_t(r) * ld + c] = canonlab::round_to_bf16(x[size_t(r) * ld + c]);
}

void check_case(const char* op, int B, int Tn, int H, int D, bool alibi) {
  const std::string why = cudnn_attention_unsupported(B, Tn, H, D, alibi, 0);
  CANONLAB_CHECK(why.empty(), std::string(op) + ": an unsupported case was launched: " + why);
  CANONLAB_CHECK(!alibi, std::string(op) + ": the stand-in does not model cuDNN's own ALiBi slopes");
}

}  // namespace

std::string cudnn_attention_unsupported(int B, int Tn, int H, int D, bool alibi, int window) {
  if (cudnn_missing()) return "no libcudnn.so.9 found (the stand-in's CANONLAB_HOST_CUDNN_MISSING=1)";
  return cuda::cudnn_attention_shape_unsupported(B, Tn, H, D);
}

size_t cudnn_attention_workspace_bytes(int B, int Tn, int H, int D, bool alibi, int window, bool backward) {
  const std::string why = cudnn_attention_unsupported(B, Tn, H, D, alibi, window);
  CANONLAB_CHECK(why.empty(), "cudnn_attention_workspace_bytes: " + why);
  return cuda::cudnn_attention_workspace_bound(B, Tn, H, D, backward);
}

void cudnn_attention_forward(CudaStream stream, float* out, float* lse, const float* q, const float* k, const float* v,
                             int ld_qkv, bool alibi, int window, int B, int Tn, int H, int D, float scale,
                             void* workspace) {
  check_case("cudnn_attention_forward", B, Tn, H, D, alibi);
  enqueue(stream, "cudnn_attention_forward", [=] {
    const size_t bytes = cudnn_attention_workspace_bytes(B, Tn, H, D, alibi, window, false);
    poison(need(static_cast<std::byte*>(workspace), bytes, "workspace"), bytes);
    const int N = B * Tn, C = H * D;
    const size_t rows = size_t(B) * H * Tn, qkv = strided(N, C, ld_qkv);
    const std::vector<float> qb = dense_bf16(need(q, qkv, "q"), N, C, ld_qkv),
                             kb = dense_bf16(need(k, qkv, "k"), N, C, ld_qkv),
                             vb = dense_bf16(need(v, qkv, "v"), N, C, ld_qkv);
    std::vector<float> state(2 * rows), scratch(attention_scratch_size(Tn, thread_count()));
    float* o = need(out, size_t(N) * C, "out");
    canonlab::attention_forward(o, state.data(), static_cast<float*>(nullptr), qb.data(), kb.data(), vb.data(), C,
                                static_cast<const float*>(nullptr), window, B, Tn, H, D, scale, scratch.data());
    round_rows_to_bf16(o, N, C, C);
    float* l = need(lse, rows, "lse");
    for (size_t i = 0; i < rows; i++) l[i] = state[2 * i] - std::log(state[2 * i + 1]);
  });
}

void cudnn_attention_backward(CudaStream stream, float* dq, float* dk, float* dv, int ld_dqkv, const float* dout,
                              const float* out, const float* lse, const float* q, const float* k, const float* v,
                              int ld_qkv, bool alibi, int window, int B, int Tn, int H, int D, float scale,
                              void* workspace) {
  check_case("cudnn_attention_backward", B, Tn, H, D, alibi);
  enqueue(stream, "cudnn_attention_backward", [=] {
    const size_t bytes = cudnn_attention_workspace_bytes(B, Tn, H, D, alibi, window, true);
    poison(need(static_cast<std::byte*>(workspace), bytes, "workspace"), bytes);
    const int N = B * Tn, C = H * D;
    const size_t rows = size_t(B) * H * Tn, qkv = strided(N, C, ld_qkv), dqkv = strided(N, C, ld_dqkv);
    need(out, size_t(N) * C, "out");  // cuDNN's backward reads O (rowsum(dO ⊙ O)); the CPU's has no use for it
    const std::vector<float> qb = dense_bf16(need(q, qkv, "q"), N, C, ld_qkv),
                             kb = dense_bf16(need(k, qkv, "k"), N, C, ld_qkv),
                             vb = dense_bf16(need(v, qkv, "v"), N, C, ld_qkv),
                             dob = dense_bf16(need(dout, size_t(N) * C, "dout"), N, C, C);
    const float* l = need(lse, rows, "lse");
    std::vector<float> state(2 * rows), scratch(attention_scratch_size(Tn, thread_count()));
    for (size_t i = 0; i < rows; i++) state[2 * i] = l[i], state[2 * i + 1] = 1.f;
    float* gq = need(dq, dqkv, "dq");
    float* gk = need(dk, dqkv, "dk");
    float* gv = need(dv, dqkv, "dv");
    canonlab::attention_backward(gq, gk, gv, ld_dqkv, dob.data(), state.data(), qb.data(), kb.data(), vb.data(), C,
                                 static_cast<const float*>(nullptr), window, B, Tn, H, D, scale, scratch.data());
    for (float* g : {gq, gk, gv}) round_rows_to_bf16(g, N, C, ld_dqkv);
  });
}

}  // namespace canonlab::cuda_host
