// Lano: the paper's grammar JSON, generated grammars, sentence sampling, the CYK parser, packing and lano_acc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <tuple>

#include <unistd.h>

#include "data/lano.h"
#include "engine/error.h"

#ifndef CANONLAB_SOURCE_DIR
#define CANONLAB_SOURCE_DIR "."
#endif

using namespace canonlab;

namespace {

std::string grammar_path(const std::string& name) {
  return std::string(CANONLAB_SOURCE_DIR) + "/data/physicslm4/lano-cfg/" + name + ".json";
}

TaskConfig lano_config(const std::string& grammar = grammar_path("cfg3f"), int context = 0) {
  TaskConfig cfg;
  cfg.name = "lano";
  cfg.context = context;
  cfg.lano.grammar = grammar;
  return cfg;
}

std::string temp_file(const std::string& stem) {
  return (std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(::getpid()) + ".json")).string();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// All sentences of a (finite) grammar's language, by expanding every rule of every symbol.
std::set<std::vector<int>> language(const Grammar& g, int level, int symbol) {
  if (level == g.depth()) return {{symbol}};
  std::set<std::vector<int>> out;
  for (const GrammarRule& rule : g.levels[size_t(level)].rules[size_t(symbol)]) {
    std::set<std::vector<int>> partial = {{}};
    for (int child : rule) {
      std::set<std::vector<int>> next;
      for (const auto& head : partial)
        for (const auto& tail : language(g, level + 1, child)) {
          std::vector<int> s = head;
          s.insert(s.end(), tail.begin(), tail.end());
          next.insert(s);
        }
      partial = std::move(next);
    }
    out.insert(partial.begin(), partial.end());
  }
  return out;
}

struct CorruptionRates {
  double substitution = 0, insertion = 0, deletion = 0;
};

// One random edit per sentence; the fraction of edited sentences the parser rejects.
CorruptionRates rejection_rates(const Grammar& g, int trials) {
  CfgParser parser(g);
  CounterRng rng(99, 5);
  const int T = g.num_terminals();
  int sub = 0, ins = 0, del = 0;
  for (int k = 0; k < trials; k++) {
    std::vector<int> s;
    sample_sentence(g, rng, s);
    std::vector<int> c = s;
    const size_t pos = rng.below(c.size());
    c[pos] = (c[pos] + 1 + int(rng.below(uint64_t(T - 1)))) % T;  // a different terminal
    sub += !parser.accepts(c);
    c = s;
    c.insert(c.begin() + long(rng.below(c.size() + 1)), int(rng.below(uint64_t(T))));
    ins += !parser.accepts(c);
    c = s;
    c.erase(c.begin() + long(rng.below(c.size())));
    del += !parser.accepts(c);
  }
  return {double(sub) / trials, double(ins) / trials, double(del) / trials};
}

// Answers every prompt with a real sentence of the task's grammar, optionally damaged, then <bos>.
class FakeSampler final : public TokenSampler {
 public:
  enum Mode { kSentence, kSubstituted, kNoStop };
  FakeSampler(const LanoTask& task, Mode mode) : task_(task), mode_(mode) {}
  std::vector<std::vector<int>> continue_prompts(const std::vector<std::vector<int>>& prompts, int max_new,
                                                 const std::vector<int>& stop_tokens, double temperature,
                                                 uint64_t seed) override {
    seen_max_new = max_new, seen_stops = stop_tokens, seen_temperature = temperature;
    std::vector<std::vector<int>> out;
    for (size_t row = 0; row < prompts.size(); row++) {
      EXPECT_EQ(prompts[row], std::vector<int>{task_.bos()});
      CounterRng rng(seed, row);
      std::vector<int> s;
      sample_sentence(task_.grammar(), rng, s);
      if (mode_ == kSubstituted) {
        const size_t pos = rng.below(s.size());
        s[pos] = (s[pos] + 1 + int(rng.below(uint64_t(task_.bos() - 1)))) % task_.bos();
      }
      if (mode_ != kNoStop) s.push_back(task_.bos());
      out.push_back(s);
    }
    return out;
  }
  int max_length() const override { return task_.seq_len(); }
  int seen_max_new = 0;
  std::vector<int> seen_stops;
  double seen_temperature = 0;

 private:
  const LanoTask& task_;
  Mode mode_;
};

}  // namespace

