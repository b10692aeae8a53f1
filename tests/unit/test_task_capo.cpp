// Capo (bioS biographies): the population, exact exposures, packing, the word-level tokenizer and the
// Part 3.3 bits estimate on hand-built logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "data/capo.h"

using namespace canonlab;

namespace {

TaskConfig capo_config(int people, int eval_people = 1000, int context = 0) {
  TaskConfig cfg;
  cfg.name = "capo";
  cfg.loss_on = "all";
  cfg.context = context;
  cfg.capo.people = people;
  cfg.capo.eval_people = eval_people;
  cfg.capo.exposures = 100;
  return cfg;
}

// Pearson chi-square of counts against a uniform expectation.
double chi_square(const std::vector<int>& counts, int total) {
  const double expected = double(total) / double(counts.size());
  double chi = 0;
  for (int c : counts) chi += (c - expected) * (c - expected) / expected;
  return chi;
}

// Every value reached, and chi-square within df + 6 sqrt(2 df) (about 6 standard deviations of a fair draw).
void expect_uniform(const std::vector<int>& counts, int total, const std::string& what) {
  for (size_t v = 0; v < counts.size(); v++) EXPECT_GT(counts[v], 0) << what << " value " << v << " never drawn";
  const double df = double(counts.size() - 1);
  EXPECT_LT(chi_square(counts, total), df + 6 * std::sqrt(2 * df)) << what;
}

// Spans of scored tokens by tag in one instance: tag -> tokens.
std::map<int, std::vector<int>> scored_spans(const Instance& inst) {
  std::map<int, std::vector<int>> out;
  for (int i = 0; i < inst.size(); i++)
    if (inst.scored[size_t(i)]) out[inst.tag[size_t(i)]].push_back(inst.tokens[size_t(i)]);
  return out;
}

}  // namespace

TEST(TaskCapo, DomainSizesComeFromTheLists) {
  CapoTask task(capo_config(1000));
  EXPECT_EQ(task.domain_size(kCapoName), 400LL * 400 * 1000);
  EXPECT_EQ(task.domain_size(kCapoGender), 2);
  EXPECT_EQ(task.domain_size(kCapoBirthDate), 12 * 28 * 200);
  EXPECT_EQ(task.domain_size(kCapoBirthCity), 200);
  EXPECT_EQ(task.domain_size(kCapoUniversity), 300);
  EXPECT_EQ(task.domain_size(kCapoMajor), 100);
  EXPECT_EQ(task.domain_size(kCapoEmployer), 263);
  EXPECT_EQ(task.capacity_bits(kCapoWorkCity), 0.0);
  EXPECT_EQ(task.seq_len(), 512);
  EXPECT_EQ(task.metric_names()[0], "capo_bits");
}

TEST(TaskCapo, AttributesAreUniformOverTheirDomainsAndNamesUnique) {
  const int N = 20000;
  CapoTask task(capo_config(N));
  std::vector<int> first(400), middle(400), last(1000), gender(2), month(12), day(28), year(200), city(200),
      university(300), major(100), employer(263);
  std::set<std::vector<int>> names;
  for (int p = 0; p < N; p++) {
    const CapoPerson a = task.person(11, p);
    first[size_t(a.first)]++, middle[size_t(a.middle)]++, last[size_t(a.last)]++, gender[size_t(a.gender)]++;
    month[size_t(a.month)]++, day[size_t(a.day)]++, year[size_t(a.year)]++, city[size_t(a.birth_city)]++;
    university[size_t(a.university)]++, major[size_t(a.major)]++, employer[size_t(a.employer)]++;
    names.insert(task.value_tokens(kCapoName, a));
  }
  EXPECT_EQ(int(names.size()), N) << "names must be unique";
  expect_uniform(first, N, "first name");
  expect_uniform(middle, N, "middle name");
  expect_uniform(last, N, "last name");
  expect_uniform(gender, N, "gender");
  expect_uniform(month, N, "month");
  expect_uniform(day, N, "day");
  expect_uniform(year, N, "year");
  expect_uniform(city, N, "birth city");
  expect_uniform(university, N, "university");
  expect_uniform(major, N, "major");
  expect_uniform(employer, N, "employer");
  // The chi-square bound is tight enough to catch a skew: one value drawn at twice its rate fails it.
  std::vector<int> skewed = major;
  skewed[0] += N / 100;
  EXPECT_GT(chi_square(skewed, N + N / 100), 99 + 6 * std::sqrt(2 * 99.0));
}

