#pragma once
// Packing task instances into training windows, as the paper does: instances are concatenated left-aligned, so the
// first instance of a window is always whole; the next ones follow while they fit and the last is cut at the window
// end (trained on, never scored).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "data/task.h"
#include "engine/error.h"
#include "engine/rng.h"

namespace canonlab {

// One instance before packing. Flags are per token: loss[i] = 1 means predicting tokens[i] (from the position
// before it) is trained; scored[i] = 1 means that prediction counts in the task metric; tag[i] is copied to the
// batch's score_tag for scored tokens.
struct Instance {
  std::vector<int> tokens;
  std::vector<uint8_t> loss;
  std::vector<uint8_t> scored;
  std::vector<int> tag;

  void push(int token, bool in_loss, bool is_scored = false, int score_tag = 0) {
    tokens.push_back(token);
    loss.push_back(in_loss ? 1 : 0);
    scored.push_back(is_scored ? 1 : 0);
    tag.push_back(score_tag);
  }
  int size() const { return int(tokens.size()); }
};

// Fills row `row` of `batch` with instances from `next_instance(rng)` (packed as described above). The first
// instance must fit: otherwise an Error names task.context. Returns the number of whole instances placed.
template <class NextInstance>
int pack_row(Batch& batch, int row, CounterRng& rng, NextInstance&& next_instance) {
  const int T = batch.T;
  int* tok = batch.tokens.data() + size_t(row) * T;
  int* tgt = batch.targets.data() + size_t(row) * T;
  float* lmask = batch.loss_mask.data() + size_t(row) * T;
  float* smask = batch.score_mask.data() + size_t(row) * T;
  int* stag = batch.score_tag.data() + size_t(row) * T;
  // Flags of the token at each window position; position t of the masks is about predicting token t + 1.
  std::vector<uint8_t> loss(static_cast<size_t>(T), 0), scored(static_cast<size_t>(T), 0);
  std::vector<int> tags(static_cast<size_t>(T), 0);
  int filled = 0, whole = 0;
  while (filled < T) {
    Instance inst = next_instance(rng);
    if (filled == 0 && inst.size() > T)
      throw Error("task.context: " + std::to_string(T) + " tokens cannot hold an instance of " +
                  std::to_string(inst.size()) + " tokens (the first instance of a window is never cut); raise "
                  "task.context or make instances smaller");
    const int take = std::min(inst.size(), T - filled);
    const bool complete = take == inst.size();
    for (int i = 0; i < take; i++) {
      tok[filled + i] = inst.tokens[size_t(i)];
      loss[size_t(filled + i)] = inst.loss[size_t(i)];
      scored[size_t(filled + i)] = complete ? inst.scored[size_t(i)] : 0;
      tags[size_t(filled + i)] = inst.tag[size_t(i)];
    }
    filled += take;
    whole += complete;
  }
  for (int t = 0; t < T; t++) {
    const bool has_next = t + 1 < T;
    tgt[t] = has_next ? tok[t + 1] : 0;
    lmask[t] = has_next && loss[size_t(t + 1)] ? 1.f : 0.f;
    smask[t] = has_next && scored[size_t(t + 1)] ? 1.f : 0.f;
    stag[t] = smask[t] != 0.f ? tags[size_t(t + 1)] : 0;
  }
  return whole;
}

// Appends a graph's edge list "x1 y1 x2 y2 ..." with every vertex written as its (possibly multi-token) name: the
// context of Depo and Brevo instances.
inline void push_edge_list(Instance& inst, const std::vector<std::vector<int>>& names,
                           const std::vector<std::pair<int, int>>& edges, bool in_loss) {
  for (auto [x, y] : edges) {
    for (int tok : names[size_t(x)]) inst.push(tok, in_loss);
    for (int tok : names[size_t(y)]) inst.push(tok, in_loss);
  }
}

// Size n in [lo, hi] with p(n) ~ 1 / (n + sqrt(hi)): the paper's difficulty sampling for Depo and Brevo.
int sample_size_inverse_sqrt(CounterRng& rng, int lo, int hi);

// `count` distinct names of name_len_min..name_len_max tokens; non-final tokens from [0, V), the final token from
// [V, 2V), so a name's end is visible in the token itself (the paper's multi-token names). Lengths are uniform;
// names are redrawn until distinct. Token ids are offsets from `first_token`.
std::vector<std::vector<int>> distinct_multi_token_names(CounterRng& rng, int count, int vocab, int len_min,
                                                         int len_max, int first_token = 0);
// How many distinct names of that shape exist (saturating at INT64_MAX/4).
int64_t multi_token_name_space(int vocab, int len_min, int len_max);

}  // namespace canonlab

namespace canonlab {

// A task whose windows are packed instances. Training draws make_instance(rng, kTrainingInstance); evaluation
// suite s draws make_instance(rng, s).
class PackedTask : public Task {
 public:
  static constexpr int kTrainingInstance = -1;
  virtual Instance make_instance(CounterRng& rng, int suite) const = 0;

  void sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const override {
    CounterRng rng = row_rng(seed, stream, index);
    pack_row(batch, row, rng, [&](CounterRng& r) { return make_instance(r, kTrainingInstance); });
  }
  void sample_eval(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index, int suite) const override {
    CounterRng rng = row_rng(seed, stream, index);
    pack_row(batch, row, rng, [&](CounterRng& r) { return make_instance(r, suite); });
  }
};

// "answers" when the config asks for it, or when it says "default" and the paper trains this task on answers only
// (a config that went through validation has "default" resolved already; tests build tasks from raw configs).
inline bool loss_on_answers(const TaskConfig& cfg) {
  return cfg.loss_on == "answers" || (cfg.loss_on == "default" && paper_trains_on_answers_only(cfg.name));
}

}  // namespace canonlab