TEST(TaskLano, Cfg3fJsonGivesThePapersRootRules) {
  const Grammar g = load_grammar_json(grammar_path("cfg3f"));
  ASSERT_EQ(g.depth(), 6);
  EXPECT_EQ(g.levels[0].ids, std::vector<int>{22});
  EXPECT_EQ(g.levels[1].ids, (std::vector<int>{19, 20, 21}));
  EXPECT_EQ(g.levels[6].ids, (std::vector<int>{1, 2, 3}));
  // Rule children index the next level: root 22 -> 20 21 | 20 19 21 | 21 19 19 | 20 20.
  std::vector<std::vector<int>> root_rules;
  for (const GrammarRule& r : g.levels[0].rules[0]) {
    std::vector<int> ids;
    for (int c : r) ids.push_back(g.levels[1].ids[size_t(c)]);
    root_rules.push_back(ids);
  }
  EXPECT_EQ(root_rules, (std::vector<std::vector<int>>{{20, 21}, {20, 19, 21}, {21, 19, 19}, {20, 20}}));
  for (int d = 1; d < 6; d++) EXPECT_EQ(g.levels[size_t(d)].ids.size(), 3u);
  EXPECT_TRUE(g.levels[6].rules.empty());

  LanoTask task(lano_config());
  EXPECT_EQ(task.vocab_size(), 4);
  EXPECT_EQ(task.seq_len(), 512);
  EXPECT_EQ(task.bos(), 3);
  EXPECT_EQ(task.token_text(0), "1");
  EXPECT_EQ(task.token_text(2), "3");
  EXPECT_EQ(task.token_text(3), "<bos>");
  EXPECT_EQ(task.metric_names(), std::vector<std::string>{"lano_acc"});
  EXPECT_TRUE(task.has_generation_eval());
}

