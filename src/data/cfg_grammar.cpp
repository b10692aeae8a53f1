#include "data/cfg_grammar.h"

#include <algorithm>
#include <bit>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/error.h"

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

Grammar parse_grammar_json(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": not valid JSON (" + e.what() + ")");
  }
  Grammar g;
  try {
    const int depth = j.at("depth").get<int>();
    const auto sizes = j.at("sizes").get<std::vector<int>>();
    const auto idx = j.at("idx").get<std::vector<std::vector<int>>>();
    const nlohmann::json& all = j.at("all");
    CANONLAB_CHECK(depth >= 1, where + ": depth " + std::to_string(depth) + "; allowed: >= 1");
    CANONLAB_CHECK(int(sizes.size()) == depth + 1 && int(idx.size()) == depth + 1 && int(all.size()) == depth + 1,
                   where + ": sizes, idx and all must each have depth + 1 = " + std::to_string(depth + 1) + " levels");
    CANONLAB_CHECK(sizes[0] == 1, where + ": the root level (sizes[0]) must hold exactly 1 symbol, not " +
                                      std::to_string(sizes[0]));
    g.levels.resize(size_t(depth) + 1);
    for (int d = 0; d <= depth; d++) {
      const std::string at = where + ": level " + std::to_string(d);
      CANONLAB_CHECK(sizes[size_t(d)] >= 1 && int(idx[size_t(d)].size()) == sizes[size_t(d)] &&
                         int(all[size_t(d)].size()) == sizes[size_t(d)],
                     at + ": sizes, idx and all disagree on the number of symbols");
      GrammarLevel& level = g.levels[size_t(d)];
      level.ids = idx[size_t(d)];
      if (d == depth) continue;  // terminals: children are null
      level.rules.resize(level.ids.size());
      for (size_t s = 0; s < level.ids.size(); s++) {
        const nlohmann::json& children = all[size_t(d)][s].at("children");
        CANONLAB_CHECK(children.is_array() && !children.empty(),
                       at + ", symbol " + std::to_string(level.ids[s]) + ": a non-terminal needs a non-empty rule list");
        for (const nlohmann::json& rule_json : children) {
          GrammarRule rule = rule_json.get<GrammarRule>();
          CANONLAB_CHECK(!rule.empty(), at + ", symbol " + std::to_string(level.ids[s]) + ": empty rule");
          for (int c : rule)
            CANONLAB_CHECK(c >= 0 && c < sizes[size_t(d) + 1],
                           at + ", symbol " + std::to_string(level.ids[s]) + ": rule index " + std::to_string(c) +
                               " outside the next level's " + std::to_string(sizes[size_t(d) + 1]) + " symbols");
          level.rules[s].push_back(std::move(rule));
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": malformed grammar (" + e.what() + "); expected keys depth, sizes, idx, all");
  }
  return g;
}

Grammar load_grammar_json(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  CANONLAB_CHECK(in.good(), key + ": cannot read '" + path +
                                "' (paths are relative to the working directory); allowed: a grammar JSON such as "
                                "data/physicslm4/lano-cfg/cfg3f.json, or 'generate'");
  std::stringstream text;
  text << in.rdbuf();
  return parse_grammar_json(text.str(), key + ": '" + path + "'");
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

Grammar generate_grammar(const LanoConfig& cfg) {
  const int n = cfg.num_sym;
  CANONLAB_CHECK(cfg.depth >= 1, "task.lano.depth: " + std::to_string(cfg.depth) + "; allowed: >= 1");
  CANONLAB_CHECK(n >= 1, "task.lano.num_sym: " + std::to_string(n) + "; allowed: >= 1");
  CANONLAB_CHECK(cfg.deg_min >= 1 && cfg.deg_min <= cfg.deg_max,
                 "task.lano.deg_min..deg_max: " + std::to_string(cfg.deg_min) + ".." + std::to_string(cfg.deg_max) +
                     "; allowed: 1 <= deg_min <= deg_max");
  CANONLAB_CHECK(cfg.len_min >= 1 && cfg.len_min <= cfg.len_max,
                 "task.lano.len_min..len_max: " + std::to_string(cfg.len_min) + ".." + std::to_string(cfg.len_max) +
                     "; allowed: 1 <= len_min <= len_max");
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
      while (int(symbol_rules.size()) < degree) {
        const int len = cfg.len_min + int(rng.below(uint64_t(cfg.len_max - cfg.len_min + 1)));
        GrammarRule rule(static_cast<size_t>(len));
        for (int& c : rule) c = int(rng.below(uint64_t(n)));
        if (std::find(symbol_rules.begin(), symbol_rules.end(), rule) == symbol_rules.end())
          symbol_rules.push_back(std::move(rule));
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

void sample_sentence(const Grammar& g, CounterRng& rng, std::vector<int>& out) {
  const int depth = g.depth();
  auto expand = [&](auto&& self, int level, int symbol) -> void {
    if (level == depth) {
      out.push_back(symbol);
      return;
    }
    const auto& rules = g.levels[size_t(level)].rules[size_t(symbol)];
    const GrammarRule& rule = rules[size_t(rng.below(uint64_t(rules.size())))];
    for (int child : rule) self(self, level + 1, child);
  };
  expand(expand, 0, 0);
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
