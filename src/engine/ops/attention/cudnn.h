#pragma once
// Causal softmax attention through cuDNN's fused scaled-dot-product attention (flash attention) in bf16: the
// training pair of cuda.h's flash_attention_forward / flash_attention_backward, with the same contract (shapes,
// strides, log-sum-exp, window convention), computed on bf16 copies of the fp32 operands with fp32 accumulation and
// fp32 softmax statistics. Plain C++: no CUDA or cuDNN header, so the backend can include it anywhere.
//
// What runs: q, k, v (and in the backward out and dout) are converted to bf16 into the caller's workspace
// (elementwise/cuda.h's convert kernels, one rounding per element, deterministic), cuDNN's SDPA graph runs on them
// (causal, optional ALiBi, optional sliding window, softmax stats out / in), and the bf16 results are converted back
// to fp32 (out contiguous; dq, dk, dv with row stride ld_dqkv). lse is written (forward) and read (backward) by cuDNN
// directly in fp32. The backward is built with set_deterministic_algorithm(true) and engines cuDNN marks
// NONDETERMINISTIC are refused (CANONLAB_CUDNN_ALLOW_NONDETERMINISTIC=1 in the environment lifts that refusal, for
// checking on a GPU whether the note is conservative): the same inputs give the same bits.
//
// cuDNN is loaded at run time (dlopen; nothing links libcudnn, ldd of a program using this lists no cuDNN), on the
// first call of any function below, from the first of
//   1. $CUDNN_HOME/lib, $CUDNN_HOME/lib64
//   2. $CUDA_HOME/lib64, /usr/local/cuda/lib64
//   3. the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache) for libcudnn.so.9
//   4. Python's nvidia-cudnn wheels: <prefix>/lib/python3*/{site,dist}-packages/nvidia/cudnn/lib for the prefixes
//      $VIRTUAL_ENV, $CONDA_PREFIX, $HOME/.local, /usr/local, /usr
// that holds a libcudnn.so.9 of major version 9. The cuDNN frontend (header-only, compiled in) also opens the shared
// CUDA 13 runtime for a few calls of its own (the ALiBi slopes' upload, stream-capture bookkeeping): libcudart.so.13
// is looked for beside that libcudnn (and its wheel's nvidia/cu13/lib), in $CUDA_HOME/lib64, /usr/local/cuda/lib64
// and the loader's path, and named to the frontend through CUDNN_FRONTEND_CUDART_LIB_NAME (set only when unset).
// Without it only ALiBi cases are unsupported.
//
// Conventions (as cuda.h):
//   causal always; window 0 = full causal, w > 0 = query t sees keys t − w < s <= t (w >= Tn is the same as 0).
//     cuDNN: diagonal band, top-left aligned, right bound 0, left bound w ("masks columns at or before row − w").
//   alibi: cuDNN's built-in ALiBi, score(t, s) = scale·q_t·k_s − m_h·(t − s), with cuDNN's own slopes m_h, which
//     are the reference code's rule (nn/attention.h's alibi_slopes(H, "press")): 2^(−8h/H) for H a power of two
//     (the same as the "geometric" rule there), the interleaved extension otherwise. The CALLER guarantees that the
//     model's slopes are those: power-of-two head counts, or model.attention.alibi_slopes: press. The slopes are
//     computed by cuDNN's frontend on the host in float (powf); the model's are double rounded to float, which can
//     differ in the last bit. On Blackwell (sm_100) the frontend refuses a deterministic backward with ALiBi, so
//     ALiBi cases are unsupported there.
//   scale is a run-time value (not part of the cached graph), so any scale works with the same cache entry.
//
// Caching and CUDA graphs: per (device, B, Tn, H, D, alibi, window, direction) the cuDNN graph and its plan are
// built once, on first use, and reused. Building is slow: on sm_90 cuDNN 9.19 and 9.26 pick runtime-compiled engines
// for these graphs, so the first use of a shape compiles its kernels with NVRTC (libnvrtc.so.13, which libcudnn finds
// through its RUNPATH: beside it, or the wheel's nvidia/cu13/lib) and loads them. The cuDNN handle is created once
// per device and bound to the caller's stream (cudnnSetStream) on every call. cudnn_attention_unsupported and
// cudnn_attention_workspace_bytes build the same cached graphs, and after them forward and backward allocate nothing
// and never synchronise; still, run each shape once eagerly before capturing it in a CUDA graph (kernels are loaded
// on their first launch). All caches are behind one mutex (the calls are thread-safe; they serialise on it).
// With ALiBi the frontend enqueues a 4·H-byte host-to-device copy of the slopes (from its own pageable host memory)
// into the workspace on every call, and under a capture it ties that host memory's lifetime to the captured graph.
//
// Errors are canonlab::Error (the cuDNN / frontend message included); cudnn_attention_unsupported never throws.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/cuda/types.h"

