// engine/ops/repeat_heads (grouped-query attention): the CPU op (the GPU's element kernels on the host) against the
// plain reference and a case by hand, finite differences in double (the backward is the forward's transpose), the
// rows' other columns untouched, thread-count independence, and the op through the Backend interface.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/ops/repeat_heads/repeat_heads.h"
#include "engine/threads.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

// N rows; x: 2·Hkv heads of D (k | v) at column X0 of rows of stride LDX; y: 2·Hkv·G heads at column Y0 of stride LDY.
constexpr int N = 11, Hkv = 3, G = 4, D = 5, HX = 2 * Hkv, CX = HX * D, CY = CX * G;
constexpr int X0 = 7, LDX = X0 + CX + 2, Y0 = 3, LDY = Y0 + CY + 1;

TEST(RepeatHeads, ByHand) {
  // one row, two heads of two dims, each repeated three times
  const std::vector<double> x = {1, 2, 3, 4};
  std::vector<double> y(12), y_ref(12);
  repeat_heads_forward(y.data(), 12, x.data(), 4, 1, 2, 3, 2);
  repeat_heads_forward_naive(y_ref.data(), 12, x.data(), 4, 1, 2, 3, 2);
  EXPECT_EQ(y, (std::vector<double>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
  EXPECT_EQ(y_ref, y);
  const std::vector<double> dy = {1, 10, 100, 1000, 2, 20, 200, 2000, 3, 30, 300, 3000};
  std::vector<double> dx(4);
  repeat_heads_backward(dx.data(), 4, dy.data(), 12, 1, 2, 3, 2);
  // head 0 collects query heads 0, 1, 2 (columns 0-5), head 1 query heads 3, 4, 5
  EXPECT_EQ(dx, (std::vector<double>{1 + 100 + 2, 10 + 1000 + 20, 200 + 3 + 300, 2000 + 30 + 3000}));
}

TEST(RepeatHeads, FastMatchesTheReferenceAndFiniteDifferences) {
  std::vector<double> x = random_vector<double>(size_t(N) * LDX, 1), w = random_vector<double>(size_t(N) * LDY, 2);
  std::vector<double> y(size_t(N) * LDY, std::nan("")), y_ref(y);
  repeat_heads_forward(y.data() + Y0, LDY, x.data() + X0, LDX, N, HX, G, D);
  repeat_heads_forward_naive(y_ref.data() + Y0, LDY, x.data() + X0, LDX, N, HX, G, D);
  for (int r = 0; r < N; r++)
    for (int c = 0; c < LDY; c++) {
      const size_t i = size_t(r) * LDY + c;
      if (c < Y0 || c >= Y0 + CY) ASSERT_TRUE(std::isnan(y[i])) << "wrote outside its columns at row " << r << " col " << c;
      else ASSERT_EQ(y[i], y_ref[i]) << "row " << r << " col " << c;  // a copy: exact
    }
  // backward: written, equal to the reference's bits (both sum in double, g in order)
  std::vector<double> dx(size_t(N) * LDX, std::nan("")), dx_ref(dx);
  repeat_heads_backward(dx.data() + X0, LDX, w.data() + Y0, LDY, N, HX, G, D);
  repeat_heads_backward_naive(dx_ref.data() + X0, LDX, w.data() + Y0, LDY, N, HX, G, D);
  for (int r = 0; r < N; r++)
    for (int c = 0; c < LDX; c++) {
      const size_t i = size_t(r) * LDX + c;
      if (c < X0 || c >= X0 + CX) ASSERT_TRUE(std::isnan(dx[i])) << "wrote outside its columns at row " << r;
      else ASSERT_EQ(dx[i], dx_ref[i]) << "row " << r << " col " << c;
    }
  // finite differences of loss = Σ w ⊙ y
  const auto loss = [&] {
    std::vector<double> out(size_t(N) * LDY, 0.0);
    repeat_heads_forward(out.data() + Y0, LDY, x.data() + X0, LDX, N, HX, G, D);
    return test::dot(out, w);
  };
  std::vector<double> gx(size_t(N) * LDX, 0.0);
  repeat_heads_backward(gx.data() + X0, LDX, w.data() + Y0, LDY, N, HX, G, D);
  const auto rx = test::gradcheck(loss, x.data(), x.size(), gx.data());
  EXPECT_TRUE(rx.ok) << rx.message;
}

TEST(RepeatHeads, FloatBitsDoNotDependOnThreads) {
  const std::vector<float> dy = random_vector<float>(size_t(N) * CY, 3);
  std::vector<std::vector<float>> dx(2, std::vector<float>(size_t(N) * CX, 0.f));
  for (int threads : {1, 2}) {
    set_thread_count(threads);
    repeat_heads_backward(dx[threads - 1].data(), CX, dy.data(), CY, N, HX, G, D);
  }
  set_thread_count(1);
  EXPECT_EQ(dx[0], dx[1]);
}

TEST(RepeatHeads, ThroughTheBackendInterface) {
  CpuBackend<float> be;
  const std::vector<float> x = random_vector<float>(size_t(N) * CX, 4), dy = random_vector<float>(size_t(N) * CY, 5);
  std::vector<float> y(size_t(N) * CY), want(y.size()), dx(x.size()), dx_want(x.size());
  be.repeat_heads_forward(y.data(), CY, x.data(), CX, N, HX, G, D);
  repeat_heads_forward_naive(want.data(), CY, x.data(), CX, N, HX, G, D);
  EXPECT_EQ(y, want);
  be.repeat_heads_backward(dx.data(), CX, dy.data(), CY, N, HX, G, D);
  repeat_heads_backward_naive(dx_want.data(), CX, dy.data(), CY, N, HX, G, D);
  const auto c = compare(dx.data(), dx_want.data(), dx.size(), 1e-6, 1e-6);
  EXPECT_TRUE(c.ok) << c.message;
  EXPECT_THROW(be.repeat_heads_forward(y.data(), CY, x.data(), CX, N, HX, 0, D), Error);
}

}  // namespace
}  // namespace canonlab
