#include "data/text.h"

#include <cmath>

#include "data/data_path.h"
#include "data/text/manifest.h"
#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/paths.h"

namespace canonlab {

namespace {

// The byte-level task holds its whole file in memory; larger corpora belong in token shards.
constexpr uint64_t kMaxTextBytes = uint64_t(4) << 30;
constexpr uint64_t kMaxModelFileBytes = uint64_t(1) << 30;

// A range of a file held in memory, read as byte tokens.
class BytesInMemory final : public TokenStream {
 public:
  explicit BytesInMemory(std::span<const unsigned char> bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  void read(uint64_t begin, std::span<int> out) const override {
    for (size_t i = 0; i < out.size(); i++) out[i] = bytes_[size_t(begin) + i];
  }

 private:
  std::span<const unsigned char> bytes_;
};

}  // namespace

TextTask::TextTask(const TaskConfig& cfg)
    : context_(cfg.context > 0 ? cfg.context : 256), whole_split_(cfg.text.eval_whole_split),
      tokenizer_(Tokenizer::bytes(false)) {
  const std::string path = resolve_data_path(cfg.text.path);
  // A path that cannot be examined (too long, no permission) is reported by the file read, naming the key.
  if (path_status(path).is_directory()) open_data_directory(path);
  else open_text_file(path, cfg.text.heldout_frac);
  const uint64_t need = uint64_t(context_) + 1;
  for (const auto& [split, name] : {std::pair{train_.get(), "training"}, std::pair{val_.get(), "held-out"}})
    CANONLAB_CHECK(split->size() >= need,
                   "task.context: " + std::to_string(context_) + " needs windows of task.context + 1 = " +
                       std::to_string(need) + " tokens, but the " + name + " split of task.text.path '" + path +
                       "' has " + std::to_string(split->size()) + "; allowed: a smaller task.context or more text");
}

void TextTask::open_text_file(const std::string& path, double frac) {
  CANONLAB_CHECK(frac > 0 && frac < 1, "task.text.heldout_frac: " + std::to_string(frac) +
                                           " is not allowed; allowed: strictly between 0 and 1");
  try {
    InputFile file(path, "task.text.path");
    CANONLAB_CHECK(file.size() <= kMaxTextBytes, "task.text.path: '" + path + "' is " + std::to_string(file.size()) +
                                                     " bytes; allowed: at most " + std::to_string(kMaxTextBytes) +
                                                     " (larger texts: canonlab data prepare makes token shards)");
    bytes_.resize(file.size());
    file.read_exact(std::as_writable_bytes(std::span(bytes_)));
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "; allowed: a text file or a data directory made by canonlab data prepare "
                "(the default /usr/share/games/fortunes/fortunes comes with the Debian package fortunes-min)");
  }
  const size_t n = bytes_.size(), need = size_t(context_) + 1;
  CANONLAB_CHECK(n >= 2 * need, "task.text.path: '" + path + "' has " + std::to_string(n) + " bytes, too few for a training "
                                "and a held-out window of task.context + 1 = " + std::to_string(need) +
                                " bytes each; allowed: a file of >= " + std::to_string(2 * need) +
                                " bytes (or a smaller task.context)");
  // Held-out size rounded to the nearest byte (not floor((1 - frac) * n), where 1 - frac loses bits).
  const size_t heldout = size_t(std::llround(frac * double(n)));
  const size_t train = n - heldout;
  CANONLAB_CHECK(train >= need && heldout >= need,
                 "task.text.heldout_frac: " + std::to_string(frac) + " splits the " + std::to_string(n) + " bytes of '" +
                     path + "' into " + std::to_string(train) + " training and " + std::to_string(heldout) +
                     " held-out bytes, but each split needs task.context + 1 = " + std::to_string(need) +
                     "; allowed: heldout_frac in [" + std::to_string(double(need) / double(n)) + ", " +
                     std::to_string(1.0 - double(need) / double(n)) + "] or a smaller task.context");
  train_ = std::make_unique<BytesInMemory>(std::span(bytes_).first(train));
  val_ = std::make_unique<BytesInMemory>(std::span(bytes_).subspan(train));
}

void TextTask::open_data_directory(const std::string& dir) {
  const std::string key = "task.text.path: ";
  CANONLAB_CHECK(path_exists(dir + "/" + kManifestName, key + "cannot read"),
                 key + "'" + dir + "' is a directory without " + kManifestName + "; allowed: a text file, or a data "
                 "directory made by canonlab data prepare");
  try {
    const Manifest m = read_manifest(dir);
    const bool eod = m.eod_id >= 0;
    if (m.tokenizer_file.empty()) {
      tokenizer_ = Tokenizer::bytes(eod);
    } else {
      const std::string path = dir + "/" + m.tokenizer_file;
      tokenizer_ = Tokenizer::sentencepiece(read_text_file(path, kMaxModelFileBytes, "tokenizer"), eod, path);
    }
    const std::string differs = "the tokenizer of '" + dir + "' does not match its " + kManifestName + ": ";
    CANONLAB_CHECK(tokenizer_.hash() == m.tokenizer_hash, differs + "its XXH64 is " + tokenizer_hash_text(tokenizer_.hash()) + ", the manifest's " +
                                                         tokenizer_hash_text(m.tokenizer_hash) + " (was the file replaced?)");
    CANONLAB_CHECK(tokenizer_.vocab_size() == m.vocab_size && tokenizer_.eod() == m.eod_id,
                   differs + "it has " + std::to_string(tokenizer_.vocab_size()) + " tokens and <eod> " +
                       std::to_string(tokenizer_.eod()) + ", the manifest " + std::to_string(m.vocab_size) + " and " +
                       std::to_string(m.eod_id));
    train_ = std::make_unique<ShardedTokens>(dir, m.train.shards, shard_header_of(m));
    val_ = std::make_unique<ShardedTokens>(dir, m.val.shards, shard_header_of(m));
  } catch (const Error& e) {
    throw Error(key + e.what());
  }
}

void TextTask::fill_row(Batch& batch, int row, const TokenStream& split, uint64_t offset) const {
  const int T = batch.T;
  CANONLAB_CHECK(T == context_, "text: batch window " + std::to_string(T) + " differs from task.context " +
                                    std::to_string(context_));
  std::vector<int> window(size_t(T) + 1);
  split.read(offset, window);
  const size_t base = size_t(row) * size_t(T);
  for (int t = 0; t < T; t++) {
    const size_t i = base + size_t(t);
    batch.tokens[i] = window[size_t(t)];
    batch.targets[i] = window[size_t(t) + 1];
    batch.loss_mask[i] = 1.f;
    batch.score_mask[i] = 1.f;
    batch.score_tag[i] = 0;
  }
}

uint64_t TextTask::training_window_start(uint64_t seed, uint64_t stream, uint64_t index) const {
  CounterRng rng = row_rng(seed, stream, index);
  // Offsets 0 .. N - T - 1: the last target, train[o + T], stays inside the training split.
  return rng.below(train_->size() - uint64_t(context_));
}

void TextTask::sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const {
  fill_row(batch, row, *train_, training_window_start(seed, stream, index));
}

namespace {
// The held-out window an eval row asks for, before wrapping: rows follow each other across the batches of a suite.
uint64_t heldout_row_number(uint64_t stream, uint64_t index, int batch_rows) {
  return ((stream - kHeldOutStream) % kHeldOutSuiteStride) * uint64_t(batch_rows) + index;
}
}  // namespace

uint64_t TextTask::heldout_window_start(uint64_t stream, uint64_t index, int batch_rows) const {
  return heldout_row_number(stream, index, batch_rows) % uint64_t(heldout_windows()) * uint64_t(context_);
}

void TextTask::sample_eval(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index, int suite) const {
  (void)seed, (void)suite;  // the held-out windows are fixed: the seed does not move them
  fill_row(batch, row, *val_, heldout_window_start(stream, index, batch.B));
  // Rows past the last window repeat earlier ones; they count neither in bpc nor in the loss, so every window
  // weighs once.
  if (heldout_row_number(stream, index, batch.B) >= uint64_t(heldout_windows()))
    for (int t = 0; t < batch.T; t++) {
      const size_t i = size_t(row) * size_t(batch.T) + size_t(t);
      batch.score_mask[i] = 0.f;
      batch.loss_mask[i] = 0.f;
    }
}

int TextTask::eval_batch_count(int configured, int batch_rows) const {
  if (!whole_split_) return configured;
  return int((uint64_t(heldout_windows()) + uint64_t(batch_rows) - 1) / uint64_t(batch_rows));
}

void TextTask::score(const Batch& batch, const float* logits, int suite, MetricSums& sums) const {
  (void)suite;
  const int V = vocab_size();
  MetricSum& bpc = sums["bpc"];
  MetricSum& bpb = sums["bpb"];
  for (size_t i = 0; i < batch.tokens.size(); i++) {
    if (batch.score_mask[i] == 0.f) continue;
    const float* row = logits + i * size_t(V);
    double top = row[0];
    for (int v = 1; v < V; v++) top = std::max(top, double(row[v]));
    double z = 0;
    for (int v = 0; v < V; v++) z += std::exp(double(row[v]) - top);
    const uint32_t target = uint32_t(batch.targets[i]);
    const double bits = -(double(row[target]) - top - std::log(z)) / std::log(2.0);
    // Each sum is bits over what the scored targets stand for; <eod> adds bits and neither bytes nor characters.
    bpc.add(bits, double(tokenizer_.token_characters(target)));
    bpb.add(bits, double(tokenizer_.token_bytes(target).size()));
  }
}

double TextTask::resident_bytes() const {
  // The tokenizer: its piece tables, and sentencepiece's processor (about three times its model file, measured).
  double tables = double(tokenizer_.vocab_size()) * 80 + 3.0 * double(tokenizer_.model().size());
  return double(bytes_.size()) + tables;
}

}  // namespace canonlab
