#include "eval/generate.h"

#include <algorithm>
#include <cmath>

#include "engine/rng.h"

namespace canonlab {

int choose_token(const float* logits, int V, double temperature, uint64_t seed, uint64_t row, uint64_t counter) {
  int best = 0;
  for (int v = 1; v < V; v++)
    if (logits[v] > logits[best]) best = v;
  if (temperature <= 0) return best;
  std::vector<double> p(static_cast<size_t>(V));
  double total = 0;
  for (int v = 0; v < V; v++) total += p[size_t(v)] = std::exp((double(logits[v]) - logits[best]) / temperature);
  CounterRng rng(seed, row, counter);
  double u = rng.uniform() * total;
  for (int v = 0; v < V; v++) {
    u -= p[size_t(v)];
    if (u < 0) return v;
  }
  return best;
}

std::vector<std::vector<int>> ModelSampler::continue_prompts(const std::vector<std::vector<int>>& prompts, int max_new,
                                                             const std::vector<int>& stop_tokens, double temperature,
                                                             uint64_t seed) {
  const int V = model_.vocab_size(), limit = max_length();
  std::vector<std::vector<int>> out(prompts.size());
  std::vector<float> host_logits;
  for (size_t first = 0; first < prompts.size(); first += size_t(batch_rows_)) {
    const int B = int(std::min(prompts.size() - first, size_t(batch_rows_)));
    std::vector<std::vector<int>> rows(prompts.begin() + long(first), prompts.begin() + long(first) + B);
    std::vector<bool> done(size_t(B), false);
    for (int b = 0; b < B; b++) done[size_t(b)] = rows[size_t(b)].empty() || int(rows[size_t(b)].size()) >= limit;
    for (int step = 0; step < max_new; step++) {
      if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
      int L = 0;
      for (const auto& r : rows) L = std::max(L, int(r.size()));
      // Right-padded: a causal model's logits at a row's last token do not see the padding after it.
      std::vector<int> tokens(size_t(B) * L, 0);
      for (int b = 0; b < B; b++) std::copy(rows[size_t(b)].begin(), rows[size_t(b)].end(), tokens.begin() + long(b) * L);
      arena_.reset();
      StepContext<float> ctx{arena_, model_.backend()};
      const float* device_logits = model_.forward(ctx, ctx.upload(std::span<const int>(tokens)), B, L);
      const float* logits = host_view(arena_.memory(), device_logits, size_t(B) * L * V, host_logits).data();
      for (int b = 0; b < B; b++) {
        if (done[size_t(b)]) continue;
        const int last = int(rows[size_t(b)].size()) - 1;
        const int next = choose_token(logits + (size_t(b) * L + size_t(last)) * V, V, temperature, seed,
                                      uint64_t(first) + uint64_t(b), uint64_t(step));
        rows[size_t(b)].push_back(next);
        out[first + size_t(b)].push_back(next);
        if (std::find(stop_tokens.begin(), stop_tokens.end(), next) != stop_tokens.end() ||
            int(rows[size_t(b)].size()) >= limit)
          done[size_t(b)] = true;
      }
    }
  }
  return out;
}

}  // namespace canonlab
