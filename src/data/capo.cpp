#include "data/capo.h"

#include "data/data_path.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>
#include <set>

#include "engine/error.h"
#include "io/atomic_file.h"

namespace canonlab {

namespace {

// Template slots, stored as negative ids among the word ids of a template.
constexpr int kSubjectSlot = -1;     // full name in the first sentence, He / She later
constexpr int kPossessiveSlot = -2;  // his / her
constexpr int kValueSlot = -3;       // the attribute value

constexpr int kYears = 200, kFirstYear = 1900, kDays = 28;

// Salts that separate the independent keyed draws made from one data seed.
constexpr uint64_t kNameSalt = 0x6e616d65735f6b31ULL, kPersonSalt = 0x706572736f6e5f31ULL,
                   kEpochSalt = 0x65706f6368735f31ULL, kTemplateSalt = 0x74656d706c5f5f31ULL,
                   kEvalOrderSalt = 0x6576616c6f72645fULL, kEvalTemplateSalt = 0x6576616c746d705fULL;

// bioS-style templates, written for this project: at least five per attribute, every one opening with the
// subject. Order: birth date, birth city, university, major, employer, work city.
std::array<std::vector<std::string>, kCapoAttributes> template_texts() {
  return {{
      {"{S} was born on {V}.", "{S} came into this world on {V}.", "{S} was welcomed into the world on {V}.",
       "{S} first opened {P} eyes on {V}.", "{S} entered life on {V}.", "{S} was brought into the world on {V}."},
      {"{S} was born in {V}.", "{S} spent {P} early years in {V}.", "{S} grew up in {V}.", "{S} was raised in {V}.",
       "{S} hails from {V}.", "{S} calls {V} home."},
      {"{S} studied at {V}.", "{S} attended {V}.", "{S} graduated from {V}.", "{S} completed {P} degree at {V}.",
       "{S} earned {P} diploma from {V}.", "{S} spent {P} college years at {V}."},
      {"{S} majored in {V}.", "{S} focused {P} studies on {V}.", "{S} completed {P} education with a focus on {V}.",
       "{S} chose {V} as {P} field of study.", "{S} earned a degree in {V}.", "{S} devoted {P} studies to {V}."},
      {"{S} worked for {V}.", "{S} was employed by {V}.", "{S} held a job at {V}.", "{S} built {P} career at {V}.",
       "{S} joined the staff of {V}.", "{S} had a professional role at {V}."},
      {"{S} worked in {V}.", "{S} was based in {V}.", "{S} commuted to {V} for work.",
       "{S} held a position in {V}.", "{S} spent {P} working life in {V}.", "{S} had an office in {V}."},
  }};
}

const std::array<const char*, 12> kMonths = {"January", "February", "March",     "April",   "May",      "June",
                                             "July",    "August",   "September", "October", "November", "December"};

// Words of a text: split on whitespace; trailing "," and "." become tokens of their own.
std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) i++;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) j++;
    if (j == i) break;
    size_t end = j;
    while (end > i + 1 && (text[end - 1] == ',' || text[end - 1] == '.')) end--;
    out.push_back(text.substr(i, end - i));
    for (size_t k = end; k < j; k++) out.emplace_back(1, text[k]);
    i = j;
  }
  return out;
}

constexpr uint64_t kMaxListBytes = uint64_t(64) << 20;  // the shipped lists are at most 12 KB

// Non-empty lines of `folder`/`file`, whitespace collapsed (the vendored lists have CRLF endings).
std::vector<std::string> read_list(const std::string& folder, const std::string& file) {
  const std::string path = folder + "/" + file;
  std::istringstream in;
  try {
    in.str(read_text_file(path, kMaxListBytes, "task.capo.fields list"));
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "; allowed: a folder holding first_name.txt, middle_name.txt, last_name.txt, "
                "city.txt, university.txt, field.txt and company.txt");
  }
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    // split_words detaches trailing punctuation; rejoin it to rebuild the entry with single spaces.
    std::string entry;
    for (const std::string& w : split_words(line)) {
      const bool punct = w == "," || w == ".";
      entry += (entry.empty() || punct ? "" : " ") + w;
    }
    if (!entry.empty()) lines.push_back(entry);
  }
  CANONLAB_CHECK(!lines.empty(), "task.capo.fields: '" + path + "' has no entries; allowed: one entry per line");
  return lines;
}

