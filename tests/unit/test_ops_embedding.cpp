// embedding: gather, scatter-add with repeated tokens against naive bit for bit, for several thread counts.
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "engine/ops/embedding/fast.h"
#include "engine/ops/embedding/naive.h"
#include "gradcheck.h"

namespace canonlab {
namespace {

TEST(OpsEmbedding, ForwardGathersRows) {
  const int V = 5, C = 3;
  auto table = test::random_vector<float>(V * C, 1);
  const std::vector<int> tokens = {4, 0, 4, 2};
  std::vector<float> out(tokens.size() * C), ref(out.size());
  embedding_forward(out.data(), tokens.data(), table.data(), (int)tokens.size(), C);
  embedding_forward_naive(ref.data(), tokens.data(), table.data(), (int)tokens.size(), C);
  EXPECT_EQ(out, ref);
  for (size_t n = 0; n < tokens.size(); n++)
    for (int c = 0; c < C; c++) EXPECT_EQ(out[n * C + c], table[tokens[n] * C + c]);
}

TEST(OpsEmbedding, BackwardAccumulatesRepeatedTokensIdenticallyForAnyThreadCount) {
  const int V = 7, C = 40, N = 500;  // C = 40 leaves a partial 16-column block
  std::vector<int> tokens(N);
  for (int n = 0; n < N; n++) tokens[n] = (n * n + 3) % V;
  auto dout = test::random_vector<float>((size_t)N * C, 2);
  auto init = test::random_vector<float>((size_t)V * C, 3);
  auto ref = init;
  embedding_backward_naive(ref.data(), dout.data(), tokens.data(), N, C);
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    auto got = init;
    embedding_backward(got.data(), dout.data(), tokens.data(), N, C);
    EXPECT_EQ(got, ref) << threads << " threads";
  }
  omp_set_num_threads(saved);
  // and the sums are right: row v gained Σ over its tokens
  for (int c : {0, 39}) {
    double s = init[2 * C + c];
    for (int n = 0; n < N; n++)
      if (tokens[n] == 2) s += dout[(size_t)n * C + c];
    EXPECT_NEAR(ref[2 * C + c], s, 1e-4);
  }
}

}  // namespace
}  // namespace canonlab
