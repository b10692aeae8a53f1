// `canonlab probe`: the probe report agrees with the run's own summary, attention maps are causal
// distributions of the heads asked for, the pictures are well-formed SVG, and the outlined induction targets
// are exactly where an induction head must look.
#include <gtest/gtest.h>

#include "cli_runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "config/config.h"
#include "engine/backend/cpu_backend.h"
#include "data/copy_task.h"
#include "eval/attention_maps.h"
#include "eval/ipmr.h"
#include "eval/probe_pictures.h"

using namespace canonlab;
namespace fs = std::filesystem;

namespace {

using canonlab::test_support::run_cli;
using CliResult = canonlab::test_support::CliResult;


std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_all(path)); }

// Enough of XML to catch what string-built SVG gets wrong: unbalanced or crossed tags, attributes without
// quotes or without an end, a raw '<' or '&' in text or attribute values. Returns "" when well formed.
std::string xml_problem(const std::string& s) {
  static const std::regex entity("^&(#[0-9]+|#x[0-9a-fA-F]+|[a-zA-Z]+);");
  auto bad_ampersand = [&](size_t from, size_t to) {
    for (size_t i = s.find('&', from); i < to; i = s.find('&', i + 1))
      if (!std::regex_search(s.begin() + long(i), s.begin() + long(std::min(to, i + 12)), entity))
        return true;
    return false;
  };
  std::vector<std::string> open;
  int roots = 0;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] != '<') {
      const size_t next = std::min(s.find('<', i), s.size());
      if (bad_ampersand(i, next)) return "raw '&' in text near " + std::to_string(i);
      if (open.empty() && s.substr(i, next - i).find_first_not_of(" \t\r\n") != std::string::npos)
        return "text outside the root element";
      i = next;
      continue;
    }
    if (s.compare(i, 2, "<?") == 0 || s.compare(i, 4, "<!--") == 0) {
      const size_t end = s.find(s[i + 1] == '?' ? "?>" : "-->", i);
      if (end == std::string::npos) return "unterminated declaration or comment";
      i = end + 2;
      continue;
    }
    const bool closing = s.compare(i, 2, "</") == 0;
    size_t j = i + (closing ? 2 : 1);
    const size_t name_end = s.find_first_of(" \t\r\n/>", j);
    if (name_end == std::string::npos || name_end == j) return "bad tag at " + std::to_string(i);
    const std::string name = s.substr(j, name_end - j);
    j = name_end;
    if (closing) {
      j = s.find_first_not_of(" \t\r\n", j);
      if (j == std::string::npos || s[j] != '>') return "bad closing tag </" + name;
      if (open.empty() || open.back() != name) return "</" + name + "> does not close <" + (open.empty() ? "" : open.back()) + ">";
      open.pop_back();
      i = j + 1;
      continue;
    }
    bool self_closing = false;
    while (true) {
      j = s.find_first_not_of(" \t\r\n", j);
      if (j == std::string::npos) return "unterminated <" + name;
      if (s[j] == '>') break;
      if (s.compare(j, 2, "/>") == 0) {
        self_closing = true;
        j++;
        break;
      }
      const size_t eq = s.find('=', j);
      if (eq == std::string::npos || s.substr(j, eq - j).find_first_of(" \t\r\n<>/\"'") != std::string::npos)
        return "bad attribute in <" + name + "> at " + std::to_string(j);
      const char quote = s[eq + 1];
      if (quote != '"' && quote != '\'') return "unquoted attribute in <" + name + ">";
      const size_t value_end = s.find(quote, eq + 2);
      if (value_end == std::string::npos) return "unterminated attribute in <" + name + ">";
      if (s.substr(eq + 2, value_end - eq - 2).find('<') != std::string::npos || bad_ampersand(eq + 2, value_end))
        return "raw '<' or '&' in an attribute of <" + name + ">";
      j = value_end + 1;
    }
    if (open.empty()) roots++;
    if (!self_closing) open.push_back(name);
    i = j + 1;
  }
  if (!open.empty()) return "<" + open.back() + "> never closed";
  if (roots != 1) return std::to_string(roots) + " root elements";
  return "";
}