TEST(TaskLano, BadGrammarFilesNameTheKeyAndPath) {
  std::string msg = error_of([] { LanoTask t(lano_config("no/such/grammar.json")); });
  EXPECT_NE(msg.find("task.lano.grammar"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no/such/grammar.json"), std::string::npos) << msg;

  const std::string path = temp_file("canonlab_lano_bad");
  for (const std::string& text :
       {std::string("{\"depth\": 1, "), std::string("{\"depth\": 1}"),
        std::string(R"({"depth": 1, "sizes": [1, 2], "idx": [[5], [1, 2]],
                        "all": [[{"children": [[0, 2]]}], [{"children": null}, {"children": null}]]})"),
        std::string(R"({"depth": 1, "sizes": [1, 2], "idx": [[5], [1, 2]],
                        "all": [[{"children": []}], [{"children": null}, {"children": null}]]})")}) {
    std::ofstream(path) << text;
    msg = error_of([&] { LanoTask t(lano_config(path)); });
    EXPECT_NE(msg.find("task.lano.grammar"), std::string::npos) << text << " -> " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
  std::remove(path.c_str());
}

TEST(TaskLano, EverySampledSentenceIsAccepted) {
  TaskConfig generated = lano_config("generate");
  generated.lano.grammar_seed = 5;
  for (const TaskConfig& cfg : {lano_config(), lano_config(grammar_path("cfg3b")), generated}) {
    LanoTask task(cfg);
    const SentenceLengths lengths = sentence_lengths(task.grammar());
    CounterRng rng(3, 4);
    for (int k = 0; k < 300; k++) {
      std::vector<int> s;
      sample_sentence(task.grammar(), rng, s);
      ASSERT_GE(int(s.size()), lengths.min[0][0]);
      ASSERT_LE(int(s.size()), lengths.max[0][0]);
      for (int t : s) ASSERT_TRUE(t >= 0 && t < task.bos());
      ASSERT_TRUE(task.accepts(s)) << cfg.lano.grammar << " sentence " << k << " of length " << s.size();
    }
  }
}

TEST(TaskLano, ParserAgreesWithTheEnumeratedLanguage) {
  // Small grammars whose whole language can be listed; rule length 1 exercises unit productions.
  LanoConfig cfg;
  cfg.depth = 2, cfg.num_sym = 2, cfg.deg_min = 1, cfg.deg_max = 3, cfg.len_min = 1, cfg.len_max = 3;
  int accepted_total = 0, rejected_total = 0;
  for (uint64_t seed = 1; seed <= 20; seed++) {
    cfg.grammar_seed = seed;
    const Grammar g = generate_grammar(cfg);
    const CfgParser parser(g);
    const std::set<std::vector<int>> lang = language(g, 0, 0);
    // Every string over {0, 1} of length 0..10 (the longest sentence has 9 terminals).
    for (int len = 0; len <= 10; len++)
      for (int bits = 0; bits < (1 << len); bits++) {
        std::vector<int> s(static_cast<size_t>(len));
        for (int i = 0; i < len; i++) s[size_t(i)] = (bits >> i) & 1;
        const bool in = lang.count(s) > 0;
        ASSERT_EQ(parser.accepts(s), in) << "seed " << seed << " length " << len << " bits " << bits;
        (in ? accepted_total : rejected_total)++;
      }
  }
  EXPECT_GT(accepted_total, 100);  // non-trivial languages: both answers occur often
  EXPECT_GT(rejected_total, 1000);
}

TEST(TaskLano, SingleTokenCorruptionsAreMostlyRejected) {
  // Measured on cfg3f with 1200 trials: substitution 0.92, insertion 0.92, deletion 0.82 rejected (a
  // deletion can turn a 3-symbol rule into a valid 2-symbol one; an edit is also accepted when the damaged
  // string happens to have another parse). Thresholds sit ~6 binomial SDs below the measurements; a parser that
  // ignores order or accepts any length-plausible string scores near 0.
  const CorruptionRates r = rejection_rates(load_grammar_json(grammar_path("cfg3f")), 1200);
  std::printf("cfg3f rejection of corrupted sentences: substitution %.3f, insertion %.3f, deletion %.3f\n",
              r.substitution, r.insertion, r.deletion);
  EXPECT_GT(r.substitution, 0.85);
  EXPECT_GT(r.insertion, 0.85);
  EXPECT_GT(r.deletion, 0.75);
}

TEST(TaskLano, KnownNonSentencesAreRejected) {
  LanoTask task(lano_config());
  EXPECT_FALSE(task.accepts({}));
  for (int t = 0; t < 3; t++) EXPECT_FALSE(task.accepts({t}));
  CounterRng rng(1, 1);
  std::vector<int> s;
  sample_sentence(task.grammar(), rng, s);
  ASSERT_TRUE(task.accepts(s));
  std::vector<int> with_bos = s;
  with_bos[s.size() / 2] = task.bos();  // <bos> is not a terminal
  EXPECT_FALSE(task.accepts(with_bos));
  std::vector<int> twice = s;
  twice.insert(twice.end(), s.begin(), s.end());  // two sentences are not one
  EXPECT_FALSE(task.accepts(twice));
  EXPECT_TRUE(task.accepts_sample([&] { auto v = s; v.push_back(task.bos()); return v; }()));
  EXPECT_FALSE(task.accepts_sample(s));  // no closing <bos>
}

TEST(TaskLano, GeneratedGrammarHasTheConfiguredShape) {
  LanoConfig cfg;
  cfg.depth = 4, cfg.num_sym = 5, cfg.deg_min = 2, cfg.deg_max = 5, cfg.len_min = 1, cfg.len_max = 4;
  cfg.grammar_seed = 17;
  const Grammar g = generate_grammar(cfg);
  ASSERT_EQ(g.depth(), 4);
  EXPECT_EQ(g.levels[0].ids.size(), 1u);
  for (int d = 1; d <= 4; d++) EXPECT_EQ(g.levels[size_t(d)].ids.size(), 5u);
  EXPECT_EQ(g.levels[4].ids, (std::vector<int>{1, 2, 3, 4, 5}));  // terminals 1..n, then 3 reserved ids
  EXPECT_EQ(g.levels[3].ids[0], 9);
  EXPECT_EQ(g.levels[0].ids[0], 9 + 5 * 3);
  std::set<size_t> degrees, lengths;
  for (int d = 0; d < 4; d++)
    for (const auto& rules : g.levels[size_t(d)].rules) {
      degrees.insert(rules.size());
      EXPECT_EQ(std::set<GrammarRule>(rules.begin(), rules.end()).size(), rules.size()) << "duplicate rule";
      for (const GrammarRule& r : rules) {
        lengths.insert(r.size());
        for (int c : r) EXPECT_TRUE(c >= 0 && c < 5);
      }
    }
  EXPECT_EQ(degrees, (std::set<size_t>{2, 3, 4, 5}));
  EXPECT_EQ(lengths, (std::set<size_t>{1, 2, 3, 4}));

  EXPECT_EQ(generate_grammar(cfg), g);
  cfg.grammar_seed = 18;
  EXPECT_NE(generate_grammar(cfg), g);

  cfg.num_sym = 1, cfg.len_min = 2, cfg.len_max = 3, cfg.deg_min = 1, cfg.deg_max = 3;  // only "a a", "a a a"
  const std::string msg = error_of([&] { generate_grammar(cfg); });
  EXPECT_NE(msg.find("task.lano.deg_max"), std::string::npos) << msg;
}

// FNV-1a over a grammar's levels: sizes, ids, and every rule with its length.
uint64_t fingerprint(const Grammar& g) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&](int64_t v) { h = (h ^ uint64_t(v)) * 1099511628211ULL; };
  for (const GrammarLevel& level : g.levels) {
    mix(int64_t(level.ids.size()));
    for (int id : level.ids) mix(id);
    for (const auto& rules : level.rules) {
      mix(int64_t(rules.size()));
      for (const GrammarRule& r : rules) {
        mix(int64_t(r.size()));
        for (int c : r) mix(c);
      }
    }
  }
  return h;
}

