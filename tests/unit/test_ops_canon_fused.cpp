// The fused Canon op (engine/ops/canon_conv/fused.h) against the separate fast ops it replaces (bit for bit, float,
// every activation × norm × residual × {depthwise, 2 groups} × shapes including Tn < K, K > the tap tile and more
// than one time chunk), against the naive composition (fused_naive.h) in double, finite differences of its
// backward in double, thread-count independence, and whole Canon models with the fused op on and off.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "config/config.h"
#include "engine/backend/cpu_backend.h"
#include "engine/ops/activation/activation.h"
#include "engine/ops/canon_conv/fast.h"
#include "engine/ops/canon_conv/fused.h"
#include "engine/ops/canon_conv/fused_naive.h"
#include "engine/ops/elementwise/elementwise.h"
#include "engine/ops/norm/fast.h"
#include "gradcheck.h"
#include "tiny_model.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

struct FusedCase {
  int B, Tn, C, K;
  bool depthwise;
  CanonEpilogue ep;
  int G() const { return depthwise ? C : 2; }
};
const char* act_name(CanonActivation a) {
  return a == CanonActivation::silu ? "silu" : a == CanonActivation::elu ? "elu" : "none";
}
const char* norm_name(CanonNorm n) {
  return n == CanonNorm::rmsnorm ? "rmsnorm" : n == CanonNorm::layernorm ? "layernorm" : "none";
}
std::ostream& operator<<(std::ostream& os, const FusedCase& c) {
  return os << "B=" << c.B << " Tn=" << c.Tn << " C=" << c.C << " K=" << c.K << " G=" << c.G() << " "
            << act_name(c.ep.activation) << " " << norm_name(c.ep.norm) << (c.ep.residual ? " residual" : "");
}

std::vector<FusedCase> all_cases() {
  struct Shape {
    int B, Tn, C, K;
  };
  // Tn < K; one chunk with a partial 64-channel tile; two time chunks; K above the 4-tap tile
  const Shape shapes[] = {{2, 3, 8, 4}, {2, 37, 80, 4}, {3, 70, 16, 4}, {1, 20, 8, 9}};
  std::vector<FusedCase> cases;
  for (const Shape& s : shapes)
    for (bool depthwise : {true, false})
      for (auto a : {CanonActivation::none, CanonActivation::silu, CanonActivation::elu})
        for (auto nk : {CanonNorm::none, CanonNorm::layernorm, CanonNorm::rmsnorm})
          for (bool residual : {true, false}) cases.push_back({s.B, s.Tn, s.C, s.K, depthwise, {a, nk, residual}});
  return cases;
}

// Inputs of one case; the accumulated gradients start from nonzero values so "accumulated" is checked too.
template <class T>
struct Inputs {
  size_t n, nw;
  int N;
  std::vector<T> in, w, nw_, nb, dout, dw0, dnw0, dnb0;
  explicit Inputs(const FusedCase& p) {
    N = p.B * p.Tn;
    n = (size_t)N * p.C;
    nw = (size_t)p.C * (p.C / p.G()) * p.K;
    in = random_vector<T>(n, 1), w = random_vector<T>(nw, 2), dout = random_vector<T>(n, 3);
    nw_ = random_vector<T>(p.C, 4, 0.5, 1.5), nb = random_vector<T>(p.C, 5);
    dw0 = random_vector<T>(nw, 6), dnw0 = random_vector<T>(p.C, 7), dnb0 = random_vector<T>(p.C, 8);
  }
};