TEST(TaskCapo, KeyedPermutationIsABijection) {
  for (uint64_t n : {1ULL, 2ULL, 5ULL, 37ULL, 1000ULL, 4097ULL}) {
    KeyedPermutation perm(n, 99);
    std::vector<int> hit(static_cast<size_t>(n), 0);
    for (uint64_t x = 0; x < n; x++) {
      const uint64_t y = perm(x);
      ASSERT_LT(y, n);
      hit[size_t(y)]++;
    }
    for (int h : hit) EXPECT_EQ(h, 1) << "n = " << n;
  }
  // Different keys give different orders.
  KeyedPermutation a(1000, 1), b(1000, 2);
  int same = 0;
  for (uint64_t x = 0; x < 1000; x++) same += a(x) == b(x);
  EXPECT_LT(same, 20);
}

TEST(TaskCapo, SamePersonSameFactsEveryExposureWhileTemplatesAndOrderVary) {
  const int N = 50;
  CapoTask task(capo_config(N));
  const uint64_t seed = 5;
  std::map<int64_t, std::vector<CapoBio>> seen;
  for (uint64_t j = 0; j < uint64_t(N) * 20; j++) {
    CounterRng rng(seed, j);
    const int64_t p = task.training_person(seed, j);
    seen[p].push_back(task.bio(seed, p, rng));
  }
  ASSERT_EQ(int(seen.size()), N);
  int order_changes = 0, template_changes = 0;
  for (auto& [p, bios] : seen) {
    const CapoPerson who = task.person(seed, p);
    ASSERT_EQ(bios.size(), 20u);
    for (const CapoBio& b : bios) {
      auto spans = scored_spans(b.tokens);
      EXPECT_EQ(spans[kCapoName], task.value_tokens(kCapoName, who));
      for (int tag = kCapoBirthDate; tag < kCapoTagEnd; tag++) {
        // The value, then the word that ends it.
        std::vector<int> value = spans[tag];
        ASSERT_FALSE(value.empty());
        value.pop_back();
        EXPECT_EQ(value, task.value_tokens(tag, who)) << tag;
      }
      // The gender word matches the person's gender (He/his for 0, She/her for 1).
      ASSERT_EQ(spans[kCapoGender].size(), 1u);
      const std::string g = task.token_text(spans[kCapoGender][0]);
      EXPECT_TRUE(who.gender == 0 ? (g == "He" || g == "his") : (g == "She" || g == "her")) << g;
      // The first sentence opens with the full name right after <bos>.
      const std::vector<int> name = task.value_tokens(kCapoName, who);
      EXPECT_TRUE(std::equal(name.begin(), name.end(), b.tokens.tokens.begin() + 1));
      order_changes += b.order != bios[0].order;
      template_changes += b.templates != bios[0].templates;
    }
  }
  EXPECT_GT(order_changes, N * 15);
  EXPECT_GT(template_changes, N * 15);
  // Every template of every attribute is used.
  for (int a = 0; a < kCapoAttributes; a++) {
    std::set<int> used;
    for (auto& [p, bios] : seen)
      for (const CapoBio& b : bios) used.insert(b.templates[size_t(a)]);
    EXPECT_EQ(int(used.size()), task.templates_of(a));
    EXPECT_GE(task.templates_of(a), 5);
  }
}

TEST(TaskCapo, TrainingStreamShowsEveryPersonExactlyOncePerEpoch) {
  const int N = 37, B = 3, epochs = 4;
  CapoTask task(capo_config(N));
  const uint64_t seed = 9;
  // Names identify people in the windows.
  std::map<std::vector<int>, int64_t> by_name;
  for (int p = 0; p < N; p++) by_name[task.value_tokens(kCapoName, task.person(seed, p))] = p;
  const int P = task.bios_per_window();
  const int64_t instances = int64_t(epochs) * N;
  const int64_t steps = (instances + B * P - 1) / (B * P);
  std::vector<int64_t> stream_of_people;  // in instance order j = (stream * B + row) * P + slot
  for (int64_t step = 0; step < steps; step++) {
    Batch batch = task.make_batch(B, seed, uint64_t(step));
    for (int r = 0; r < B; r++) {
      const int* t = batch.tokens.data() + size_t(r) * batch.T;
      int bios = 0;
      for (int i = 0; i + 1 < batch.T; i++)
        if (t[i] == task.bos() && t[i + 1] != task.bos()) {
          std::vector<int> name(t + i + 1, t + i + 4);
          ASSERT_TRUE(by_name.count(name)) << "unknown name at " << i;
          stream_of_people.push_back(by_name[name]);
          bios++;
        }
      EXPECT_EQ(bios, P);
    }
  }
  ASSERT_GE(int64_t(stream_of_people.size()), instances);
  for (int e = 0; e < epochs; e++) {
    std::vector<int> count(static_cast<size_t>(N), 0);
    for (int64_t j = int64_t(e) * N; j < int64_t(e + 1) * N; j++) count[size_t(stream_of_people[size_t(j)])]++;
    for (int c : count) EXPECT_EQ(c, 1) << "epoch " << e;
  }
  // Epochs are shuffled differently.
  EXPECT_FALSE(std::equal(stream_of_people.begin(), stream_of_people.begin() + N, stream_of_people.begin() + N));
  // steps_for_exposures is the smallest step count that covers exposures * N instances.
  const int64_t s = task.steps_for_exposures(B);
  EXPECT_GE(s * B * P, 100LL * N);
  EXPECT_LT((s - 1) * B * P, 100LL * N);
}