// One tiny run shared by the CLI tests: the demo config (NoPE + Canon-ABCD) with a key shift at offset 2, so
// the probe measures two deltas; a few steps, because these tests check plumbing, not learning. One thread:
// on a busy machine OpenMP's spinning makes even this tiny run take seconds.
class ProbeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("canonlab_probe_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    run_ = root_ / "run";
    const CliResult train = run_cli(
        "train " + std::string(CANONLAB_SOURCE_DIR) + "/configs/demo.yaml --quiet --out " + run_.string() +
        " --set train.threads=1 --set train.steps=30 --set train.eval_every=0 --set train.checkpoint_every=0 --set probe.n_sequences=32"
        " --set model.attention.key_shift.layers=[0] --set model.attention.key_shift.offset=2");
    ASSERT_EQ(train.exit_code, 0) << train.output;
    probe_ = run_cli("probe " + run_.string());
    ASSERT_EQ(probe_.exit_code, 0) << probe_.output;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static fs::path root_, run_;
  static CliResult probe_;
};
fs::path ProbeCli::root_, ProbeCli::run_;
CliResult ProbeCli::probe_;

}  // namespace

TEST_F(ProbeCli, IpmrAndEvalAreTheNumbersOfTheRunSummary) {
  const nlohmann::json summary = read_json(run_ / "summary.json");
  const nlohmann::json probe = read_json(run_ / "probe/probe.json");
  for (const char* delta : {"delta_1", "delta_2"}) {
    const nlohmann::json& m = probe["ipmr"][delta]["per_head"];
    ASSERT_EQ(m.size(), 2u) << delta;  // layers
    for (const auto& row : m) {
      ASSERT_EQ(row.size(), 4u) << delta;  // heads
      for (double v : row) {
        EXPECT_GE(v, 0.0);
        EXPECT_LE(v, 1.0);
      }
    }
  }
  // Same held-out sequences, same weights, same thread count: the same numbers, bit for bit.
  EXPECT_EQ(probe["ipmr"], summary["ipmr"]);
  EXPECT_EQ(probe["eval"], summary["eval"]);
  EXPECT_EQ(probe["step"], 30);
  EXPECT_EQ(probe["checkpoint"], summary["checkpoint"]);
  EXPECT_NE(probe_.output.find("IPMR at delta=2"), std::string::npos) << probe_.output;
  EXPECT_NE(probe_.output.find("top heads:"), std::string::npos) << probe_.output;
}

TEST_F(ProbeCli, DefaultHeadsAreTheTopFourThenTheTopAtTheKeyShiftOffset) {
  const nlohmann::json ipmr = read_json(run_ / "summary.json")["ipmr"];
  std::vector<std::string> expected;
  auto add = [&](const nlohmann::json& top) {
    const std::string name = HeadId{top["layer"].get<int>(), top["head"].get<int>()}.name();
    if (std::find(expected.begin(), expected.end(), name) == expected.end()) expected.push_back(name);
  };
  for (int i = 0; i < 4; i++) add(ipmr["delta_1"]["top_heads"][i]);
  add(ipmr["delta_2"]["top_heads"][0]);
  EXPECT_EQ(read_json(run_ / "probe/probe.json")["heads"].get<std::vector<std::string>>(), expected);
}

TEST_F(ProbeCli, AttentionMapsAreCausalDistributions) {
  const nlohmann::json probe = read_json(run_ / "probe/probe.json");
  const size_t T = 25;
  ASSERT_EQ(probe["examples"].size(), 2u);
  for (const auto& ex : probe["examples"]) {
    ASSERT_EQ(ex["tokens"].size(), T);
    ASSERT_EQ(ex["token_text"].size(), T);
    EXPECT_EQ(ex["token_text"][0], "<bos>");
    ASSERT_EQ(ex["attention"].size(), probe["heads"].size());
    for (const auto& head : probe["heads"]) {
      const nlohmann::json& rows = ex["attention"][head.get<std::string>()];
      ASSERT_EQ(rows.size(), T) << head;
      for (size_t q = 0; q < T; q++) {
        ASSERT_EQ(rows[q].size(), T);
        double sum = 0;
        for (size_t k = 0; k < T; k++) {
          const double p = rows[q][k];
          if (k > q) {
            EXPECT_EQ(p, 0.0) << head << " query " << q << " key " << k;
          }
          EXPECT_GE(p, 0.0);
          sum += p;
        }
        EXPECT_NEAR(sum, 1.0, 1e-5) << head << " query " << q;
      }
    }
    // Queries 13..23 (second block, next token copyable): targets p+1 and p+2, p = q - 12.
    for (const char* delta : {"delta_1", "delta_2"}) {
      const nlohmann::json& cells = ex["induction_targets"][delta];
      ASSERT_EQ(cells.size(), 11u) << delta;
      const int d = delta[6] - '0';
      for (const auto& c : cells) EXPECT_EQ(c[1].get<int>(), c[0].get<int>() - 12 + d);
    }
  }
}

