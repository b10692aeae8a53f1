#pragma once
// Mano (knowledge manipulation): prefix modular arithmetic.
//   <bos> <len_l> + * a b - c d <ans> v        here v = ((a * b) + (c - d)) mod m and l = 3 operators
// Operands are values in [0, m); l is uniform in 1..L for training and L for evaluation; the root operator is
// uniform, and an expression with l operators splits l - 1 between its operands uniformly, recursively.
// Tokens: values [0, m), operators (+ - *, and with knowledge_augment an alternate token for each), <len_1> ..
// <len_L>, <bos>, <ans>. Metric mano_acc: exact single-token accuracy of the answer at l = L.
#include "data/packing.h"

namespace canonlab {

class ManoTask final : public PackedTask {
 public:
  explicit ManoTask(const TaskConfig& cfg);
  std::string name() const override { return "mano"; }
  int vocab_size() const override { return ans() + 1; }
  int seq_len() const override { return context_; }
  std::string token_text(int token) const override;
  std::vector<std::string> metric_names() const override { return {"mano_acc"}; }
  std::vector<std::string> eval_suites() const override { return {"max_ops"}; }
  Instance make_instance(CounterRng& rng, int suite) const override;
  void score(const Batch& batch, const float* logits, int suite, MetricSums& sums) const override;

  // Evaluates a prefix expression written in this task's tokens (values and operator tokens); for tests.
  int evaluate_prefix(const std::vector<int>& tokens) const;
  Instance draw_with(CounterRng& rng, int ops) const;
  int modulus() const { return modulus_; }
  int max_ops() const { return max_ops_; }
  int first_op_token() const { return modulus_; }
  int len_token(int ops) const { return first_op_token() + 2 * n_ops() + ops - 1; }
  int bos() const { return len_token(max_ops_) + 1; }
  int ans() const { return bos() + 1; }

 private:
  int n_ops() const { return int(ops_.size()); }
  int apply(char op, int a, int b) const;
  int expression(CounterRng& rng, int ops, std::vector<int>& out) const;  // appends tokens, returns the value
  int max_ops_, modulus_, context_;
  std::vector<char> ops_;
  bool knowledge_augment_, answers_only_;
};

}  // namespace canonlab