namespace canonlab::cuda {

inline constexpr int kCudnnMaxHeadDim = 128;

// What cuDNN's fused attention refuses by the shape alone, before a device is asked: "" or why.
inline std::string cudnn_attention_shape_unsupported(int B, int Tn, int H, int D) {
  if (B <= 0 || Tn <= 0 || H <= 0)
    return "empty attention (B=" + std::to_string(B) + ", Tn=" + std::to_string(Tn) + ", H=" + std::to_string(H) + ")";
  if (D > kCudnnMaxHeadDim)
    return "head dimension " + std::to_string(D) + ": cuDNN's fused attention takes at most " +
           std::to_string(kCudnnMaxHeadDim);
  if (D <= 0 || D % 8 != 0)
    return "head dimension " + std::to_string(D) + ": cuDNN's fused attention needs a multiple of 8";
  if (size_t(B) * Tn > size_t(INT32_MAX) / (size_t(H) * D))
    return "B·Tn·H·D = " + std::to_string(size_t(B) * Tn * H * D) + " elements is more than this op indexes";
  return "";
}

// A bound of cudnn_attention_workspace_bytes from the shape alone, where no device can be asked (the resource
// estimate, the host stand-in): the bf16 copies (4 blocks forward, 8 backward) and the fp32 statistics, and for the
// backward the deterministic algorithm's dP, 2·B·H·Tn'² bytes with Tn' = Tn rounded up to 128, plus 1 MiB for
// cuDNN's own and the alignment.
inline size_t cudnn_attention_workspace_bound(int B, int Tn, int H, int D, bool backward) {
  const size_t elements = size_t(B) * Tn * H * D, rows = size_t(B) * H * Tn, tpad = (size_t(Tn) + 127) / 128 * 128;
  return elements * 2 * (backward ? 8 : 4) + rows * 4 + (backward ? 2 * size_t(B) * H * tpad * tpad : 0) + (1 << 20);
}

// "" when cuDNN (loaded as above) can run this case in bf16 — forward, and a deterministic backward — on the current
// device; otherwise a short reason ("no libcudnn.so.9 found (searched ...)", "head dimension 256: cuDNN's fused
// attention takes at most 128", "no deterministic backward for this case in cuDNN 9.19.0: ...", "no CUDA device:
// ..."). Builds and caches both graphs to ask cuDNN, so it needs a device; never throws.
std::string cudnn_attention_unsupported(int B, int Tn, int H, int D, bool alibi, int window);

// Bytes of device workspace cudnn_attention_forward (backward = false) or cudnn_attention_backward (true) needs:
// the bf16 copies (q, k, v; backward also out, dout, dq, dk, dv), an fp32 (B, H, Tn) stats buffer, cuDNN's own
// workspace for this shape, and 256 bytes of slack for aligning an arbitrary workspace pointer. Builds the graph
// if it is not cached yet (call it before capturing a CUDA graph); throws Error when the case is unsupported.
// The backward's cuDNN workspace is large on Hopper: the deterministic algorithm keeps dP, about 2·B·H·Tn'² bytes
// (Tn rounded up to 64/128).
size_t cudnn_attention_workspace_bytes(int B, int Tn, int H, int D, bool alibi, int window, bool backward);

// flash_attention_forward's contract: out (B, Tn, H, D) contiguous fp32; lse (B, H, Tn) fp32, the natural-log
// log-sum-exp of the scaled (and ALiBi-biased) scores of the keys query t sees; q, k, v: (B, Tn, H, D) token rows
// of stride ld_qkv, fp32. workspace: cudnn_attention_workspace_bytes(..., false) bytes of device memory, used by
// this call only until the stream reaches its end.
void cudnn_attention_forward(CudaStream stream, float* out, float* lse, const float* q, const float* k, const float* v,
                             int ld_qkv, bool alibi, int window, int B, int Tn, int H, int D, float scale,
                             void* workspace);

// flash_attention_backward's contract: dq, dk, dv written (not accumulated) with row stride ld_dqkv; dout, out:
// (B, Tn, H, D) contiguous; lse as the forward wrote it; the same alibi, window and scale. workspace:
// cudnn_attention_workspace_bytes(..., true) bytes.
void cudnn_attention_backward(CudaStream stream, float* dq, float* dk, float* dv, int ld_dqkv, const float* dout,
                              const float* out, const float* lse, const float* q, const float* k, const float* v,
                              int ld_qkv, bool alibi, int window, int B, int Tn, int H, int D, float scale,
                              void* workspace);

// dst (rows, cols) fp32 with row stride ld_dst = src (rows, cols) bf16 with row stride ld_src (exact widening):
// the backward's gradients into column blocks of a fused buffer (cudnn_convert.cu).
void convert_columns_from_bf16(CudaStream stream, float* dst, int ld_dst, const Bf16* src, int ld_src, int rows,
                               int cols);

}  // namespace canonlab::cuda
