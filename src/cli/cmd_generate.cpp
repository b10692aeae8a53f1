// canonlab generate CHECKPOINT|RUN_DIR --prompt TOKENS|TEXT [--max-new N] [--temperature T] [--top-k K] [--seed S]
//                   [--recompute] [--int8] [--set train.threads=1]...
// Continues one prompt with a trained model: token ids separated by commas or spaces, or text where the run's task is
// the text task (its tokenizer encodes the prompt and decodes the continuation). Greedy at temperature 0, else a
// draw from the counter-based stream of --seed, so a fixed seed gives the same text. The cached (linear-time) decode
// path by default; --recompute runs the whole forward pass per token, the reference (eval/generate.h). --int8 runs
// both with weight-only int8 GEMM weights (eval/int8_inference.h).
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "data/text.h"
#include "engine/error.h"
#include "eval/generate.h"
#include "eval/int8_inference.h"
#include "eval/probe.h"
#include "io/strict_number.h"

namespace canonlab::cli {

namespace {

constexpr int kMaxNewTokens = 1 << 20;

struct GenerateArgs {
  std::string checkpoint, prompt, max_new = "32", temperature = "0", top_k = "0", seed = "0";
  std::vector<std::string> sets;
  bool recompute = false, int8 = false;
};

// "3,1,4" or "3 1 4" (or both) -> ids in [0, vocab).
std::vector<int> parse_token_ids(const std::string& text, int vocab) {
  std::vector<int> ids;
  std::string piece;
  auto flush = [&] {
    if (piece.empty()) return;
    const std::optional<int> id = parse_integer<int>(piece);
    if (!id)
      throw Error("--prompt: '" + piece + "' is not a token id; give ids separated by commas or spaces (--prompt 3,1,4)" +
                  " or text when the run's task is the text task");
    if (*id < 0 || *id >= vocab)
      throw Error("--prompt: token id " + piece + " is outside the model's vocabulary [0, " + std::to_string(vocab) +
                  ") (model.vocab_size " + std::to_string(vocab) + ")");
    ids.push_back(*id);
    piece.clear();
  };
  for (char ch : text) {
    if (ch == ',' || ch == ' ' || ch == '\t' || ch == '\n') flush();
    else piece += ch;
  }
  flush();
  return ids;
}

template <class Integer>
Integer parse_option(const std::string& option, const std::string& text, Integer lo, Integer hi) {
  const std::optional<Integer> v = parse_integer<Integer>(text);
  if (!v || *v < lo || *v > hi)
    throw Error(option + ": '" + text + "' is not allowed; expected a whole number in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  return *v;
}

std::string join_ids(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); i++) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

int run_generate(const GenerateArgs& a) {
  const int max_new = parse_option<int>("--max-new", a.max_new, 1, kMaxNewTokens);
  const std::optional<double> temperature = parse_finite_double(a.temperature);
  if (!temperature || *temperature < 0)
    throw Error("--temperature: '" + a.temperature + "' is not allowed; expected a finite number >= 0 (0 = greedy)");
  const uint64_t seed = parse_option<uint64_t>("--seed", a.seed, 0, UINT64_MAX);
  int top_k = parse_option<int>("--top-k", a.top_k, 0, kMaxNewTokens);

  LoadedCheckpoint c = load_checkpoint(a.checkpoint, a.sets, Purpose::eval);
  std::optional<Int8Summary> int8;
  if (a.int8) int8 = quantize_for_inference(*c.model, c.cfg);
  const int vocab = c.model->vocab_size(), context = c.model->config().max_seq_len;
  if (top_k > vocab)
    throw Error("--top-k: " + a.top_k + " exceeds the model's vocabulary of " + std::to_string(vocab) +
                " tokens; allowed: 0 (all) to " + std::to_string(vocab));
  const auto* text_task = dynamic_cast<const TextTask*>(c.task.get());
  std::vector<int> prompt;
  if (text_task) {
    std::vector<uint32_t> ids;
    text_task->tokenizer().encode(a.prompt, ids);
    prompt.assign(ids.begin(), ids.end());
  } else {
    prompt = parse_token_ids(a.prompt, vocab);
  }
  if (prompt.empty()) throw Error("--prompt: '" + a.prompt + "' holds no tokens; give at least one");
  if (int(prompt.size()) >= context)
    throw Error("--prompt: " + std::to_string(prompt.size()) + " tokens, but the model's context (model.max_seq_len) is " +
                std::to_string(context) + ": a prompt may have at most " + std::to_string(context - 1) +
                " tokens, leaving room for one generated token");

  Arena arena(c.model->backend().memory());  // on the model's device: a GPU run generates there
  ModelSampler sampler(*c.model, arena, 1, a.recompute ? GenerationPath::recompute : GenerationPath::cached, top_k);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> generated = sampler.continue_prompts({prompt}, max_new, {}, *temperature, seed).front();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::cout << "checkpoint " << c.path << "\n" << (int8 ? int8->text() : "weights fp32\n");
  std::cout << "path " << (sampler.path() == GenerationPath::cached ? "cached" : "recompute");
  if (!sampler.fallback_reason().empty()) std::cout << " (the cached path is unavailable: " << sampler.fallback_reason() << ")";
  std::cout << "\nprompt " << join_ids(prompt) << "\ngenerated " << join_ids(generated) << "\n";
  if (int(generated.size()) < max_new)
    std::cout << "stopped after " << generated.size() << " tokens at the model's context of " << context << "\n";
  if (text_task) {
    const std::vector<uint32_t> ids(generated.begin(), generated.end());
    std::cout << "text " << text_task->tokenizer().decode(ids) << "\n";
  }
  std::cerr << "generated " << generated.size() << " tokens in " << seconds << " s ("
            << (seconds > 0 ? double(generated.size()) / seconds : 0.0) << " tokens/s)\n";
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "Continue a prompt with a checkpoint (cached, linear-time decoding)");
  sub->add_option("checkpoint", a->checkpoint, "A .model.safetensors file, a run directory or its checkpoints/")
      ->required();
  sub->add_option("--prompt", a->prompt,
                  "Token ids separated by commas or spaces, or text when the run's task is the text task")
      ->type_name("TOKENS|TEXT")
      ->required();
  sub->add_option("--max-new", a->max_new, "Tokens to generate (fewer where the model's context ends); default 32")
      ->type_name("N");
  sub->add_option("--temperature", a->temperature, "0 = greedy (default); > 0 samples from softmax(logits / T)")
      ->type_name("T");
  sub->add_option("--top-k", a->top_k, "Sample among the k most likely tokens only; 0 = all (default)")
      ->type_name("K");
  sub->add_option("--seed", a->seed, "Seed of the sampling stream (default 0)")->type_name("S");
  sub->add_flag("--recompute", a->recompute, "Re-run the whole forward pass per token (the reference path)");
  sub->add_flag("--int8", a->int8,
                "Generate with weight-only int8 GEMM weights (per-output-channel scales, fp32 activations; CPU, fp32)");
  sub->add_option("--set", a->sets, "Change an eval setting: --set train.threads=1 (repeatable; task.*, train.*)");
  return {sub, [a] { return run_generate(*a); }};
}

}  // namespace canonlab::cli