TEST(TaskCapo, WindowsHoldWholeBiographiesLeftAlignedThenPadding) {
  CapoTask task(capo_config(500));
  const uint64_t seed = 3;
  const int B = 4, P = task.bios_per_window();
  EXPECT_EQ(P, task.seq_len() / task.longest_bio());
  Batch batch = task.make_batch(B, seed, 7);
  for (int r = 0; r < B; r++) {
    const size_t base = size_t(r) * batch.T;
    int pos = 0;
    for (int slot = 0; slot < P; slot++) {
      const uint64_t j = (7ULL * B + uint64_t(r)) * uint64_t(P) + uint64_t(slot);
      const Instance expect = task.training_instance(seed, j);
      for (int i = 0; i < expect.size(); i++) ASSERT_EQ(batch.tokens[base + size_t(pos + i)], expect.tokens[size_t(i)]);
      pos += expect.size();
    }
    ASSERT_LE(pos, batch.T);
    for (int t = pos; t < batch.T; t++) {
      EXPECT_EQ(batch.tokens[base + size_t(t)], task.bos());
      EXPECT_EQ(batch.loss_mask[base + size_t(t) - 1], 0.f);
      EXPECT_EQ(batch.score_mask[base + size_t(t)], 0.f);
    }
    EXPECT_EQ(batch.tokens[base], task.bos());
    EXPECT_EQ(batch.loss_mask[base], 1.f) << "all mode trains the first name";
  }
  // A context shorter than the longest biography is refused, naming task.context.
  try {
    CapoTask small(capo_config(500, 1000, task.longest_bio() - 1));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("task.context"), std::string::npos) << e.what();
  }
  CapoTask exact(capo_config(500, 1000, task.longest_bio()));
  EXPECT_EQ(exact.bios_per_window(), 1);
}

TEST(TaskCapo, AnswersModeTrainsOnlyAttributeValues) {
  TaskConfig cfg = capo_config(100);
  cfg.loss_on = "answers";
  CapoTask task(cfg);
  CounterRng rng(1, 2);
  const CapoBio b = task.bio(4, 17, rng);
  int trained = 0;
  for (int i = 0; i < b.tokens.size(); i++) {
    const int tag = b.tokens.tag[size_t(i)];
    const bool value = b.tokens.scored[size_t(i)] && tag >= kCapoBirthDate;
    EXPECT_EQ(b.tokens.loss[size_t(i)] != 0, value) << i;
    trained += b.tokens.loss[size_t(i)];
  }
  const CapoPerson who = task.person(4, 17);
  int value_tokens = 0;
  for (int tag = kCapoBirthDate; tag < kCapoTagEnd; tag++) value_tokens += int(task.value_tokens(tag, who).size());
  EXPECT_EQ(trained, value_tokens + kCapoAttributes);  // each value and the word that ends it
}

TEST(TaskCapo, TokenizerRoundTripsGeneratedBiographies) {
  CapoTask task(capo_config(3000));
  for (int p = 0; p < 3000; p += 7) {
    CounterRng rng(8, uint64_t(p));
    const Instance inst = task.bio(2, p, rng).tokens;
    const std::string text = task.decode(inst.tokens);
    EXPECT_EQ(task.encode(text), inst.tokens) << text;
    EXPECT_EQ(task.decode(task.encode(text)), text);
    EXPECT_EQ(text.find("  "), std::string::npos);
    EXPECT_EQ(text.find(" ,"), std::string::npos);
  }
  // Ids are the sorted word list, <bos> last.
  for (int t = 1; t < task.bos(); t++) EXPECT_LT(task.token_text(t - 1), task.token_text(t));
  EXPECT_EQ(task.token_text(task.bos()), "<bos>");
  EXPECT_THROW(task.encode("Zyzzyvaqx was born."), Error);
}

