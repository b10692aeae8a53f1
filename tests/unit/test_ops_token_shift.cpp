// engine/ops/token_shift: the CPU op (the GPU's element kernels on the host) against the plain reference, finite
// differences in double for dx and the learned coefficients, the formulas of each kind on small cases by hand,
// thread-count independence, and the op through the Backend interface (CPU backend, double and float).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/ops/token_shift/token_shift.h"
#include "engine/threads.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

struct Case {
  std::string name;
  TokenShift shift;
};

// B = 2, Tn = 7, H = 3, D = 4, rows of stride 3·C (the k columns of a q|k|v buffer)
constexpr int B = 2, Tn = 7, H = 3, D = 4, C = H * D, LD = 3 * C, N = B * Tn;

std::vector<Case> cases() {
  return {{"replace_o1", {TokenShiftKind::replace, 1, 0, D}}, {"replace_o3", {TokenShiftKind::replace, 3, 0, D}},
          {"partial_o1_dims1_3", {TokenShiftKind::partial, 1, 1, 3}}, {"partial_o2_all", {TokenShiftKind::partial, 2, 0, D}},
          {"smeared_o1", {TokenShiftKind::smeared, 1, 0, D}},      {"smeared_o2", {TokenShiftKind::smeared, 2, 0, D}},
          {"kv_o1", {TokenShiftKind::kv, 1, 0, D}},                {"kv_o3_dims2_4", {TokenShiftKind::kv, 3, 2, 4}}};
}

template <class T>
std::vector<T> coefficients(const TokenShift& s, unsigned seed) {
  return random_vector<T>(size_t(token_shift_coef_count(s.kind, H)), seed, -1.5, 1.5);
}

TEST(TokenShift, FormulasByHand) {
  // one head of one dim, offset 1, x = 1, 2, 3
  const std::vector<double> x = {1, 2, 3};
  const auto run = [&](TokenShiftKind kind, std::vector<double> coef) {
    std::vector<double> y(3);
    token_shift_forward_naive(y.data(), 1, x.data(), 1, coef.data(), TokenShift{kind, 1, 0, 1}, 1, 3, 1, 1);
    std::vector<double> fast(3);
    token_shift_forward(fast.data(), 1, x.data(), 1, coef.data(), TokenShift{kind, 1, 0, 1}, 1, 3, 1, 1);
    EXPECT_EQ(fast, y);
    return y;
  };
  EXPECT_EQ(run(TokenShiftKind::replace, {}), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(run(TokenShiftKind::partial, {}), (std::vector<double>{1, 1, 2}));
  EXPECT_EQ(run(TokenShiftKind::smeared, {0.0}), (std::vector<double>{1, 1.5, 2.5}));  // σ(0) = 1/2, first key kept
  EXPECT_EQ(run(TokenShiftKind::kv, {0.5, 2.0}), (std::vector<double>{0.5, 3, 5.5}));  // zero-padded shift: 0.5·1
}

TEST(TokenShift, FastMatchesTheReferenceAndFiniteDifferences) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const size_t n = size_t(N) * LD;
    std::vector<double> x = random_vector<double>(n, 1), w = random_vector<double>(n, 2);
    std::vector<double> coef = coefficients<double>(c.shift, 3);
    std::vector<double> y(n, std::nan("")), y_ref(n, std::nan(""));
    token_shift_forward(y.data() + C, LD, x.data() + C, LD, coef.data(), c.shift, B, Tn, H, D);
    token_shift_forward_naive(y_ref.data() + C, LD, x.data() + C, LD, coef.data(), c.shift, B, Tn, H, D);
    for (int r = 0; r < N; r++)
      for (int j = 0; j < C; j++) {
        const size_t i = size_t(r) * LD + C + size_t(j);
        ASSERT_NEAR(y[i], y_ref[i], 1e-14) << "row " << r << " channel " << j;
        y[i] = std::nan("");  // checked; every element must now be NaN again
      }
    for (size_t i = 0; i < n; i++) ASSERT_TRUE(std::isnan(y[i])) << "wrote outside its columns at " << i;

    // backward: dx written, dcoef accumulated onto a non-zero start
    const size_t J = coef.size();
    std::vector<double> dx(n, 0.0), dx_ref(n, 0.0), dcoef(J, 0.25), dcoef_ref(J, 0.25);
    token_shift_backward(dx.data() + C, LD, J ? dcoef.data() : nullptr, w.data() + C, LD, x.data() + C, LD,
                         coef.data(), c.shift, B, Tn, H, D);
    token_shift_backward_naive(dx_ref.data() + C, LD, J ? dcoef_ref.data() : nullptr, w.data() + C, LD, x.data() + C,
                               LD, coef.data(), c.shift, B, Tn, H, D);
    const auto cx = compare(dx.data(), dx_ref.data(), n, 1e-12, 1e-13);
    EXPECT_TRUE(cx.ok) << cx.message;
    const auto cc = compare(dcoef.data(), dcoef_ref.data(), J, 1e-12, 1e-13);
    EXPECT_TRUE(cc.ok) << cc.message;

    // finite differences of loss = Σ w ⊙ y, for x and the coefficients
    const auto loss = [&] {
      std::vector<double> out(n, 0.0);
      token_shift_forward(out.data() + C, LD, x.data() + C, LD, coef.data(), c.shift, B, Tn, H, D);
      return test::dot(out, w);
    };
    std::vector<double> gx(n, 0.0), gcoef(J, 0.0);
    token_shift_backward(gx.data() + C, LD, J ? gcoef.data() : nullptr, w.data() + C, LD, x.data() + C, LD,
                         coef.data(), c.shift, B, Tn, H, D);
    for (int r = 0; r < N; r++)  // only the k columns are inputs
      for (int j = 0; j < LD; j++)
        if (j < C || j >= 2 * C) gx[size_t(r) * LD + size_t(j)] = 0;
    const auto rx = test::gradcheck(loss, x.data(), n, gx.data());
    EXPECT_TRUE(rx.ok) << rx.message;
    if (J) {
      const auto rc = test::gradcheck(loss, coef.data(), J, gcoef.data());
      EXPECT_TRUE(rc.ok) << rc.message;
    }
  }
}

