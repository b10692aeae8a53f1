// attention: fast (per-(b, h) GEMMs, block-causal) against naive in float on a fused, padded qkv buffer, with and
// without a sliding window; finite differences in double for both; probs are a causal (windowed) softmax with exact
// zeros outside each query's keys; a window of Tn or more is full attention bit for bit. The fast forward keeps only
// each row's softmax state for backward and gives the same bits whether or not it is asked for the probabilities.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <vector>

#include "engine/ops/attention/fast.h"
#include "engine/ops/attention/naive.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

using test::compare;
using test::random_vector;

struct AttnCase {
  int B, Tn, H, D, pad;  // q/k/v live in (B·Tn, 3C + pad) and dq/dk/dv in (B·Tn, 3C + pad + 1)
  bool alibi;
  int window;  // 0 = full causal
};
std::ostream& operator<<(std::ostream& os, const AttnCase& c) {
  return os << "B=" << c.B << " Tn=" << c.Tn << " H=" << c.H << " D=" << c.D << " pad=" << c.pad
            << " alibi=" << c.alibi << " window=" << c.window;
}

// First key query t sees, written out independently of the kernels.
int first_key(int t, int window) { return window > 0 ? std::max(0, t - window + 1) : 0; }

class OpsAttentionFastVsNaive : public ::testing::TestWithParam<AttnCase> {};