namespace {

// Builds logits for an eval batch. For each scored position, `knows(tag)` decides between probability ~1 on the
// target and the distribution of a model that knows only the domain: uniform over the values consistent with the
// tokens seen so far (teacher forcing), where a value that is complete moves on to the word that ends it.
std::vector<float> domain_logits(const CapoTask& task, const Batch& batch, const std::function<bool(int)>& knows) {
  const int V = task.vocab_size();
  std::vector<float> logits(size_t(batch.B) * batch.T * V, 0.f);
  std::vector<std::vector<int>> dates;
  for (const auto& m : task.list_tokens(CapoList::kMonth))
    for (const auto& d : task.list_tokens(CapoList::kDay))
      for (const auto& y : task.list_tokens(CapoList::kYear)) dates.push_back({m[0], d[0], task.encode(",")[0], y[0]});
  auto domain_of = [&](int tag) -> const std::vector<std::vector<int>>& {
    switch (tag) {
      case kCapoBirthDate: return dates;
      case kCapoBirthCity: return task.list_tokens(CapoList::kCity);
      case kCapoUniversity: return task.list_tokens(CapoList::kUniversity);
      case kCapoMajor: return task.list_tokens(CapoList::kMajor);
      case kCapoEmployer: return task.list_tokens(CapoList::kCompany);
      default: return task.list_tokens(CapoList::kHeadquarters);
    }
  };
  for (int b = 0; b < batch.B; b++) {
    const size_t base = size_t(b) * batch.T;
    auto tag_at = [&](int t) { return t >= 0 && t < batch.T && batch.score_mask[base + t] != 0.f ? batch.score_tag[base + t] : 0; };
    for (int t = 0; t < batch.T; t++) {
      const int tag = tag_at(t);
      if (tag == 0) continue;
      int start = t, end = t;
      while (tag_at(start - 1) == tag) start--;
      while (tag_at(end + 1) == tag) end++;
      float* row = logits.data() + (base + t) * size_t(V);
      const int target = batch.targets[base + t];
      std::fill(row, row + V, -1e4f);
      if (knows(tag)) {
        row[target] = 50.f;
        continue;
      }
      std::map<int, double> next;  // token -> how many domain values go on with it
      if (tag == kCapoName) {
        const CapoList parts[] = {CapoList::kFirst, CapoList::kMiddle, CapoList::kLast};
        for (const auto& v : task.list_tokens(parts[t - start])) next[v[0]]++;
      } else if (tag == kCapoGender) {
        next[target] = 1;
        next[target == 0 ? 1 : 0] = 1;  // a fair coin between two words
      } else {
        const std::vector<int> prefix(batch.targets.begin() + long(base + start), batch.targets.begin() + long(base + t));
        const bool true_value_ends_here = t == end;  // the span is the value and the word that ends it
        for (const auto& v : domain_of(tag)) {
          if (v.size() < prefix.size() || !std::equal(prefix.begin(), prefix.end(), v.begin())) continue;
          if (v.size() > prefix.size()) next[v[prefix.size()]]++;
          else next[true_value_ends_here ? target : task.bos()]++;  // the value ends: its ending word
        }
      }
      for (auto [tok, count] : next) row[tok] = float(std::log(count));
    }
  }
  return logits;
}

std::map<std::string, double> evaluate_with(const CapoTask& task, uint64_t seed, int B,
                                            const std::function<bool(int)>& knows, MetricSums* out_sums = nullptr) {
  MetricSums sums;
  for (int i = 0; i < task.eval_batches_for(B); i++) {
    Batch batch = task.make_eval_batch(B, seed, kHeldOutStream + uint64_t(i), 0);
    const std::vector<float> logits = domain_logits(task, batch, knows);
    task.score(batch, logits.data(), 0, sums);
  }
  std::map<std::string, double> metrics;
  for (auto& [k, m] : sums) metrics[k] = m.sum / m.count;
  task.finish_metrics(metrics);
  if (out_sums) *out_sums = sums;
  return metrics;
}

}  // namespace

