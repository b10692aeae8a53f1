// Files from elsewhere never crash canonlab (docs/engine.md, "Untrusted input"): one test per finding of the review
// that filed this — deep nesting in a Hugging Face folder and in a Lano grammar, import-hf's leftovers and memory,
// sizes that overflowed int, refusals that named neither file nor key, values echoed uncapped, --pack -1, and
// train-pack retraining a finished run.
#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "bad_inputs_support.h"
#include "cli_runner.h"
#include "config/config.h"
#include "expect_error.h"
#include "io/hf/export.h"
#include "io/hf/hf_config.h"
#include "io/hf/import.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test_support::error_of;
using test_support::read_text;
using test_support::temp_dir;
using test_support::write_text;

std::string nested_arrays(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }
constexpr size_t kDeep = 80'000;  // the review's files: about 160 KB

// A tiny trained run exported as a Llama folder, made once; each test edits a copy.
const fs::path& exported_folder() {
  static const fs::path folder = [] {
    const fs::path root = temp_dir("untrusted_source");
    const RunConfig cfg = test_support::tiny_config({"train.steps=2", "train.eval_every=2", "model.mlp.kind=swiglu"});
    test_support::train_quietly(cfg, (root / "run").string());
    export_hf((root / "run").string(), (root / "hf").string(), false);
    return root / "hf";
  }();
  return folder;
}

fs::path copy_of_folder(const std::string& name) {
  const fs::path dir = fs::path(temp_dir("untrusted_" + name));
  fs::copy(exported_folder(), dir / "hf", fs::copy_options::recursive);
  return dir;
}

