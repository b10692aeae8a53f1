#include "data/show.h"

namespace canonlab {

std::string show_window(const Task& task, const Batch& batch, int row, int width, int max_tokens) {
  const int T = batch.T;
  const size_t base = size_t(row) * T;
  const int shown = max_tokens > 0 ? std::min(T, max_tokens) : T;
  std::string out, line;
  int trained = 0, scored = 0;
  for (int t = 0; t < T; t++) {
    // The mask at t - 1 is about predicting the token at t.
    const bool in_loss = t > 0 && batch.loss_mask[base + size_t(t - 1)] != 0.f;
    const bool is_scored = t > 0 && batch.score_mask[base + size_t(t - 1)] != 0.f;
    trained += in_loss;
    scored += is_scored;
    if (t >= shown) continue;
    std::string word = task.token_text(batch.tokens[base + size_t(t)]);
    // Most tasks predict the next input token; where the target differs (MQAR's answers), show both.
    const int target = t > 0 ? batch.targets[base + size_t(t - 1)] : -1;
    const std::string mark = target >= 0 && target != batch.tokens[base + size_t(t)] ? "->" + task.token_text(target) : "";
    if (is_scored) word = mark.empty() ? "{" + word + "}" : word + "{" + mark + "}";
    else if (in_loss) word = mark.empty() ? "[" + word + "]" : word + "[" + mark + "]";
    if (!line.empty() && int(line.size() + 1 + word.size()) > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) out += line + "\n";
  if (shown < T) out += "... (" + std::to_string(T - shown) + " more tokens; --tokens 0 shows all)\n";
  out += "window: " + std::to_string(T) + " tokens, " + std::to_string(trained) + " trained, " +
         std::to_string(scored) + " scored\n";
  return out;
}

}  // namespace canonlab