// What CanonLayer did before the fused op: one pass per stage through full (B, Tn, C) buffers.
struct Separate {
  std::vector<float> out, conv, mean, rstd, din, dw, dnw, dnb;
};
Separate run_separate(const FusedCase& p, const Inputs<float>& x, float eps) {
  const int C = p.C, N = x.N;
  const size_t n = x.n;
  Separate r;
  r.out.assign(n, 0), r.conv.assign(n, 0), r.mean.assign(N, 0), r.rstd.assign(N, 0), r.din.assign(n, 0);
  r.dw = x.dw0, r.dnw = x.dnw0, r.dnb = x.dnb0;
  std::vector<float> act(n), normed(n);
  canon_conv_forward(r.conv.data(), x.in.data(), x.w.data(), p.B, p.Tn, C, p.K, p.G());
  const float* branch = r.conv.data();
  if (p.ep.activation == CanonActivation::silu) silu_forward(act.data(), r.conv.data(), n), branch = act.data();
  if (p.ep.activation == CanonActivation::elu) elu_forward(act.data(), r.conv.data(), n), branch = act.data();
  const float* norm_in = branch;
  if (p.ep.norm == CanonNorm::rmsnorm)
    rmsnorm_forward(normed.data(), r.rstd.data(), norm_in, x.nw_.data(), N, C, eps), branch = normed.data();
  if (p.ep.norm == CanonNorm::layernorm)
    layernorm_forward(normed.data(), r.mean.data(), r.rstd.data(), norm_in, x.nw_.data(), x.nb.data(), N, C, eps),
        branch = normed.data();
  if (p.ep.residual) add(r.out.data(), x.in.data(), branch, n);
  else copy(r.out.data(), branch, n);

  std::vector<float> dact(n), dconv(n);
  const float* dbranch = x.dout.data();
  if (p.ep.norm == CanonNorm::rmsnorm)
    rmsnorm_backward(dact.data(), r.dnw.data(), dbranch, norm_in, x.nw_.data(), r.rstd.data(), N, C),
        dbranch = dact.data();
  if (p.ep.norm == CanonNorm::layernorm)
    layernorm_backward(dact.data(), r.dnw.data(), r.dnb.data(), dbranch, norm_in, x.nw_.data(), r.mean.data(),
                       r.rstd.data(), N, C),
        dbranch = dact.data();
  if (p.ep.activation == CanonActivation::silu)
    silu_backward(dconv.data(), dbranch, r.conv.data(), n), dbranch = dconv.data();
  if (p.ep.activation == CanonActivation::elu)
    elu_backward(dconv.data(), dbranch, r.conv.data(), n), dbranch = dconv.data();
  canon_conv_backward(r.din.data(), r.dw.data(), dbranch, x.in.data(), x.w.data(), p.B, p.Tn, C, p.K, p.G());
  if (p.ep.residual) add_into(r.din.data(), x.dout.data(), n);
  return r;
}

