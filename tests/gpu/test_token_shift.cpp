// The token shift on the GPU (engine/ops/token_shift/cuda.h) against the CPU op (the same element kernels on the
// host): every kind, strided rows, outputs poisoned first, coefficient gradients accumulated onto non-zero values and
// run twice to compare bit for bit.
#include <string>
#include <vector>

#include "engine/ops/token_shift/cuda.h"
#include "engine/ops/token_shift/token_shift.h"
#include "gpu_test.h"

namespace canonlab::test {
namespace {

class GpuTokenShift : public GpuTest {};

TEST_F(GpuTokenShift, EveryKindMatchesTheCpu) {
  const int B = 3, Tn = 37, H = 4, D = 16, C = H * D, ld = 3 * C, N = B * Tn;
  const TokenShift shifts[] = {{TokenShiftKind::replace, 1, 0, D}, {TokenShiftKind::partial, 2, 4, 12},
                               {TokenShiftKind::smeared, 1, 0, D}, {TokenShiftKind::kv, 3, 0, D}};
  for (const TokenShift& s : shifts) {
    SCOPED_TRACE("kind " + std::to_string(int(s.kind)) + " offset " + std::to_string(s.offset));
    const int J = token_shift_coef_count(s.kind, H);
    const auto x = random_vector<float>(size_t(N) * ld, 1), dy = random_vector<float>(size_t(N) * ld, 2);
    const auto coef = random_vector<float>(size_t(J > 0 ? J : 1), 3), dcoef0 = random_vector<float>(size_t(J > 0 ? J : 1), 4);
    std::vector<float> y(size_t(N) * ld, 0.0f), dx(size_t(N) * ld, 0.0f), dcoef = dcoef0;
    token_shift_forward(y.data(), ld, x.data(), ld, coef.data(), s, B, Tn, H, D);
    token_shift_backward(dx.data(), ld, J ? dcoef.data() : nullptr, dy.data(), ld, x.data(), ld, coef.data(), s, B, Tn,
                         H, D);

    const auto x_d = to_device(x), dy_d = to_device(dy), coef_d = to_device(coef);
    auto y_d = poisoned(size_t(N) * ld), dx_d = poisoned(size_t(N) * ld);
    cuda::DeviceBuffer<double> scratch(cuda::token_shift_backward_scratch_size(s, H));
    cuda::token_shift_forward(stream(), y_d.data(), ld, x_d.data(), ld, coef_d.data(), s, B, Tn, H, D);
    std::vector<std::vector<float>> dcoefs;
    for (int rep = 0; rep < 2; rep++) {
      auto dcoef_d = to_device(dcoef0);
      cuda::token_shift_backward(stream(), dx_d.data(), ld, J ? dcoef_d.data() : nullptr, dy_d.data(), ld, x_d.data(),
                                 ld, coef_d.data(), s, B, Tn, H, D, scratch.data());
      sync();
      dcoefs.push_back(dcoef_d.download());
    }
    // only the rows' first C columns are written; compare those
    const auto y_got = y_d.download(), dx_got = dx_d.download();
    std::vector<float> yw, yg, dxw, dxg;
    for (int r = 0; r < N; r++)
      for (int c = 0; c < C; c++) {
        const size_t i = size_t(r) * ld + size_t(c);
        yw.push_back(y[i]), yg.push_back(y_got[i]), dxw.push_back(dx[i]), dxg.push_back(dx_got[i]);
      }
    EXPECT_TRUE(compare_with(yg, yw, Tolerance{1e-6, 1e-6}).ok);
    EXPECT_TRUE(compare_with(dxg, dxw, Tolerance{1e-6, 1e-6}).ok);
    EXPECT_TRUE(compare_with(dcoefs[0], dcoef, Tolerance{1e-5, 1e-5}).ok);
    EXPECT_TRUE(bit_equal(dcoefs[0], dcoefs[1])) << "dcoef differs between two identical launches";
  }
}

}  // namespace
}  // namespace canonlab::test
