// The Canon convolution on the GPU: the fused depthwise branch out = [in +] norm(act(conv(in))) against the
// composition of the CPU references it replaces (canon_conv/naive.h, activation.h, norm/naive.h, as nn/canon.h
// chains them), forward and backward, for every activation × norm, with and without the residual; kernel lengths
// from 1 to longer than the sequence; lengths that are not multiples of the 64-token tile, channel counts that are
// not multiples of the 32-channel tile. Grouped and dense convolutions against naive.h. Reruns give the same bits.
#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "engine/ops/activation/activation.h"
#include "engine/ops/canon_conv/cuda.h"
#include "engine/error.h"
#include "engine/ops/canon_conv/naive.h"
#include "engine/ops/norm/naive.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

using cuda::CanonActivation;
using cuda::CanonNorm;

struct CanonCase {
  int B, Tn, C, K;
  CanonActivation act;
  CanonNorm norm;
  bool residual;
};
const char* name(CanonActivation a) {
  return a == CanonActivation::silu ? "silu" : a == CanonActivation::elu ? "elu" : "none";
}
const char* name(CanonNorm n) { return n == CanonNorm::rmsnorm ? "rmsnorm" : n == CanonNorm::layernorm ? "layernorm" : "none"; }
std::ostream& operator<<(std::ostream& os, const CanonCase& c) {
  return os << "B=" << c.B << " Tn=" << c.Tn << " C=" << c.C << " K=" << c.K << " act=" << name(c.act)
            << " norm=" << name(c.norm) << " residual=" << c.residual;
}

// The CPU reference: nn/canon.h's forward and backward written out over the reference kernels.
struct Reference {
  std::vector<float> out, pre, din, dweight, dnw, dnb;
};
Reference reference(const CanonCase& p, const std::vector<float>& in, const std::vector<float>& w,
                    const std::vector<float>& nw, const std::vector<float>& nb, const std::vector<float>& dout,
                    const std::vector<float>& dweight0, const std::vector<float>& dnw0, const std::vector<float>& dnb0) {
  const size_t n = in.size();
  const int N = p.B * p.Tn;
  Reference r;
  r.pre.resize(n);
  canon_conv_forward_naive(r.pre.data(), in.data(), w.data(), p.B, p.Tn, p.C, p.K, p.C);
  std::vector<float> act(n), branch(n), mean(N), rstd(N);
  if (p.act == CanonActivation::silu) silu_forward(act.data(), r.pre.data(), n);
  else if (p.act == CanonActivation::elu) elu_forward(act.data(), r.pre.data(), n);
  else act = r.pre;
  if (p.norm == CanonNorm::rmsnorm) rmsnorm_forward_naive(branch.data(), rstd.data(), act.data(), nw.data(), N, p.C, 1e-5f);
  else if (p.norm == CanonNorm::layernorm)
    layernorm_forward_naive(branch.data(), mean.data(), rstd.data(), act.data(), nw.data(), nb.data(), N, p.C, 1e-5f);
  else branch = act;
  r.out.resize(n);
  for (size_t i = 0; i < n; i++) r.out[i] = p.residual ? in[i] + branch[i] : branch[i];

  r.dnw = dnw0;
  r.dnb = dnb0;
  std::vector<float> dact(n), dconv(n);
  if (p.norm == CanonNorm::rmsnorm)
    rmsnorm_backward_naive(dact.data(), r.dnw.data(), dout.data(), act.data(), nw.data(), rstd.data(), N, p.C);
  else if (p.norm == CanonNorm::layernorm)
    layernorm_backward_naive(dact.data(), r.dnw.data(), r.dnb.data(), dout.data(), act.data(), nw.data(), mean.data(),
                             rstd.data(), N, p.C);
  else dact = dout;
  if (p.act == CanonActivation::silu) silu_backward(dconv.data(), dact.data(), r.pre.data(), n);
  else if (p.act == CanonActivation::elu) elu_backward(dconv.data(), dact.data(), r.pre.data(), n);
  else dconv = dact;
  r.din.resize(n);
  r.dweight = dweight0;
  canon_conv_backward_naive(r.din.data(), r.dweight.data(), dconv.data(), in.data(), w.data(), p.B, p.Tn, p.C, p.K, p.C);
  if (p.residual)
    for (size_t i = 0; i < n; i++) r.din[i] += dout[i];
  return r;
}

class GpuCanon : public GpuTestWithParam<CanonCase> {};

