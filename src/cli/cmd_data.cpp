// canonlab data show TASK|CONFIG [--set k=v]... [--n N] [--eval SUITE] [--seed S] [--tokens N] [--width W]
// canonlab data windows TASK|CONFIG [--set k=v]... [--steps N]      the trainer's token windows as JSON
// canonlab data prepare --input FILE|DIR|GLOB... --tokenizer SPEC --out DATA_DIR [options]   (docs/text-data.md)
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/config.h"
#include "data/show.h"
#include "data/text/corpus.h"
#include "data/text/prepare.h"
#include "engine/error.h"
#include "eval/evaluate.h"
#include "io/paths.h"

namespace canonlab::cli {

namespace {

// A config file when one is there, else a task name (which names no file). A path that cannot be examined (too
// long, no permission) is named as one rather than reported as an unknown task.
RunConfig config_of(const std::string& task_or_config, const std::vector<std::string>& sets) {
  const PathStatus status = path_status(task_or_config);
  if (!status.examined()) throw path_error("TASK|CONFIG: cannot read config file", task_or_config, status.problem);
  return status.is_regular_file() ? load_config(task_or_config, sets)
                                  : config_from_yaml_string("task:\n  name: " + task_or_config + "\n", sets);
}

struct DataShowArgs {
  std::string task_or_config, suite;
  std::vector<std::string> sets;
  int n = 2, tokens = 400, width = 110;
  uint64_t seed = 1;
};

int run_data_show(const DataShowArgs& a) {
  const RunConfig cfg = config_of(a.task_or_config, a.sets);
  auto task = make_task(cfg.task);
  const std::vector<std::string> suites = task->eval_suites();
  int suite = -1;
  if (!a.suite.empty()) {
    for (int s = 0; s < int(suites.size()); s++)
      if (suites[size_t(s)] == a.suite || (suites[size_t(s)].empty() && a.suite == "default")) suite = s;
    if (suite < 0) {
      std::string allowed;
      for (const auto& s : suites) allowed += (allowed.empty() ? "" : ", ") + (s.empty() ? std::string("default") : s);
      throw Error("--eval: '" + a.suite + "' is not an evaluation suite of " + task->name() + "; allowed: " + allowed);
    }
  }
  Batch batch;
  batch.resize(a.n, task->seq_len());
  for (int r = 0; r < a.n; r++) {
    if (suite >= 0) task->sample_eval(batch, r, a.seed, kHeldOutStream, uint64_t(r), suite);
    else task->sample(batch, r, a.seed, 0, uint64_t(r));
  }
  std::cout << task->name() << ": vocabulary " << task->vocab_size() << ", window " << task->seq_len() << " tokens, "
            << (suite >= 0 ? "evaluation suite '" + a.suite + "'" : std::string("training stream"))
            << "; [x] = trained on, {x} = trained and scored (" << task->metric_names().front() << ")\n";
  for (int r = 0; r < a.n; r++) {
    std::cout << "\n--- example " << r << "\n" << show_window(*task, batch, r, a.width, a.tokens);
  }
  return 0;
}

struct DataWindowsArgs {
  std::string task_or_config;
  std::vector<std::string> sets;
  int steps = 1;
};

nlohmann::json rows_of(const std::vector<int>& values, int B, int T) {
  nlohmann::json rows = nlohmann::json::array();
  for (int b = 0; b < B; b++)
    rows.push_back(std::vector<int>(values.begin() + long(b) * T, values.begin() + long(b + 1) * T));
  return rows;
}

nlohmann::json mask_rows(const std::vector<float>& mask, int B, int T) {
  std::vector<int> bits(mask.size());
  for (size_t i = 0; i < mask.size(); i++) bits[i] = mask[i] != 0.f;
  return rows_of(bits, B, T);
}

// Exactly the batches `canonlab train` would feed the model for this config: training steps 0 .. steps - 1 (rows
// drawn as the trainer draws them, from train.data_seed) and the fixed held-out batches of make_eval_batches.
int run_data_windows(const DataWindowsArgs& a) {
  const RunConfig cfg = config_of(a.task_or_config, a.sets);
  auto task = make_task(cfg.task);
  const int B = cfg.train.batch_size, T = task->seq_len();
  nlohmann::json out = {{"task", task->name()}, {"vocab_size", task->vocab_size()}, {"seq_len", T},
                        {"batch_size", B}, {"data_seed", cfg.train.data_seed}};
  nlohmann::json train = nlohmann::json::array();
  Batch batch;
  batch.resize(B, T);
  for (int step = 0; step < a.steps; step++) {
    for (int b = 0; b < B; b++) task->sample(batch, b, cfg.train.data_seed, uint64_t(step), uint64_t(b));
    train.push_back({{"step", step}, {"tokens", rows_of(batch.tokens, B, T)}, {"targets", rows_of(batch.targets, B, T)},
                     {"loss_mask", mask_rows(batch.loss_mask, B, T)}});
  }
  out["train"] = train;
  nlohmann::json eval = nlohmann::json::array();
  for (const EvalBatch& eb : make_eval_batches(*task, cfg))
    eval.push_back({{"suite", eb.suite}, {"tokens", rows_of(eb.batch.tokens, B, T)},
                    {"targets", rows_of(eb.batch.targets, B, T)}, {"loss_mask", mask_rows(eb.batch.loss_mask, B, T)},
                    {"score_mask", mask_rows(eb.batch.score_mask, B, T)}});
  out["eval"] = eval;
  std::cout << out.dump() << "\n";
  return 0;
}

struct DataPrepareArgs {
  PrepareOptions options;
  std::string delimiter;
  int sample_mb = 16;
  bool no_eod = false, quiet = false;
};

std::string thousands(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); i++) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

int run_data_prepare(DataPrepareArgs& a) {
  PrepareOptions& o = a.options;
  o.doc_delimiter = parse_escapes(a.delimiter, "--doc-delimiter");
  o.sample_bytes = uint64_t(a.sample_mb) << 20;
  o.eod = !a.no_eod;
  o.progress = !a.quiet;
  const PrepareReport r = prepare_text_data(o);
  const Manifest& m = r.manifest;
  std::cout << "wrote " << o.out << ": tokenizer " << m.tokenizer << " (vocabulary " << m.vocab_size
            << (m.eod_id >= 0 ? ", <eod> = " + std::to_string(m.eod_id) : std::string(", no <eod>")) << "), "
            << (m.token_bytes == 2 ? "uint16" : "uint32") << " shards\n";
  for (const auto& [name, s] : {std::pair{"train", &m.train}, std::pair{"val  ", &m.val}})
    std::cout << "  " << name << ": " << thousands(s->documents) << " documents, " << thousands(s->bytes) << " bytes, "
              << thousands(s->characters) << " characters, " << thousands(s->tokens) << " tokens in "
              << s->shards.size() << " shard" << (s->shards.size() > 1 ? "s" : "") << "\n";
  const uint64_t tokens = m.train.tokens + m.val.tokens, bytes = m.train.bytes + m.val.bytes;
  char line[256];
  std::snprintf(line, sizeof line,
                "  %.3f bytes per token; encoding %.1f MB/s, %.2fM tokens/s; %.1f s in all (scan %.1f s, tokenizer "
                "%.1f s, encoding %.1f s)\n",
                double(bytes) / double(tokens), double(r.input_bytes) / 1e6 / std::max(r.encode_seconds, 1e-9),
                double(tokens) / 1e6 / std::max(r.encode_seconds, 1e-9), r.total_seconds, r.scan_seconds,
                r.train_seconds, r.encode_seconds);
  std::cout << line;
  return 0;
}

}  // namespace

