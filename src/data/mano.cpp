#include "data/mano.h"

#include "engine/error.h"

namespace canonlab {

ManoTask::ManoTask(const TaskConfig& cfg)
    : max_ops_(cfg.mano.max_ops), modulus_(cfg.mano.modulus), context_(cfg.context > 0 ? cfg.context : 1024),
      knowledge_augment_(cfg.mano.knowledge_augment), answers_only_(loss_on_answers(cfg)) {
  CANONLAB_CHECK(!cfg.mano.ops.empty(), "task.mano.ops: empty; allowed: a list of +, -, *");
  for (const std::string& op : cfg.mano.ops) ops_.push_back(op[0]);
  const int longest = 4 + 2 * max_ops_ + 1;  // <bos> <len> (2l + 1 symbols) <ans> v
  CANONLAB_CHECK(longest <= context_, "task.context: " + std::to_string(context_) + " is shorter than a Mano instance with " +
                                          std::to_string(max_ops_) + " operators (" + std::to_string(longest) +
                                          " tokens); allowed: >= " + std::to_string(longest));
}

int ManoTask::apply(char op, int a, int b) const {
  switch (op) {
    case '+': return (a + b) % modulus_;
    case '-': return ((a - b) % modulus_ + modulus_) % modulus_;
    default: return int((int64_t(a) * b) % modulus_);
  }
}

int ManoTask::expression(CounterRng& rng, int ops, std::vector<int>& out) const {
  if (ops == 0) {
    const int v = int(rng.below(uint64_t(modulus_)));
    out.push_back(v);
    return v;
  }
  const int which = int(rng.below(uint64_t(n_ops())));
  const bool alternate = knowledge_augment_ && rng.below(2) == 1;
  out.push_back(first_op_token() + which + (alternate ? n_ops() : 0));
  const int left_ops = int(rng.below(uint64_t(ops)));
  const int a = expression(rng, left_ops, out);
  const int b = expression(rng, ops - 1 - left_ops, out);
  return apply(ops_[size_t(which)], a, b);
}

Instance ManoTask::draw_with(CounterRng& rng, int ops) const {
  std::vector<int> expr;
  const int value = expression(rng, ops, expr);
  Instance inst;
  const bool all = !answers_only_;
  inst.push(bos(), all);
  inst.push(len_token(ops), all);
  for (int tok : expr) inst.push(tok, all);
  inst.push(ans(), true);
  inst.push(value, true, true);
  return inst;
}

Instance ManoTask::make_instance(CounterRng& rng, int suite) const {
  const int ops = suite == kTrainingInstance ? 1 + int(rng.below(uint64_t(max_ops_))) : max_ops_;
  return draw_with(rng, ops);
}

int ManoTask::evaluate_prefix(const std::vector<int>& tokens) const {
  size_t pos = 0;
  auto eval = [&](auto&& self) -> int {
    CANONLAB_CHECK(pos < tokens.size(), "Mano expression ends early");
    const int tok = tokens[pos++];
    if (tok < modulus_) return tok;
    const int which = (tok - first_op_token()) % n_ops();
    const int a = self(self);
    const int b = self(self);
    return apply(ops_[size_t(which)], a, b);
  };
  const int v = eval(eval);
  CANONLAB_CHECK(pos == tokens.size(), "Mano expression has trailing tokens");
  return v;
}

void ManoTask::score(const Batch& batch, const float* logits, int, MetricSums& sums) const {
  score_argmax_accuracy(batch, logits, vocab_size(), "mano_acc", sums);
}

std::string ManoTask::token_text(int token) const {
  if (token < modulus_) return std::to_string(token);
  if (token < first_op_token() + 2 * n_ops()) {
    const int i = token - first_op_token();
    return std::string(1, ops_[size_t(i % n_ops())]) + (i >= n_ops() ? "'" : "");
  }
  if (token == bos()) return "<bos>";
  if (token == ans()) return "<ans>";
  return "<len_" + std::to_string(token - len_token(1) + 1) + ">";
}

}  // namespace canonlab