TEST_P(GpuCanon, FusedBranchMatchesTheModuleChain) {
  const auto p = GetParam();
  const size_t n = size_t(p.B) * p.Tn * p.C;
  const int N = p.B * p.Tn;
  const auto in = random_vector<float>(n, 1), dout = random_vector<float>(n, 2);
  // PyTorch's Conv1d init range for depthwise: U(±1/sqrt(K))
  const auto w = random_vector<float>(size_t(p.C) * p.K, 3, -1 / std::sqrt(double(p.K)), 1 / std::sqrt(double(p.K)));
  const auto nw = random_vector<float>(p.C, 4, 0.5, 1.5), nb = random_vector<float>(p.C, 5, -0.5, 0.5);
  const auto dweight0 = random_vector<float>(w.size(), 6), dnw0 = random_vector<float>(p.C, 7),
             dnb0 = random_vector<float>(p.C, 8);
  const Reference ref = reference(p, in, w, nw, nb, dout, dweight0, dnw0, dnb0);

  const auto in_d = to_device(in), dout_d = to_device(dout), w_d = to_device(w), nw_d = to_device(nw),
             nb_d = to_device(nb);
  auto out_d = poisoned(n), pre_d = poisoned(n), mean_d = poisoned(N), rstd_d = poisoned(N);
  const bool ln = p.norm == CanonNorm::layernorm, has_norm = p.norm != CanonNorm::none;
  cuda::canon_forward(stream(), out_d.data(), pre_d.data(), mean_d.data(), rstd_d.data(), in_d.data(), w_d.data(),
                      has_norm ? nw_d.data() : nullptr, ln ? nb_d.data() : nullptr, p.B, p.Tn, p.C, p.K, p.act, p.norm,
                      1e-5f, p.residual);
  // the forward again into fresh poisoned buffers: the same bits (its norm statistics are fixed warp trees)
  auto out2_d = poisoned(n), pre2_d = poisoned(n), mean2_d = poisoned(N), rstd2_d = poisoned(N);
  cuda::canon_forward(stream(), out2_d.data(), pre2_d.data(), mean2_d.data(), rstd2_d.data(), in_d.data(), w_d.data(),
                      has_norm ? nw_d.data() : nullptr, ln ? nb_d.data() : nullptr, p.B, p.Tn, p.C, p.K, p.act, p.norm,
                      1e-5f, p.residual);
  cuda::DeviceBuffer<double> scratch(cuda::canon_backward_scratch_size(p.B, p.Tn, p.C, p.K));
  std::vector<std::vector<float>> din, dw, dnw, dnb;
  for (int rep = 0; rep < 2; rep++) {
    auto din_d = poisoned(n), dw_d = to_device(dweight0), dnw_d = to_device(dnw0), dnb_d = to_device(dnb0);
    scratch.fill_bytes(0xff);
    cuda::canon_backward(stream(), din_d.data(), dw_d.data(), dnw_d.data(), dnb_d.data(), dout_d.data(), in_d.data(),
                         w_d.data(), pre_d.data(), has_norm ? nw_d.data() : nullptr, mean_d.data(), rstd_d.data(), p.B,
                         p.Tn, p.C, p.K, p.act, p.norm, p.residual, scratch.data());
    sync();
    din.push_back(din_d.download());
    dw.push_back(dw_d.download());
    dnw.push_back(dnw_d.download());
    dnb.push_back(dnb_d.download());
  }
  EXPECT_TRUE(bit_equal(out_d.download(), out2_d.download())) << "forward rerun differs (out)";
  EXPECT_TRUE(bit_equal(pre_d.download(), pre2_d.download())) << "forward rerun differs (pre_act)";
  if (has_norm) {
    auto r = compare_with(rstd_d.download(), std::vector<float>(N), {0, 1e30});  // every rstd written (not NaN)
    EXPECT_TRUE(r.ok) << "rstd " << r.message;
    EXPECT_TRUE(bit_equal(rstd_d.download(), rstd2_d.download())) << "forward rerun differs (rstd)";
  }
  auto r = compare_with(pre_d.download(), ref.pre, kReduction);
  EXPECT_TRUE(r.ok) << "pre_act " << r.message;
  r = compare_with(out_d.download(), ref.out, kReduction);
  EXPECT_TRUE(r.ok) << "out " << r.message;
  r = compare_with(din[0], ref.din, kReduction);
  EXPECT_TRUE(r.ok) << "din " << r.message;
  r = compare_with(dw[0], ref.dweight, kReduction);
  EXPECT_TRUE(r.ok) << "dweight " << r.message;
  r = compare_with(dnw[0], ref.dnw, kReduction);
  EXPECT_TRUE(r.ok) << "dnorm_w " << r.message;
  r = compare_with(dnb[0], ref.dnb, kReduction);
  EXPECT_TRUE(r.ok) << "dnorm_b " << r.message;
  for (auto* v : {&din, &dw, &dnw, &dnb}) EXPECT_TRUE(bit_equal((*v)[0], (*v)[1])) << "rerun differs";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GpuCanon,
    ::testing::Values(CanonCase{1, 1, 1, 1, CanonActivation::none, CanonNorm::none, true},
                      CanonCase{2, 49, 128, 4, CanonActivation::none, CanonNorm::none, true},
                      CanonCase{2, 49, 384, 4, CanonActivation::none, CanonNorm::none, false},
                      CanonCase{3, 70, 33, 4, CanonActivation::silu, CanonNorm::rmsnorm, true},
                      CanonCase{2, 130, 96, 3, CanonActivation::elu, CanonNorm::layernorm, false},
                      CanonCase{1, 65, 385, 7, CanonActivation::silu, CanonNorm::layernorm, true},
                      CanonCase{2, 40, 20, 100, CanonActivation::none, CanonNorm::rmsnorm, true},
                      CanonCase{1, 300, 8, 1, CanonActivation::elu, CanonNorm::none, false},
                      CanonCase{4, 64, 64, 4, CanonActivation::silu, CanonNorm::none, true},
                      CanonCase{1, 129, 32, 4, CanonActivation::none, CanonNorm::layernorm, true},
                      // K = 320: the backward block's shared memory (382 × 32 floats + 4 KiB) is above the 48 KiB
                      // a launch gets without opting in
                      CanonCase{1, 70, 40, 320, CanonActivation::silu, CanonNorm::rmsnorm, true},
                      // K = 1024, model.canon.kernel_size's limit: 140 KiB of shared memory
                      CanonCase{1, 20, 7, 1024, CanonActivation::elu, CanonNorm::layernorm, false}));

