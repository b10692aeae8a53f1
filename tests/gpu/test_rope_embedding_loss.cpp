// RoPE, the embedding and cross entropy on the GPU against their CPU ops (rope.h, embedding/naive.h,
// cross_entropy.h, train/loss.h's masked mean): partial RoPE on strided rows, positions far enough out that float
// angles would drift; the embedding's scatter-add bit for bit (the same additions in the same order) with
// repeated tokens and vocabularies of 1 to 40000 rows; cross entropy on vocabularies that are not a multiple of
// the block, a bad target, and the masked mean with a NaN under the mask.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>
#include <ostream>
#include <vector>

#include "engine/ops/cross_entropy/cross_entropy.h"
#include "engine/ops/cross_entropy/cuda.h"
#include "engine/ops/embedding/cuda.h"
#include "engine/ops/embedding/naive.h"
#include "engine/ops/rope/cuda.h"
#include "engine/ops/rope/rope.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

struct RopeCase {
  int B, Tn, H, D, rope_dim, pad;
};
std::ostream& operator<<(std::ostream& os, const RopeCase& c) {
  return os << "B=" << c.B << " Tn=" << c.Tn << " H=" << c.H << " D=" << c.D << " rope_dim=" << c.rope_dim
            << " pad=" << c.pad;
}

class GpuRope : public GpuTestWithParam<RopeCase> {};

TEST_P(GpuRope, ForwardAndBackwardMatchCpu) {
  const auto p = GetParam();
  const int ld = p.H * p.D + p.pad;
  const auto x = random_vector<float>(size_t(p.B) * p.Tn * ld, 1);
  std::vector<float> fwd = x, bwd = x;
  rope_forward(fwd.data(), ld, p.B, p.Tn, p.H, p.D, p.rope_dim, 10000.0);
  rope_backward(bwd.data(), ld, p.B, p.Tn, p.H, p.D, p.rope_dim, 10000.0);
  auto f_d = to_device(x), b_d = to_device(x);
  cuda::rope_forward(stream(), f_d.data(), ld, p.B, p.Tn, p.H, p.D, p.rope_dim, 10000.0);
  cuda::rope_backward(stream(), b_d.data(), ld, p.B, p.Tn, p.H, p.D, p.rope_dim, 10000.0);
  sync();
  auto r = compare_with(f_d.download(), fwd, kElementwise);
  EXPECT_TRUE(r.ok) << "forward " << r.message;
  r = compare_with(b_d.download(), bwd, kElementwise);
  EXPECT_TRUE(r.ok) << "backward " << r.message;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuRope,
                         ::testing::Values(RopeCase{1, 1, 1, 2, 2, 0}, RopeCase{2, 49, 4, 32, 32, 0},
                                           RopeCase{3, 37, 3, 16, 8, 5}, RopeCase{1, 4099, 2, 64, 64, 0},
                                           RopeCase{2, 70, 2, 24, 0, 3}, RopeCase{1, 9, 5, 6, 4, 96}));

class GpuLookup : public GpuTest {};

TEST_F(GpuLookup, RopeRejectsAnOddRopeDim) {
  cuda::DeviceBuffer<float> x(64);
  EXPECT_THROW(cuda::rope_forward(stream(), x.data(), 8, 1, 8, 1, 8, 3, 10000.0), Error);
}