// generate_grammar looks a symbol's duplicate rules up in a set (issue 25 F3: the linear search it used was
// quadratic in deg_max). The draws are the same, so the grammars must be too: these fingerprints are of grammars
// built by the linear-search generator (checked against a copy of it when the set came in).
TEST(TaskLano, GeneratedGrammarsAreTheOnesTheLinearSearchGave) {
  std::vector<LanoConfig> configs(4);
  configs[1].grammar_seed = 7;
  // 2 symbols, rules of 1..3: 14 distinct rules, up to 12 wanted, so most draws are duplicates
  configs[2].depth = 3, configs[2].num_sym = 2, configs[2].deg_min = 10, configs[2].deg_max = 12;
  configs[2].len_min = 1, configs[2].len_max = 3;
  configs[3].depth = 2, configs[3].num_sym = 64, configs[3].deg_min = 200, configs[3].deg_max = 300;
  configs[3].len_min = 1, configs[3].len_max = 2;
  const std::vector<uint64_t> linear_search = {6786429674775957630ULL, 17446904941616671595ULL,
                                               12606897689961915689ULL, 4993015355175041043ULL};
  for (size_t i = 0; i < configs.size(); i++)
    EXPECT_EQ(fingerprint(generate_grammar(configs[i])), linear_search[i]) << "config " << i;
}

// The size bound the estimate uses holds for what is built, and the keys that would exceed kMaxGrammarRuleSymbols
// are refused before generation starts (generate_grammar's own check, for callers that skip config resolution).
TEST(TaskLano, GeneratedGrammarsStayWithinTheirBound) {
  for (uint64_t seed : {1, 2, 3}) {
    LanoConfig cfg;
    cfg.depth = 3, cfg.num_sym = 40, cfg.deg_min = 1, cfg.deg_max = 30, cfg.len_min = 1, cfg.len_max = 6;
    cfg.grammar_seed = seed;
    const Grammar g = generate_grammar(cfg);
    const GrammarSize size = grammar_size(g), bound = generated_grammar_bound(cfg);
    EXPECT_EQ(size.symbols, bound.symbols);
    EXPECT_LE(size.rules, bound.rules);
    EXPECT_LE(size.rule_symbols, bound.rule_symbols);
    EXPECT_LE(size.parser_symbols, bound.parser_symbols);
    const int parser_symbols = CfgParser(g).num_symbols();
    EXPECT_GT(parser_symbols, size.symbols);  // rules of 3..6 symbols need intermediates
    EXPECT_LE(parser_symbols, size.parser_symbols);
    EXPECT_GE(parse_table_bytes(size, 100), double(parser_symbols) * 101 * 2 * 8);  // CfgParser::accepts' table
  }
  LanoConfig over;
  over.depth = 2, over.num_sym = 4096, over.deg_min = over.deg_max = 4096, over.len_min = 1, over.len_max = 16;
  const uint64_t built = generated_grammar_count();
  const std::string msg = error_of([&] { generate_grammar(over); });
  EXPECT_NE(msg.find("task.lano.deg_max"), std::string::npos) << msg;
  EXPECT_NE(msg.find("allowed: at most 1048576"), std::string::npos) << msg;
  EXPECT_EQ(generated_grammar_count(), built);
}