// Kernels longer than the fused kernels take are an Error naming the limit, not a failed launch.
class GpuCanonLimits : public GpuTest {};
TEST_F(GpuCanonLimits, KernelAboveTheLimitIsAnError) {
  cuda::DeviceBuffer<float> buf(1 << 12);
  try {
    cuda::canon_forward(stream(), buf.data(), buf.data(), nullptr, nullptr, buf.data(), buf.data(), nullptr, nullptr, 1,
                        1, 1, 1025, CanonActivation::none, CanonNorm::none, 1e-5f, false);
    FAIL() << "no error for K = 1025";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1024"), std::string::npos) << e.what();
  }
}

struct ConvCase {
  int B, Tn, C, K, G;
};
std::ostream& operator<<(std::ostream& os, const ConvCase& c) {
  return os << "B=" << c.B << " Tn=" << c.Tn << " C=" << c.C << " K=" << c.K << " G=" << c.G;
}
class GpuCanonConv : public GpuTestWithParam<ConvCase> {};

TEST_P(GpuCanonConv, MatchesNaive) {
  const auto p = GetParam();
  const size_t n = size_t(p.B) * p.Tn * p.C;
  const auto in = random_vector<float>(n, 11), dout = random_vector<float>(n, 12);
  const auto w = random_vector<float>(size_t(p.C) * (p.C / p.G) * p.K, 13), dw0 = random_vector<float>(w.size(), 14);
  std::vector<float> out(n), din(n), dw = dw0;
  canon_conv_forward_naive(out.data(), in.data(), w.data(), p.B, p.Tn, p.C, p.K, p.G);
  canon_conv_backward_naive(din.data(), dw.data(), dout.data(), in.data(), w.data(), p.B, p.Tn, p.C, p.K, p.G);
  const auto in_d = to_device(in), dout_d = to_device(dout), w_d = to_device(w);
  auto out_d = poisoned(n), din_d = poisoned(n), dw_d = to_device(dw0);
  cuda::DeviceBuffer<double> scratch(std::max<size_t>(1, cuda::canon_conv_backward_scratch_size(p.B, p.Tn, p.C, p.K, p.G)));
  cuda::canon_conv_forward(stream(), out_d.data(), in_d.data(), w_d.data(), p.B, p.Tn, p.C, p.K, p.G);
  cuda::canon_conv_backward(stream(), din_d.data(), dw_d.data(), dout_d.data(), in_d.data(), w_d.data(), p.B, p.Tn, p.C,
                            p.K, p.G, scratch.data());
  sync();
  auto r = compare_with(out_d.download(), out, kReduction);
  EXPECT_TRUE(r.ok) << "out " << r.message;
  r = compare_with(din_d.download(), din, kReduction);
  EXPECT_TRUE(r.ok) << "din " << r.message;
  r = compare_with(dw_d.download(), dw, kReduction);
  EXPECT_TRUE(r.ok) << "dweight " << r.message;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuCanonConv,
                         ::testing::Values(ConvCase{2, 49, 128, 4, 128}, ConvCase{2, 33, 24, 4, 12},
                                           ConvCase{1, 70, 16, 1, 1}, ConvCase{3, 17, 12, 5, 3},
                                           ConvCase{1, 100, 40, 3, 1}));

}  // namespace
}  // namespace canonlab::test