TEST_F(GpuLookup, EmbeddingMatchesCpuBitForBit) {
  for (const auto& [N, C, V] : std::vector<std::tuple<int, int, int>>{
           {1, 1, 1}, {3136, 128, 30}, {777, 200, 7}, {5000, 33, 40000}, {4097, 768, 500}, {64, 129, 1}}) {
    // draw tokens so that many repeat (the sums whose order matters)
    const auto u = random_vector<float>(N, unsigned(N + C), 0, 1);
    std::vector<int> tokens(N);
    for (int n = 0; n < N; n++) tokens[n] = std::min(V - 1, int(u[n] * u[n] * V));
    const auto table = random_vector<float>(size_t(V) * C, 2), dout = random_vector<float>(size_t(N) * C, 3);
    const auto dtable0 = random_vector<float>(table.size(), 4);
    std::vector<float> out(size_t(N) * C), dtable = dtable0;
    embedding_forward_naive(out.data(), tokens.data(), table.data(), N, C);
    embedding_backward_naive(dtable.data(), dout.data(), tokens.data(), N, C);
    const auto tok_d = to_device(tokens);
    const auto table_d = to_device(table), dout_d = to_device(dout);
    auto out_d = poisoned(out.size());
    std::vector<std::vector<float>> dts;
    for (int rep = 0; rep < 2; rep++) {
      auto dt_d = to_device(dtable0);
      cuda::embedding_forward(stream(), out_d.data(), tok_d.data(), table_d.data(), N, C, V);
      cuda::embedding_backward(stream(), dt_d.data(), dout_d.data(), tok_d.data(), N, C, V);
      sync();
      dts.push_back(dt_d.download());
    }
    EXPECT_TRUE(bit_equal(out_d.download(), out)) << "forward N=" << N << " C=" << C << " V=" << V;
    EXPECT_TRUE(bit_equal(dts[0], dtable)) << "backward N=" << N << " C=" << C << " V=" << V;
    EXPECT_TRUE(bit_equal(dts[0], dts[1])) << "backward rerun N=" << N;
  }
}

TEST_F(GpuLookup, EmbeddingTokenOutsideTheVocabularyGivesNaN) {
  const int N = 3, C = 5, V = 4;
  const std::vector<int> tokens = {0, 4, -1};
  const auto table = random_vector<float>(size_t(V) * C, 5);
  const auto tok_d = to_device(tokens);
  const auto table_d = to_device(table);
  auto out_d = poisoned(size_t(N) * C);
  cuda::embedding_forward(stream(), out_d.data(), tok_d.data(), table_d.data(), N, C, V);
  sync();
  const auto out = out_d.download();
  for (int c = 0; c < C; c++) {
    EXPECT_EQ(out[c], table[c]);
    EXPECT_TRUE(std::isnan(out[C + c]));
    EXPECT_TRUE(std::isnan(out[2 * C + c]));
  }
}

TEST_F(GpuLookup, CrossEntropyMatchesCpu) {
  for (const auto& [N, V] : std::vector<std::pair<int, int>>{{1, 1}, {37, 31}, {3136, 30}, {65, 257}, {9, 50257}}) {
    const auto logits = random_vector<float>(size_t(N) * V, 6, -8, 8), dl = random_vector<float>(N, 7, 0, 1);
    std::vector<int> targets(N);
    for (int n = 0; n < N; n++) targets[n] = (n * 7919) % V;
    std::vector<float> losses(N), dlogits(size_t(N) * V);
    cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V);
    cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), dl.data(), N, V);
    const auto lg_d = to_device(logits), dl_d = to_device(dl);
    const auto tg_d = to_device(targets);
    auto loss_d = poisoned(N), dlg_d = poisoned(dlogits.size());
    cuda::cross_entropy_forward(stream(), loss_d.data(), lg_d.data(), tg_d.data(), N, V);
    cuda::cross_entropy_backward(stream(), dlg_d.data(), lg_d.data(), tg_d.data(), dl_d.data(), N, V);
    auto loss2_d = poisoned(N), dlg2_d = poisoned(dlogits.size());  // again: the same bits
    cuda::cross_entropy_forward(stream(), loss2_d.data(), lg_d.data(), tg_d.data(), N, V);
    cuda::cross_entropy_backward(stream(), dlg2_d.data(), lg_d.data(), tg_d.data(), dl_d.data(), N, V);
    sync();
    EXPECT_TRUE(bit_equal(loss_d.download(), loss2_d.download())) << "losses rerun N=" << N << " V=" << V;
    EXPECT_TRUE(bit_equal(dlg_d.download(), dlg2_d.download())) << "dlogits rerun N=" << N << " V=" << V;
    auto r = compare_with(loss_d.download(), losses, kReduction);
    EXPECT_TRUE(r.ok) << "losses N=" << N << " V=" << V << ": " << r.message;
    r = compare_with(dlg_d.download(), dlogits, kReduction);
    EXPECT_TRUE(r.ok) << "dlogits N=" << N << " V=" << V << ": " << r.message;
  }
}

