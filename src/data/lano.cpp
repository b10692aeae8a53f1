#include "data/lano.h"

#include "data/data_path.h"

#include "engine/error.h"

namespace canonlab {

namespace {

Grammar lano_grammar(const LanoConfig& cfg) {
  return cfg.grammar == "generate" ? generate_grammar(cfg) : load_grammar_json(resolve_data_path(cfg.grammar), "task.lano.grammar");
}

// A window's first sentence is redrawn when it does not fit; this many long draws in a row means the context is
// far too short for the grammar.
constexpr int kMaxRedraws = 1000;

constexpr int kDefaultContext = 512;

int lano_context(const TaskConfig& cfg) { return cfg.context > 0 ? cfg.context : kDefaultContext; }

}  // namespace

int lano_max_sentence(const TaskConfig& cfg) {
  return cfg.lano.max_sentence > 0 ? cfg.lano.max_sentence : lano_context(cfg) - 1;
}

TaskShape lano_task_shape(const TaskConfig& cfg) {
  if (cfg.lano.grammar != "generate") {
    const LanoTask task(cfg);
    return {task.vocab_size(), task.seq_len()};
  }
  const LanoConfig& lano = cfg.lano;
  check_generated_grammar(lano);
  const int context = lano_context(cfg);
  // Every rule has >= len_min symbols, so every sentence has >= len_min^depth terminals (saturating above context).
  int64_t shortest = 1;
  for (int d = 0; d < lano.depth && shortest < context; d++) shortest *= lano.len_min;
  CANONLAB_CHECK(shortest + 1 <= context,
                 "task.context: " + std::to_string(context) + " cannot hold a sentence of the generated grammar with "
                 "its <bos>: rules of at least task.lano.len_min = " + std::to_string(lano.len_min) + " symbols over "
                 "task.lano.depth = " + std::to_string(lano.depth) + " levels make every sentence at least len_min^depth "
                 "terminals (more than " + std::to_string(context - 1) + "); allowed: a larger task.context, or a "
                 "smaller len_min or depth");
  return {lano.num_sym + 1, context};  // terminals, then <bos>
}

LanoTask::LanoTask(const TaskConfig& cfg)
    : grammar_(lano_grammar(cfg.lano)),
      parser_(grammar_),
      context_(lano_context(cfg)),
      max_sentence_(lano_max_sentence(cfg)) {
  CANONLAB_CHECK(!loss_on_answers(cfg), "task.loss_on: 'answers' has no meaning for lano (every token is "
                                               "data); allowed: default, all");
  const int shortest = sentence_lengths(grammar_).min[0][0] + 1;  // <bos> + the shortest sentence
  CANONLAB_CHECK(shortest <= context_, "task.context: " + std::to_string(context_) +
                                           " cannot hold the grammar's shortest sentence with its <bos> (" +
                                           std::to_string(shortest) + " tokens); allowed: >= " +
                                           std::to_string(shortest));
}

Instance LanoTask::make_instance(CounterRng& rng, int) const {
  // A window holds at most context_ tokens, so a longer sentence is never used whole: the first instance of a
  // window is redrawn, a later one is cut at the window end. Its first context_ terminals are all that is needed.
  std::vector<int> sentence;
  sample_sentence(grammar_, rng, sentence, size_t(context_));
  Instance inst;
  inst.tokens.reserve(sentence.size() + 1);
  inst.push(bos(), true);
  for (int t : sentence) inst.push(t, true);
  return inst;
}

void LanoTask::fill_row(Batch& batch, int row, CounterRng& rng, int suite) const {
  bool first = true;
  pack_row(batch, row, rng, [&](CounterRng& r) {
    Instance inst = make_instance(r, suite);
    for (int tries = 1; first && inst.size() > context_; tries++) {
      CANONLAB_CHECK(tries < kMaxRedraws, "task.context: " + std::to_string(context_) + " tokens held none of " +
                                              std::to_string(kMaxRedraws) + " sentences drawn from the grammar; "
                                              "raise task.context");
      inst = make_instance(r, suite);
    }
    first = false;
    return inst;
  });
}

void LanoTask::sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const {
  CounterRng rng = row_rng(seed, stream, index);
  fill_row(batch, row, rng, kTrainingInstance);
}

void LanoTask::sample_eval(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index, int suite) const {
  CounterRng rng = row_rng(seed, stream, index);
  fill_row(batch, row, rng, suite);
}

bool LanoTask::accepts_sample(const std::vector<int>& sample) const {
  if (sample.empty() || sample.back() != bos()) return false;
  return parser_.accepts(std::vector<int>(sample.begin(), sample.end() - 1));
}

void LanoTask::score_generation(TokenSampler& sampler, uint64_t seed, int count, MetricSums& sums) const {
  const std::vector<std::vector<int>> prompts(static_cast<size_t>(count), std::vector<int>{bos()});
  // The sampler also stops at its max_length, so a sample that runs to the end of the window without <bos> is
  // wrong, as is one cut at max_sentence.
  const auto samples = sampler.continue_prompts(prompts, max_new_tokens(), {bos()}, 1.0, seed);
  for (const std::vector<int>& s : samples) sums["lano_acc"].add(accepts_sample(s) ? 1.0 : 0.0);
}

std::string LanoTask::token_text(int token) const {
  if (token == bos()) return "<bos>";
  if (token >= 0 && token < bos()) return std::to_string(grammar_.levels.back().ids[size_t(token)]);
  return "<unk>";
}

}  // namespace canonlab