template <class T>
struct Fused {
  std::vector<T> out, conv, mean, rstd, din, dw, dnw, dnb;
};
// The fused op with only the buffers its contract asks for (null otherwise), so a missing one would crash.
template <class T>
Fused<T> run_fused(const FusedCase& p, const Inputs<T>& x, T eps, bool naive) {
  const int C = p.C, N = x.N;
  const size_t n = x.n;
  Fused<T> r;
  r.out.assign(n, 0), r.din.assign(n, 0), r.conv.assign(p.ep.saves_conv() ? n : 0, 0);
  r.rstd.assign(p.ep.norm != CanonNorm::none ? N : 0, 0), r.mean.assign(p.ep.norm == CanonNorm::layernorm ? N : 0, 0);
  r.dw = x.dw0, r.dnw = x.dnw0, r.dnb = x.dnb0;
  auto ptr = [](std::vector<T>& v) { return v.empty() ? nullptr : v.data(); };
  const T* nw = p.ep.norm != CanonNorm::none ? x.nw_.data() : nullptr;
  const T* nb = p.ep.norm == CanonNorm::layernorm ? x.nb.data() : nullptr;
  T* dnb = p.ep.norm == CanonNorm::layernorm ? r.dnb.data() : nullptr;
  if (naive) {
    canon_fused_forward_naive(r.out.data(), ptr(r.conv), ptr(r.mean), ptr(r.rstd), x.in.data(), x.w.data(), nw, nb,
                              p.B, p.Tn, C, p.K, p.G(), p.ep, eps);
    canon_fused_backward_naive(r.din.data(), r.dw.data(), r.dnw.data(), dnb, x.dout.data(), x.in.data(), ptr(r.conv),
                               x.w.data(), nw, ptr(r.mean), ptr(r.rstd), p.B, p.Tn, C, p.K, p.G(), p.ep);
  } else {
    canon_fused_forward(r.out.data(), ptr(r.conv), ptr(r.mean), ptr(r.rstd), x.in.data(), x.w.data(), nw, nb, p.B,
                        p.Tn, C, p.K, p.G(), p.ep, eps);
    std::vector<T> scratch(canon_fused_scratch_size(p.B, p.Tn, C, p.K, p.G(), p.ep), T(7));
    canon_fused_backward(r.din.data(), r.dw.data(), r.dnw.data(), dnb, ptr(scratch), x.dout.data(), x.in.data(),
                         ptr(r.conv), x.w.data(), nw, ptr(r.mean), ptr(r.rstd), p.B, p.Tn, C, p.K, p.G(), p.ep);
  }
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class OpsCanonFused : public ::testing::TestWithParam<FusedCase> {};

TEST_P(OpsCanonFused, SameBitsAsSeparateOps) {
  const FusedCase p = GetParam();
  Inputs<float> x(p);
  const float eps = 1e-5f;
  Separate s = run_separate(p, x, eps);
  Fused<float> f = run_fused(p, x, eps, false);
  EXPECT_TRUE(same_bits(f.out, s.out)) << compare(f.out.data(), s.out.data(), x.n, 0, 0).message;
  EXPECT_TRUE(same_bits(f.din, s.din)) << compare(f.din.data(), s.din.data(), x.n, 0, 0).message;
  EXPECT_TRUE(same_bits(f.dw, s.dw)) << compare(f.dw.data(), s.dw.data(), x.nw, 0, 0).message;
  if (p.ep.saves_conv()) {
    EXPECT_TRUE(same_bits(f.conv, s.conv));
  }
  if (p.ep.norm != CanonNorm::none) {
    EXPECT_TRUE(same_bits(f.rstd, s.rstd));
    EXPECT_TRUE(same_bits(f.dnw, s.dnw)) << compare(f.dnw.data(), s.dnw.data(), p.C, 0, 0).message;
  } else {
    EXPECT_TRUE(same_bits(f.dnw, x.dnw0)) << "no norm: its gradient must stay untouched";
  }
  if (p.ep.norm == CanonNorm::layernorm) {
    EXPECT_TRUE(same_bits(f.mean, s.mean));
    EXPECT_TRUE(same_bits(f.dnb, s.dnb));
  } else {
    EXPECT_TRUE(same_bits(f.dnb, x.dnb0));
  }
}

TEST_P(OpsCanonFused, MatchesNaiveCompositionInDouble) {
  const FusedCase p = GetParam();
  Inputs<double> x(p);
  Fused<double> f = run_fused(p, x, 1e-5, false), r = run_fused(p, x, 1e-5, true);
  const double rtol = 1e-12, atol = 1e-12;
  auto check = [&](const char* what, const std::vector<double>& a, const std::vector<double>& b) {
    ASSERT_EQ(a.size(), b.size()) << what;
    auto c = compare(a.data(), b.data(), a.size(), rtol, atol);
    EXPECT_TRUE(c.ok) << what << ": " << c.message;
  };
  check("out", f.out, r.out), check("conv", f.conv, r.conv), check("mean", f.mean, r.mean);
  check("rstd", f.rstd, r.rstd), check("din", f.din, r.din), check("dweight", f.dw, r.dw);
  check("dnorm_w", f.dnw, r.dnw), check("dnorm_b", f.dnb, r.dnb);
}

INSTANTIATE_TEST_SUITE_P(AllCombinations, OpsCanonFused, ::testing::ValuesIn(all_cases()));

// Finite differences in double of the fused backward: loss = Σ out ⊙ r with respect to the input, the conv weight
// and the norm's weight and bias, for every combination, with Tn < K and Tn > K.
TEST(OpsCanonFusedGrad, MatchesFiniteDifferences) {
  for (int Tn : {2, 6})
    for (bool depthwise : {true, false})
      for (auto a : {CanonActivation::none, CanonActivation::silu, CanonActivation::elu})
        for (auto nk : {CanonNorm::none, CanonNorm::layernorm, CanonNorm::rmsnorm})
          for (bool residual : {true, false}) {
            const FusedCase p{2, Tn, 8, 3, depthwise, {a, nk, residual}};
            Inputs<double> x(p);
            std::vector<double> r = random_vector<double>(x.n, 11);
            x.dout = r;
            std::fill(x.dw0.begin(), x.dw0.end(), 0.0), std::fill(x.dnw0.begin(), x.dnw0.end(), 0.0);
            std::fill(x.dnb0.begin(), x.dnb0.end(), 0.0);
            Fused<double> f = run_fused(p, x, 1e-5, false);
            auto loss = [&] { return test::dot(run_fused(p, x, 1e-5, false).out, r); };
            const test::GradcheckOptions opt;
            auto g = test::gradcheck(loss, x.in.data(), x.n, f.din.data(), opt);
            EXPECT_TRUE(g.ok) << p << " din: " << g.message;
            g = test::gradcheck(loss, x.w.data(), x.nw, f.dw.data(), opt);
            EXPECT_TRUE(g.ok) << p << " dweight: " << g.message;
            if (nk != CanonNorm::none) {
              g = test::gradcheck(loss, x.nw_.data(), p.C, f.dnw.data(), opt);
              EXPECT_TRUE(g.ok) << p << " dnorm_w: " << g.message;
            }
            if (nk == CanonNorm::layernorm) {
              g = test::gradcheck(loss, x.nb.data(), p.C, f.dnb.data(), opt);
              EXPECT_TRUE(g.ok) << p << " dnorm_b: " << g.message;
            }
          }
}

TEST(OpsCanonFusedGrad, DoesNotDependOnThreadCount) {
  const int saved = omp_get_max_threads();
  for (bool depthwise : {true, false}) {
    const FusedCase p{5, 90, 48, 4, depthwise, {CanonActivation::silu, CanonNorm::layernorm, true}};
    Inputs<float> x(p);
    std::vector<Fused<float>> runs;
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      runs.push_back(run_fused(p, x, 1e-5f, false));
    }
    for (int i : {1, 2}) {
      EXPECT_TRUE(same_bits(runs[0].out, runs[i].out)) << p;
      EXPECT_TRUE(same_bits(runs[0].din, runs[i].din)) << p;
      EXPECT_TRUE(same_bits(runs[0].dw, runs[i].dw)) << p;
      EXPECT_TRUE(same_bits(runs[0].dnw, runs[i].dnw)) << p;
      EXPECT_TRUE(same_bits(runs[0].dnb, runs[i].dnb)) << p;
    }
  }
  omp_set_num_threads(saved);
}

