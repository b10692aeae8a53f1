#include "data/text/prepare.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "data/text/corpus.h"
#include "data/text/tokenizer.h"
#include "data/text/utf8.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "engine/threads.h"
#include "io/atomic_file.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kSplitStream = 0x73706c6974ULL;   // "split"
constexpr uint64_t kSampleStream = 0x73616d706cULL;  // "sampl"
constexpr int kMaxVocab = 1 << 24;                   // model.vocab_size's bound (config/schema.cpp)
constexpr uint64_t kMaxModelFileBytes = uint64_t(1) << 30;
// Sampling unit of the tokenizer's training text: a line, or kMaxRunBytes of a longer one.
constexpr size_t kSampleUnitBytes = kMaxRunBytes;
// Text handed to one encoding task, and per thread to one round of encoding.
constexpr size_t kPartBytes = size_t(1) << 20;
constexpr size_t kRoundBytesPerThread = size_t(4) << 20;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string megabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  return text;
}

// One line per stage on stderr; on a terminal also a redrawn bar with bytes/s and the time left.
class StageProgress {
 public:
  StageProgress(bool enabled, std::string stage, uint64_t total)
      : enabled_(enabled), interactive_(enabled && isatty(STDERR_FILENO)), stage_(std::move(stage)), total_(total) {
    if (enabled_ && !interactive_)
      std::fprintf(stderr, "%s%s%s ...\n", stage_.c_str(), total_ > 0 ? ": " : "", total_ > 0 ? megabytes(double(total_)).c_str() : "");
  }
  void update(uint64_t done) {
    if (!interactive_ || total_ == 0) return;
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_).count() < 0.1) return;
    last_ = now;
    const double elapsed = seconds_since(start_), rate = double(done) / std::max(elapsed, 1e-9);
    const double left = rate > 0 ? double(total_ - std::min(done, total_)) / rate : 0;
    constexpr int width = 24;
    const int filled = total_ > 0 ? int(double(width) * double(std::min(done, total_)) / double(total_)) : width;
    std::string bar(size_t(filled), '=');
    if (filled < width) bar += '>' + std::string(size_t(width - filled - 1), ' ');
    std::fprintf(stderr, "\r\033[K%s [%s] %s / %s, %.1f MB/s, ETA %.0fs", stage_.c_str(), bar.c_str(),
                 megabytes(double(done)).c_str(), megabytes(double(total_)).c_str(), rate / 1e6, left);
    std::fflush(stderr);
  }
  void finish(const std::string& summary) {
    if (!enabled_) return;
    std::fprintf(stderr, "%s%s: %s (%.1f s)\n", interactive_ ? "\r\033[K" : "", stage_.c_str(), summary.c_str(),
                 seconds_since(start_));
  }

 private:
  bool enabled_, interactive_;
  std::string stage_;
  uint64_t total_;
  Clock::time_point start_ = Clock::now(), last_{};
};

struct TokenizerSpec {
  std::string kind;  // bytes | bpe | unigram | model
  int vocab = 0;
  std::string path;
};

TokenizerSpec parse_tokenizer_spec(const std::string& spec) {
  const std::string allowed = "; allowed: bytes, bpe:VOCAB, unigram:VOCAB (VOCAB from 260 to " +
                              std::to_string(kMaxVocab) + ") or the path of a sentencepiece .model file";
  if (spec == "bytes") return {"bytes", 0, ""};
  for (const std::string kind : {"bpe", "unigram"}) {
    if (!spec.starts_with(kind + ":")) continue;
    const std::string digits = spec.substr(kind.size() + 1);
    const bool numeric = !digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos;
    const int vocab = numeric ? std::stoi(digits) : 0;
    // 256 byte pieces, <unk> and <eod>, and room for a piece of the text's own.
    CANONLAB_CHECK(numeric && vocab >= 260 && vocab <= kMaxVocab,
                   "--tokenizer: '" + spec + "' has vocabulary '" + digits + "'" + allowed);
    return {kind, vocab, ""};
  }
  CANONLAB_CHECK(spec.ends_with(".model"), "--tokenizer: '" + spec + "' is not a tokenizer" + allowed);
  return {"model", 0, spec};
}

