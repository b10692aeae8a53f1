#include "data/packing.h"

#include <cmath>
#include <set>

#include "engine/error.h"

namespace canonlab {

int sample_size_inverse_sqrt(CounterRng& rng, int lo, int hi) {
  const double root = std::sqrt(double(hi));
  double total = 0;
  for (int n = lo; n <= hi; n++) total += 1.0 / (n + root);
  double u = rng.uniform() * total;
  for (int n = lo; n <= hi; n++) {
    u -= 1.0 / (n + root);
    if (u < 0) return n;
  }
  return hi;
}

int64_t multi_token_name_space(int vocab, int len_min, int len_max) {
  const int64_t cap = INT64_MAX / 4;
  int64_t total = 0;
  for (int len = len_min; len <= len_max; len++) {
    int64_t count = vocab;  // the final token
    for (int i = 1; i < len && count < cap; i++) count = count > cap / vocab ? cap : count * vocab;
    total = std::min(cap, total + count);
  }
  return total;
}

std::vector<std::vector<int>> distinct_multi_token_names(CounterRng& rng, int count, int vocab, int len_min,
                                                         int len_max, int first_token) {
  CANONLAB_CHECK(multi_token_name_space(vocab, len_min, len_max) >= count,
                 "cannot draw " + std::to_string(count) + " distinct names of " + std::to_string(len_min) + ".." +
                     std::to_string(len_max) + " tokens over a vocabulary of " + std::to_string(vocab));
  std::set<std::vector<int>> seen;
  std::vector<std::vector<int>> names;
  names.reserve(size_t(count));
  while (int(names.size()) < count) {
    const int len = len_min + int(rng.below(uint64_t(len_max - len_min + 1)));
    std::vector<int> name(static_cast<size_t>(len));
    for (int i = 0; i + 1 < len; i++) name[size_t(i)] = first_token + int(rng.below(uint64_t(vocab)));
    name[size_t(len - 1)] = first_token + vocab + int(rng.below(uint64_t(vocab)));
    if (seen.insert(name).second) names.push_back(std::move(name));
  }
  return names;
}

void score_argmax_accuracy(const Batch& batch, const float* logits, int vocab, const std::string& metric,
                           MetricSums& sums) {
  MetricSum& m = sums[metric];
  for (size_t i = 0; i < batch.tokens.size(); i++) {
    if (batch.score_mask[i] == 0.f) continue;
    const float* row = logits + i * size_t(vocab);
    int best = 0;
    for (int v = 1; v < vocab; v++)
      if (row[v] > row[best]) best = v;
    m.add(best == batch.targets[i] ? 1.0 : 0.0);
  }
}

}  // namespace canonlab
