#pragma once
// Generation for the tasks scored on what a model writes (Brevo answers, Lano sentences) and for `canonlab generate`.
// Two paths give the same tokens:
//   cached     (default) LanguageModel::decode_step, one position per step with every layer's caches: linear in the
//              length. Prompts go through the same step token by token, so a batch's rows of different lengths need
//              no padding: at step t every row feeds its token t and the rows whose prompt has ended sample.
//   recompute  every step re-runs the whole forward pass over the rows' current tokens: O(L^2), the reference, and
//              what runs where the model cannot decode recurrently (LanguageModel::recurrent_decode_unavailable:
//              parameters in GPU memory, bf16 precision).
#include <string>

#include "data/task.h"
#include "engine/arena.h"
#include "models/language_model.h"

namespace canonlab {

enum class GenerationPath { cached, recompute };

class ModelSampler final : public TokenSampler {
 public:
  // top_k > 0 samples among the k largest logits only (temperature > 0). A cached path the model cannot run falls
  // back to recompute; fallback_reason() says why.
  ModelSampler(LanguageModel<float>& model, Arena& arena, int batch_rows, GenerationPath path = GenerationPath::cached,
               int top_k = 0);
  std::vector<std::vector<int>> continue_prompts(const std::vector<std::vector<int>>& prompts, int max_new,
                                                 const std::vector<int>& stop_tokens, double temperature,
                                                 uint64_t seed) override;
  int max_length() const override { return model_.config().max_seq_len; }

  GenerationPath path() const { return path_; }
  const std::string& fallback_reason() const { return fallback_reason_; }  // "" unless cached fell back

 private:
  struct Batch;
  void continue_cached(Batch& batch, double temperature, uint64_t seed);
  void continue_recomputed(Batch& batch, double temperature, uint64_t seed);

  LanguageModel<float>& model_;
  Arena& arena_;
  int batch_rows_;
  GenerationPath path_;
  int top_k_;
  std::string fallback_reason_;
};

// The next token from one row of logits: argmax at temperature 0, else a draw from softmax(logits / temperature)
// with the counter-based stream (seed, row) at position `counter`; top_k > 0 keeps only the k largest logits (ties
// broken towards the lower id) before drawing.
int choose_token(const float* logits, int V, double temperature, uint64_t seed, uint64_t row, uint64_t counter,
                 int top_k = 0);

}  // namespace canonlab
