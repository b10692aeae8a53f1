#include "data/cfg_grammar.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/json_read.h"

namespace canonlab {

namespace {

constexpr int kLengthCap = INT32_MAX / 4;  // longest sentence lengths saturate here

int capped_sum(int a, int b) { return std::min(kLengthCap, a + b); }

// The paper's symbol names: id - 1 in base 26 with letters, at least two ("AA" = 1, "AV" = 22, "GD" = 160).
std::string symbol_name(int id) {
  std::string name;
  int v = id - 1;
  do {
    name.insert(name.begin(), char('A' + v % 26));
    v /= 26;
  } while (v > 0);
  if (name.size() < 2) name.insert(name.begin(), 'A');
  return name;
}

}  // namespace

namespace {

// Limits far above the paper's grammars (cfg3f: depth 6, 3 symbols per level, 4 rules of <= 3 symbols) that keep
// a hostile file from building a structure that cannot be sampled or parsed.
constexpr int kMaxGrammarDepth = 32;
constexpr int kMaxSymbolsPerLevel = 1024;
constexpr int kMaxRulesPerSymbol = 1024;
constexpr int kMaxRuleLength = 64;
constexpr uint64_t kMaxGrammarFileBytes = uint64_t(64) << 20;
// The format nests 6 levels: the object, all, a level, a symbol, its children, a rule.
constexpr int kMaxGrammarJsonDepth = 8;

// Integers where integers are meant: nlohmann's get<int>() converts 1.9 to 1 and 1e68 to undefined behaviour.
int json_int(const nlohmann::json& value, const std::string& what, int64_t lo, int64_t hi) {
  const bool integral = value.is_number_integer();
  const int64_t v = !integral ? 0 : value.is_number_unsigned() ? int64_t(std::min<uint64_t>(value.get<uint64_t>(), uint64_t(INT64_MAX)))
                                                              : value.get<int64_t>();
  if (!integral || v < lo || v > hi)
    throw Error(what + " is " + brief(value, 40) + "; allowed: a whole number from " + std::to_string(lo) +
                " to " + std::to_string(hi));
  return int(v);
}

const nlohmann::json& json_field(const nlohmann::json& object, const char* key, const std::string& where) {
  if (!object.is_object()) throw Error(where + " is " + std::string(object.type_name()) + "; expected a JSON object");
  const auto it = object.find(key);
  if (it == object.end()) throw Error(where + " has no '" + key + "'");
  return *it;
}

const nlohmann::json& json_array(const nlohmann::json& value, const std::string& what, size_t size) {
  if (!value.is_array() || value.size() != size)
    throw Error(what + " must be a list of " + std::to_string(size) + " entries, got " +
                (value.is_array() ? std::to_string(value.size()) + " entries" : std::string(value.type_name())));
  return value;
}

}  // namespace

Grammar parse_grammar_json(const std::string& text, const std::string& where) {
  const nlohmann::json j = parse_json(text, where, kMaxGrammarJsonDepth);
  try {
    const int depth = json_int(json_field(j, "depth", "the grammar"), "depth", 1, kMaxGrammarDepth);
    const nlohmann::json& sizes_json = json_array(json_field(j, "sizes", "the grammar"), "sizes", size_t(depth) + 1);
    const nlohmann::json& idx = json_array(json_field(j, "idx", "the grammar"), "idx", size_t(depth) + 1);
    const nlohmann::json& all = json_array(json_field(j, "all", "the grammar"), "all", size_t(depth) + 1);
    std::vector<int> sizes;
    for (int d = 0; d <= depth; d++)
      sizes.push_back(json_int(sizes_json[size_t(d)], "sizes[" + std::to_string(d) + "]", 1, kMaxSymbolsPerLevel));
    CANONLAB_CHECK(sizes[0] == 1, "the root level (sizes[0]) must hold exactly 1 symbol, not " + std::to_string(sizes[0]));
    Grammar g;
    g.levels.resize(size_t(depth) + 1);
    int64_t rule_symbols = 0;
    for (int d = 0; d <= depth; d++) {
      const std::string at = "level " + std::to_string(d);
      const size_t n = size_t(sizes[size_t(d)]);
      const nlohmann::json& ids = json_array(idx[size_t(d)], "idx[" + std::to_string(d) + "]", n);
      const nlohmann::json& symbols = json_array(all[size_t(d)], "all[" + std::to_string(d) + "]", n);
      GrammarLevel& level = g.levels[size_t(d)];
      for (size_t s = 0; s < n; s++)
        level.ids.push_back(json_int(ids[s], "idx[" + std::to_string(d) + "][" + std::to_string(s) + "]", 0, INT32_MAX));
      if (d == depth) continue;  // terminals: children are null
      level.rules.resize(n);
      for (size_t s = 0; s < n; s++) {
        const std::string symbol = at + ", symbol " + std::to_string(level.ids[s]);
        const nlohmann::json& children = json_field(symbols[s], "children", "all[" + std::to_string(d) + "][" + std::to_string(s) + "]");
        CANONLAB_CHECK(children.is_array() && !children.empty() && children.size() <= size_t(kMaxRulesPerSymbol),
                       symbol + ": a non-terminal needs a list of 1 to " + std::to_string(kMaxRulesPerSymbol) + " rules");
        for (size_t r = 0; r < children.size(); r++) {
          const nlohmann::json& rule_json = children[r];
          const std::string rule_at = symbol + ", rule " + std::to_string(r);
          CANONLAB_CHECK(rule_json.is_array() && !rule_json.empty() && rule_json.size() <= size_t(kMaxRuleLength),
                         rule_at + ": a rule is a list of 1 to " + std::to_string(kMaxRuleLength) + " symbol indices");
          rule_symbols += int64_t(rule_json.size());
          CANONLAB_CHECK(rule_symbols <= kMaxGrammarRuleSymbols,
                         "the rules hold more than " + std::to_string(kMaxGrammarRuleSymbols) +
                             " symbols in all; allowed: at most that many");
          GrammarRule rule;
          for (const nlohmann::json& c : rule_json)
            rule.push_back(json_int(c, rule_at + ": rule index", 0, sizes[size_t(d) + 1] - 1));
          level.rules[s].push_back(std::move(rule));
        }
      }
    }
    return g;
  } catch (const Error& e) {
    throw Error(where + ": " + e.what() + " (expected keys depth, sizes, idx, all as in the paper's cfg3f.json)");
  }
}

Grammar load_grammar_json(const std::string& path, const std::string& key) {
  std::string text;
  try {
    text = read_text_file(path, kMaxGrammarFileBytes, "grammar file");
  } catch (const Error& e) {
    throw Error(key + ": " + e.what() + " (a relative path is read from the working directory, else from the "
                "canonlab checkout); allowed: a grammar JSON such as data/physicslm4/lano-cfg/cfg3f.json, or 'generate'");
  }
  return parse_grammar_json(text, key + ": '" + path + "'");
}

std::string grammar_to_json(const Grammar& g) {
  const int depth = g.depth();
  int deg_min = INT32_MAX, deg_max = 0, len_min = INT32_MAX, len_max = 0, count = 0;
  bool distinct = true;
  for (const GrammarLevel& level : g.levels) {
    for (int id : level.ids) count = std::max(count, id);
    for (const auto& rules : level.rules) {
      deg_min = std::min(deg_min, int(rules.size()));
      deg_max = std::max(deg_max, int(rules.size()));
      for (const GrammarRule& r : rules) {
        len_min = std::min(len_min, int(r.size()));
        len_max = std::max(len_max, int(r.size()));
      }
      distinct = distinct && std::set<GrammarRule>(rules.begin(), rules.end()).size() == rules.size();
    }
  }
  nlohmann::ordered_json j;
  j["depth"] = depth;
  j["num_sym"] = g.num_terminals();
  j["vocab_size"] = g.num_terminals();
  j["deg_min"] = deg_min;
  j["deg_max"] = deg_max;
  j["len_min"] = len_min;
  j["len_max"] = len_max;
  j["disallow_duplicate_seq"] = distinct;
  // The paper reserves the three ids after the terminals for its own special tokens.
  j["eos_token"] = g.num_terminals() + 1;
  j["mask_token"] = g.num_terminals() + 2;
  j["sep_token"] = g.num_terminals() + 3;
  nlohmann::ordered_json sizes = nlohmann::ordered_json::array(), idx = nlohmann::ordered_json::array(),
                         all = nlohmann::ordered_json::array();
  for (int d = 0; d <= depth; d++) {
    const GrammarLevel& level = g.levels[size_t(d)];
    sizes.push_back(level.ids.size());
    idx.push_back(level.ids);
    nlohmann::ordered_json symbols = nlohmann::ordered_json::array();
    for (size_t s = 0; s < level.ids.size(); s++) {
      nlohmann::ordered_json sym;
      sym["depth"] = d;
      sym["id"] = level.ids[s];
      sym["name"] = symbol_name(level.ids[s]);
      sym["children"] = d < depth ? nlohmann::ordered_json(level.rules[s]) : nlohmann::ordered_json(nullptr);
      symbols.push_back(std::move(sym));
    }
    all.push_back(std::move(symbols));
  }
  j["sizes"] = sizes;
  j["idx"] = idx;
  j["all"] = all;
  j["count"] = count;
  return j.dump();
}

void save_grammar_json(const Grammar& grammar, const std::string& path) {
  std::ofstream out(path);
  CANONLAB_CHECK(out.good(), "cannot write grammar to '" + path + "'");
  out << grammar_to_json(grammar) << "\n";
  CANONLAB_CHECK(out.good(), "cannot write grammar to '" + path + "'");
}

GrammarSize grammar_size(const Grammar& g) {
  GrammarSize size;
  for (const GrammarLevel& level : g.levels) {
    size.symbols += int64_t(level.ids.size());
    for (const auto& rules : level.rules) {
      size.rules += int64_t(rules.size());
      for (const GrammarRule& r : rules) {
        size.rule_symbols += int64_t(r.size());
        size.parser_symbols += std::max<int64_t>(0, int64_t(r.size()) - 2);  // at most one intermediate per extra symbol
      }
    }
  }
  size.parser_symbols += size.symbols;
  return size;
}

GrammarSize generated_grammar_bound(const LanoConfig& cfg) {
  GrammarSize size;
  const int64_t nonterminals = 1 + int64_t(cfg.depth - 1) * cfg.num_sym;
  size.symbols = nonterminals + cfg.num_sym;
  size.rules = nonterminals * cfg.deg_max;
  size.rule_symbols = size.rules * cfg.len_max;
  size.parser_symbols = size.symbols + size.rules * std::max(0, cfg.len_max - 2);
  return size;
}

void check_generated_grammar(const LanoConfig& cfg) {
  const int n = cfg.num_sym;
  CANONLAB_CHECK(cfg.depth >= 1, "task.lano.depth: " + std::to_string(cfg.depth) + "; allowed: >= 1");
  CANONLAB_CHECK(n >= 1, "task.lano.num_sym: " + std::to_string(n) + "; allowed: >= 1");
  CANONLAB_CHECK(cfg.deg_min >= 1 && cfg.deg_min <= cfg.deg_max,
                 "task.lano.deg_min..deg_max: " + std::to_string(cfg.deg_min) + ".." + std::to_string(cfg.deg_max) +
                     "; allowed: 1 <= deg_min <= deg_max");
  CANONLAB_CHECK(cfg.len_min >= 1 && cfg.len_min <= cfg.len_max,
                 "task.lano.len_min..len_max: " + std::to_string(cfg.len_min) + ".." + std::to_string(cfg.len_max) +
                     "; allowed: 1 <= len_min <= len_max");
  // Checked from the parameters, before anything is built: generating, sampling and parsing all scale with it.
  const GrammarSize bound = generated_grammar_bound(cfg);
  CANONLAB_CHECK(bound.rule_symbols <= kMaxGrammarRuleSymbols,
                 "task.lano.depth, task.lano.num_sym, task.lano.deg_max, task.lano.len_max: a generated grammar of depth " +
                     std::to_string(cfg.depth) + ", num_sym " + std::to_string(n) + ", deg_max " +
                     std::to_string(cfg.deg_max) + " and len_max " + std::to_string(cfg.len_max) + " may hold (1 + (depth - 1) * "
                     "num_sym) * deg_max * len_max = " + std::to_string(bound.rule_symbols) + " rule symbols; allowed: at "
                     "most " + std::to_string(kMaxGrammarRuleSymbols) + ", the limit of a grammar file (cfg3f: 192); "
                     "lower some of those keys");
  // Rules are distinct, so a symbol can have at most sum_L n^L of them.
  int64_t distinct_rules = 0, power = 1;
  for (int L = 1; L <= cfg.len_max && distinct_rules < cfg.deg_max; L++) {
    power = std::min<int64_t>(power * n, INT32_MAX);
    if (L >= cfg.len_min) distinct_rules += power;
  }
  CANONLAB_CHECK(distinct_rules >= cfg.deg_max,
                 "task.lano.deg_max: " + std::to_string(cfg.deg_max) + " distinct rules do not exist with num_sym " +
                     std::to_string(n) + " and rule lengths " + std::to_string(cfg.len_min) + ".." +
                     std::to_string(cfg.len_max) + "; allowed: <= " + std::to_string(distinct_rules));
}

double grammar_bytes(const GrammarSize& size) {
  // Per symbol its id and rule list; per rule a std::vector and its heap block; per parser production 3 ints, and
  // while the parser is built a map node per intermediate (a conservative 64 bytes each).
  const double intermediates = double(size.parser_symbols - size.symbols);
  return 28.0 * double(size.symbols) + 48.0 * double(size.rules) + 4.0 * double(size.rule_symbols) +
         12.0 * (double(size.rules) + intermediates) + 64.0 * intermediates;
}

double parse_table_bytes(const GrammarSize& size, int length) {
  const double positions = double(length) + 1;  // ends 0..n
  return double(size.parser_symbols) * positions * std::ceil(positions / 64) * 8;
}

namespace {
std::atomic<uint64_t> generated_grammars{0};
}  // namespace

uint64_t generated_grammar_count() { return generated_grammars.load(); }

Grammar generate_grammar(const LanoConfig& cfg) {
  check_generated_grammar(cfg);
  generated_grammars++;
  const int n = cfg.num_sym;
  CounterRng rng(cfg.grammar_seed, 0x6c616e6fULL);  // "lano"
  Grammar g;
  g.levels.resize(size_t(cfg.depth) + 1);
  for (int d = 0; d <= cfg.depth; d++) {
    const int size = d == 0 ? 1 : n;
    g.levels[size_t(d)].ids.resize(size_t(size));
    if (d == cfg.depth) break;
    auto& rules = g.levels[size_t(d)].rules;
    rules.resize(size_t(size));
    for (auto& symbol_rules : rules) {
      const int degree = cfg.deg_min + int(rng.below(uint64_t(cfg.deg_max - cfg.deg_min + 1)));
      // Duplicates are looked up in a set: a linear search made a symbol's rules quadratic in deg_max (4096 rules
      // of 4096 symbols took minutes). The draws, and so the grammar, are the same either way.
      std::set<GrammarRule> seen;
      GrammarRule rule;
      while (int(symbol_rules.size()) < degree) {
        const int len = cfg.len_min + int(rng.below(uint64_t(cfg.len_max - cfg.len_min + 1)));
        rule.resize(static_cast<size_t>(len));
        for (int& c : rule) c = int(rng.below(uint64_t(n)));
        if (seen.insert(rule).second) symbol_rules.push_back(rule);
      }
    }
  }
  // Ids bottom-up as in the paper's files: terminals 1..n, three reserved ids, then level D-1 upwards.
  int next_id = 1;
  for (int d = cfg.depth; d >= 0; d--) {
    for (int& id : g.levels[size_t(d)].ids) id = next_id++;
    if (d == cfg.depth) next_id += 3;
  }
  return g;
}

bool sample_sentence(const Grammar& g, CounterRng& rng, std::vector<int>& out, size_t max_length) {
  // Depth-first, leftmost symbol first, with an explicit stack: the rule draws happen in the same order as a
  // recursive expansion, terminals come out in sentence order, and the expansion stops as soon as the sentence
  // outgrows max_length, so a grammar whose sentences are astronomically long cannot hang or exhaust memory.
  const int depth = g.depth();
  const size_t start = out.size();
  std::vector<std::pair<int, int>> pending = {{0, 0}};  // (level, symbol), next to expand at the back
  while (!pending.empty()) {
    const auto [level, symbol] = pending.back();
    pending.pop_back();
    if (level == depth) {
      if (out.size() - start == max_length) return false;
      out.push_back(symbol);
      continue;
    }
    const auto& rules = g.levels[size_t(level)].rules[size_t(symbol)];
    const GrammarRule& rule = rules[size_t(rng.below(uint64_t(rules.size())))];
    for (auto child = rule.rbegin(); child != rule.rend(); ++child) pending.emplace_back(level + 1, *child);
  }
  return true;
}

SentenceLengths sentence_lengths(const Grammar& g) {
  const int depth = g.depth();
  SentenceLengths L;
  L.min.resize(size_t(depth) + 1);
  L.max.resize(size_t(depth) + 1);
  L.min[size_t(depth)].assign(size_t(g.num_terminals()), 1);
  L.max[size_t(depth)].assign(size_t(g.num_terminals()), 1);
  for (int d = depth - 1; d >= 0; d--) {
    const auto& rules = g.levels[size_t(d)].rules;
    for (const auto& symbol_rules : rules) {
      int lo = kLengthCap, hi = 0;
      for (const GrammarRule& r : symbol_rules) {
        int rlo = 0, rhi = 0;
        for (int c : r) {
          rlo = capped_sum(rlo, L.min[size_t(d) + 1][size_t(c)]);
          rhi = capped_sum(rhi, L.max[size_t(d) + 1][size_t(c)]);
        }
        lo = std::min(lo, rlo);
        hi = std::max(hi, rhi);
      }
      L.min[size_t(d)].push_back(lo);
      L.max[size_t(d)].push_back(hi);
    }
  }
  return L;
}

CfgParser::CfgParser(const Grammar& g) {
  const int depth = g.depth();
  // Parser symbols: every grammar symbol level by level (root first, terminals last), then intermediates.
  std::vector<int> offset(size_t(depth) + 2, 0);
  for (int d = 0; d <= depth; d++) offset[size_t(d) + 1] = offset[size_t(d)] + int(g.levels[size_t(d)].ids.size());
  num_symbols_ = offset[size_t(depth) + 1];
  root_ = 0;
  terminal_offset_ = offset[size_t(depth)];
  num_terminals_ = g.num_terminals();
  // Deeper levels first: at a start i, a production reads its left child at the same start, which must be done.
  for (int d = depth - 1; d >= 0; d--) {
    std::map<std::pair<int, int>, int> intermediate;  // (left, right) -> parser symbol deriving "left right"
    auto pair_symbol = [&](int left, int right) {
      auto [it, added] = intermediate.try_emplace({left, right}, num_symbols_);
      if (added) productions_.push_back({num_symbols_++, left, right});
      return it->second;
    };
    const auto& rules = g.levels[size_t(d)].rules;
    for (size_t s = 0; s < rules.size(); s++) {
      const int parent = offset[size_t(d)] + int(s);
      for (const GrammarRule& rule : rules[s]) {
        std::vector<int> kids;
        for (int c : rule) kids.push_back(offset[size_t(d) + 1] + c);
        // Right-fold A -> B C D E into A -> B X1, X1 -> C X2, X2 -> D E. An intermediate is only read as a right
        // child, i.e. at a later start, so its place in the list does not matter.
        while (kids.size() > 2) {
          const int x = pair_symbol(kids[kids.size() - 2], kids.back());
          kids.pop_back();
          kids.back() = x;
        }
        productions_.push_back({parent, kids[0], kids.size() == 2 ? kids[1] : -1});
      }
    }
  }
}

bool CfgParser::accepts(const std::vector<int>& sentence) const {
  const int n = int(sentence.size());
  if (n == 0) return false;
  for (int t : sentence)
    if (t < 0 || t >= num_terminals_) return false;
  const int W = (n + 1 + 63) / 64;  // words of a bitset over positions 0..n
  const size_t N1 = size_t(n) + 1;
  // ends[(s, i)] bit k: symbol s derives sentence[i, k).
  std::vector<uint64_t> ends(size_t(num_symbols_) * N1 * size_t(W), 0);
  auto ends_row = [&](int s, int i) { return ends.data() + (size_t(s) * N1 + size_t(i)) * size_t(W); };
  // Starts from right to left: when start i is processed, every span starting after i is complete.
  for (int i = n - 1; i >= 0; i--) {
    ends_row(terminal_offset_ + sentence[size_t(i)], i)[(i + 1) >> 6] |= uint64_t(1) << ((i + 1) & 63);
    for (const Production& p : productions_) {
      uint64_t* dst = ends_row(p.parent, i);
      const uint64_t* left = ends_row(p.left, i);
      if (p.right < 0) {
        for (int w = 0; w < W; w++) dst[w] |= left[w];
        continue;
      }
      // A -> B C on [i, j): B on [i, k) and C on [k, j), so ends(A, i) |= ends(C, k) for every k in ends(B, i).
      for (int w = (i + 1) >> 6; w < W; w++) {
        for (uint64_t bits = left[w]; bits != 0; bits &= bits - 1) {
          const int k = w * 64 + std::countr_zero(bits);
          if (k >= n) break;
          const uint64_t* right = ends_row(p.right, k);
          for (int v = (k + 1) >> 6; v < W; v++) dst[v] |= right[v];
        }
      }
    }
  }
  return (ends_row(root_, 0)[n >> 6] >> (n & 63)) & 1;
}

}  // namespace canonlab
