#pragma once
// Attention maps of chosen heads on a few held-out copy sequences, for looking at what a head does rather
// than only at its IPMR rate. The sequences are the first ones the IPMR probe measures (same seed, stream and
// index), so a map shows the behaviour behind the reported numbers and is the same on every run.
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/copy_task.h"
#include "eval/ipmr.h"
#include "models/language_model.h"

namespace canonlab {

struct HeadId {
  int layer = 0, head = 0;
  std::string name() const;  // "L3H3", the spelling of the IPMR report
  bool operator==(const HeadId&) const = default;
};

// "L0H1,L3H3" (case-insensitive, duplicates dropped, order kept). Throws Error naming a malformed entry or a
// head outside the model, with the valid range.
std::vector<HeadId> parse_heads(std::string_view spec, int n_layers, int n_heads);

// The k best heads by IPMR at delta = 1, then the best head at every other measured delta (the key-shift
// offset) when it is not already among them.
std::vector<HeadId> default_heads(const IpmrResult& ipmr, int k);

// One cell of a T x T attention matrix: row = query position, column = key position.
struct Cell {
  int query = 0, key = 0;
  bool operator==(const Cell&) const = default;
};

// Where a head that matches at offset `delta` puts its argmax, for the queries IPMR scores
// (first_query..last_query): key p + delta, p = the latest earlier position holding the query's token.
// Queries without an earlier occurrence are skipped, and so are targets beyond the query (not attendable).
std::vector<Cell> induction_targets(std::span<const int> tokens, int first_query, int last_query, int delta);

// The first n sequences of the IPMR probe's held-out stream: measure_ipmr draws its sequences in chunks of
// train.batch_size from stream kHeldOutStream + 1000 + chunk with seed probe.seed (eval/ipmr.cpp), and so do we.
Batch probe_example_batch(const CopyTask& task, const RunConfig& cfg, int n);

struct AttentionMaps {
  int seq_len = 0;
  std::vector<HeadId> heads;
  std::vector<std::vector<int>> tokens;            // [example] -> T tokens
  std::vector<std::vector<std::vector<float>>> probs;  // [example][head in `heads` order] -> T*T, row = query

  std::span<const float> map(int example, int head_index) const { return probs[example][head_index]; }
};

// Runs the model on `batch` and copies the attention probabilities of `heads` (softmax outputs, causal:
// zero above the diagonal). Throws if a chosen head's layer never reports attention.
AttentionMaps capture_attention_maps(LanguageModel<float>& model, const Batch& batch, std::span<const HeadId> heads);

// For probe.json: per example its tokens, their text, the induction targets at each delta as [query, key]
// pairs, and per head (by name) the attention matrix as T rows of T probabilities.
nlohmann::json attention_maps_to_json(const AttentionMaps& maps, const CopyTask& task, std::span<const int> deltas);

}  // namespace canonlab