Command add_data_command(CLI::App& app) {
  auto a = std::make_shared<DataShowArgs>();
  auto w = std::make_shared<DataWindowsArgs>();
  auto p = std::make_shared<DataPrepareArgs>();
  CLI::App* sub = app.add_subcommand("data", "Look at the data a task generates; prepare natural text");
  sub->require_subcommand(1);
  CLI::App* show = sub->add_subcommand("show", "Print decoded windows of a task with the loss mask marked");
  show->add_option("task", a->task_or_config, "Task name (copy, depo, brevo, mano, lano, capo, mqar, text) or a YAML config")
      ->required();
  show->add_option("--set", a->sets, "Override a config key: --set task.depo.n_max=20 (repeatable)");
  show->add_option("--n", a->n, "Windows to print")->check(CLI::Range(1, 1000));
  show->add_option("--eval", a->suite, "Show an evaluation suite (e.g. depo: k_max, k_half) instead of training data");
  show->add_option("--seed", a->seed, "Data seed");
  show->add_option("--tokens", a->tokens, "Tokens per window to print; 0 = all")->check(CLI::NonNegativeNumber);
  show->add_option("--width", a->width, "Line width")->check(CLI::Range(20, 10000));

  CLI::App* windows = sub->add_subcommand(
      "windows", "Print as JSON the token windows the trainer sees: the first training steps and the held-out batches");
  windows->add_option("task", w->task_or_config, "Task name or a YAML config")->required();
  windows->add_option("--set", w->sets, "Override a config key (repeatable)");
  windows->add_option("--steps", w->steps, "Training steps to print, from step 0")->check(CLI::Range(1, 1000));

  CLI::App* prepare = sub->add_subcommand(
      "prepare", "Tokenize text files into a data directory of token shards for task.text.path (docs/text-data.md)");
  PrepareOptions& o = p->options;
  prepare->add_option("--input", o.inputs, "Text files, directories (read recursively, sorted) or glob patterns")
      ->required()
      ->expected(1, -1);
  prepare->add_option("--tokenizer", o.tokenizer, "bytes, bpe:VOCAB, unigram:VOCAB (trained with sentencepiece), or PATH.model")
      ->required();
  prepare->add_option("--out", o.out, "The data directory to write (new or empty; --force replaces an earlier one)")
      ->required();
  prepare->add_option("--val-fraction", o.val_fraction, "Expected fraction of documents held out")->capture_default_str();
  prepare->add_option("--threads", o.threads, "Encoding threads; 0 = every core")->capture_default_str();
  prepare->add_option("--seed", o.seed, "Seed of the split and of the tokenizer's training sample")->capture_default_str();
  prepare->add_option("--doc-delimiter", p->delimiter,
                      "Split each file into documents at this text (escapes \\n \\t \\r \\\\ \\0 \\xNN, e.g. '\\n\\n'); "
                      "default: one document per file");
  prepare->add_flag("--no-eod", p->no_eod, "Do not end every document with the <eod> token");
  prepare->add_option("--shard-tokens", o.shard_tokens, "Tokens per shard file")->capture_default_str();
  prepare->add_option("--sample-mb", p->sample_mb, "MiB of text the tokenizer is trained on (drawn by line)")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  prepare->add_flag("--force", o.force, "Replace an existing data directory made by data prepare");
  prepare->add_flag("--quiet", p->quiet, "No progress on stderr");

  return {sub, [a, w, p, show, windows, prepare] {
            if (*show) return run_data_show(*a);
            if (*windows) return run_data_windows(*w);
            return run_data_prepare(*p);
          }};
}

}  // namespace canonlab::cli
