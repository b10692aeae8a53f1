// Attention on the GPU against naive.h: the flash kernels (output, log-sum-exp, dq/dk/dv) and the materialising
// probe path (probabilities with exact zeros outside each query's keys), with ALiBi and sliding windows, head dims
// from 1 to 128 (odd ones too) and lengths that are not multiples of the 64-row blocks or 32-row tiles, on a fused
// padded q|k|v buffer; ±1 inputs as sign-STE attention feeds it; the flash backward twice gives the same bits.
#include <cmath>
#include <ostream>
#include <vector>

#include "engine/ops/attention/cuda.h"
#include "engine/ops/attention/naive.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

struct AttnCase {
  int B, Tn, H, D, pad;  // q/k/v in (B·Tn, 3C + pad), dq/dk/dv in (B·Tn, 3C + pad + 1)
  bool alibi;
  int window;  // 0 = full causal
  bool sign;   // q and k are ±1 (sign-STE scoring)
};
std::ostream& operator<<(std::ostream& os, const AttnCase& c) {
  return os << "B=" << c.B << " Tn=" << c.Tn << " H=" << c.H << " D=" << c.D << " pad=" << c.pad
            << " alibi=" << c.alibi << " window=" << c.window << " sign=" << c.sign;
}

struct Inputs {
  int C, ld, ldd;
  size_t rows;
  float scale;
  std::vector<float> qkv, slopes, dout;
};
Inputs make_inputs(const AttnCase& p) {
  Inputs in;
  in.C = p.H * p.D;
  in.ld = 3 * in.C + p.pad;
  in.ldd = in.ld + 1;
  in.rows = size_t(p.B) * p.Tn;
  in.scale = 1.0f / std::sqrt(float(p.D));
  // a spread wider than U(-1, 1) gives peaked rows, where mistakes show
  in.qkv = random_vector<float>(in.rows * in.ld, 1, -2, 2);
  if (p.sign)
    for (size_t r = 0; r < in.rows; r++)
      for (int c = 0; c < 2 * in.C; c++) {
        float& x = in.qkv[r * in.ld + c];
        x = x >= 0 ? 1.f : -1.f;
      }
  in.slopes.resize(p.H);
  for (int h = 0; h < p.H; h++) in.slopes[h] = std::pow(2.0f, -8.0f * (h + 1) / p.H);
  in.dout = random_vector<float>(in.rows * in.C, 2);
  return in;
}

class GpuAttention : public GpuTestWithParam<AttnCase> {};