// The files data prepare writes into a data directory (and the temp files of an interrupted run).
bool written_by_prepare(const std::string& name) {
  if (name.find(".tmp.") != std::string::npos) return true;
  return name == kManifestName || name == kTokenizerFileName ||
         ((name.starts_with("train_") || name.starts_with("val_")) && name.ends_with(".bin"));
}

// Checks that `out` can become the data directory: a new or empty directory, or with --force one that holds only
// what data prepare writes (an earlier data directory, complete or interrupted). Returns those files. Nothing is
// changed yet, so a mistake found while the inputs are scanned leaves no trace.
std::vector<fs::path> check_output_directory(const std::string& out, bool force) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return {};
  CANONLAB_CHECK(fs::is_directory(out, ec), "--out: '" + out + "' exists and is not a directory");
  std::vector<fs::path> ours;
  for (const auto& entry : fs::directory_iterator(out, ec)) {
    const std::string name = entry.path().filename().string();
    CANONLAB_CHECK(force, "--out: '" + out + "' is not empty; allowed: a new or empty directory, or --force to "
                          "replace a data directory made by canonlab data prepare");
    CANONLAB_CHECK(written_by_prepare(name) && entry.is_regular_file(ec),
                   "--out: '" + out + "' holds '" + name + "', which canonlab data prepare does not write, so it is "
                   "not a data directory made by data prepare; --force replaces only those");
    ours.push_back(entry.path());
  }
  CANONLAB_CHECK(!ec, "--out: cannot read directory '" + out + "': " + ec.message());
  return ours;
}

// Creates `out`, or removes the files of the earlier data directory there: the manifest first, so a directory is
// never left looking complete while its shards are half replaced.
void make_output_directory(const std::string& out, const std::vector<fs::path>& old_files) {
  std::error_code ec;
  fs::create_directories(out, ec);
  CANONLAB_CHECK(!ec, "--out: cannot create directory '" + out + "': " + ec.message());
  fs::remove(fs::path(out) / kManifestName, ec);
  for (const fs::path& path : old_files) {
    fs::remove(path, ec);
    CANONLAB_CHECK(!ec, "--out: cannot remove '" + path.string() + "' of the earlier data directory: " + ec.message());
  }
}

// The first pass: counts the documents and draws the tokenizer's training sample, a Bernoulli draw per line (or
// kSampleUnitBytes of a longer one) with probability sample_bytes / input bytes, cut into clean runs of at most
// kMaxTrainingSentenceBytes (sentencepiece skips longer sentences).
struct ScanResult {
  uint64_t documents = 0;
  uint64_t sample_bytes = 0;
  std::vector<std::string> sentences;
};