TEST_F(ProbeCli, WritesWellFormedPicturesAndOnePageWithAllOfThem) {
  const nlohmann::json probe = read_json(run_ / "probe/probe.json");
  std::vector<std::string> files = {"ipmr_delta_1.svg", "ipmr_delta_2.svg"};
  for (int e = 0; e < 2; e++)
    for (const auto& head : probe["heads"]) files.push_back("attention_ex" + std::to_string(e) + "_" + head.get<std::string>() + ".svg");
  const std::string page = read_all(run_ / "probe/index.html");
  for (const std::string& f : files) {
    const fs::path path = run_ / "probe" / f;
    ASSERT_TRUE(fs::exists(path)) << f;
    const std::string svg = read_all(path);
    EXPECT_NE(svg.find("<svg"), std::string::npos) << f;
    EXPECT_EQ(xml_problem(svg), "") << f;
    // Inlined as is (without any XML declaration) on the page.
    const std::string body = svg.substr(svg.find("<svg"), svg.rfind("</svg>") + 6 - svg.find("<svg"));
    EXPECT_NE(page.find(body), std::string::npos) << f << " is not on index.html";
  }
  EXPECT_EQ(page.find("<?xml"), std::string::npos);
  EXPECT_NE(page.find("IPMR at delta=1"), std::string::npos);  // the text report
}