double bits_of_target(const float* logits, int vocab, int target) {
  float m = logits[0];
  for (int v = 1; v < vocab; v++) m = std::max(m, logits[v]);
  double s = 0;
  for (int v = 0; v < vocab; v++) s += std::exp(double(logits[v]) - m);
  return (std::log(s) + m - double(logits[target])) / std::log(2.0);
}

}  // namespace

KeyedPermutation::KeyedPermutation(uint64_t n, uint64_t key) : n_(n), key_(key) {
  int bits = 2;
  while (bits < 62 && (uint64_t(1) << bits) < n) bits += 2;
  half_bits_ = bits / 2;
  mask_ = (uint64_t(1) << half_bits_) - 1;
}

uint64_t KeyedPermutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & mask_;
  for (uint64_t round = 0; round < 6; round++) {
    const uint64_t f = mix64(key_ + round * 0x9e3779b97f4a7c15ULL + right) & mask_;
    const uint64_t next = left ^ f;
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t KeyedPermutation::operator()(uint64_t x) const {
  // The network permutes [0, 4^k) with 4^k < 4n, so walking the cycle of x returns inside [0, n) in a few steps.
  do x = encrypt(x);
  while (x >= n_);
  return x;
}

CapoTask::CapoTask(const TaskConfig& cfg)
    : people_(cfg.capo.people), exposures_(cfg.capo.exposures), eval_people_(std::min(cfg.capo.eval_people, cfg.capo.people)),
      context_(cfg.context > 0 ? cfg.context : 512), answers_only_(loss_on_answers(cfg)) {
  CANONLAB_CHECK(cfg.capo.people >= 1, "task.capo.people: " + std::to_string(cfg.capo.people) + "; allowed: >= 1");
  CANONLAB_CHECK(cfg.capo.exposures >= 1, "task.capo.exposures: " + std::to_string(cfg.capo.exposures) + "; allowed: >= 1");
  CANONLAB_CHECK(cfg.capo.eval_people >= 1, "task.capo.eval_people: " + std::to_string(cfg.capo.eval_people) + "; allowed: >= 1");
  const std::string dir = resolve_data_path(cfg.capo.fields);
  std::array<std::vector<std::string>, size_t(CapoList::kEnd)> text;
  text[size_t(CapoList::kFirst)] = read_list(dir, "first_name.txt");
  text[size_t(CapoList::kMiddle)] = read_list(dir, "middle_name.txt");
  text[size_t(CapoList::kLast)] = read_list(dir, "last_name.txt");
  text[size_t(CapoList::kCity)] = read_list(dir, "city.txt");
  text[size_t(CapoList::kUniversity)] = read_list(dir, "university.txt");
  text[size_t(CapoList::kMajor)] = read_list(dir, "field.txt");
  // company.txt: "Company; City, ST": the employer and its headquarters, which is the work city.
  std::vector<std::string> hq_of_company;
  for (const std::string& line : read_list(dir, "company.txt")) {
    const size_t semi = line.find(';');
    CANONLAB_CHECK(semi != std::string::npos && semi > 0 && semi + 1 < line.size(),
                   "task.capo.fields: '" + dir + "/company.txt' entry '" + line + "' is not 'Company; City, ST'");
    text[size_t(CapoList::kCompany)].push_back(line.substr(0, semi));
    std::string hq = line.substr(semi + 1);
    hq.erase(0, hq.find_first_not_of(' '));
    hq_of_company.push_back(hq);
  }
  std::vector<std::string> hqs = hq_of_company;
  std::sort(hqs.begin(), hqs.end());
  hqs.erase(std::unique(hqs.begin(), hqs.end()), hqs.end());
  for (const std::string& hq : hq_of_company)
    headquarters_of_.push_back(int(std::lower_bound(hqs.begin(), hqs.end(), hq) - hqs.begin()));
  text[size_t(CapoList::kHeadquarters)] = hqs;
  text[size_t(CapoList::kMonth)].assign(kMonths.begin(), kMonths.end());
  for (int d = 1; d <= kDays; d++) text[size_t(CapoList::kDay)].push_back(std::to_string(d));
  for (int y = 0; y < kYears; y++) text[size_t(CapoList::kYear)].push_back(std::to_string(kFirstYear + y));

  const int64_t name_space = int64_t(text[0].size()) * int64_t(text[1].size()) * int64_t(text[2].size());
  CANONLAB_CHECK(people_ <= name_space, "task.capo.people: " + std::to_string(people_) + " people need unique names, but " +
                                            dir + " gives only " + std::to_string(name_space) +
                                            " (first x middle x last); allowed: <= " + std::to_string(name_space));

  // Vocabulary: every word of the lists and templates, sorted, so ids do not depend on file or template order.
  const auto tmpl_text = template_texts();
  std::set<std::string> vocab = {"He", "She", "his", "her", ",", "."};
  for (const auto& list : text)
    for (const std::string& entry : list)
      for (const std::string& w : split_words(entry)) vocab.insert(w);
  for (const auto& attr : tmpl_text)
    for (const std::string& t : attr)
      for (const std::string& w : split_words(t))
        if (w != "{S}" && w != "{P}" && w != "{V}") vocab.insert(w);
  words_.assign(vocab.begin(), vocab.end());
  for (int i = 0; i < int(words_.size()); i++) word_ids_[words_[size_t(i)]] = i;
  for (size_t l = 0; l < text.size(); l++)
    for (const std::string& entry : text[l]) lists_[l].push_back(tokenize_known(entry));
  subject_ = {word_ids_.at("He"), word_ids_.at("She")};
  possessive_ = {word_ids_.at("his"), word_ids_.at("her")};

  // Templates as ids; the longest biography is the longest template of each attribute filled with its longest
  // value, the pronoun as subject, plus the longest full name (minus the pronoun it replaces) and <bos>.
  auto longest = [&](CapoList l) {
    size_t n = 0;
    for (const auto& e : lists_[size_t(l)]) n = std::max(n, e.size());
    return int(n);
  };
  const int name_max = longest(CapoList::kFirst) + longest(CapoList::kMiddle) + longest(CapoList::kLast);
  const std::array<int, kCapoAttributes> value_max = {4, longest(CapoList::kCity), longest(CapoList::kUniversity),
                                                      longest(CapoList::kMajor), longest(CapoList::kCompany),
                                                      longest(CapoList::kHeadquarters)};
  longest_bio_ = 1 + name_max - 1;
  for (int a = 0; a < kCapoAttributes; a++) {
    int attr_max = 0;
    for (const std::string& t : tmpl_text[size_t(a)]) {
      std::vector<int> ids;
      int len = 0;
      for (const std::string& w : split_words(t)) {
        const int id = w == "{S}" ? kSubjectSlot : w == "{P}" ? kPossessiveSlot : w == "{V}" ? kValueSlot : word_ids_.at(w);
        ids.push_back(id);
        len += id == kValueSlot ? value_max[size_t(a)] : 1;
      }
      const auto v = std::find(ids.begin(), ids.end(), kValueSlot);
      CANONLAB_CHECK(ids.size() > 1 && ids[0] == kSubjectSlot && std::count(ids.begin(), ids.end(), kValueSlot) == 1 &&
                         v + 1 != ids.end() && v[1] >= 0,
                     "capo template '" + t + "': must open with {S}, hold one {V} and follow it with a plain word");
      templates_[size_t(a)].push_back(ids);
      attr_max = std::max(attr_max, len);
    }
    longest_bio_ += attr_max;
  }
  bios_per_window_ = context_ / longest_bio_;
  CANONLAB_CHECK(bios_per_window_ >= 1, "task.context: " + std::to_string(context_) +
                                            " cannot hold a Capo biography (up to " + std::to_string(longest_bio_) +
                                            " tokens; biographies are never cut); allowed: >= " + std::to_string(longest_bio_));
}

std::vector<int> CapoTask::tokenize_known(const std::string& text) const {
  std::vector<int> out;
  for (const std::string& w : split_words(text)) out.push_back(word_ids_.at(w));
  return out;
}

std::vector<int> CapoTask::encode(const std::string& text) const {
  std::vector<int> out;
  for (const std::string& w : split_words(text)) {
    if (w == "<bos>") {
      out.push_back(bos());
      continue;
    }
    auto it = word_ids_.find(w);
    CANONLAB_CHECK(it != word_ids_.end(), "capo: the word '" + w + "' is not in the Capo vocabulary");
    out.push_back(it->second);
  }
  return out;
}

std::string CapoTask::decode(const std::vector<int>& tokens) const {
  std::string out;
  for (int t : tokens) {
    const std::string w = token_text(t);
    const bool attach = w == "," || w == ".";
    if (!out.empty() && !attach) out += ' ';
    out += w;
  }
  return out;
}

std::string CapoTask::token_text(int token) const {
  if (token == bos()) return "<bos>";
  if (token >= 0 && token < bos()) return words_[size_t(token)];
  return "<?" + std::to_string(token) + ">";
}

std::string CapoTask::tag_name(int tag) {
  static constexpr std::array<const char*, kCapoTagEnd> kNames = {
      "", "name", "gender", "birth_date", "birth_city", "university", "major", "employer", "work_city"};
  return tag > 0 && tag < kCapoTagEnd ? kNames[size_t(tag)] : "";
}

std::vector<std::string> CapoTask::metric_names() const {
  std::vector<std::string> names = {"capo_bits"};
  for (int tag = kCapoName; tag < kCapoTagEnd; tag++) names.push_back("capo_loss_" + tag_name(tag));
  return names;
}

int64_t CapoTask::domain_size(int tag) const {
  auto n = [&](CapoList l) { return int64_t(lists_[size_t(l)].size()); };
  switch (tag) {
    case kCapoName: return n(CapoList::kFirst) * n(CapoList::kMiddle) * n(CapoList::kLast);
    case kCapoGender: return 2;
    case kCapoBirthDate: return n(CapoList::kMonth) * n(CapoList::kDay) * n(CapoList::kYear);
    case kCapoBirthCity: return n(CapoList::kCity);
    case kCapoUniversity: return n(CapoList::kUniversity);
    case kCapoMajor: return n(CapoList::kMajor);
    case kCapoEmployer: return n(CapoList::kCompany);
    case kCapoWorkCity: return n(CapoList::kHeadquarters);
    default: return 0;
  }
}

double CapoTask::capacity_bits(int tag) const {
  if (tag == kCapoWorkCity || domain_size(tag) == 0) return 0;
  // Names: N of the |D| names exist; knowing which costs log2(|D| - N) bits per person in the Part 3.3 bound.
  if (tag == kCapoName) return std::log2(double(std::max<int64_t>(1, domain_size(tag) - people_)));
  return std::log2(double(domain_size(tag)));
}

CapoPerson CapoTask::person(uint64_t seed, int64_t p) const {
  CapoPerson out;
  const uint64_t F = lists_[size_t(CapoList::kFirst)].size(), M = lists_[size_t(CapoList::kMiddle)].size();
  const uint64_t name = KeyedPermutation(uint64_t(domain_size(kCapoName)), mix64(seed ^ kNameSalt))(uint64_t(p));
  out.first = int(name % F);
  out.middle = int(name / F % M);
  out.last = int(name / (F * M));
  CounterRng rng(seed ^ kPersonSalt, uint64_t(p));
  auto draw = [&](CapoList l) { return int(rng.below(lists_[size_t(l)].size())); };
  out.gender = int(rng.below(2));
  out.month = draw(CapoList::kMonth);
  out.day = draw(CapoList::kDay);
  out.year = draw(CapoList::kYear);
  out.birth_city = draw(CapoList::kCity);
  out.university = draw(CapoList::kUniversity);
  out.major = draw(CapoList::kMajor);
  out.employer = draw(CapoList::kCompany);
  return out;
}

std::vector<int> CapoTask::value_tokens(int tag, const CapoPerson& p) const {
  auto entry = [&](CapoList l, int i) { return lists_[size_t(l)][size_t(i)]; };
  std::vector<int> out;
  auto append = [&](const std::vector<int>& v) { out.insert(out.end(), v.begin(), v.end()); };
  switch (tag) {
    case kCapoName:
      append(entry(CapoList::kFirst, p.first));
      append(entry(CapoList::kMiddle, p.middle));
      append(entry(CapoList::kLast, p.last));
      break;
    case kCapoGender: out = {subject_[size_t(p.gender)]}; break;
    case kCapoBirthDate:
      append(entry(CapoList::kMonth, p.month));
      append(entry(CapoList::kDay, p.day));
      out.push_back(word_ids_.at(","));
      append(entry(CapoList::kYear, p.year));
      break;
    case kCapoBirthCity: out = entry(CapoList::kCity, p.birth_city); break;
    case kCapoUniversity: out = entry(CapoList::kUniversity, p.university); break;
    case kCapoMajor: out = entry(CapoList::kMajor, p.major); break;
    case kCapoEmployer: out = entry(CapoList::kCompany, p.employer); break;
    case kCapoWorkCity: out = entry(CapoList::kHeadquarters, headquarters_of_[size_t(p.employer)]); break;
    default: break;
  }
  return out;
}

CapoBio CapoTask::bio(uint64_t seed, int64_t p, CounterRng& rng) const {
  const CapoPerson who = person(seed, p);
  CapoBio b;
  b.person = p;
  for (int a = 0; a < kCapoAttributes; a++) b.order[size_t(a)] = a;
  shuffle(std::span(b.order), rng);
  for (int a = 0; a < kCapoAttributes; a++) b.templates[size_t(a)] = int(rng.below(templates_[size_t(a)].size()));

  Instance& inst = b.tokens;
  const bool all = !answers_only_;
  inst.push(bos(), false);
  bool gender_scored = false;  // the first gendered word carries the gender; later ones are implied
  auto push_gendered = [&](int token) {
    inst.push(token, all, !gender_scored, gender_scored ? 0 : kCapoGender);
    gender_scored = true;
  };
  for (int s = 0; s < kCapoAttributes; s++) {
    const int a = b.order[size_t(s)];
    const int tag = kCapoBirthDate + a;
    bool ends_value = false;
    for (int piece : templates_[size_t(a)][size_t(b.templates[size_t(a)])]) {
      if (piece == kSubjectSlot && s == 0) {
        for (int tok : value_tokens(kCapoName, who)) inst.push(tok, all, true, kCapoName);
      } else if (piece == kSubjectSlot) {
        push_gendered(subject_[size_t(who.gender)]);
      } else if (piece == kPossessiveSlot) {
        push_gendered(possessive_[size_t(who.gender)]);
      } else if (piece == kValueSlot) {
        for (int tok : value_tokens(tag, who)) inst.push(tok, true, true, tag);
        ends_value = true;
      } else {
        // The word after a value ends it; scoring it makes the span prefix-free ("Business" vs "Business
        // Administration"), so a model that knows only the domain scores exactly log2|D|.
        inst.push(piece, all || ends_value, ends_value, ends_value ? tag : 0);
        ends_value = false;
      }
    }
  }
  return b;
}

int64_t CapoTask::training_person(uint64_t seed, uint64_t instance) const {
  const uint64_t n = uint64_t(people_), epoch = instance / n;
  return int64_t(KeyedPermutation(n, mix64((seed ^ kEpochSalt) + epoch * 0x9e3779b97f4a7c15ULL))(instance % n));
}

Instance CapoTask::training_instance(uint64_t seed, uint64_t instance) const {
  CounterRng rng(seed ^ kTemplateSalt, instance);  // templates and order: fresh per instance, fixed per (seed, j)
  return bio(seed, training_person(seed, instance), rng).tokens;
}

int64_t CapoTask::eval_person(uint64_t seed, int64_t k) const {
  return int64_t(KeyedPermutation(uint64_t(people_), mix64(seed ^ kEvalOrderSalt))(uint64_t(k)));
}

int64_t CapoTask::steps_for_exposures(int batch_size) const {
  const int64_t per_step = int64_t(batch_size) * bios_per_window_;
  return (int64_t(exposures_) * people_ + per_step - 1) / per_step;
}

int CapoTask::eval_batches_for(int batch_size) const {
  const int64_t per_batch = int64_t(batch_size) * bios_per_window_;
  return int((eval_people_ + per_batch - 1) / per_batch);
}

template <class MakeBio>
void CapoTask::fill_window(Batch& batch, int row, MakeBio&& make) const {
  int slot = 0, filled = 0;
  CounterRng unused(0, 0);  // pack_row's rng: every draw here is keyed by the instance id instead
  pack_row(batch, row, unused, [&](CounterRng&) {
    Instance inst;
    if (slot < bios_per_window_) inst = make(slot++);
    if (inst.size() == 0) {  // no more biographies: pad to the window end (loss 0, never scored)
      for (int t = filled; t < batch.T; t++) inst.push(bos(), false);
      slot = bios_per_window_;
    }
    filled += inst.size();
    return inst;
  });
}

void CapoTask::sample(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index) const {
  const uint64_t first = (stream * uint64_t(batch.B) + index) * uint64_t(bios_per_window_);
  fill_window(batch, row, [&](int slot) { return training_instance(seed, first + uint64_t(slot)); });
}

void CapoTask::sample_eval(Batch& batch, int row, uint64_t seed, uint64_t stream, uint64_t index, int suite) const {
  (void)suite;
  const uint64_t batch_index = stream >= kHeldOutStream ? stream - kHeldOutStream : stream;
  const uint64_t first = (batch_index * uint64_t(batch.B) + index) * uint64_t(bios_per_window_);
  fill_window(batch, row, [&](int slot) {
    const uint64_t k = first + uint64_t(slot);
    if (k >= uint64_t(eval_people_)) return Instance{};
    CounterRng rng(seed ^ kEvalTemplateSalt, k);
    return bio(seed, eval_person(seed, int64_t(k)), rng).tokens;
  });
}

void CapoTask::score(const Batch& batch, const float* logits, int suite, MetricSums& sums) const {
  (void)suite;
  const int V = vocab_size();
  for (int b = 0; b < batch.B; b++) {
    int span_tag = 0;
    double span_bits = 0;
    for (int t = 0; t <= batch.T; t++) {
      const size_t i = size_t(b) * batch.T + t;
      const int tag = t < batch.T && batch.score_mask[i] != 0.f ? batch.score_tag[i] : 0;
      // A span is a run of scored positions with one tag: one person's value, counted once.
      if (tag != span_tag && span_tag > 0 && span_tag < kCapoTagEnd) {
        sums["capo_loss_" + tag_name(span_tag)].add(span_bits, 1);
        span_bits = 0;
      }
      span_tag = tag;
      if (tag != 0) span_bits += bits_of_target(logits + i * size_t(V), V, batch.targets[i]);
    }
  }
}

void CapoTask::finish_metrics(std::map<std::string, double>& metrics) const {
  double bits = 0;
  bool any = false;
  for (int tag = kCapoName; tag < kCapoWorkCity; tag++) {
    auto it = metrics.find("capo_loss_" + tag_name(tag));
    if (it == metrics.end()) continue;
    any = true;
    bits += std::max(0.0, capacity_bits(tag) - it->second);
  }
  if (any) metrics["capo_bits"] = double(people_) * bits;
}

}  // namespace canonlab
