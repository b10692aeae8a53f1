// cuDNN's fused attention in bf16 (engine/ops/attention/cudnn.h) against naive.h in double on the same bf16-rounded
// q, k, v and dout: output, log-sum-exp and dq/dk/dv, causal with sliding windows (1, small, 64, ≥ Tn) and ALiBi
// (power-of-two heads, and H = 6 with the "press" slopes cuDNN uses), head dims 32/64/128, lengths that are not
// multiples of 64, q|k|v as column blocks of a padded fused buffer and dq|dk|dv written into one whose pad columns
// must keep their 7s; forward and backward run twice on a NaN-poisoned workspace and give the same bits; the two
// captured in a CUDA graph after an eager call replay the eager bits. Every case asks cudnn_attention_unsupported
// first and skips with its reason (no libcudnn, an older cuDNN, no deterministic backward for the case...).
//
// Tolerances (|got − want| <= atol + rtol·|want|). Against a double reference on the same bf16 inputs the products
// q·k and dO·v are exact in fp32, so what remains is cuDNN's bf16 roundings: P (forward) and dS (backward) are cast
// to bf16 for the second GEMMs, and out, dq, dk, dv are stored as bf16. Each costs at most 2^-9 ≈ 2e-3 of the sum of
// |terms| of an entry, which the largest entry of the tensor bounds within a small factor, so every tensor gets
// rtol = 1e-2 and atol = 1e-2 · max|want| (kBf16Attention). lse comes from the fp32 scores with nothing in bf16:
// fp32 sums of D exact products and fp32 ALiBi distances, i.e. the reduction row with a wider atol (kCudnnLse).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "engine/cuda/graph.h"
#include "engine/error.h"
#include "engine/ops/attention/cudnn.h"
#include "engine/ops/attention/naive.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

constexpr double kBf16AttentionRtol = 1e-2;
constexpr double kBf16AttentionAtolScale = 1e-2;
constexpr Tolerance kCudnnLse{2e-4, 1e-4};

// bf16 tolerance of one tensor: atol scaled by its largest reference entry (see the top of the file)
Tolerance bf16_attention(const std::vector<float>& want) {
  double m = 0;
  for (float x : want) m = std::max(m, double(std::abs(x)));
  return {kBf16AttentionRtol, kBf16AttentionAtolScale * std::max(m, 1e-3)};
}

struct CudnnCase {
  int B, Tn, H, D, pad;  // q/k/v in (B·Tn, 3C + pad), dq/dk/dv in (B·Tn, 3C + pad + 1)
  bool alibi;
  int window;          // 0 = full causal
  bool misaligned;     // lse 4 bytes past a 16-byte boundary, workspace 8 bytes past one
};
std::ostream& operator<<(std::ostream& os, const CudnnCase& c) {
  return os << "B=" << c.B << " Tn=" << c.Tn << " H=" << c.H << " D=" << c.D << " pad=" << c.pad
            << " alibi=" << c.alibi << " window=" << c.window << " misaligned=" << c.misaligned;
}

// nn/attention.h's alibi_slopes(H, "press"), which is cuDNN's rule (the frontend's get_alibi_slope); the test binary
// does not include the model headers.
std::vector<float> press_slopes(int H) {
  int base = H;
  while ((base & (base - 1)) != 0) base &= base - 1;
  std::vector<float> s(H);
  for (int h = 0; h < H; h++)
    s[h] = float(h < base ? std::pow(2.0, -8.0 * (h + 1) / base)
                          : std::pow(2.0, -8.0 * (2 * (h - base) + 1) / (2.0 * base)));
  return s;
}

struct Problem {
  CudnnCase p;
  int C, ld, ldd;
  size_t rows;
  float scale;
  std::vector<float> qkv, dout, slopes;           // bf16-valued floats
  std::vector<float> out, lse, dqkv;              // the double reference, rounded to float
};

