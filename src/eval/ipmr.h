#pragma once
// Induction pattern match rate (IPMR), from attention probabilities on held-out copy sequences.
// For every query q in the second block whose next token is copyable (q = n + i, i = 1..n-1) the earlier
// occurrence of its token is p = q - n. A head "matches at offset delta" when its attention argmax (first
// index on ties) is p + delta. delta = 1 is the classic induction target; delta = key-shift offset is where a
// key-shifted head lands when it matches tokens directly.
//   per-head rate  IPMR[l][h](delta) = hits / |Q|
//   global         fraction of queries where at least one head of any layer hits
//   mean           mean of the per-head matrix
//   confident      per query, only the head (any layer) whose attention peak is highest counts; a stricter
//                  "global" whose chance level is the per-head one, since any-head global saturates on short
//                  sequences (72% chance for 16 heads at n_symbols = 8)
//   chance         per head: mean over q of 1/(q+1) (uniform causal attention);
//                  global: mean over q of 1 - (1 - 1/(q+1))^(L*H) (independent uniform heads)
// In hybrids only the attention layers (A, S) have heads; the rows of the other layers stay 0 and are left out
// of the top heads, the mean and the chance levels. Models without attention layers get no IPMR.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/copy_task.h"
#include "models/language_model.h"

namespace canonlab {

struct IpmrResult {
  int n_layers = 0, n_heads = 0, n_sequences = 0, n_queries = 0;
  std::string layer_mixers;  // one letter per layer (config/model_shapes.h); only A and S layers have heads
  int attention_heads = 0;   // heads in attention layers: what mean and chance_global count
  std::vector<int> deltas;
  std::map<int, std::vector<double>> per_head;  // delta -> (L * H) row-major rates
  std::map<int, double> global, mean, confident;
  double chance_head = 0, chance_global = 0;
  double copy_acc = 0;  // on the same held-out sequences

  // Heads sorted by rate at `delta`, best first: (layer, head, rate).
  std::vector<std::tuple<int, int, double>> top_heads(int delta, int k) const;
};

// Runs the model on probe.n_sequences held-out sequences (batches of train.batch_size) and measures IPMR at
// delta = 1 and at each distinct key-shift offset.
IpmrResult measure_ipmr(LanguageModel<float>& model, const CopyTask& task, const RunConfig& cfg);

// A readable report: per-head matrices, top heads ("L3H3 69.0%"), mean, global with chance beside it.
std::string format_ipmr(const IpmrResult& r, int top_k);
nlohmann::json ipmr_to_json(const IpmrResult& r, int top_k);

}  // namespace canonlab