TEST_P(OpsAttentionFastVsNaive, MatchesInFloat) {
  const auto p = GetParam();
  const int C = p.H * p.D, ld = 3 * C + p.pad, ldd = 3 * C + p.pad + 1;
  const size_t rows = (size_t)p.B * p.Tn;
  const float scale = 1.0f / std::sqrt(float(p.D));
  // a larger spread than U(-1, 1) gives peaked softmax rows, which is where mistakes show
  auto qkv = random_vector<float>(rows * ld, 1, -2, 2);
  std::vector<float> slopes(p.H);
  for (int h = 0; h < p.H; h++) slopes[h] = std::pow(2.0f, -8.0f * (h + 1) / p.H);
  const float* sp = p.alibi ? slopes.data() : nullptr;
  const float *q = qkv.data(), *k = q + C, *v = q + 2 * C;

  std::vector<float> out1(rows * C), out2(rows * C), P1((size_t)p.B * p.H * p.Tn * p.Tn, 9.f), P2(P1.size(), 9.f);
  std::vector<float> state(attention_state_size(p.B, p.Tn, p.H), 9.f);
  attention_forward(out1.data(), state.data(), P1.data(), q, k, v, ld, sp, p.window, p.B, p.Tn, p.H, p.D, scale,
                    (float*)nullptr);
  attention_forward_naive(out2.data(), P2.data(), q, k, v, ld, sp, p.window, p.B, p.Tn, p.H, p.D, scale);
  // NaN scratch: the fast kernels must never read an entry of it that they have not written in this call
  std::vector<float> scratch(attention_scratch_size(p.Tn, omp_get_max_threads()),
                             std::numeric_limits<float>::quiet_NaN());
  {  // without probabilities (training): the same output and state, bit for bit
    std::vector<float> out3(rows * C), state3(state.size(), 5.f);
    attention_forward(out3.data(), state3.data(), (float*)nullptr, q, k, v, ld, sp, p.window, p.B, p.Tn, p.H, p.D,
                      scale, scratch.data());
    EXPECT_EQ(std::memcmp(out3.data(), out1.data(), out1.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(state3.data(), state.data(), state.size() * sizeof(float)), 0);
  }
  auto c = compare(P1.data(), P2.data(), P1.size(), 1e-5, 1e-7);
  EXPECT_TRUE(c.ok) << "probs " << c.message;
  c = compare(out1.data(), out2.data(), out1.size(), 1e-5, 1e-6);
  EXPECT_TRUE(c.ok) << "out " << c.message;
  // every entry written (none left at the 9 they started as), exact zeros outside [first_key, t], rows sum to 1
  for (const std::vector<float>* P : {&P1, &P2})
    for (int bh = 0; bh < p.B * p.H; bh++)
      for (int t = 0; t < p.Tn; t++) {
        const float* row = P->data() + ((size_t)bh * p.Tn + t) * p.Tn;
        const int lo = first_key(t, p.window);
        double sum = 0;
        for (int s = 0; s < p.Tn; s++) {
          if (s < lo || s > t) {
            ASSERT_EQ(row[s], 0.f) << (P == &P1 ? "fast" : "naive") << ": masked entry, row " << t << " key " << s;
          }
          sum += row[s];
        }
        ASSERT_NEAR(sum, 1.0, 1e-5) << (P == &P1 ? "fast" : "naive") << " row " << t;
      }

  auto dout = random_vector<float>(rows * C, 2);
  std::vector<float> d1(rows * ldd, 7.f), d2(rows * ldd, 7.f);
  std::fill(scratch.begin(), scratch.end(), std::numeric_limits<float>::quiet_NaN());
  attention_backward(d1.data(), d1.data() + C, d1.data() + 2 * C, ldd, dout.data(), state.data(), q, k, v, ld, sp,
                     p.window, p.B, p.Tn, p.H, p.D, scale, scratch.data());
  attention_backward_naive(d2.data(), d2.data() + C, d2.data() + 2 * C, ldd, dout.data(), P2.data(), q, k, v, ld,
                           p.window, p.B, p.Tn, p.H, p.D, scale, (float*)nullptr);
  for (int which = 0; which < 3; which++) {
    // compare column block `which` (dq, dk, dv) row by row
    std::vector<float> a, b;
    for (size_t r = 0; r < rows; r++)
      for (int col = 0; col < C; col++) {
        a.push_back(d1[r * ldd + which * C + col]);
        b.push_back(d2[r * ldd + which * C + col]);
      }
    c = compare(a.data(), b.data(), a.size(), 1e-4, 2e-6);
    EXPECT_TRUE(c.ok) << "d"
                      << "qkv"[which] << " " << c.message;
  }
  for (size_t r = 0; r < rows; r++)
    for (int col = 3 * C; col < ldd; col++) ASSERT_EQ(d1[r * ldd + col], 7.f) << "padding written";
}

// Every shape with no window and windows 1, 3, 17, 70, Tn − 1, Tn, Tn + 5. 17 and 70 put a block's first key
// off and across the 64-row block grid for the longer shapes; Tn and beyond must act as no window.
std::vector<AttnCase> attention_cases() {
  const AttnCase shapes[] = {{1, 1, 1, 4, 0, false, 0},   {2, 5, 2, 3, 1, true, 0},    {3, 37, 2, 8, 0, false, 0},
                             {3, 37, 2, 8, 3, true, 0},   {2, 64, 1, 16, 0, true, 0},  {2, 65, 3, 16, 2, false, 0},
                             {1, 131, 4, 32, 5, true, 0}, {2, 200, 2, 8, 0, true, 0}};
  std::vector<AttnCase> cases;
  for (AttnCase c : shapes)
    for (int w : {0, 1, 3, 17, 70, c.Tn - 1, c.Tn, c.Tn + 5}) {
      c.window = w;
      cases.push_back(c);
    }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Shapes, OpsAttentionFastVsNaive, ::testing::ValuesIn(attention_cases()));

// loss = Σ out ⊙ r over all of q, k and v, against finite differences.
template <bool Fast>
void gradcheck_attention(int B, int Tn, int H, int D, bool alibi, int window, size_t max_points) {
  const int C = H * D, ld = 3 * C + 1;
  const size_t rows = (size_t)B * Tn;
  const double scale = 0.7;
  auto qkv = random_vector(rows * ld, 31, -1.5, 1.5), r = random_vector(rows * C, 32);
  std::vector<double> slopes = {0.5, 0.125, 0.03};
  const double* sp = alibi ? slopes.data() : nullptr;
  std::vector<double> out(rows * C), P((size_t)B * H * Tn * Tn), state(attention_state_size(B, Tn, H));
  std::vector<double> scratch(attention_scratch_size(Tn, omp_get_max_threads()));
  auto loss = [&] {
    if (Fast)  // as in training: no probabilities, the softmax state only
      attention_forward(out.data(), state.data(), (double*)nullptr, qkv.data(), qkv.data() + C, qkv.data() + 2 * C, ld,
                        sp, window, B, Tn, H, D, scale, scratch.data());
    else
      attention_forward_naive(out.data(), P.data(), qkv.data(), qkv.data() + C, qkv.data() + 2 * C, ld, sp, window, B,
                              Tn, H, D, scale);
    return test::dot(out, r);
  };
  loss();
  std::vector<double> dqkv(rows * ld, 0.0);
  if (Fast)
    attention_backward(dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C, ld, r.data(), state.data(), qkv.data(),
                       qkv.data() + C, qkv.data() + 2 * C, ld, sp, window, B, Tn, H, D, scale, scratch.data());
  else
    attention_backward_naive(dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C, ld, r.data(), P.data(), qkv.data(),
                             qkv.data() + C, qkv.data() + 2 * C, ld, window, B, Tn, H, D, scale, scratch.data());
  test::GradcheckOptions opt;
  opt.max_points = max_points;
  auto g = test::gradcheck(loss, qkv.data(), qkv.size(), dqkv.data(), opt);
  EXPECT_TRUE(g.ok) << "window " << window << ": " << g.message;
}

TEST(OpsAttention, GradcheckNaive) {
  gradcheck_attention<false>(2, 7, 2, 3, false, 0, 0);
  gradcheck_attention<false>(2, 7, 3, 2, true, 0, 0);
}
TEST(OpsAttention, GradcheckFast) {
  // The fast path is already pinned to naive in float; samples keep its many threaded calls cheap.
  gradcheck_attention<true>(2, 7, 2, 3, false, 0, 80);
  gradcheck_attention<true>(2, 7, 3, 2, true, 0, 80);
  // crosses the 64-row causal block boundary
  gradcheck_attention<true>(1, 70, 2, 3, true, 0, 150);
}
TEST(OpsAttention, GradcheckNaiveWindowed) {
  gradcheck_attention<false>(2, 7, 2, 3, false, 3, 0);
  gradcheck_attention<false>(2, 7, 3, 2, true, 2, 0);
  gradcheck_attention<false>(1, 6, 2, 2, false, 1, 0);  // each query sees only itself: dq = dk = 0
}
TEST(OpsAttention, GradcheckFastWindowed) {
  gradcheck_attention<true>(2, 7, 2, 3, false, 3, 80);
  gradcheck_attention<true>(2, 7, 3, 2, true, 2, 80);
  // the last block's keys start at 120, past the first block's end: key blocks cut short on both sides
  gradcheck_attention<true>(1, 140, 1, 2, true, 9, 200);
  // a window wider than a block, crossing the 64-row boundary
  gradcheck_attention<true>(1, 70, 2, 3, false, 66, 150);
}

// A window of Tn or more masks nothing, so it must give full attention bit for bit, forward and backward,
// in both kernels.
template <class T>
void check_wide_window_is_full(bool fast) {
  const int B = 2, Tn = 70, H = 2, D = 4, C = H * D, ld = 3 * C;
  const size_t rows = (size_t)B * Tn;
  const T scale = T(0.5);
  auto qkv = random_vector<T>(rows * ld, 41, -2, 2), dout = random_vector<T>(rows * C, 42);
  const T slopes[] = {T(0.25), T(0.0625)};
  const T *q = qkv.data(), *k = q + C, *v = q + 2 * C;
  std::vector<T> scratch(attention_scratch_size(Tn, omp_get_max_threads()));
  std::vector<T> state(attention_state_size(B, Tn, H));
  auto run = [&](int window, std::vector<T>& out, std::vector<T>& P, std::vector<T>& d) {
    out.assign(rows * C, T(0));
    P.assign((size_t)B * H * Tn * Tn, T(0));
    d.assign(rows * ld, T(0));
    if (fast) {
      attention_forward(out.data(), state.data(), P.data(), q, k, v, ld, slopes, window, B, Tn, H, D, scale,
                        scratch.data());
      attention_backward(d.data(), d.data() + C, d.data() + 2 * C, ld, dout.data(), state.data(), q, k, v, ld, slopes,
                         window, B, Tn, H, D, scale, scratch.data());
    } else {
      attention_forward_naive(out.data(), P.data(), q, k, v, ld, slopes, window, B, Tn, H, D, scale);
      attention_backward_naive(d.data(), d.data() + C, d.data() + 2 * C, ld, dout.data(), P.data(), q, k, v, ld,
                               window, B, Tn, H, D, scale, scratch.data());
    }
  };
  std::vector<T> out0, P0, d0;
  run(0, out0, P0, d0);
  for (int w : {Tn, Tn + 1, 1000}) {
    std::vector<T> out, P, d;
    run(w, out, P, d);
    EXPECT_EQ(std::memcmp(out.data(), out0.data(), out.size() * sizeof(T)), 0) << "out, window " << w;
    EXPECT_EQ(std::memcmp(P.data(), P0.data(), P.size() * sizeof(T)), 0) << "probs, window " << w;
    EXPECT_EQ(std::memcmp(d.data(), d0.data(), d.size() * sizeof(T)), 0) << "dqkv, window " << w;
  }
  // and Tn − 1 does mask something: the first key of the last query
  std::vector<T> out, P, d;
  run(Tn - 1, out, P, d);
  EXPECT_EQ(P[(size_t)(Tn - 1) * Tn], T(0));
  EXPECT_GT(P0[(size_t)(Tn - 1) * Tn], T(0));
}
TEST(OpsAttention, WindowOfTnOrMoreIsFullAttention) {
  check_wide_window_is_full<float>(true);
  check_wide_window_is_full<float>(false);
  check_wide_window_is_full<double>(true);
  check_wide_window_is_full<double>(false);
}

TEST(OpsAttention, WindowOneCopiesValues) {
  // each query sees only its own key, so probs are the identity and out[t] = v[t] whatever q and k are
  const int B = 2, Tn = 67, H = 2, D = 3, C = H * D, ld = 3 * C;
  const size_t rows = (size_t)B * Tn;
  auto qkv = random_vector<float>(rows * ld, 51, -3, 3);
  std::vector<float> out(rows * C), P((size_t)B * H * Tn * Tn, 9.f), state(attention_state_size(B, Tn, H));
  attention_forward(out.data(), state.data(), P.data(), qkv.data(), qkv.data() + C, qkv.data() + 2 * C, ld,
                    (const float*)nullptr, 1, B, Tn, H, D, 1.0f, (float*)nullptr);
  for (int bh = 0; bh < B * H; bh++)
    for (int t = 0; t < Tn; t++)
      for (int s = 0; s < Tn; s++)
        ASSERT_EQ(P[((size_t)bh * Tn + t) * Tn + s], s == t ? 1.f : 0.f) << "bh " << bh << " t " << t << " s " << s;
  for (size_t r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) ASSERT_NEAR(out[r * C + c], qkv[r * ld + 2 * C + c], 1e-6f) << "row " << r;
}

TEST(OpsAttention, AlibiPenalisesDistance) {
  // q = 0 makes every score equal without ALiBi; with slope m, p[t, s] ∝ exp(−m (t − s))
  const int Tn = 4, H = 1, D = 2, C = 2;
  std::vector<float> qkv(Tn * 3 * C, 0.f);
  for (int t = 0; t < Tn; t++) qkv[t * 3 * C + C] = float(t);  // keys vary, but q = 0 hides them
  float slope = 0.5f;
  std::vector<float> out(Tn * C), P(Tn * Tn), state(attention_state_size(1, Tn, H));
  attention_forward(out.data(), state.data(), P.data(), qkv.data(), qkv.data() + C, qkv.data() + 2 * C, 3 * C, &slope,
                    0, 1, Tn, H, D, 1.0f, (float*)nullptr);
  double z = 1 + std::exp(-0.5) + std::exp(-1.0) + std::exp(-1.5);
  EXPECT_NEAR(P[3 * Tn + 3], 1 / z, 1e-6);
  EXPECT_NEAR(P[3 * Tn + 0], std::exp(-1.5) / z, 1e-6);
  attention_forward(out.data(), state.data(), P.data(), qkv.data(), qkv.data() + C, qkv.data() + 2 * C, 3 * C,
                    (const float*)nullptr, 0, 1, Tn, H, D, 1.0f, (float*)nullptr);
  for (int s = 0; s < Tn; s++) EXPECT_NEAR(P[3 * Tn + s], 0.25, 1e-6);
}

}  // namespace
}  // namespace canonlab
