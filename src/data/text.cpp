#include "data/text.h"

#include "data/data_path.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "data/packing.h"
#include "engine/error.h"
#include "io/atomic_file.h"

namespace canonlab {

namespace {
// The byte-level task holds its whole file in memory; larger corpora belong in token shards.
constexpr uint64_t kMaxTextBytes = uint64_t(4) << 30;
}  // namespace

TextTask::TextTask(const TaskConfig& cfg) : context_(cfg.context > 0 ? cfg.context : 256) {
  const std::string path = resolve_data_path(cfg.text.path);
  const double frac = cfg.text.heldout_frac;
  CANONLAB_CHECK(frac > 0 && frac < 1, "task.text.heldout_frac: " + std::to_string(frac) +
                                           " is not allowed; allowed: strictly between 0 and 1");
  try {
    InputFile file(path, "task.text.path");
    CANONLAB_CHECK(file.size() <= kMaxTextBytes, "task.text.path: '" + path + "' is " + std::to_string(file.size()) +
                                                     " bytes; allowed: at most " + std::to_string(kMaxTextBytes));
    bytes_.resize(file.size());
    file.read_exact(std::as_writable_bytes(std::span(bytes_)));
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "; allowed: a path to a text file (the default "
                "/usr/share/games/fortunes/fortunes comes with the Debian package fortunes-min)");
  }
  const size_t n = bytes_.size(), need = size_t(context_) + 1;
  CANONLAB_CHECK(n >= 2 * need, "task.text.path: '" + path + "' has " + std::to_string(n) + " bytes, too few for a training "
                                "and a held-out window of task.context + 1 = " + std::to_string(need) +
                                " bytes each; allowed: a file of >= " + std::to_string(2 * need) +
                                " bytes (or a smaller task.context)");
  // Held-out size rounded to the nearest byte (not floor((1 - frac) * n), where 1 - frac loses bits).
  const size_t heldout = size_t(std::llround(frac * double(n)));
  train_size_ = n - heldout;
  CANONLAB_CHECK(train_size_ >= need && heldout >= need,
                 "task.text.heldout_frac: " + std::to_string(frac) + " splits the " + std::to_string(n) + " bytes of '" +
                     path + "' into " + std::to_string(train_size_) + " training and " + std::to_string(heldout) +
                     " held-out bytes, but each split needs task.context + 1 = " + std::to_string(need) +
                     "; allowed: heldout_frac in [" + std::to_string(double(need) / double(n)) + ", " +
                     std::to_string(1.0 - double(need) / double(n)) + "] or a smaller task.context");
}

void TextTask::fill_row(Batch& batch, int row, size_t offset) const {
  const int T = batch.T;
  CANONLAB_CHECK(T == context_, "text: batch window " + std::to_string(T) + " differs from task.context " +
                                    std::to_string(context_));
  const size_t base = size_t(row) * size_t(T);
  for (int t = 0; t < T; t++) {
    const size_t i = base + size_t(t);
    batch.tokens[i] = bytes_[offset + size_t(t)];
    batch.targets[i] = bytes_[offset + size_t(t) + 1];
    batch.loss_mask[i] = 1.f;
    batch.score_mask[i] = 1.f;
    batch.score_tag[i] = 0;
  }
}

void TextTask::sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const {
  CounterRng rng = row_rng(seed, stream, index);
  // Offsets 0 .. train_size_ - T - 1: the last target, bytes[o + T], stays inside the training split.
  const size_t offset = size_t(rng.below(uint64_t(train_size_ - size_t(context_))));
  fill_row(batch, row, offset);
}

size_t TextTask::heldout_window_offset(uint64_t stream, uint64_t index, int batch_rows) const {
  // make_eval_batches numbers eval batches kHeldOutStream + suite * 1000003 + i; rows follow each other across batches.
  const uint64_t batch_number = (stream - kHeldOutStream) % 1000003;
  const uint64_t k = (batch_number * uint64_t(batch_rows) + index) % uint64_t(heldout_windows());
  return train_size_ + size_t(k) * size_t(context_);
}

void TextTask::sample_eval(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index, int suite) const {
  (void)seed, (void)suite;  // the held-out windows are fixed: the seed does not move them
  fill_row(batch, row, heldout_window_offset(stream, index, batch.B));
  // Rows past the last window repeat earlier ones; they are not scored, so bpc weighs every window once.
  const uint64_t k = ((stream - kHeldOutStream) % 1000003) * uint64_t(batch.B) + index;
  if (k >= uint64_t(heldout_windows()))
    for (int t = 0; t < batch.T; t++) batch.score_mask[size_t(row) * size_t(batch.T) + size_t(t)] = 0.f;
}

void TextTask::score(const Batch& batch, const float* logits, int suite, MetricSums& sums) const {
  (void)suite;
  const int V = vocab_size();
  MetricSum& bpc = sums["bpc"];
  for (size_t i = 0; i < batch.tokens.size(); i++) {
    if (batch.score_mask[i] == 0.f) continue;
    const float* row = logits + i * size_t(V);
    double top = row[0];
    for (int v = 1; v < V; v++) top = std::max(top, double(row[v]));
    double z = 0;
    for (int v = 0; v < V; v++) z += std::exp(double(row[v]) - top);
    const double log_p = double(row[batch.targets[i]]) - top - std::log(z);
    bpc.add(-log_p / std::log(2.0));
  }
}

std::string TextTask::token_text(int token) const {
  if (token == ' ') return "\xE2\x90\xA3";  // U+2423 OPEN BOX
  if (token == '\n') return "\\n";
  if (token > ' ' && token < 0x7f) return std::string(1, char(token));
  constexpr char hex[] = "0123456789abcdef";
  if (token < 0 || token > 255) return "?" + std::to_string(token);
  return std::string("\\x") + hex[token >> 4] + hex[token & 15];
}

}  // namespace canonlab
