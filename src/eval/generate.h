#pragma once
// Generation for the tasks scored on what a model writes (Brevo answers, Lano sentences). Every step re-runs the
// whole forward pass over the rows' current tokens: O(L^2) forwards, simple and exact for every family, and cheap
// at the lengths these evaluations use.
#include "data/task.h"
#include "engine/arena.h"
#include "models/language_model.h"

namespace canonlab {

class ModelSampler final : public TokenSampler {
 public:
  ModelSampler(LanguageModel<float>& model, Arena& arena, int batch_rows)
      : model_(model), arena_(arena), batch_rows_(std::max(1, batch_rows)) {}
  std::vector<std::vector<int>> continue_prompts(const std::vector<std::vector<int>>& prompts, int max_new,
                                                 const std::vector<int>& stop_tokens, double temperature,
                                                 uint64_t seed) override;
  int max_length() const override { return model_.config().max_seq_len; }

 private:
  LanguageModel<float>& model_;
  Arena& arena_;
  int batch_rows_;
};

// The next token from one row of logits: argmax at temperature 0, else a draw from softmax(logits / temperature)
// with the counter-based stream (seed, row) at position `counter`.
int choose_token(const float* logits, int V, double temperature, uint64_t seed, uint64_t row, uint64_t counter);

}  // namespace canonlab