TEST(TaskLano, JsonRoundTrip) {
  const Grammar f = load_grammar_json(grammar_path("cfg3f"));
  const std::string text = grammar_to_json(f);
  EXPECT_EQ(parse_grammar_json(text, "round trip"), f);
  EXPECT_NE(text.find(R"("id":22,"name":"AV","children":[[1,2],[1,0,2],[2,0,0],[1,1]])"), std::string::npos);

  LanoConfig cfg;
  cfg.grammar_seed = 3;
  const Grammar g = generate_grammar(cfg);
  const std::string path = temp_file("canonlab_lano_roundtrip");
  save_grammar_json(g, path);
  EXPECT_EQ(load_grammar_json(path), g);
  // The written file drives the task exactly like the generated grammar.
  TaskConfig from_file = lano_config(path), generated = lano_config("generate");
  generated.lano.grammar_seed = 3;
  Batch a = LanoTask(from_file).make_batch(2, 1, 2), b = LanoTask(generated).make_batch(2, 1, 2);
  EXPECT_EQ(a.tokens, b.tokens);
  std::remove(path.c_str());
}

TEST(TaskLano, WindowsAreDeterministicAndStartWithAWholeSentence) {
  // Context 200 is shorter than most cfg3f sentences (mean ~250), so first sentences are often redrawn.
  LanoTask task(lano_config(grammar_path("cfg3f"), 200));
  const Batch a = task.make_batch(64, 11, 3), again = task.make_batch(64, 11, 3), other = task.make_batch(64, 11, 4);
  EXPECT_EQ(a.tokens, again.tokens);
  EXPECT_EQ(a.loss_mask, again.loss_mask);
  EXPECT_NE(a.tokens, other.tokens);
  int second_sentences = 0;
  for (int r = 0; r < a.B; r++) {
    const int* t = a.tokens.data() + size_t(r) * a.T;
    ASSERT_EQ(t[0], task.bos());
    int end = 1;
    while (end < a.T && t[end] != task.bos()) end++;
    ASSERT_TRUE(task.accepts(std::vector<int>(t + 1, t + end))) << "row " << r << ": first sentence cut or wrong";
    second_sentences += end < a.T;
    for (int p = 0; p < a.T; p++) {
      EXPECT_TRUE(t[p] >= 0 && t[p] < task.vocab_size());
      EXPECT_EQ(a.loss_mask[size_t(r) * a.T + size_t(p)], p + 1 < a.T ? 1.f : 0.f);  // loss on all tokens
      EXPECT_EQ(a.score_mask[size_t(r) * a.T + size_t(p)], 0.f);
      if (p + 1 < a.T) {
        EXPECT_EQ(a.targets[size_t(r) * a.T + size_t(p)], t[p + 1]);
      }
    }
  }
  EXPECT_GT(second_sentences, 0);
  // Evaluation windows follow the same rule.
  Batch e = task.make_eval_batch(8, 11, kHeldOutStream, 0);
  for (int r = 0; r < e.B; r++) {
    const int* t = e.tokens.data() + size_t(r) * e.T;
    int end = 1;
    while (end < e.T && t[end] != task.bos()) end++;
    EXPECT_TRUE(task.accepts(std::vector<int>(t + 1, t + end)));
  }

  const std::string msg = error_of([] { LanoTask t(lano_config(grammar_path("cfg3f"), 60)); });
  EXPECT_NE(msg.find("task.context"), std::string::npos) << msg;  // shortest cfg3f sentence + <bos> = 65
  EXPECT_NO_THROW(LanoTask(lano_config(grammar_path("cfg3f"), 65)));
}

TEST(TaskLano, GenerationScoreCountsParsedSentencesEndingInBos) {
  LanoTask task(lano_config());
  for (auto [mode, lo, hi] : {std::tuple{FakeSampler::kSentence, 1.0, 1.0}, {FakeSampler::kSubstituted, 0.0, 0.2},
                              {FakeSampler::kNoStop, 0.0, 0.0}}) {
    FakeSampler sampler(task, mode);
    MetricSums sums;
    task.score_generation(sampler, 1234, 100, sums);
    ASSERT_EQ(sums["lano_acc"].count, 100);
    const double acc = sums["lano_acc"].sum / sums["lano_acc"].count;
    EXPECT_GE(acc, lo) << "mode " << mode;
    EXPECT_LE(acc, hi) << "mode " << mode;
    EXPECT_EQ(sampler.seen_max_new, 512);  // max_sentence 0 -> context - 1, plus the closing <bos>
    EXPECT_EQ(sampler.seen_stops, std::vector<int>{task.bos()});
    EXPECT_EQ(sampler.seen_temperature, 1.0);
  }
  // Teacher-forced scoring adds nothing.
  MetricSums sums;
  Batch b = task.make_batch(1, 1, 1);
  std::vector<float> logits(size_t(b.T) * 4, 0.f);
  task.score(b, logits.data(), 0, sums);
  EXPECT_TRUE(sums.empty());
}