TEST(TokenShift, FloatBitsDoNotDependOnThreads) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const size_t n = size_t(N) * LD;
    const std::vector<float> x = random_vector<float>(n, 4), w = random_vector<float>(n, 5);
    const std::vector<float> coef = coefficients<float>(c.shift, 6);
    const size_t J = coef.size();
    std::vector<std::vector<float>> dx(2, std::vector<float>(n, 0.f)), dcoef(2, std::vector<float>(J, 0.f));
    for (int threads : {1, 2}) {
      set_thread_count(threads);
      token_shift_backward(dx[threads - 1].data(), LD, J ? dcoef[threads - 1].data() : nullptr, w.data(), LD, x.data(),
                           LD, coef.data(), c.shift, B, Tn, H, D);
    }
    set_thread_count(1);
    EXPECT_EQ(dx[0], dx[1]);
    EXPECT_EQ(dcoef[0], dcoef[1]);
  }
}

TEST(TokenShift, ThroughTheBackendInterface) {
  CpuBackend<float> be;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const size_t n = size_t(N) * LD;
    const std::vector<float> x = random_vector<float>(n, 7), w = random_vector<float>(n, 8);
    const std::vector<float> coef = coefficients<float>(c.shift, 9);
    const size_t J = coef.size();
    std::vector<float> y(n, 0.f), want(n, 0.f), dx(n, 0.f), dx_want(n, 0.f), dcoef(J, 1.f), dcoef_want(J, 1.f);
    be.token_shift_forward(y.data(), LD, x.data(), LD, coef.data(), c.shift, B, Tn, H, D);
    token_shift_forward_naive(want.data(), LD, x.data(), LD, coef.data(), c.shift, B, Tn, H, D);
    const auto cy = compare(y.data(), want.data(), n, 1e-6, 1e-6);
    EXPECT_TRUE(cy.ok) << cy.message;
    be.token_shift_backward(dx.data(), LD, J ? dcoef.data() : nullptr, w.data(), LD, x.data(), LD, coef.data(),
                            c.shift, B, Tn, H, D);
    token_shift_backward_naive(dx_want.data(), LD, J ? dcoef_want.data() : nullptr, w.data(), LD, x.data(), LD,
                               coef.data(), c.shift, B, Tn, H, D);
    const auto cx = compare(dx.data(), dx_want.data(), n, 1e-6, 1e-6);
    EXPECT_TRUE(cx.ok) << cx.message;
    const auto cc = compare(dcoef.data(), dcoef_want.data(), J, 1e-5, 1e-5);
    EXPECT_TRUE(cc.ok) << cc.message;
  }
}

TEST(TokenShift, RefusesAnEmptyOrOutOfRangeDimRange) {
  std::vector<float> x(size_t(N) * C), y(x.size());
  EXPECT_THROW(token_shift_forward(y.data(), C, x.data(), C, static_cast<const float*>(nullptr),
                                   TokenShift{TokenShiftKind::partial, 1, 2, 2}, B, Tn, H, D),
               Error);
  EXPECT_THROW(token_shift_forward(y.data(), C, x.data(), C, static_cast<const float*>(nullptr),
                                   TokenShift{TokenShiftKind::partial, 0, 0, D}, B, Tn, H, D),
               Error);
}

}  // namespace
}  // namespace canonlab