TEST(OpsCanonFused, RejectsMissingBuffers) {
  std::vector<float> x(2 * 8), w(8 * 2);
  const CanonEpilogue silu{CanonActivation::silu, CanonNorm::none, true};
  EXPECT_THROW(canon_fused_forward<float>(x.data(), nullptr, nullptr, nullptr, x.data(), w.data(), nullptr, nullptr, 1,
                                          2, 8, 2, 8, silu, 1e-5f),
               Error);
  const CanonEpilogue ln{CanonActivation::none, CanonNorm::layernorm, true};
  EXPECT_THROW(canon_fused_forward<float>(x.data(), x.data(), nullptr, x.data(), x.data(), w.data(), w.data(),
                                          w.data(), 1, 2, 8, 2, 8, ln, 1e-5f),
               Error);
}

// Whole models: the loss and every parameter gradient of a Canon model are the same bits with the fused op as with
// the separate ops (CpuBackend::set_fused_canon(false)), for the paper's default and the activations and norms the
// fused path takes (an activation and a norm together stay on the separate path: CanonEpilogue::fusion_pays),
// depthwise and grouped, with and without residual. The op-level tests above cover every epilogue.
TEST(CanonFusedModel, LossAndGradientsUnchanged) {
  const std::vector<std::vector<std::string>> variants = {
      {"model.canon.set=ABCD"},
      {"model.canon.set=ABCD", "model.canon.activation=silu"},
      {"model.canon.set=ABCD", "model.canon.norm=rmsnorm", "model.canon.residual=false"},
      {"model.canon.set=ABCD", "model.canon.groups=2", "model.canon.activation=elu"},
      {"model.canon.set=ABCD", "model.canon.groups=2", "model.canon.norm=layernorm"},
      {"model.canon.set=BD", "model.canon.kernel_size=2", "model.canon.norm=layernorm", "model.canon.residual=false"},
  };
  for (const auto& v : variants) {
    std::vector<std::string> sets = {"model.d_model=32", "model.n_heads=2", "model.n_layers=2", "task.vocab=11",
                                     "task.n_symbols=5", "train.batch_size=3", "model.attention.position=nope"};
    sets.insert(sets.end(), v.begin(), v.end());
    const RunConfig cfg = config_from_yaml_string("{}", sets);
    std::string label;
    for (const auto& s : v) label += s + " ";
    std::vector<double> losses;
    std::vector<size_t> arena_bytes;
    std::vector<std::vector<float>> grads, logits(2);
    for (bool fused : {true, false}) {
      auto be = std::make_shared<CpuBackend<float>>();
      be->set_fused_canon(fused);
      test::TinyModel<float> m(cfg);
      m.model = build_model<float>(cfg.model, cfg.train.seed, be);
      losses.push_back(m.loss(true, &logits[fused ? 0 : 1]));
      grads.emplace_back(m.model->params().grads().begin(), m.model->params().grads().end());
      arena_bytes.push_back(m.arena.high_water_bytes());
    }
    // the two runs took different paths: the fused one keeps different buffers
    EXPECT_NE(arena_bytes[0], arena_bytes[1]) << label;
    EXPECT_EQ(losses[0], losses[1]) << label;
    EXPECT_TRUE(same_bits(logits[0], logits[1])) << label;
    EXPECT_TRUE(same_bits(grads[0], grads[1])) << label;
    // a test that cannot fail is a defect: the gradients are not all zero
    double norm = 0;
    for (float g : grads[0]) norm += double(g) * g;
    EXPECT_GT(norm, 0) << label;
  }
}

}  // namespace
}  // namespace canonlab