TEST_P(GpuAttention, FlashMatchesNaive) {
  const auto p = GetParam();
  const Inputs in = make_inputs(p);
  const int C = in.C;
  const float* sp = p.alibi ? in.slopes.data() : nullptr;
  const float *q = in.qkv.data(), *k = q + C, *v = q + 2 * C;
  std::vector<float> out(in.rows * C), probs(size_t(p.B) * p.H * p.Tn * p.Tn);
  attention_forward_naive(out.data(), probs.data(), q, k, v, in.ld, sp, p.window, p.B, p.Tn, p.H, p.D, in.scale);
  std::vector<float> d(in.rows * in.ldd, 7.f);
  attention_backward_naive(d.data(), d.data() + C, d.data() + 2 * C, in.ldd, in.dout.data(), probs.data(), q, k, v,
                           in.ld, p.window, p.B, p.Tn, p.H, p.D, in.scale, static_cast<float*>(nullptr));
  // log-sum-exp per (b, h, t), in double from the definition
  std::vector<float> lse(size_t(p.B) * p.H * p.Tn);
  for (int b = 0; b < p.B; b++)
    for (int h = 0; h < p.H; h++)
      for (int t = 0; t < p.Tn; t++) {
        const int lo = p.window > 0 ? std::max(0, t - p.window + 1) : 0;
        double mx = -INFINITY;
        std::vector<double> sc(t + 1);
        for (int s = lo; s <= t; s++) {
          double dot = 0;
          for (int e = 0; e < p.D; e++)
            dot += double(q[(size_t(b) * p.Tn + t) * in.ld + h * p.D + e]) *
                   double(k[(size_t(b) * p.Tn + s) * in.ld + h * p.D + e]);
          sc[s] = double(in.scale) * dot - (sp ? double(sp[h]) * (t - s) : 0.0);
          mx = std::max(mx, sc[s]);
        }
        double sum = 0;
        for (int s = lo; s <= t; s++) sum += std::exp(sc[s] - mx);
        lse[(size_t(b) * p.H + h) * p.Tn + t] = float(mx + std::log(sum));
      }

  const auto qkv_d = to_device(in.qkv), slopes_d = to_device(in.slopes), dout_d = to_device(in.dout);
  const float* qd = qkv_d.data();
  auto out_d = poisoned(out.size()), lse_d = poisoned(lse.size());
  cuda::DeviceBuffer<float> scratch(cuda::flash_attention_scratch_size(p.B, p.Tn, p.H));
  cuda::flash_attention_forward(stream(), out_d.data(), lse_d.data(), qd, qd + C, qd + 2 * C, in.ld,
                                p.alibi ? slopes_d.data() : nullptr, p.window, p.B, p.Tn, p.H, p.D, in.scale);
  auto out2_d = poisoned(out.size()), lse2_d = poisoned(lse.size());  // the forward again: the same bits
  cuda::flash_attention_forward(stream(), out2_d.data(), lse2_d.data(), qd, qd + C, qd + 2 * C, in.ld,
                                p.alibi ? slopes_d.data() : nullptr, p.window, p.B, p.Tn, p.H, p.D, in.scale);
  std::vector<std::vector<float>> grads;
  for (int rep = 0; rep < 2; rep++) {
    auto d_d = to_device(std::vector<float>(d.size(), 7.f));  // the pad columns must keep their 7s
    scratch.fill_bytes(0xff);
    cuda::flash_attention_backward(stream(), d_d.data(), d_d.data() + C, d_d.data() + 2 * C, in.ldd, dout_d.data(),
                                   out_d.data(), lse_d.data(), qd, qd + C, qd + 2 * C, in.ld,
                                   p.alibi ? slopes_d.data() : nullptr, p.window, p.B, p.Tn, p.H, p.D, in.scale,
                                   scratch.data());
    sync();
    grads.push_back(d_d.download());
  }
  auto r = compare_with(out_d.download(), out, kReduction);
  EXPECT_TRUE(r.ok) << "out " << r.message;
  r = compare_with(lse_d.download(), lse, kReduction);
  EXPECT_TRUE(r.ok) << "lse " << r.message;
  r = compare_with(grads[0], d, kReduction);
  EXPECT_TRUE(r.ok) << "dq|dk|dv " << r.message;
  EXPECT_TRUE(bit_equal(grads[0], grads[1])) << "flash backward differs between two identical launches";
  EXPECT_TRUE(bit_equal(out_d.download(), out2_d.download())) << "flash forward (out) differs between two launches";
  EXPECT_TRUE(bit_equal(lse_d.download(), lse2_d.download())) << "flash forward (lse) differs between two launches";
}

