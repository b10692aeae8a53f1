#pragma once
// Held-out evaluation: mean masked loss and the task's metrics over fixed batches of every evaluation suite, plus
// the task's generative evaluation (Brevo, Lano) where it has one.
#include <vector>

#include <nlohmann/json.hpp>

#include "data/task.h"
#include "engine/arena.h"
#include "models/language_model.h"

namespace canonlab {

struct EvalBatch {
  int suite = 0;
  Batch batch;
};

// Tasks score logits over their own vocabulary: a model with a larger model.vocab_size (unused extra rows) has
// its logits (rows, model_vocab) cut to (rows, task_vocab), in `buffer` when a copy is needed.
const float* logits_over_task_vocab(const float* logits, int rows, int model_vocab, int task_vocab,
                                    std::vector<float>& buffer);

// train.eval_batches batches of train.batch_size sequences per suite from the held-out stream of train.data_seed:
// the same for every step, every resume and every thread count.
std::vector<EvalBatch> make_eval_batches(const Task& task, const RunConfig& cfg);

// One held-out batch through the model (the arena reset first): its logits (B, T, V) in the arena and its masked mean
// loss. What evaluate() does per batch, and what the resource estimate counts for it.
struct EvalPass {
  const float* logits;
  double loss;
};
EvalPass evaluation_pass(LanguageModel<float>& model, Arena& arena, const Batch& batch);

// {"loss": mean masked loss over every suite, <task metrics>...}; capo_bits also gives capo_bits_per_param.
nlohmann::json evaluate(LanguageModel<float>& model, const Task& task, const std::vector<EvalBatch>& batches,
                        const RunConfig& cfg, Arena& arena);

}  // namespace canonlab