Problem make_problem(const CudnnCase& p) {
  Problem r;
  r.p = p;
  r.C = p.H * p.D;
  r.ld = 3 * r.C + p.pad;
  r.ldd = r.ld + 1;
  r.rows = size_t(p.B) * p.Tn;
  r.scale = 1.0f / std::sqrt(float(p.D));
  // a spread wider than U(-1, 1) gives peaked rows, where mistakes show
  r.qkv = rounded_bf16(random_vector<float>(r.rows * r.ld, 11, -2, 2));
  r.dout = rounded_bf16(random_vector<float>(r.rows * r.C, 12));
  r.slopes = press_slopes(p.H);

  const std::vector<double> qkv(r.qkv.begin(), r.qkv.end()), dout(r.dout.begin(), r.dout.end());
  const std::vector<double> slopes(r.slopes.begin(), r.slopes.end());
  const double* sp = p.alibi ? slopes.data() : nullptr;
  const double *q = qkv.data(), *k = q + r.C, *v = q + 2 * r.C;
  const double scale = r.scale;
  std::vector<double> out(r.rows * r.C), probs(size_t(p.B) * p.H * p.Tn * p.Tn);
  attention_forward_naive(out.data(), probs.data(), q, k, v, r.ld, sp, p.window, p.B, p.Tn, p.H, p.D, scale);
  std::vector<double> d(r.rows * r.ldd, 7.0);
  attention_backward_naive(d.data(), d.data() + r.C, d.data() + 2 * r.C, r.ldd, dout.data(), probs.data(), q, k, v,
                           r.ld, p.window, p.B, p.Tn, p.H, p.D, scale, static_cast<double*>(nullptr));
  r.out.assign(out.begin(), out.end());
  r.dqkv.assign(d.begin(), d.end());
  // log-sum-exp per (b, h, t) from the definition
  r.lse.resize(size_t(p.B) * p.H * p.Tn);
  for (int b = 0; b < p.B; b++)
    for (int h = 0; h < p.H; h++)
      for (int t = 0; t < p.Tn; t++) {
        const int lo = p.window > 0 ? std::max(0, t - p.window + 1) : 0;
        std::vector<double> sc(t + 1);
        double mx = -INFINITY;
        for (int s = lo; s <= t; s++) {
          double dot = 0;
          for (int e = 0; e < p.D; e++)
            dot += q[(size_t(b) * p.Tn + t) * r.ld + h * p.D + e] * k[(size_t(b) * p.Tn + s) * r.ld + h * p.D + e];
          sc[s] = scale * dot - (sp ? sp[h] * (t - s) : 0.0);
          mx = std::max(mx, sc[s]);
        }
        double sum = 0;
        for (int s = lo; s <= t; s++) sum += std::exp(sc[s] - mx);
        r.lse[(size_t(b) * p.H + h) * p.Tn + t] = float(mx + std::log(sum));
      }
  return r;
}

// Device buffers of one problem, and the two calls.
struct Buffers {
  const Problem& pr;
  cuda::DeviceBuffer<float> qkv, dout, out, lse, dqkv;
  cuda::DeviceBuffer<uint8_t> ws_fwd, ws_bwd;
  size_t lse_offset, ws_offset;