TEST_P(GpuAttention, MaterialisingPathMatchesNaive) {
  const auto p = GetParam();
  const Inputs in = make_inputs(p);
  const int C = in.C;
  const float* sp = p.alibi ? in.slopes.data() : nullptr;
  const float *q = in.qkv.data(), *k = q + C, *v = q + 2 * C;
  std::vector<float> out(in.rows * C), probs(size_t(p.B) * p.H * p.Tn * p.Tn);
  attention_forward_naive(out.data(), probs.data(), q, k, v, in.ld, sp, p.window, p.B, p.Tn, p.H, p.D, in.scale);
  std::vector<float> d(in.rows * in.ldd, 7.f);
  attention_backward_naive(d.data(), d.data() + C, d.data() + 2 * C, in.ldd, in.dout.data(), probs.data(), q, k, v,
                           in.ld, p.window, p.B, p.Tn, p.H, p.D, in.scale, static_cast<float*>(nullptr));

  const auto qkv_d = to_device(in.qkv), slopes_d = to_device(in.slopes), dout_d = to_device(in.dout);
  const float* qd = qkv_d.data();
  auto out_d = poisoned(out.size()), probs_d = poisoned(probs.size());
  auto d_d = to_device(std::vector<float>(d.size(), 7.f));
  cuda::DeviceBuffer<float> scratch(cuda::attention_backward_scratch_size(p.B, p.Tn, p.H));
  cuda::attention_forward(stream(), out_d.data(), probs_d.data(), qd, qd + C, qd + 2 * C, in.ld,
                          p.alibi ? slopes_d.data() : nullptr, p.window, p.B, p.Tn, p.H, p.D, in.scale);
  cuda::attention_backward(stream(), d_d.data(), d_d.data() + C, d_d.data() + 2 * C, in.ldd, dout_d.data(),
                           probs_d.data(), qd, qd + C, qd + 2 * C, in.ld, p.window, p.B, p.Tn, p.H, p.D, in.scale,
                           scratch.data());
  // both again into fresh buffers: the same bits
  auto out2_d = poisoned(out.size()), probs2_d = poisoned(probs.size());
  auto d2_d = to_device(std::vector<float>(d.size(), 7.f));
  cuda::attention_forward(stream(), out2_d.data(), probs2_d.data(), qd, qd + C, qd + 2 * C, in.ld,
                          p.alibi ? slopes_d.data() : nullptr, p.window, p.B, p.Tn, p.H, p.D, in.scale);
  sync();  // the first backward is done with scratch (fill_bytes runs on the legacy stream)
  scratch.fill_bytes(0xff);
  cuda::attention_backward(stream(), d2_d.data(), d2_d.data() + C, d2_d.data() + 2 * C, in.ldd, dout_d.data(),
                           probs2_d.data(), qd, qd + C, qd + 2 * C, in.ld, p.window, p.B, p.Tn, p.H, p.D, in.scale,
                           scratch.data());
  sync();
  const auto P = probs_d.download();
  EXPECT_TRUE(bit_equal(P, probs2_d.download())) << "probs differ between two launches";
  EXPECT_TRUE(bit_equal(out_d.download(), out2_d.download())) << "out differs between two launches";
  EXPECT_TRUE(bit_equal(d_d.download(), d2_d.download())) << "dq|dk|dv differ between two launches";
  auto r = compare_with(P, probs, kReduction);
  EXPECT_TRUE(r.ok) << "probs " << r.message;
  r = compare_with(out_d.download(), out, kReduction);
  EXPECT_TRUE(r.ok) << "out " << r.message;
  r = compare_with(d_d.download(), d, kReduction);
  EXPECT_TRUE(r.ok) << "dq|dk|dv " << r.message;
  // exact zeros outside [first key, t]
  for (int bh = 0; bh < p.B * p.H; bh++)
    for (int t = 0; t < p.Tn; t++) {
      const int lo = p.window > 0 ? std::max(0, t - p.window + 1) : 0;
      for (int s = 0; s < p.Tn; s++)
        if (s < lo || s > t) {
          ASSERT_EQ(P[(size_t(bh) * p.Tn + t) * p.Tn + s], 0.f) << "row " << t << " key " << s;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GpuAttention,
    ::testing::Values(AttnCase{1, 1, 1, 1, 0, false, 0, false}, AttnCase{2, 49, 4, 32, 0, true, 0, true},
                      AttnCase{2, 49, 4, 32, 0, false, 0, false}, AttnCase{1, 65, 2, 64, 3, false, 0, false},
                      AttnCase{2, 97, 3, 16, 1, false, 7, false}, AttnCase{1, 130, 2, 128, 0, true, 50, false},
                      AttnCase{1, 33, 1, 100, 2, true, 0, false}, AttnCase{3, 200, 2, 24, 0, true, 0, false},
                      AttnCase{1, 70, 2, 5, 0, false, 1, false}, AttnCase{1, 64, 2, 48, 0, true, 64, true},
                      AttnCase{1, 257, 1, 64, 0, false, 33, false}));

class GpuAttentionLimits : public GpuTest {};

TEST_F(GpuAttentionLimits, HeadDimAboveTheLimitIsAnError) {
  cuda::DeviceBuffer<float> buf(3 * 129 + 129 + 1);
  EXPECT_THROW(cuda::flash_attention_forward(stream(), buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                             3 * 129, nullptr, 0, 1, 1, 1, 129, 1.f),
               Error);
}

}  // namespace
}  // namespace canonlab::test
