#pragma once
// Levelled context-free grammars in the paper's JSON format (Physics of LMs Part 1, Lano-cfg/data_cfg.py), a
// sentence sampler, and a membership parser.
//
// A grammar of depth D has D + 1 levels: level 0 holds the root, levels 1..D-1 the other non-terminals, level D the
// terminals. Every rule of a level-d symbol is a list of level-(d+1) symbols, so derivations step down one level
// per rule and every leaf sits at depth D. cfg3f (D = 6, 3 symbols per level, 3..4 rules of 2..3 symbols):
//   root 22 -> 20 21 | 20 19 21 | 21 19 19 | 20 20        (level 1 = {19, 20, 21}; terminals 1, 2, 3)
//
// JSON keys read: depth, sizes (symbols per level), idx (JSON ids per level; idx[D] are the terminals) and all:
// all[d][s].children = list of rules, each a list of indices into level d + 1 (not ids); null for terminals.
// In cfg3f.json the root is {"id": 22, "children": [[1, 2], [1, 0, 2], [2, 0, 0], [1, 1]]} with idx[1] = [19,
// 20, 21], which is the rule list above.
#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "engine/rng.h"

namespace canonlab {

using GrammarRule = std::vector<int>;  // indices of symbols of the next level

struct GrammarLevel {
  std::vector<int> ids;                          // the JSON id of each symbol
  std::vector<std::vector<GrammarRule>> rules;   // rules[s]: the rules of symbol s; empty at the terminal level
  bool operator==(const GrammarLevel&) const = default;
};

struct Grammar {
  std::vector<GrammarLevel> levels;  // levels[0] = {root}, levels.back() = terminals

  int depth() const { return int(levels.size()) - 1; }
  int num_terminals() const { return int(levels.back().ids.size()); }
  bool operator==(const Grammar&) const = default;
};

// Reads a grammar JSON. Errors name `key` (task.lano.grammar) and the path.
Grammar load_grammar_json(const std::string& path, const std::string& key = "task.lano.grammar");
// Parses grammar JSON text; `where` prefixes error messages.
Grammar parse_grammar_json(const std::string& text, const std::string& where);
// The same JSON format (ids, names "AA".., sizes, idx, all, depth, num_sym, vocab_size, rule-shape keys).
std::string grammar_to_json(const Grammar& grammar);
void save_grammar_json(const Grammar& grammar, const std::string& path);

// Symbols summed over every rule of a grammar, read from a file or generated: far above the paper's grammars
// (cfg3f: 192), and small enough that a grammar and its parser are built in seconds with tens of MB (measured at
// the limit on 2 busy cores, `canonlab data show` included: 1.7 to 4.7 s, 48 MB; the per-key maxima alone allowed
// 268M rule symbols: 5 GB and minutes).
inline constexpr int64_t kMaxGrammarRuleSymbols = int64_t(1) << 20;

// How big a grammar is, as the parser sees it: symbols (terminals included), rules, symbols summed over the rules,
// and the parser's symbols (the grammar's plus the intermediates that binarise rules of 3 or more symbols).
struct GrammarSize {
  int64_t symbols = 0, rules = 0, rule_symbols = 0, parser_symbols = 0;
};
GrammarSize grammar_size(const Grammar& grammar);
// The most a generated grammar of this configuration can hold, from its parameters alone (nothing is built):
// 1 + (depth - 1) * num_sym non-terminals with deg_max rules of len_max symbols each.
GrammarSize generated_grammar_bound(const LanoConfig& cfg);
// Refuses, before anything is built, a generated grammar that may exceed kMaxGrammarRuleSymbols or that cannot
// have deg_min distinct rules per symbol; errors name the task.lano keys.
void check_generated_grammar(const LanoConfig& cfg);
// Resident bytes of a grammar of this size with its parser's productions (and, while the parser is built, its
// map of intermediates).
double grammar_bytes(const GrammarSize& size);
// Bytes of the parser's table for a sentence of `length` terminals (CfgParser::accepts).
double parse_table_bytes(const GrammarSize& size, int length);

// A random grammar of the configured shape: depth rule levels, root level of 1 symbol, num_sym symbols on every
// other level (terminals included), deg_min..deg_max distinct rules per non-terminal, len_min..len_max symbols per
// rule, all uniform. Ids are numbered bottom-up like the paper's files (terminals 1..num_sym, root last).
// check_generated_grammar runs first.
Grammar generate_grammar(const LanoConfig& cfg);
// Grammars generate_grammar has built in this process (tests check that config resolution and --dry-run build none).
uint64_t generated_grammar_count();

// Appends one sentence (terminal indices 0..num_terminals-1): from the root, every symbol expands by a uniformly
// chosen rule. Stops once max_length terminals are appended and another is due: it then returns false and `out`
// holds the sentence's first max_length terminals (exactly the prefix a full expansion would give).
inline constexpr size_t kMaxSentenceTokens = size_t(1) << 20;
bool sample_sentence(const Grammar& grammar, CounterRng& rng, std::vector<int>& out,
                     size_t max_length = kMaxSentenceTokens);

// Shortest and longest sentence each symbol derives, per level (longest saturates at INT32_MAX / 4).
struct SentenceLengths {
  std::vector<std::vector<int>> min, max;
};
SentenceLengths sentence_lengths(const Grammar& grammar);

// CYK membership test. Rules of length 3 are binarised through shared intermediate symbols (A -> B C D becomes
// A -> B X, X -> C D); rules of length 1 are unit productions. The table holds, for every symbol s and start i, a
// bitset over ends k: s derives sentence[i, k). Starts are filled right to left, and at one start the productions
// run deepest level first (a level-d symbol only points at level d + 1), so a binary production A -> B C sets
// ends(A, i) |= ends(C, k) for every k in ends(B, i), reading only finished rows. O(n^2 m) row ORs of n / 64 words
// in the worst case (m productions); a 500-token cfg3f sentence takes about a millisecond.
class CfgParser {
 public:
  explicit CfgParser(const Grammar& grammar);
  int num_symbols() const { return num_symbols_; }  // the grammar's symbols and the intermediates
  // True iff `sentence` (terminal indices) derives from the root. Empty and out-of-range tokens are rejected.
  bool accepts(const std::vector<int>& sentence) const;

 private:
  struct Production {
    int parent, left, right;  // right = -1: unit production parent -> left
  };
  int num_symbols_ = 0, root_ = 0, terminal_offset_ = 0, num_terminals_ = 0;
  std::vector<Production> productions_;  // in evaluation order: deeper levels first
};

}  // namespace canonlab