TEST_F(ProbeCli, HeadsAndExamplesOptionsAreHonoured) {
  const fs::path out = root_ / "chosen";
  const CliResult r = run_cli("probe " + (run_ / "checkpoints").string() + " --heads L1H2,l0h0,L1H2 --examples 4 --json --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json printed = nlohmann::json::parse(r.output);
  EXPECT_EQ(printed, read_json(out / "probe.json"));
  EXPECT_EQ(printed["heads"], nlohmann::json({"L1H2", "L0H0"}));
  ASSERT_EQ(printed["examples"].size(), 4u);
  EXPECT_EQ(printed["examples"][3]["attention"].size(), 2u);
  EXPECT_TRUE(fs::exists(out / "attention_ex3_L1H2.svg"));
  EXPECT_TRUE(fs::exists(out / "attention_ex3_L0H0.svg"));
  // A later probe with fewer examples leaves no stale pictures of the earlier one behind.
  ASSERT_EQ(run_cli("probe " + run_.string() + " --heads L0H0 --examples 1 --out " + out.string()).exit_code, 0);
  EXPECT_FALSE(fs::exists(out / "attention_ex3_L0H0.svg"));
  EXPECT_FALSE(fs::exists(out / "attention_ex0_L1H2.svg"));
  EXPECT_TRUE(fs::exists(out / "attention_ex0_L0H0.svg"));
}

TEST_F(ProbeCli, HeadOutsideTheModelFailsNamingTheValidRange) {
  const CliResult r = run_cli("probe " + run_.string() + " --heads L0H1,L9H0 --out " + (root_ / "bad").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("L9H0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("L0H0..L1H3"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(root_ / "bad"));  // rejected before anything ran or was written

  const CliResult typo = run_cli("probe " + run_.string() + " --heads 3.3");
  EXPECT_EQ(typo.exit_code, 2) << typo.output;
  EXPECT_NE(typo.output.find("L<layer>H<head>"), std::string::npos) << typo.output;

  const CliResult none = run_cli("probe " + run_.string() + " --examples 0");
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(none.output.find("--examples 0"), std::string::npos) << none.output;
}

namespace {

RunConfig small_copy_config(int n_symbols) {
  return config_from_yaml_string("{}", {"task.vocab=9", "task.n_symbols=" + std::to_string(n_symbols), "model.d_model=8",
                                        "model.n_heads=2", "model.n_layers=2", "probe.n_sequences=10",
                                        "train.batch_size=4"});
}

// A stand-in model: records the tokens it is given, and writes attention patterns that name their head:
// head (l, h) attends from query q to key min(q, 4l + h) only.
class RecordingModel final : public LanguageModel<float> {
 public:
  explicit RecordingModel(const RunConfig& cfg) : cfg_(cfg.model) { store_.finalize(0); }
  const float* forward(StepContext<float>& ctx, const int* tokens, int B, int T) override {
    seen.insert(seen.end(), tokens, tokens + size_t(B) * T);
    const int L = cfg_.n_layers, H = cfg_.n_heads;
    for (int l = 0; l < L; l++) {
      float* probs = ctx.arena.alloc_zeroed<float>(size_t(B) * H * T * T);
      for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
          for (int q = 0; q < T; q++) probs[((size_t(b) * H + h) * T + q) * T + std::min(q, 4 * l + h)] = 1.f;
      if (ctx.on_attention_probs) ctx.on_attention_probs(l, probs, B, H, T);
    }
    return ctx.arena.alloc_zeroed<float>(size_t(B) * T * cfg_.vocab_size);
  }
  void backward(StepContext<float>&, const float*, int, int) override {}
  ParameterStore<float>& params() override { return store_; }
  Backend<float>& backend() override { return backend_; }
  const ModelConfig& config() const override { return cfg_; }

  std::vector<int> seen;

 private:
  ModelConfig cfg_;
  ParameterStore<float> store_;
  CpuBackend<float> backend_;
};

}  // namespace

TEST(ProbeTargets, OutlinedCellsAreTheKeyAfterTheEarlierOccurrence) {
  const RunConfig cfg = small_copy_config(3);
  const CopyTask task(cfg.task);
  // [BOS] 3 1 4 3 1 4: IPMR scores queries 4 and 5 (the second 3 and 1), whose earlier occurrences are 1 and 2.
  const std::vector<int> tokens = {task.bos(), 3, 1, 4, 3, 1, 4};
  ASSERT_EQ(task.first_query(), 4);
  ASSERT_EQ(task.last_query(), 5);
  EXPECT_EQ(induction_targets(tokens, 4, 5, 1), (std::vector<Cell>{{4, 2}, {5, 3}}));
  EXPECT_EQ(induction_targets(tokens, 4, 5, 2), (std::vector<Cell>{{4, 3}, {5, 4}}));
  // A target after the query cannot be attended and is not drawn.
  EXPECT_EQ(induction_targets(tokens, 4, 5, 3), (std::vector<Cell>{{4, 4}, {5, 5}}));
  EXPECT_EQ(induction_targets(tokens, 4, 5, 4), std::vector<Cell>{});

  AttentionMaps maps;
  maps.seq_len = 7;
  maps.heads = {{1, 0}};
  maps.tokens = {tokens};
  maps.probs = {{std::vector<float>(49, 0.f)}};
  for (int q = 0; q < 7; q++) maps.probs[0][0][size_t(q) * 7] = 1.f;
  const std::vector<int> deltas = {1, 2};
  const svg::Heatmap h = attention_heatmap(maps, 0, 0, task, deltas, nullptr);
  EXPECT_EQ(h.marked_cells, (std::vector<std::pair<int, int>>{{4, 2}, {5, 3}, {4, 3}, {5, 4}}));
  EXPECT_EQ(h.row_labels, (std::vector<std::string>{"<bos>", "s3", "s1", "s4", "s3", "s1", "s4"}));
  EXPECT_EQ(h.col_labels, h.row_labels);
  EXPECT_DOUBLE_EQ(h.values[5 * 7 + 0], 1.0);
  EXPECT_DOUBLE_EQ(h.values[5 * 7 + 5], 0.0);
  EXPECT_TRUE(std::isnan(h.values[5 * 7 + 6]));  // above the diagonal: masked, drawn blank
}

TEST(ProbeTargets, OnHeldOutSequencesTheTargetHoldsTheTokenToPredict) {
  const RunConfig cfg = small_copy_config(6);
  const CopyTask task(cfg.task);
  const Batch batch = probe_example_batch(task, cfg, 5);
  for (int b = 0; b < batch.B; b++) {
    std::span<const int> t(batch.tokens.data() + size_t(b) * batch.T, size_t(batch.T));
    const std::vector<Cell> cells = induction_targets(t, task.first_query(), task.last_query(), 1);
    ASSERT_EQ(cells.size(), 5u);
    for (const Cell& c : cells) {
      EXPECT_LT(c.key, c.query);
      EXPECT_EQ(t[c.key - 1], t[c.query]);  // the key follows the earlier occurrence of the query's token
      EXPECT_EQ(t[c.key], t[c.query + 1]);  // and holds exactly the token the model must predict next
    }
  }
}

TEST(ProbeExamples, AreTheFirstSequencesTheIpmrProbeMeasures) {
  const RunConfig cfg = small_copy_config(6);  // 10 probe sequences in chunks of 4
  const CopyTask task(cfg.task);
  RecordingModel model(cfg);
  measure_ipmr(model, task, cfg);
  ASSERT_EQ(model.seen.size(), size_t(10) * task.seq_len());
  const Batch examples = probe_example_batch(task, cfg, 6);  // spans the first two chunks
  EXPECT_EQ(examples.tokens, std::vector<int>(model.seen.begin(), model.seen.begin() + 6 * task.seq_len()));
}

TEST(ProbeAttention, CapturesTheChosenHeadsInTheOrderAsked) {
  const RunConfig cfg = small_copy_config(6);
  const CopyTask task(cfg.task);
  RecordingModel model(cfg);
  const std::vector<HeadId> heads = {{1, 1}, {0, 0}};
  const AttentionMaps maps = capture_attention_maps(model, probe_example_batch(task, cfg, 2), heads);
  const int T = task.seq_len();
  ASSERT_EQ(maps.probs.size(), 2u);
  for (int e = 0; e < 2; e++)
    for (int q = 0; q < T; q++) {
      EXPECT_EQ(maps.map(e, 0)[size_t(q) * T + std::min(q, 5)], 1.f) << q;  // L1H1 -> key 4*1+1
      EXPECT_EQ(maps.map(e, 1)[size_t(q) * T + 0], 1.f) << q;               // L0H0 -> key 0
    }
}

TEST(ProbeHeads, ParsesListsAndRejectsHeadsOutsideTheModel) {
  EXPECT_EQ(parse_heads("L0H1, l1h0,L0H1", 2, 4), (std::vector<HeadId>{{0, 1}, {1, 0}}));
  EXPECT_EQ(parse_heads("L1H3", 2, 4)[0].name(), "L1H3");
  for (const char* bad : {"L2H0", "L0H4", "L-1H0", "H1", "L1H", "L1H1x", "L0H1,,L1H1", ""}) {
    try {
      parse_heads(bad, 2, 4);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("L0H0..L1H3"), std::string::npos) << bad << ": " << e.what();
    }
  }
}

TEST(ProbeHeads, DefaultsAreTheTopKThenTheBestAtEachOtherDelta) {
  IpmrResult r;
  r.n_layers = 2;
  r.n_heads = 2;
  r.deltas = {1, 2};
  r.per_head[1] = {0.1, 0.9, 0.5, 0.0};
  r.per_head[2] = {0.0, 0.2, 0.1, 0.8};
  EXPECT_EQ(default_heads(r, 2), (std::vector<HeadId>{{0, 1}, {1, 0}, {1, 1}}));
  r.per_head[2] = {0.0, 0.7, 0.1, 0.3};  // the best at delta 2 is already chosen
  EXPECT_EQ(default_heads(r, 2), (std::vector<HeadId>{{0, 1}, {1, 0}}));
}
