// Fuzz target: grammar JSON text -> canonlab::parse_grammar_json (src/data/cfg_grammar.h), as task.lano.grammar
// files are read; a grammar that parses is then used as the Lano task uses it: CfgParser is built and a few
// sentences are sampled with sample_sentence.
//
// Contract: canonlab::Error is the only way to reject an input. A grammar that parses must survive
// grammar_to_json -> parse_grammar_json unchanged. A sampled sentence that sample_sentence reports complete has a
// length within sentence_lengths' bounds for the root, and the CYK parser accepts it (checked up to
// kMaxParsedLength tokens, to bound the O(n^2) parse); one it reports cut holds exactly kMaxSampledLength tokens
// of a grammar whose longest sentence is longer. And what the format says is a whole number (depth, sizes, ids,
// rule indices) was one in the accepted text: 1.9 must not pass as 1.
#include <nlohmann/json.hpp>

#include "data/cfg_grammar.h"
#include "engine/error.h"
#include "fuzz_support.h"

namespace {

constexpr int kSentences = 4;
constexpr size_t kMaxSampledLength = size_t(1) << 16;  // below the library's default cap, to keep inputs fast
constexpr size_t kMaxParsedLength = 256;

// The input parsed as `grammar`, so its structure is known; every number that became an int must be written as
// an integer.
bool numbers_are_integers(const std::string& text, const canonlab::Grammar& grammar) {
  const nlohmann::json j = nlohmann::json::parse(text);
  bool ok = j.at("depth").is_number_integer();
  for (size_t d = 0; d < grammar.levels.size(); d++) {
    ok = ok && j.at("sizes").at(d).is_number_integer();
    for (size_t s = 0; s < grammar.levels[d].ids.size(); s++) {
      ok = ok && j.at("idx").at(d).at(s).is_number_integer();
      if (d + 1 == grammar.levels.size()) continue;
      for (const nlohmann::json& rule : j.at("all").at(d).at(s).at("children"))
        for (const nlohmann::json& index : rule) ok = ok && index.is_number_integer();
    }
  }
  return ok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace canonlab;
  const std::string text = fuzz::as_text(data, size);
  Grammar grammar;
  try {
    grammar = parse_grammar_json(text, "fuzz grammar");
  } catch (const Error&) {
    return 0;
  }
  fuzz::expect(numbers_are_integers(text, grammar), "a grammar with a non-integer depth, size, id or rule index parsed");
  try {
    fuzz::expect(parse_grammar_json(grammar_to_json(grammar), "written grammar") == grammar,
                 "grammar_to_json of a parsed grammar parses to a different grammar");
  } catch (const Error& e) {
    fuzz::fail(std::string("grammar_to_json of a parsed grammar does not parse: ") + e.what());
  }
  const CfgParser parser(grammar);
  const SentenceLengths lengths = sentence_lengths(grammar);
  const int shortest = lengths.min[0][0], longest = lengths.max[0][0];
  fuzz::expect(!parser.accepts({}), "the parser accepts the empty sentence");
  for (int i = 0; i < kSentences; i++) {
    CounterRng rng(/*seed=*/1, /*stream=*/uint64_t(i));
    std::vector<int> sentence;
    const bool complete = sample_sentence(grammar, rng, sentence, kMaxSampledLength);
    const int n = int(sentence.size());
    if (!complete) {
      fuzz::expect(sentence.size() == kMaxSampledLength && longest > n,
                   "sample_sentence cut a sentence at " + std::to_string(n) + " tokens (asked for at most " +
                       std::to_string(kMaxSampledLength) + "); sentence_lengths says at most " + std::to_string(longest));
      continue;
    }
    fuzz::expect(shortest <= n && n <= longest, "a sampled sentence has " + std::to_string(n) +
                                                     " tokens; sentence_lengths says " + std::to_string(shortest) +
                                                     ".." + std::to_string(longest));
    if (sentence.size() <= kMaxParsedLength)
      fuzz::expect(parser.accepts(sentence), "the parser rejects a sentence sampled from the grammar");
  }
  return 0;
}