ScanResult scan_inputs(const std::vector<std::string>& files, const PrepareOptions& o, uint64_t input_bytes,
                       bool sample) {
  ScanResult r;
  const double p = input_bytes > 0 ? std::min(1.0, double(o.sample_bytes) / double(input_bytes)) : 1.0;
  // A hard bound on the sample, well above its expected size (p * input bytes <= sample_bytes).
  const uint64_t cap = o.sample_bytes + o.sample_bytes / 4 + kSampleUnitBytes;
  StageProgress progress(o.progress, sample ? "scanning the inputs and sampling the tokenizer's text" : "counting documents", input_bytes);
  DocumentReader reader(files, o.doc_delimiter);
  DocumentReader::Piece piece;
  uint64_t unit = 0;
  std::string line;
  size_t unit_length = 0;
  bool selected = false, unit_open = false;
  const auto close_unit = [&] {
    if (selected && r.sample_bytes + line.size() <= cap) {
      for_each_run(line, [&](size_t begin, size_t end, bool clean) {
        // Clean runs are valid UTF-8, so cuts before a lead byte keep every character whole.
        while (clean && begin < end) {
          size_t stop = std::min(end, begin + kMaxTrainingSentenceBytes);
          while (stop < end && utf8::is_continuation(static_cast<unsigned char>(line[stop]))) stop--;
          r.sentences.emplace_back(line, begin, stop - begin);
          begin = stop;
        }
      });
      r.sample_bytes += line.size();
    }
    line.clear();
    unit_length = 0;
    unit_open = false;
  };
  const auto open_unit = [&] {
    selected = sample && CounterRng(o.seed, kSampleStream, unit++).uniform() < p;
    unit_open = true;
  };
  bool in_document = false;
  while (reader.next(piece)) {
    if (!in_document) r.documents++, in_document = true;
    if (sample) {
      std::string_view text = piece.text;
      while (!text.empty()) {
        if (!unit_open) open_unit();
        const size_t room = kSampleUnitBytes - unit_length;
        const size_t newline = text.substr(0, room).find('\n');
        const size_t take = newline == std::string_view::npos ? std::min(room, text.size()) : newline;
        if (selected) line.append(text.substr(0, take));
        unit_length += take;
        text.remove_prefix(take);
        if (newline != std::string_view::npos) text.remove_prefix(1), close_unit();
        else if (unit_length == kSampleUnitBytes) close_unit();
      }
      if (piece.ends_document && unit_open) close_unit();
    }
    if (piece.ends_document) in_document = false;
    progress.update(reader.bytes_read());
  }
  progress.finish(std::to_string(r.documents) + " documents" +
                  (sample ? ", a training sample of " + megabytes(double(r.sample_bytes)) : std::string()));
  return r;
}

Tokenizer make_tokenizer(const TokenizerSpec& spec, const std::string& what, const PrepareOptions& o,
                         std::vector<std::string>& sentences) {
  if (spec.kind == "bytes") return Tokenizer::bytes(o.eod);
  std::string model;
  if (spec.kind == "model") {
    model = read_text_file(spec.path, kMaxModelFileBytes, "--tokenizer model");
  } else {
    StageProgress progress(o.progress, "training the " + what + " tokenizer", 0);
    model = train_sentencepiece(spec.kind, spec.vocab, sentences, "--tokenizer " + what);
    progress.finish("done");
  }
  std::vector<std::string>().swap(sentences);  // the sample is not needed any more
  Tokenizer tokenizer = Tokenizer::sentencepiece(std::move(model), o.eod, "--tokenizer " + what);
  CANONLAB_CHECK(tokenizer.vocab_size() <= kMaxVocab,
                 "--tokenizer " + what + ": a vocabulary of " + std::to_string(tokenizer.vocab_size()) +
                     " tokens; allowed: at most " + std::to_string(kMaxVocab));
  return tokenizer;
}

// One piece of a document, encoded by one task of a round.
struct Part {
  uint64_t document = 0;
  bool ends_document = false;
  std::string text;
  std::vector<uint32_t> tokens;
  uint64_t characters = 0;
  std::string error;
};

class Encoder {
 public:
  Encoder(const Tokenizer& tokenizer, int threads, const std::string& what) : what_(what) {
    for (int t = 0; t < threads; t++) workers_.push_back(tokenizer.clone());
  }
  // Encodes every part, each on whichever thread is free; the results do not depend on which one.
  void encode(std::vector<Part>& parts) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(int(workers_.size()))
    for (size_t i = 0; i < parts.size(); i++) {
      Part& part = parts[i];
      try {
        const Tokenizer& tokenizer = workers_[size_t(omp_get_thread_num())];
        tokenizer.encode(part.text, part.tokens);
        part.characters = utf8::count_characters(part.text);
        // The shards must decode to the text exactly: a model of another origin may normalise or drop text.
        if (tokenizer.decode(part.tokens) != part.text)
          part.error = "--tokenizer " + what_ + " does not reproduce document " + std::to_string(part.document) +
                       " when its tokens are decoded (a sentencepiece model must use the identity normalisation, no "
                       "dummy prefix and byte fallback; --tokenizer bpe:VOCAB or unigram:VOCAB trains such a model)";
      } catch (const std::exception& e) {
        part.error = e.what();
      }
    }
    for (const Part& part : parts)
      if (!part.error.empty()) throw Error(part.error);
  }

 private:
  std::vector<Tokenizer> workers_;
  std::string what_;
};