TEST_F(GpuLookup, CrossEntropyBadTargetGivesNaN) {
  const int N = 2, V = 3;
  const std::vector<float> logits = {0.f, 1.f, 2.f, 0.f, 1.f, 2.f}, dl = {1.f, 1.f};
  const std::vector<int> targets = {2, 3};
  const auto lg_d = to_device(logits), dl_d = to_device(dl);
  const auto tg_d = to_device(targets);
  auto loss_d = poisoned(N), dlg_d = poisoned(size_t(N) * V);
  cuda::cross_entropy_forward(stream(), loss_d.data(), lg_d.data(), tg_d.data(), N, V);
  cuda::cross_entropy_backward(stream(), dlg_d.data(), lg_d.data(), tg_d.data(), dl_d.data(), N, V);
  sync();
  const auto loss = loss_d.download(), dlg = dlg_d.download();
  EXPECT_TRUE(std::isfinite(loss[0]));
  EXPECT_TRUE(std::isnan(loss[1]));
  for (int v = 0; v < V; v++) {
    EXPECT_TRUE(std::isfinite(dlg[v]));
    EXPECT_TRUE(std::isnan(dlg[V + v]));
  }
}

TEST_F(GpuLookup, MaskedMeanMatchesTheTrainersLoss) {
  const int N = 3001;
  auto losses = random_vector<float>(N, 8, 0, 5), mask = random_vector<float>(N, 9, 0, 1);
  for (int i = 0; i < N; i += 3) mask[i] = 0.f;
  losses[3] = std::numeric_limits<float>::quiet_NaN();  // under the mask: must not reach the loss
  double total = 0, weight = 0;
  for (int i = 0; i < N; i++) {
    if (mask[i] == 0.f) continue;
    total += double(mask[i]) * double(losses[i]);
    weight += mask[i];
  }
  std::vector<float> dl(N);
  for (int i = 0; i < N; i++) dl[i] = float(mask[i] / weight);
  const auto l_d = to_device(losses), m_d = to_device(mask);
  cuda::DeviceBuffer<double> loss_d(1);
  auto dl_d = poisoned(N);
  cuda::masked_mean_loss(stream(), loss_d.data(), dl_d.data(), l_d.data(), m_d.data(), N, nullptr);
  sync();
  EXPECT_NEAR(loss_d.download()[0], total / weight, 1e-12 * std::abs(total / weight));
  // Σ mask is summed in another order than the CPU's serial loop: the last bit may differ
  const auto r = compare_with(dl_d.download(), dl, kElementwise);
  EXPECT_TRUE(r.ok) << r.message;
  // an all-zero mask: loss 0 and no gradient, as on the CPU
  const auto zeros_d = to_device(std::vector<float>(N, 0.f));
  cuda::masked_mean_loss(stream(), loss_d.data(), dl_d.data(), l_d.data(), zeros_d.data(), N, nullptr);
  sync();
  EXPECT_EQ(loss_d.download()[0], 0.0);
  EXPECT_TRUE(bit_equal(dl_d.download(), std::vector<float>(N, 0.f)));
  // a micro-batch's loss: divided by the whole batch's mask sum (a device double), as the CPU's denominator
  const double whole = 3 * weight;
  const auto whole_d = to_device(std::vector<double>{whole});
  cuda::masked_mean_loss(stream(), loss_d.data(), dl_d.data(), l_d.data(), m_d.data(), N, whole_d.data());
  sync();
  EXPECT_NEAR(loss_d.download()[0], total / whole, 1e-12 * std::abs(total / whole));
  for (int i = 0; i < N; i++) dl[i] = float(mask[i] / whole);
  const auto r2 = compare_with(dl_d.download(), dl, kElementwise);
  EXPECT_TRUE(r2.ok) << r2.message;
}

}  // namespace
}  // namespace canonlab::test