  explicit Buffers(const Problem& problem)
      : pr(problem), qkv(to_device(problem.qkv)), dout(to_device(problem.dout)), out(poisoned(problem.out.size())),
        lse(poisoned(problem.lse.size() + 1)), dqkv(to_device(std::vector<float>(problem.dqkv.size(), 7.f))),
        lse_offset(problem.p.misaligned ? 1 : 0), ws_offset(problem.p.misaligned ? 8 : 0) {
    const CudnnCase& p = problem.p;
    ws_fwd = cuda::DeviceBuffer<uint8_t>(
        cuda::cudnn_attention_workspace_bytes(p.B, p.Tn, p.H, p.D, p.alibi, p.window, false) + ws_offset);
    ws_bwd = cuda::DeviceBuffer<uint8_t>(
        cuda::cudnn_attention_workspace_bytes(p.B, p.Tn, p.H, p.D, p.alibi, p.window, true) + ws_offset);
    // NaN bf16s everywhere: nothing may depend on what the workspace held
    ws_fwd.fill_bytes(0xff);
    ws_bwd.fill_bytes(0xff);
  }
  float* lse_ptr() { return lse.data() + lse_offset; }
  void forward(cuda::CudaStream s) {
    const CudnnCase& p = pr.p;
    const float* q = qkv.data();
    cuda::cudnn_attention_forward(s, out.data(), lse_ptr(), q, q + pr.C, q + 2 * pr.C, pr.ld, p.alibi, p.window, p.B,
                                  p.Tn, p.H, p.D, pr.scale, ws_fwd.data() + ws_offset);
  }
  void backward(cuda::CudaStream s) {
    const CudnnCase& p = pr.p;
    const float* q = qkv.data();
    float* d = dqkv.data();
    cuda::cudnn_attention_backward(s, d, d + pr.C, d + 2 * pr.C, pr.ldd, dout.data(), out.data(), lse_ptr(), q,
                                   q + pr.C, q + 2 * pr.C, pr.ld, p.alibi, p.window, p.B, p.Tn, p.H, p.D, pr.scale,
                                   ws_bwd.data() + ws_offset);
  }
  std::vector<float> lse_host() const {
    std::vector<float> all = lse.download();
    return std::vector<float>(all.begin() + lse_offset, all.begin() + lse_offset + pr.lse.size());
  }
};

// the dq|dk|dv columns of a (rows, ldd) buffer, and whether every pad column still holds 7
std::vector<float> gradient_columns(const Problem& pr, const std::vector<float>& d, bool& pads_kept) {
  std::vector<float> g;
  g.reserve(pr.rows * 3 * pr.C);
  pads_kept = true;
  for (size_t r = 0; r < pr.rows; r++)
    for (int c = 0; c < pr.ldd; c++) {
      const float x = d[r * pr.ldd + c];
      if (c < 3 * pr.C) g.push_back(x);
      else if (x != 7.f) pads_kept = false;
    }
  return g;
}

class GpuCudnnAttention : public GpuTestWithParam<CudnnCase> {
 protected:
  void SetUp() override {
    GpuTestWithParam<CudnnCase>::SetUp();
    if (IsSkipped()) return;
    const CudnnCase p = GetParam();
    const std::string why = cuda::cudnn_attention_unsupported(p.B, p.Tn, p.H, p.D, p.alibi, p.window);
    if (!why.empty()) GTEST_SKIP() << "cuDNN attention unsupported: " << why;
  }
};

TEST_P(GpuCudnnAttention, MatchesNaiveOnBf16InputsAndRepeatsBitForBit) {
  const Problem pr = make_problem(GetParam());
  Buffers first(pr), second(pr);
  first.forward(stream());
  second.forward(stream());
  first.backward(stream());
  second.backward(stream());
  sync();
  const std::vector<float> out = first.out.download(), lse = first.lse_host(), d = first.dqkv.download();

  auto r = compare_with(out, pr.out, bf16_attention(pr.out));
  EXPECT_TRUE(r.ok) << "out " << r.message;
  r = compare_with(lse, pr.lse, kCudnnLse);
  EXPECT_TRUE(r.ok) << "lse " << r.message;
  bool pads_kept = false;
  const std::vector<float> got = gradient_columns(pr, d, pads_kept);
  bool ref_pads = false;
  const std::vector<float> want = gradient_columns(pr, pr.dqkv, ref_pads);
  EXPECT_TRUE(pads_kept) << "a pad column of dq|dk|dv was written";
  // each of dq, dk, dv with its own scale
  for (int part = 0; part < 3; part++) {
    std::vector<float> g, w;
    for (size_t row = 0; row < pr.rows; row++)
      for (int c = part * pr.C; c < (part + 1) * pr.C; c++) {
        g.push_back(got[row * 3 * pr.C + c]);
        w.push_back(want[row * 3 * pr.C + c]);
      }
    r = compare_with(g, w, bf16_attention(w));
    EXPECT_TRUE(r.ok) << (part == 0 ? "dq " : part == 1 ? "dk " : "dv ") << r.message;
  }
  EXPECT_TRUE(bit_equal(out, second.out.download())) << "forward (out) differs between two launches";
  EXPECT_TRUE(bit_equal(lse, second.lse_host())) << "forward (lse) differs between two launches";
  EXPECT_TRUE(bit_equal(d, second.dqkv.download())) << "backward differs between two launches";
}