struct SplitWriter {
  ShardWriter shards;
  SplitCounts counts;
};

}  // namespace

DocumentSplit::DocumentSplit(uint64_t seed, uint64_t documents, double val_fraction)
    : seed_(seed), fraction_(val_fraction) {
  uint64_t val = 0;
  double lowest = 2, highest = -1;
  int64_t lowest_at = -1, highest_at = -1;
  for (uint64_t i = 0; i < documents; i++) {
    const double u = draw(i);
    val += u < fraction_;
    if (u < lowest) lowest = u, lowest_at = int64_t(i);
    if (u > highest) highest = u, highest_at = int64_t(i);
  }
  if (documents >= 2 && val == 0) forced_val_ = lowest_at;
  if (documents >= 2 && val == documents) forced_train_ = highest_at;
}

double DocumentSplit::draw(uint64_t index) const { return CounterRng(seed_, kSplitStream, index).uniform(); }

bool DocumentSplit::is_val(uint64_t index) const {
  if (int64_t(index) == forced_val_) return true;
  if (int64_t(index) == forced_train_) return false;
  return draw(index) < fraction_;
}

PrepareReport prepare_text_data(const PrepareOptions& o) {
  const auto start = Clock::now();
  CANONLAB_CHECK(o.val_fraction > 0 && o.val_fraction < 1, "--val-fraction: " + std::to_string(o.val_fraction) +
                                                               " is not allowed; allowed: strictly between 0 and 1");
  CANONLAB_CHECK(o.threads >= 0 && o.threads <= 1024, "--threads: " + std::to_string(o.threads) +
                                                          " is not allowed; allowed: 0 (every core) to 1024");
  CANONLAB_CHECK(o.shard_tokens >= 1 && o.shard_tokens <= (uint64_t(1) << 40),
                 "--shard-tokens: " + std::to_string(o.shard_tokens) + " is not allowed; allowed: 1 to 2^40");
  CANONLAB_CHECK(o.sample_bytes >= 1 && o.sample_bytes <= (uint64_t(64) << 30),
                 "--sample-mb: " + std::to_string(o.sample_bytes >> 20) + " MiB is not allowed; allowed: 1 to 65536");
  CANONLAB_CHECK(!o.out.empty(), "--out: no data directory given");
  const TokenizerSpec spec = parse_tokenizer_spec(o.tokenizer);
  if (spec.kind == "model") InputFile(spec.path, "--tokenizer model");  // a regular file, checked before any work
  const std::vector<std::string> files = expand_inputs(o.inputs);
  PrepareReport report;
  for (const std::string& f : files) report.input_bytes += InputFile(f, "input").size();
  const std::vector<fs::path> old_files = check_output_directory(o.out, o.force);

  // Pass 1, where needed: the number of documents (for the split) and the tokenizer's training sample.
  const bool training = spec.kind == "bpe" || spec.kind == "unigram";
  ScanResult scan;
  if (training || !o.doc_delimiter.empty()) {
    const auto t = Clock::now();
    scan = scan_inputs(files, o, report.input_bytes, training);
    report.scan_seconds = seconds_since(t);
  } else {
    for (const std::string& f : files) scan.documents += InputFile(f, "input").size() > 0;
  }
  report.sample_bytes = scan.sample_bytes;
  CANONLAB_CHECK(scan.documents >= 2,
                 "--input: the inputs hold " + std::to_string(scan.documents) + " non-empty document" +
                     (scan.documents == 1 ? "" : "s") + "; a training and a validation split need at least 2: give "
                     "more files, or split files into documents with --doc-delimiter (e.g. '\\n\\n')");

  const auto train_start = Clock::now();
  const Tokenizer tokenizer = make_tokenizer(spec, o.tokenizer, o, scan.sentences);
  report.train_seconds = training ? seconds_since(train_start) : 0;

  // Everything that could be refused has been checked: only now is the output directory touched.
  make_output_directory(o.out, old_files);
  if (!tokenizer.is_bytes()) write_text_atomic(o.out + "/" + kTokenizerFileName, tokenizer.model());

  Manifest m;
  m.tokenizer = o.tokenizer;
  m.tokenizer_file = tokenizer.is_bytes() ? "" : kTokenizerFileName;
  m.tokenizer_hash = tokenizer.hash();
  m.vocab_size = tokenizer.vocab_size();
  m.eod_id = tokenizer.eod();
  m.token_bytes = token_bytes_for(uint64_t(m.vocab_size));

  // Pass 2: encode and write.
  const auto encode_start = Clock::now();
  const int threads = o.threads > 0 ? o.threads : thread_count();
  const DocumentSplit split(o.seed, scan.documents, o.val_fraction);
  SplitWriter train{ShardWriter(o.out, "train", shard_header_of(m), o.shard_tokens), {}};
  SplitWriter val{ShardWriter(o.out, "val", shard_header_of(m), o.shard_tokens), {}};
  Encoder encoder(tokenizer, threads, o.tokenizer);
  StageProgress progress(o.progress, "encoding on " + std::to_string(threads) + " thread" + (threads > 1 ? "s" : ""),
                         report.input_bytes);
  DocumentReader reader(files, o.doc_delimiter);
  std::vector<Part> round;
  size_t round_bytes = 0;
  uint64_t document = 0;
  std::string pending;  // the current document's text not yet handed to a part
  const std::vector<uint32_t> eod = tokenizer.eod() >= 0 ? std::vector<uint32_t>{uint32_t(tokenizer.eod())}
                                                         : std::vector<uint32_t>{};
  const auto write_round = [&] {
    encoder.encode(round);
    for (const Part& part : round) {
      SplitWriter& w = split.is_val(part.document) ? val : train;
      w.shards.append(part.tokens);
      w.counts.bytes += part.text.size();
      w.counts.characters += part.characters;
      w.counts.tokens += part.tokens.size();
      if (part.ends_document) {
        w.shards.append(eod);
        w.counts.tokens += eod.size();
        w.counts.documents++;
      }
    }
    round.clear();
    round_bytes = 0;
    progress.update(reader.bytes_read());
  };
  const auto add_part = [&](std::string text, bool ends) {
    round_bytes += text.size();
    round.push_back({document, ends, std::move(text), {}, 0, {}});
    if (ends) document++;
    if (round_bytes >= kRoundBytesPerThread * size_t(threads) || round.size() >= 65536) write_round();
  };
  DocumentReader::Piece piece;
  while (reader.next(piece)) {
    pending.append(piece.text);
    while (!piece.ends_document && pending.size() >= kPartBytes) {
      const size_t cut = tokenizer.safe_cut(pending);
      if (cut == 0) break;
      add_part(pending.substr(0, cut), false);
      pending.erase(0, cut);
    }
    if (piece.ends_document) {
      add_part(std::move(pending), true);
      pending.clear();
    }
  }
  write_round();
  CANONLAB_CHECK(document == scan.documents, "--input: the inputs changed while being read (" +
                                                 std::to_string(scan.documents) + " documents on the first pass, " +
                                                 std::to_string(document) + " on the second)");
  m.train = train.counts;
  m.val = val.counts;
  m.train.shards = train.shards.finish();
  m.val.shards = val.shards.finish();
  report.encode_seconds = seconds_since(encode_start);
  progress.finish(std::to_string(m.train.tokens + m.val.tokens) + " tokens");

  m.prepare = {{"inputs", o.inputs},
               {"files", files.size()},
               {"input_bytes", report.input_bytes},
               {"doc_delimiter", o.doc_delimiter},
               {"val_fraction", o.val_fraction},
               {"seed", o.seed},
               {"eod", o.eod},
               {"shard_tokens", o.shard_tokens},
               {"tokenizer_sample_bytes", report.sample_bytes}};
  write_text_atomic(o.out + "/" + kManifestName, manifest_to_json(m));
  report.manifest = std::move(m);
  report.total_seconds = seconds_since(start);
  return report;
}

}  // namespace canonlab
