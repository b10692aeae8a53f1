#pragma once
// Lano (hierarchical structure): sentences of a context-free grammar, separated by <bos>.
//   <bos> 3 3 1 2 3 1 3 1 1 2 ... 2 1 <bos> 1 3 3 ...         (cfg3f sentences are ~100-500 terminals)
// Tokens: terminals [0, num_terminals) in the order of the grammar's terminal level (cfg3f: ids 1 2 3 -> 0 1 2;
// token_text shows the JSON id), then <bos> = num_terminals; vocab = num_terminals + 1. Training instance =
// <bos> + sentence, loss on every token. The first sentence of a window is redrawn until it fits (never cut).
// Grammar (data/cfg_grammar.h): task.lano.grammar is a JSON file in the paper's format, or "generate".
// Metric lano_acc (generative): sample from <bos> at temperature 1 until <bos>; a sample is correct iff it ends
// with <bos> and the CYK parser accepts the text before it. Teacher-forced scoring is a no-op (loss only).
#include "data/cfg_grammar.h"
#include "data/packing.h"

namespace canonlab {

// Config resolution's view of a Lano task: its vocabulary and window. A grammar file is read and the task built,
// as make_task does (a file is bounded by its own limits). A generated grammar is not built, so that resolving
// and estimating (--dry-run) a large one costs nothing: check_generated_grammar vets its parameters, and a context
// shorter than len_min^depth terminals (every sentence's lower bound) plus <bos> is refused. The exact
// shortest-sentence check runs when the task is built.
TaskShape lano_task_shape(const TaskConfig& cfg);
// The longest sentence lano_acc parses: task.lano.max_sentence, or the context - 1 (0 = the task's default).
int lano_max_sentence(const TaskConfig& cfg);

class LanoTask final : public PackedTask {
 public:
  explicit LanoTask(const TaskConfig& cfg);
  std::string name() const override { return "lano"; }
  int vocab_size() const override { return bos() + 1; }
  int seq_len() const override { return context_; }
  std::string token_text(int token) const override;
  std::vector<std::string> metric_names() const override { return {"lano_acc"}; }
  Instance make_instance(CounterRng& rng, int suite) const override;
  void sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const override;
  void sample_eval(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index, int suite) const override;
  void score(const Batch&, const float*, int, MetricSums&) const override {}
  bool has_generation_eval() const override { return true; }
  void score_generation(TokenSampler& sampler, uint64_t seed, int count, MetricSums& sums) const override;

  const Grammar& grammar() const { return grammar_; }
  int bos() const { return grammar_.num_terminals(); }
  // True iff `tokens` (terminal tokens, no <bos>) is a sentence of the grammar.
  bool accepts(const std::vector<int>& tokens) const { return parser_.accepts(tokens); }
  // A sample from score_generation's sampler is correct iff it is a sentence followed by <bos>.
  bool accepts_sample(const std::vector<int>& sample) const;
  int max_new_tokens() const { return max_sentence_ + 1; }

 private:
  // Packs one window; the first instance is redrawn until it fits.
  void fill_row(Batch& batch, int row, CounterRng& rng, int suite) const;
  Grammar grammar_;
  CfgParser parser_;
  int context_, max_sentence_;
};

}  // namespace canonlab