TEST_P(GpuCudnnAttention, CapturedInACudaGraphReplaysTheEagerBits) {
  const Problem pr = make_problem(GetParam());
  Buffers eager(pr), graphed(pr);
  eager.forward(stream());
  eager.backward(stream());
  // a first eager call of the shape on the graphed buffers too (cuDNN loads its kernels on first use), then poison
  graphed.forward(stream());
  graphed.backward(stream());
  sync();
  graphed.out.fill_bytes(0xff);
  graphed.lse.fill_bytes(0xff);
  graphed.dqkv.upload(std::vector<float>(pr.dqkv.size(), 7.f));
  cuda::CudaGraph graph;
  graph.capture(stream(), [&] {
    graphed.forward(stream());
    graphed.backward(stream());
  });
  graph.launch(stream());
  sync();
  EXPECT_TRUE(bit_equal(eager.out.download(), graphed.out.download())) << "out";
  EXPECT_TRUE(bit_equal(eager.lse_host(), graphed.lse_host())) << "lse";
  EXPECT_TRUE(bit_equal(eager.dqkv.download(), graphed.dqkv.download())) << "dq|dk|dv";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GpuCudnnAttention,
    ::testing::Values(CudnnCase{2, 49, 4, 32, 0, false, 0, false}, CudnnCase{2, 97, 2, 64, 3, false, 0, true},
                      CudnnCase{1, 130, 2, 128, 0, false, 0, false}, CudnnCase{2, 77, 4, 64, 1, true, 0, false},
                      CudnnCase{1, 150, 8, 32, 0, true, 33, true}, CudnnCase{2, 100, 2, 64, 0, false, 7, false},
                      CudnnCase{1, 65, 2, 128, 2, false, 64, false}, CudnnCase{1, 200, 2, 64, 0, false, 1, false},
                      CudnnCase{1, 257, 1, 64, 0, false, 300, false}, CudnnCase{3, 33, 2, 128, 0, true, 16, false},
                      CudnnCase{1, 96, 6, 32, 0, true, 0, false}));

// What needs no device: the shape checks answer with a reason, and nothing throws, whatever the machine has.
TEST(CudnnAttentionSupport, SaysWhyInsteadOfThrowing) {
  std::string why;
  ASSERT_NO_THROW(why = cuda::cudnn_attention_unsupported(1, 64, 2, 64, false, 0));
  if (why.find("built without") != std::string::npos) GTEST_SKIP() << why;  // cudnn_absent.cpp: one answer for all
  ASSERT_NO_THROW(why = cuda::cudnn_attention_unsupported(1, 64, 2, 256, false, 0));
  EXPECT_NE(why.find("at most 128"), std::string::npos) << why;
  ASSERT_NO_THROW(why = cuda::cudnn_attention_unsupported(1, 64, 2, 100, false, 0));
  EXPECT_NE(why.find("multiple of 8"), std::string::npos) << why;
  ASSERT_NO_THROW(why = cuda::cudnn_attention_unsupported(0, 64, 2, 64, false, 0));
  EXPECT_FALSE(why.empty());
  ASSERT_NO_THROW(why = cuda::cudnn_attention_unsupported(2, 64, 4, 64, true, 16));
  if (cuda::device_count() == 0) {
    EXPECT_FALSE(why.empty()) << "no device, yet supported";
  }
  std::printf("cudnn_attention_unsupported(2, 64, 4, 64, alibi, window 16): %s\n",
              why.empty() ? "(supported)" : why.c_str());
}

TEST(CudnnAttentionSupport, WorkspaceOfAnUnsupportedCaseIsAnError) {
  EXPECT_THROW(cuda::cudnn_attention_workspace_bytes(1, 64, 2, 256, false, 0, true), Error);
}

}  // namespace
}  // namespace canonlab::test
