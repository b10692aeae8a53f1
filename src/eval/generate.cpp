#include "eval/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/rng.h"

namespace canonlab {

int choose_token(const float* logits, int V, double temperature, uint64_t seed, uint64_t row, uint64_t counter,
                 int top_k) {
  int best = 0;
  for (int v = 1; v < V; v++)
    if (logits[v] > logits[best]) best = v;
  if (temperature <= 0) return best;
  // Tokens outside the top k get probability 0; the draw below still walks every id in order, so top_k = 0 and
  // top_k >= V give the same draws.
  std::vector<bool> kept(size_t(V), true);
  if (top_k > 0 && top_k < V) {
    std::vector<int> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    kept.assign(size_t(V), false);
    for (int i = 0; i < top_k; i++) kept[size_t(order[size_t(i)])] = true;
  }
  std::vector<double> p(static_cast<size_t>(V));
  double total = 0;
  for (int v = 0; v < V; v++)
    total += p[size_t(v)] = kept[size_t(v)] ? std::exp((double(logits[v]) - logits[best]) / temperature) : 0.0;
  CounterRng rng(seed, row, counter);
  double u = rng.uniform() * total;
  for (int v = 0; v < V; v++) {
    u -= p[size_t(v)];
    if (u < 0) return v;
  }
  return best;
}

// The rows of one batch: each row's tokens so far (prompt + continuation) and its continuation alone.
struct ModelSampler::Batch {
  size_t first = 0;  // index of row 0 among all prompts: the row of its random stream
  std::vector<std::vector<int>> rows, out;
  std::vector<bool> done;
  int max_new = 0;
  const std::vector<int>* stop_tokens = nullptr;
  int limit = 0;

  int size() const { return int(rows.size()); }
  bool all_done() const { return std::all_of(done.begin(), done.end(), [](bool d) { return d; }); }
  // Appends row b's next token (the draw number out[b].size() of its stream) and decides whether the row is done.
  void append(int b, int next) {
    rows[size_t(b)].push_back(next);
    out[size_t(b)].push_back(next);
    const bool stopped = std::find(stop_tokens->begin(), stop_tokens->end(), next) != stop_tokens->end();
    if (stopped || int(rows[size_t(b)].size()) >= limit || int(out[size_t(b)].size()) >= max_new)
      done[size_t(b)] = true;
  }
};

ModelSampler::ModelSampler(LanguageModel<float>& model, Arena& arena, int batch_rows, GenerationPath path, int top_k)
    : model_(model), arena_(arena), batch_rows_(std::max(1, batch_rows)), path_(path), top_k_(top_k) {
  if (path_ == GenerationPath::cached) {
    fallback_reason_ = model_.recurrent_decode_unavailable();
    if (!fallback_reason_.empty()) path_ = GenerationPath::recompute;
  }
}

std::vector<std::vector<int>> ModelSampler::continue_prompts(const std::vector<std::vector<int>>& prompts, int max_new,
                                                             const std::vector<int>& stop_tokens, double temperature,
                                                             uint64_t seed) {
  std::vector<std::vector<int>> out(prompts.size());
  if (max_new <= 0) return out;
  for (size_t first = 0; first < prompts.size(); first += size_t(batch_rows_)) {
    const int B = int(std::min(prompts.size() - first, size_t(batch_rows_)));
    Batch batch;
    batch.first = first;
    batch.rows.assign(prompts.begin() + long(first), prompts.begin() + long(first) + B);
    batch.out.resize(size_t(B));
    batch.max_new = max_new;
    batch.stop_tokens = &stop_tokens;
    batch.limit = max_length();
    for (const auto& r : batch.rows) batch.done.push_back(r.empty() || int(r.size()) >= batch.limit);
    if (path_ == GenerationPath::cached) continue_cached(batch, temperature, seed);
    else continue_recomputed(batch, temperature, seed);
    for (int b = 0; b < B; b++) out[first + size_t(b)] = std::move(batch.out[size_t(b)]);
  }
  return out;
}

// One decode step per position t: every row feeds its token t (a finished row, or one past its tokens, feeds 0,
// which only its own state sees); a row whose last token is t draws its next token from the logits.
void ModelSampler::continue_cached(Batch& batch, double temperature, uint64_t seed) {
  const int B = batch.size(), V = model_.vocab_size();
  std::unique_ptr<ModelDecodeState> state = model_.start_decode(B);
  std::vector<int> tokens(static_cast<size_t>(B));
  std::vector<float> logits(size_t(B) * V);
  for (int t = 0; !batch.all_done(); t++) {
    for (int b = 0; b < B; b++) {
      const std::vector<int>& row = batch.rows[size_t(b)];
      tokens[size_t(b)] = !batch.done[size_t(b)] && t < int(row.size()) ? row[size_t(t)] : 0;
    }
    model_.decode_step(*state, tokens.data(), logits.data(), B);
    for (int b = 0; b < B; b++) {
      if (batch.done[size_t(b)] || t != int(batch.rows[size_t(b)].size()) - 1) continue;
      batch.append(b, choose_token(logits.data() + size_t(b) * V, V, temperature, seed, uint64_t(batch.first) + b,
                                   uint64_t(batch.out[size_t(b)].size()), top_k_));
    }
  }
}

// Every step runs forward() over the rows' tokens so far, right-padded: a causal model's logits at a row's last
// token do not see the padding after it.
void ModelSampler::continue_recomputed(Batch& batch, double temperature, uint64_t seed) {
  const int B = batch.size(), V = model_.vocab_size();
  std::vector<float> host_logits;
  while (!batch.all_done()) {
    int L = 0;
    for (const auto& r : batch.rows) L = std::max(L, int(r.size()));
    std::vector<int> tokens(size_t(B) * L, 0);
    for (int b = 0; b < B; b++)
      std::copy(batch.rows[size_t(b)].begin(), batch.rows[size_t(b)].end(), tokens.begin() + long(b) * L);
    arena_.reset();
    StepContext<float> ctx{arena_, model_.backend()};
    const float* device_logits = model_.forward(ctx, ctx.upload(std::span<const int>(tokens)), B, L);
    const float* logits = host_view(arena_.memory(), device_logits, size_t(B) * L * V, host_logits).data();
    for (int b = 0; b < B; b++) {
      if (batch.done[size_t(b)]) continue;
      const size_t last = batch.rows[size_t(b)].size() - 1;
      batch.append(b, choose_token(logits + (size_t(b) * L + last) * V, V, temperature, seed, uint64_t(batch.first) + b,
                                   uint64_t(batch.out[size_t(b)].size()), top_k_));
    }
  }
}

}  // namespace canonlab