// Every entry beside `out` whose name starts with out's: a finished import leaves only `out` itself.
std::vector<std::string> entries_named_like(const fs::path& out) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out.parent_path()))
    if (e.path().filename().string().starts_with(out.filename().string())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

json config_json(const fs::path& folder) { return json::parse(read_text(folder / "config.json")); }

// The config.json text with `key` set to raw JSON text (a deep value cannot go through nlohmann's dump, which recurses).
void set_raw_key(const fs::path& folder, const std::string& key, const std::string& raw_value) {
  json j = config_json(folder);
  j.erase(key);
  std::string text = j.dump();
  text.pop_back();  // the closing brace
  write_text(folder / "config.json", text + ",\"" + key + "\":" + raw_value + "}");
}

TEST(UntrustedFiles, DeepConfigJsonValueIsRefusedNamingFileAndKey) {
  const fs::path dir = copy_of_folder("deep_config");
  set_raw_key(dir / "hf", "hidden_size", nested_arrays(kDeep));
  const std::string message = error_of([&] { import_hf((dir / "hf").string(), (dir / "out").string(), {}); });
  EXPECT_CONTAINS(message, "config.json': JSON nests deeper than 64 levels at 'hidden_size[][]");
  EXPECT_LT(message.size(), 400u);
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(UntrustedFiles, DeepSafetensorsHeaderEntryOrShapeIsRefused) {
  for (const std::string& where : {std::string("entry"), std::string("shape")}) {
    const fs::path dir = copy_of_folder("deep_header_" + where);
    const fs::path weights = dir / "hf" / "model.safetensors";
    test_support::RawFile f = test_support::split_file(weights);
    const std::string deep = nested_arrays(kDeep);
    f.header.pop_back();  // '}' (the exporter pads with spaces: strip them first)
    while (f.header.back() == ' ') f.header.pop_back();
    f.header.pop_back();
    f.header += where == "entry" ? ",\"x\":" + deep + "}" : ",\"x\":{\"dtype\":\"F32\",\"shape\":" + deep + ",\"data_offsets\":[0,0]}}";
    test_support::join_file(weights, f);
    const std::string message = error_of([&] { import_hf((dir / "hf").string(), (dir / "out").string(), {}); });
    EXPECT_CONTAINS(message, "model.safetensors' are not a valid safetensors file: the header: JSON nests deeper than 3");
    EXPECT_CONTAINS(message, "at 'x");
    EXPECT_LT(message.size(), 400u);
  }
}

TEST(UntrustedFiles, DeepWeightMapValueIsRefused) {
  const fs::path dir = copy_of_folder("deep_index");
  fs::rename(dir / "hf" / "model.safetensors", dir / "hf" / "model-00001-of-00001.safetensors");
  write_text(dir / "hf" / "model.safetensors.index.json",
             "{\"weight_map\": {\"model.norm.weight\": " + nested_arrays(kDeep) + "}}");
  const std::string message = error_of([&] { import_hf((dir / "hf").string(), (dir / "out").string(), {}); });
  EXPECT_CONTAINS(message, "model.safetensors.index.json': JSON nests deeper than 64 levels at 'weight_map.model.norm.weight[");
  // and a shallow value that is not a file name is shown in brief, not whole
  write_text(dir / "hf" / "model.safetensors.index.json",
             "{\"weight_map\": {\"model.norm.weight\": [\"" + std::string(80'000, 'x') + "\"]}}");
  const std::string brief_message = error_of([&] { import_hf((dir / "hf").string(), (dir / "out").string(), {}); });
  EXPECT_CONTAINS(brief_message, "weight_map['model.norm.weight'] is [\"xxx");
  EXPECT_LT(brief_message.size(), 400u);
}

TEST(UntrustedFiles, DeepLanoGrammarIsRefusedNamingTheFile) {
  const fs::path dir = temp_dir("untrusted_grammar");
  write_text(dir / "deep.json", "{\"depth\": " + nested_arrays(kDeep) + "}");
  write_text(dir / "deep_all.json", "{\"depth\": 1, \"sizes\": [1, 1], \"idx\": [[2], [1]], \"all\": " + nested_arrays(kDeep) + "}");
  for (const std::string file : {"deep.json", "deep_all.json"}) {
    const std::string path = (dir / file).string();
    const std::string message = error_of([&] {
      config_from_yaml_string("{}", {"task.name=lano", "task.lano.grammar=" + path});
    });
    EXPECT_CONTAINS(message, "task.lano.grammar: '" + path + "': JSON nests deeper than 8 levels at '");
    EXPECT_LT(message.size(), 400u);
  }
  // a shallow non-integer is shown in brief
  write_text(dir / "long.json", "{\"depth\": \"" + std::string(80'000, 'd') + "\"}");
  const std::string message = error_of([&] {
    config_from_yaml_string("{}", {"task.name=lano", "task.lano.grammar=" + (dir / "long.json").string()});
  });
  EXPECT_CONTAINS(message, "depth is \"ddd");
  EXPECT_LT(message.size(), 400u);
}

std::string hf_error(const json& config) {
  return error_of([&] { model_config_from_hf(config, "/models/m/config.json"); });
}

TEST(UntrustedFiles, SizesAreCheckedAgainstCanonlabsLimitsUnderTheirOwnKeys) {
  const json llama = config_json(exported_folder());
  json big = llama;
  big["hidden_size"] = 1'000'000'000;
  big["num_attention_heads"] = 1;
  EXPECT_CONTAINS(hf_error(big), "Hugging Face config '/models/m/config.json': hidden_size = 1000000000: exceeds "
                                 "canonlab's model.d_model limit of 16384");
  json vocab = llama;
  vocab["vocab_size"] = 100'000'000;
  EXPECT_CONTAINS(hf_error(vocab), "vocab_size = 100000000: exceeds canonlab's model.vocab_size limit of 16777216");
  // Products of bounded keys, computed in 64 bits: hidden * ratio, heads * head_dim, heads * head_dim * expand_v.
  const json base = {{"hidden_size", 64}, {"num_hidden_layers", 1}, {"vocab_size", 10}};
  json gla = base;
  gla.update({{"model_type", "GLACanon"}, {"num_heads", 2}, {"use_short_conv", true}, {"hidden_ratio", 1'000'000'000}});
  EXPECT_CONTAINS(hf_error(gla), "hidden_ratio = 1000000000: 2/3 * hidden_size * hidden_ratio rounded up to 256 = "
                                 "42666666752 exceeds canonlab's model.mlp.hidden_dim limit of 262144");
  json gdn = base;
  gdn.update({{"model_type", "GatedDeltaNetCanon"}, {"num_heads", 16384}, {"head_dim", 1'000'000'000}});
  EXPECT_CONTAINS(hf_error(gdn), "head_dim = 1000000000: num_heads * head_dim = 16384000000000 exceeds canonlab's "
                                 "model.delta.expand_k limit (16) times hidden_size");
  gdn.update({{"num_heads", 2}, {"head_dim", 64}, {"expand_v", 1'000'000'000}});
  EXPECT_CONTAINS(hf_error(gdn), "expand_v = 1000000000: num_heads * head_dim * expand_v = 128000000000 exceeds");
  json mamba = base;
  mamba.update({{"model_type", "Mamba2Canon"}, {"num_heads", 1'000'000'000}, {"head_dim", 10'000'000}, {"expand", 2}});
  EXPECT_CONTAINS(hf_error(mamba), "head_dim = 10000000: exceeds canonlab's model.mamba2.headdim limit of 1048576");
  mamba["head_dim"] = 64;
  EXPECT_CONTAINS(hf_error(mamba), "num_heads = 1000000000: num_heads * head_dim must be expand * hidden_size = 128");
}

TEST(UntrustedFiles, LongValuesAreShownInBrief) {
  json j = config_json(exported_folder());
  j["hidden_act"] = std::string(80'000, 'a');
  const std::string hf = hf_error(j);
  EXPECT_CONTAINS(hf, "hidden_act = \"aaa");
  EXPECT_LT(hf.size(), 400u);
  const std::string yaml = error_of([] { config_from_yaml_string("model:\n  family: " + std::string(80'000, 'f') + "\n"); });
  EXPECT_CONTAINS(yaml, "model.family: 'fff");
  EXPECT_LT(yaml.size(), 400u);
  const std::string set = error_of([] { config_from_yaml_string("{}", {"model.d_model=" + std::string(80'000, '9')}); });
  EXPECT_CONTAINS(set, "model.d_model: expected an integer, got '999");
  EXPECT_LT(set.size(), 400u);
  const std::string key = error_of([] { config_from_yaml_string("{}", {"model." + std::string(80'000, 'k') + "=1"}); });
  EXPECT_CONTAINS(key, "unknown key 'model.kkk");
  EXPECT_LT(key.size(), 1000u);
}

// A pid that no process has any more: a child that has exited and been reaped.
long dead_pid() {
  pid_t pid = 0;
  char arg0[] = "true";
  char* argv[] = {arg0, nullptr};
  EXPECT_EQ(posix_spawnp(&pid, "true", nullptr, nullptr, argv, environ), 0);
  int status = 0;
  waitpid(pid, &status, 0);
  return long(pid);
}

// Field 22 of /proc/1/stat: when process 1, which lives as long as the machine, started.
std::string start_of_pid_1() {
  const std::string stat = read_text("/proc/1/stat");
  size_t at = stat.rfind(')');
  for (int field = 2; field < 22; field++) at = stat.find(' ', at + 1);
  return stat.substr(at + 1, stat.find(' ', at + 1) - at - 1);
}

TEST(UntrustedFiles, ImportIsAllOrNothing) {
  const fs::path dir = copy_of_folder("all_or_nothing");
  const fs::path out = dir / "out";
  // A failure after the config checks (the config names a second layer the weights lack) leaves nothing.
  json two_layers = config_json(dir / "hf");
  two_layers["num_hidden_layers"] = 2;
  write_text(dir / "hf" / "config.json", two_layers.dump());
  EXPECT_CONTAINS(error_of([&] { import_hf((dir / "hf").string(), out.string(), {}); }), "is missing");
  EXPECT_TRUE(entries_named_like(out).empty());
  fs::copy_file(exported_folder() / "config.json", dir / "hf" / "config.json", fs::copy_options::overwrite_existing);

  // A write that fails midway (a file-size limit stands in for a full disk; the signal it raises is ignored, so the
  // write fails with EFBIG) leaves nothing either: the model file is written, the state file is not.
  const fs::path log = dir / "import.log";
  const std::string limited = "sh -c \"trap '' XFSZ; ulimit -f 40; exec " + std::string(CANONLAB_BINARY) + " import-hf '" +
                              (dir / "hf").string() + "' --out '" + out.string() + "'\" > '" + log.string() + "' 2>&1";
  const int status = std::system(limited.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << read_text(log);
  EXPECT_CONTAINS(read_text(log), "File too large");
  EXPECT_TRUE(entries_named_like(out).empty());

  // What a killed import left (a dead writer's sibling) is removed; one of a live process is kept.
  const std::string dead = "out.tmp." + std::to_string(dead_pid()) + ".12345";
  const std::string live = "out.tmp.1." + start_of_pid_1();
  fs::create_directories(dir / dead / "checkpoints");
  write_text(dir / dead / "checkpoints" / "step_00000000.model.safetensors", std::string(1000, 'j'));
  fs::create_directories(dir / live);
  const HfImportResult r = import_hf((dir / "hf").string(), out.string(), {});
  EXPECT_EQ(entries_named_like(out), (std::vector<std::string>{"out", live}));
  EXPECT_TRUE(fs::exists(out / "imported_from.json"));
  EXPECT_TRUE(fs::exists(out / "checkpoints" / "latest.json"));
  EXPECT_EQ(r.checkpoint, (out / "checkpoints" / "step_00000000.model.safetensors").string());
  fs::remove_all(dir / live);

  // An --out that an import of an earlier canonlab left half-written is named as such.
  const fs::path old = dir / "old";
  fs::create_directories(old / "checkpoints");
  EXPECT_CONTAINS(error_of([&] { import_hf((dir / "hf").string(), old.string(), {}); }),
                  "holds checkpoints/ without imported_from.json: what an interrupted import left; remove it (rm -r");
  // An empty --out is filled.
  fs::create_directories(dir / "empty");
  import_hf((dir / "hf").string(), (dir / "empty").string(), {});
  EXPECT_TRUE(fs::exists(dir / "empty" / "imported_from.json"));
}

TEST(UntrustedFiles, WeightsHeaderIsCheckedBeforeAnyDataIsRead) {
  const fs::path dir = copy_of_folder("junk_weights");
  const fs::path weights = dir / "hf" / "model.safetensors";
  fs::remove(weights);
  {
    std::ofstream f(weights, std::ios::binary);
    const uint64_t header_len = 16;
    f.write(reinterpret_cast<const char*>(&header_len), 8);
    f << "not json at all!";
  }
  fs::resize_file(weights, uint64_t(2) << 30);  // 2 GiB, sparse: the rest reads as zeros
  const std::string message = error_of([&] { import_hf((dir / "hf").string(), (dir / "out").string(), {}); });
  EXPECT_CONTAINS(message, "model.safetensors' are not a valid safetensors file: the header: not valid JSON");
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  EXPECT_LT(usage.ru_maxrss, 1L << 20) << "peak RSS " << usage.ru_maxrss << " KiB: the 2 GiB file was read";
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(UntrustedFiles, PackTakesAPositiveNumberOrAuto) {
  const std::string sweep = test_support::source_path("configs/sweeps/ks-placement-4L-3seeds-small.yaml");
  for (const std::string bad : {"-1", "0", "-5", "1.5", "autox"}) {
    const test_support::CliResult r = test_support::run_cli("sweep " + sweep + " --dry-run --pack " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
    EXPECT_CONTAINS(r.output, "--pack: '" + bad + "' is not a pack size; allowed: a whole number of runs from 1 to 1000000, or auto");
  }
  const test_support::CliResult slurm =
      test_support::run_cli("sweep " + sweep + " --launcher slurm --dry-run --pack -1");
  EXPECT_NE(slurm.exit_code, 0);
  EXPECT_CONTAINS(slurm.output, "--pack: '-1' is not a pack size");
  EXPECT_EQ(test_support::run_cli("sweep " + sweep + " --dry-run --pack auto").exit_code, 0);
  EXPECT_EQ(test_support::run_cli("sweep " + sweep + " --dry-run --pack 3").exit_code, 0);
}

TEST(UntrustedFiles, TrainPackKeepsAFinishedRun) {
  const fs::path run = temp_dir("untrusted_train_pack");
  write_text(run / "run.yaml", config_to_yaml(test_support::tiny_config({"train.steps=2", "train.eval_every=2"})));
  const test_support::CliResult first = test_support::run_cli("train-pack " + run.string() + " --report " + (run.parent_path() / "r1.json").string());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string summary = read_text(run / "summary.json");
  std::vector<std::string> before;
  for (const auto& e : fs::recursive_directory_iterator(run)) before.push_back(e.path().string());
  std::sort(before.begin(), before.end());

  const fs::path report = run.parent_path() / "r2.json";
  const test_support::CliResult again = test_support::run_cli("train-pack " + run.string() + " --report " + report.string());
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_CONTAINS(again.output, "(already finished: kept, not trained again)");
  const json r = json::parse(read_text(report));
  EXPECT_EQ(r[0]["end"], "done");
  EXPECT_EQ(r[0]["kept"], true);
  EXPECT_EQ(read_text(run / "summary.json"), summary);
  std::vector<std::string> after;
  for (const auto& e : fs::recursive_directory_iterator(run)) after.push_back(e.path().string());
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, before);  // nothing moved aside into superseded/
}

}  // namespace
}  // namespace canonlab
