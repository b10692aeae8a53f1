#pragma once
// Held-out evaluation: mean masked loss and the task's metrics over fixed batches.
#include <vector>

#include <nlohmann/json.hpp>

#include "data/task.h"
#include "models/language_model.h"

namespace canonlab {

// train.eval_batches batches of train.batch_size sequences from the held-out stream of train.data_seed: the
// same for every step, every resume and every thread count.
std::vector<Batch> make_eval_batches(const Task& task, const RunConfig& cfg);

// {"loss": mean masked loss, <task metrics>...}, averaged over batches weighted by their scored tokens.
nlohmann::json evaluate(LanguageModel<float>& model, const Task& task, const std::vector<Batch>& batches, Arena& arena);

}  // namespace canonlab