TEST(TaskCapo, BitsOfAPerfectModelAreTheFullCapacity) {
  const int N = 60;
  CapoTask task(capo_config(N, N));
  MetricSums sums;
  const auto m = evaluate_with(task, 21, 2, [](int) { return true; }, &sums);
  // Each person-attribute is scored exactly once.
  for (int tag = kCapoName; tag < kCapoTagEnd; tag++) EXPECT_EQ(sums["capo_loss_" + CapoTask::tag_name(tag)].count, N) << tag;
  const double full = N * (std::log2(400.0 * 400 * 1000 - N) + 1 + std::log2(12.0 * 28 * 200) + std::log2(200.0) +
                           std::log2(300.0) + std::log2(100.0) + std::log2(263.0));
  EXPECT_NEAR(m.at("capo_bits"), full, 1e-3);
  EXPECT_NEAR(m.at("capo_loss_employer"), 0.0, 1e-6);
}

TEST(TaskCapo, BitsOfAModelThatKnowsOnlyTheDomainsAreZero) {
  const int N = 60;
  CapoTask task(capo_config(N, N));
  const auto m = evaluate_with(task, 21, 2, [](int) { return false; });
  EXPECT_NEAR(m.at("capo_bits"), 0.0, 1e-3 * N);
  EXPECT_NEAR(m.at("capo_loss_birth_date"), std::log2(12.0 * 28 * 200), 1e-3);
  EXPECT_NEAR(m.at("capo_loss_employer"), std::log2(263.0), 1e-3);
  EXPECT_NEAR(m.at("capo_loss_gender"), 1.0, 1e-3);
  // Knowing the employers alone stores N log2 263 bits; the implied work city adds nothing.
  const auto employer = evaluate_with(task, 21, 2, [](int tag) { return tag == kCapoEmployer || tag == kCapoWorkCity; });
  EXPECT_NEAR(employer.at("capo_bits"), N * std::log2(263.0), 1e-3 * N);
}

TEST(TaskCapo, EvaluationCoversTheEvalPeopleOnce) {
  const int N = 200, eval = 50;
  CapoTask task(capo_config(N, eval));
  const uint64_t seed = 4;
  const int B = 2;
  std::set<std::vector<int>> names;
  int bios = 0;
  for (int i = 0; i < task.eval_batches_for(B) + 1; i++) {  // one batch beyond: nothing more to score
    Batch batch = task.make_eval_batch(B, seed, kHeldOutStream + uint64_t(i), 0);
    for (size_t k = 0; k + 3 < batch.tokens.size(); k++)
      if (batch.tokens[k] == task.bos() && batch.tokens[k + 1] != task.bos() && (k + 1) % size_t(batch.T) != 0) {
        names.insert(std::vector<int>(batch.tokens.begin() + long(k + 1), batch.tokens.begin() + long(k + 4)));
        bios++;
      }
  }
  EXPECT_EQ(bios, eval);
  std::set<std::vector<int>> expected;
  for (int k = 0; k < eval; k++) expected.insert(task.value_tokens(kCapoName, task.person(seed, task.eval_person(seed, k))));
  EXPECT_EQ(names, expected);
}

TEST(TaskCapo, DeterministicPerSeedStreamAndIndex) {
  CapoTask task(capo_config(1000));
  Batch a = task.make_batch(3, 42, 5), b = task.make_batch(3, 42, 5), c = task.make_batch(3, 43, 5);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.loss_mask, b.loss_mask);
  EXPECT_EQ(a.score_tag, b.score_tag);
  EXPECT_NE(a.tokens, c.tokens);
  // Row r of a batch is the same whether drawn alone or with others.
  Batch one;
  one.resize(3, task.seq_len());
  task.sample(one, 2, 42, 5, 2);
  EXPECT_TRUE(std::equal(a.tokens.begin() + 2 * a.T, a.tokens.end(), one.tokens.begin() + 2 * a.T));
  // The population is a function of the data seed.
  EXPECT_NE(task.value_tokens(kCapoName, task.person(1, 0)), task.value_tokens(kCapoName, task.person(2, 0)));
  EXPECT_EQ(task.value_tokens(kCapoUniversity, task.person(1, 7)), task.value_tokens(kCapoUniversity, task.person(1, 7)));
}

TEST(TaskCapo, ConfigErrorsNameTheKey) {
  TaskConfig cfg = capo_config(100);
  cfg.capo.fields = "/nonexistent/capo-fields";
  try {
    CapoTask task(cfg);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("task.capo.fields"), std::string::npos) << what;
    EXPECT_NE(what.find("/nonexistent/capo-fields/first_name.txt"), std::string::npos) << what;
  }
  cfg = capo_config(200000000);
  try {
    CapoTask task(cfg);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("task.capo.people"), std::string::npos) << e.what();
  }
}
