#pragma once
// Capo (knowledge capacity): bioS biographies of N fictitious people; every exposure of a person draws fresh
// sentence templates and a fresh sentence order, so only the facts repeat.
//   <bos> Curtis Ryder Mcbride was born on March 9 , 1987 . He majored in Nursing . He grew up in Tulsa , OK . ...
// Six sentences, one per attribute: birth date, birth city, university, major, employer, work city (= the
// employer's headquarters). The first sentence names the person in full, later ones use the pronoun.
// Person p's name, gender and attributes are a pure function of (data seed, p); names are unique (a keyed
// bijection of p onto first x middle x last).
// Tokens: a word-level vocabulary of every template word and list word, with "," and "." as separate tokens,
// ids in sorted order; then <bos> (also the padding token, with loss 0).
// Windows: bios_per_window() = P biographies placed left-aligned (P = how many of the longest possible
// biography fit the context), then padding. Training instance j = (stream * B + row) * P + slot shows person
// perm_e(j mod N) in epoch e = j / N, so after e * N instances every person has been seen exactly e times.
// Metric (Part 3.3 bit-complexity estimate): per-attribute summed loss in bits over each evaluated person's
// value tokens and the word that ends the value, capo_bits = N * sum_a max(0, log2|D_a| - loss_a) (docs/tasks/capo.md).
#include <array>
#include <unordered_map>

#include "data/packing.h"

namespace canonlab {

// Batch::score_tag of Capo's scored tokens: which piece of knowledge the token belongs to.
enum CapoTag : int {
  kCapoName = 1,   // the full name in the first sentence (which people exist)
  kCapoGender,     // the first gendered word of a biography (He / She / his / her)
  kCapoBirthDate,  // the six attribute values (with the word that ends each), in the order of the sentences
  kCapoBirthCity,
  kCapoUniversity,
  kCapoMajor,
  kCapoEmployer,
  kCapoWorkCity,   // implied by the employer: scored and reported, never counted in capo_bits
  kCapoTagEnd
};
inline constexpr int kCapoAttributes = 6;  // sentences: tags kCapoBirthDate .. kCapoWorkCity

// The lists a person's values index into.
enum class CapoList : int { kFirst, kMiddle, kLast, kCity, kUniversity, kMajor, kCompany, kHeadquarters, kMonth, kDay, kYear, kEnd };

// One person: indices into the lists. The (first, middle, last) triple is unique across the population.
struct CapoPerson {
  int first = 0, middle = 0, last = 0;
  int gender = 0;                    // 0: he / his, 1: she / her
  int month = 0, day = 0, year = 0;  // 0..11, 0..27 (day 1..28), 0..199 (year 1900..2099)
  int birth_city = 0, university = 0, major = 0, employer = 0;  // work city = headquarters of the employer
};

// One biography as generated, with the choices behind it (for tests and `canonlab data show`).
struct CapoBio {
  int64_t person = 0;
  std::array<int, kCapoAttributes> order{};      // order[s] = attribute of sentence s (0 = birth date .. 5 = work city)
  std::array<int, kCapoAttributes> templates{};  // template used for attribute a
  Instance tokens;                               // <bos> and the six sentences
};

// A keyed bijection of [0, n) with O(1) state: a balanced Feistel network on the smallest even number of bits
// that covers n, cycle-walked until the value falls back inside [0, n).
class KeyedPermutation {
 public:
  KeyedPermutation(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t x) const;

 private:
  uint64_t encrypt(uint64_t x) const;
  uint64_t n_, key_, mask_;
  int half_bits_;
};

class CapoTask final : public Task {
 public:
  explicit CapoTask(const TaskConfig& cfg);
  std::string name() const override { return "capo"; }
  int vocab_size() const override { return bos() + 1; }
  int seq_len() const override { return context_; }
  std::string token_text(int token) const override;
  std::vector<std::string> metric_names() const override;
  std::vector<std::string> eval_suites() const override { return {"people"}; }
  void sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const override;
  // Suite 0: the biographies of the first eval_people people of a seeded order, each once; index i of held-out
  // stream kHeldOutStream + i continues where batch i - 1 stopped, so eval batches cover people in sequence.
  void sample_eval(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index, int suite) const override;
  // Adds, per tag, the summed loss in bits of each scored span (one person's value) as one sample.
  void score(const Batch& batch, const float* logits, int suite, MetricSums& sums) const override;
  // capo_bits from the averaged per-person losses in bits (capo_loss_<tag>).
  void finish_metrics(std::map<std::string, double>& metrics) const override;

  // Steps of `batch_size` windows that show every person `exposures` times (the last may show some an extra time).
  int64_t steps_for_exposures(int batch_size) const;
  // Eval batches of `batch_size` windows that cover all eval_people people.
  int eval_batches_for(int batch_size) const;
  int bios_per_window() const { return bios_per_window_; }
  int longest_bio() const { return longest_bio_; }
  int64_t people() const { return people_; }
  int eval_people() const { return eval_people_; }

  CapoPerson person(uint64_t seed, int64_t p) const;
  CapoBio bio(uint64_t seed, int64_t p, CounterRng& rng) const;
  int64_t training_person(uint64_t seed, uint64_t instance) const;  // person of training instance j
  Instance training_instance(uint64_t seed, uint64_t instance) const;  // its biography, as sample() packs it
  int64_t eval_person(uint64_t seed, int64_t k) const;              // k-th person of the evaluation order
  // The name, the subject pronoun, or an attribute value (scored spans add the word that ends a value).
  std::vector<int> value_tokens(int tag, const CapoPerson& person) const;
  // |D| of a tag: distinct names, 2 genders, 12 * 28 * 200 dates, then the list sizes (work city: distinct HQs).
  int64_t domain_size(int tag) const;
  // Bits a model can hold about one person for this tag: log2|D| (names: log2(|D| - N)); 0 for the work city.
  double capacity_bits(int tag) const;
  const std::vector<std::vector<int>>& list_tokens(CapoList list) const { return lists_[size_t(list)]; }
  int templates_of(int attribute) const { return int(templates_[size_t(attribute)].size()); }
  static std::string tag_name(int tag);  // "name", "gender", "birth_date", ...

  int bos() const { return int(words_.size()); }
  std::vector<int> encode(const std::string& text) const;  // words split on spaces, trailing , and . split off
  std::string decode(const std::vector<int>& tokens) const;

 private:
  std::vector<int> tokenize_known(const std::string& text) const;
  // Fills a window with biography k = first_slot .. first_slot + P - 1 from make(k) (empty = none), then padding.
  template <class MakeBio>
  void fill_window(Batch& batch, int row, MakeBio&& make) const;

  int64_t people_;
  int exposures_, eval_people_, context_;
  bool answers_only_;
  std::vector<std::string> words_;  // sorted; id = index
  std::unordered_map<std::string, int> word_ids_;
  std::array<std::vector<std::vector<int>>, size_t(CapoList::kEnd)> lists_;  // token ids of every list entry
  std::vector<int> headquarters_of_;                                        // company -> index in kHeadquarters
  // Per attribute: templates as token ids with the slot markers below.
  std::array<std::vector<std::vector<int>>, kCapoAttributes> templates_;
  std::array<int, 2> subject_{}, possessive_{};  // He / She, his / her
  int longest_bio_ = 0, bios_per_window_ = 0;
};

}  // namespace canonlab
