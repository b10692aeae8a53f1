// Config loading, --set, base: overlays, the canon_config alias, validation messages and YAML/JSON round trips.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <set>
#include <sstream>
#include <string>

#include "config/config.h"
#include "config/schema.h"
#include "engine/error.h"
#include "text_presets_data.h"

#ifndef CANONLAB_SOURCE_DIR
#define CANONLAB_SOURCE_DIR "."
#endif

namespace canonlab {
namespace {

namespace fs = std::filesystem;

const fs::path kSourceDir = CANONLAB_SOURCE_DIR;
const fs::path kConfigDir = kSourceDir / "configs";

std::string config_file(const std::string& name) { return (kConfigDir / name).string(); }

// Runs `action`, requires a canonlab::Error, and requires every fragment in its message.
void expect_error(const std::function<void()>& action, std::initializer_list<std::string> fragments) {
  try {
    action();
  } catch (const Error& e) {
    std::string message = e.what();
    for (const auto& fragment : fragments)
      EXPECT_NE(message.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << message;
    return;
  }
  ADD_FAILURE() << "expected canonlab::Error";
}

void expect_yaml_error(const std::string& yaml, std::initializer_list<std::string> fragments) {
  SCOPED_TRACE(yaml);
  expect_error([&] { config_from_yaml_string(yaml); }, fragments);
}

void expect_override_error(const std::string& assignment, std::initializer_list<std::string> fragments) {
  SCOPED_TRACE(assignment);
  expect_error([&] { config_from_yaml_string("", {assignment}); }, fragments);
}

// Every run config under configs/, in subfolders too (configs/sweeps holds sweep files, not run configs).
std::vector<fs::path> all_config_files() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(kConfigDir))
    if (entry.path().extension() == ".yaml" && entry.path().parent_path().filename() != "sweeps")
      files.push_back(entry.path());
  std::ranges::sort(files);
  return files;
}

// A scratch directory with the given files, for base: tests.
fs::path write_files(const std::string& name, const std::vector<std::pair<std::string, std::string>>& files) {
  fs::path dir = fs::path(testing::TempDir()) / ("canonlab_config_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [file, text] : files) std::ofstream(dir / file) << text;
  return dir;
}

// ---------------------------------------------------------------------------------------------- defaults

TEST(Config, EmptyConfigResolvesDefaults) {
  RunConfig c = config_from_yaml_string("");
  EXPECT_EQ(c.model.vocab_size, 65);   // task.vocab 64 + BOS
  EXPECT_EQ(c.model.max_seq_len, 49);  // 2 * 24 + 1
  EXPECT_EQ(c.model.attention.rope_dim, 32);  // head_dim 128 / 4
  EXPECT_EQ(c.model.mlp.hidden_dim, 512);
  EXPECT_EQ(c.train.data_seed, 43u);
  EXPECT_EQ(c.model.canon.groups, 0);  // depthwise stays 0
  EXPECT_EQ(c.train.decay_on, std::vector<std::string>{"linear"});
}

TEST(Config, SwigluHiddenDimIsRoundedEightThirds) {
  EXPECT_EQ(config_from_yaml_string("model: {mlp: {kind: swiglu}}").model.mlp.hidden_dim, 341);  // 341.33
  EXPECT_EQ(config_from_yaml_string("model: {d_model: 64, mlp: {kind: swiglu}}").model.mlp.hidden_dim, 171);  // 170.67
  EXPECT_EQ(config_from_yaml_string("model: {mlp: {kind: relu2}}").model.mlp.hidden_dim, 512);
}

TEST(Config, RopeDimStaysZeroWithoutRope) {
  EXPECT_EQ(config_from_yaml_string("model: {attention: {position: alibi}}").model.attention.rope_dim, 0);
}

TEST(Config, ExplicitValuesAreKept) {
  RunConfig c = config_from_yaml_string(
      "model: {vocab_size: 80, max_seq_len: 100, attention: {rope_dim: 16}, mlp: {hidden_dim: 300}}\n"
      "train: {data_seed: 7}");
  EXPECT_EQ(c.model.vocab_size, 80);
  EXPECT_EQ(c.model.max_seq_len, 100);
  EXPECT_EQ(c.model.attention.rope_dim, 16);
  EXPECT_EQ(c.model.mlp.hidden_dim, 300);
  EXPECT_EQ(c.train.data_seed, 7u);
}

TEST(Config, ResolveIsIdempotent) {
  RunConfig c = config_from_yaml_string("model: {mlp: {kind: swiglu}, canon: {set: DB}}");
  std::string once = config_to_yaml(c);
  resolve_and_validate(c);
  EXPECT_EQ(config_to_yaml(c), once);
}

TEST(Config, CanonSetIsWrittenInABCDOrder) {
  EXPECT_EQ(config_from_yaml_string("model: {canon: {set: DCA}}").model.canon.set, "ACD");
}

TEST(Config, EmptySectionKeepsDefaults) {
  EXPECT_EQ(config_from_yaml_string("probe:\n").probe.top_heads, 5);
}

// ---------------------------------------------------------------------------------------------- files

TEST(ConfigFiles, EveryConfigLoads) {
  test_support::ensure_text_presets_data();
  auto files = all_config_files();
  EXPECT_GE(files.size(), 35u);
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    EXPECT_NO_THROW(load_config(file.string(), {}));
  }
}

TEST(ConfigFiles, E1Bk0IsTheDescribedExperiment) {
  RunConfig c = load_config(config_file("E1-Bk0.yaml"), {});
  EXPECT_EQ(c.model.attention.scoring, "sign_ste");
  EXPECT_EQ(c.model.attention.position, "alibi");
  EXPECT_EQ(c.model.attention.rope_dim, 0);
  EXPECT_EQ(c.model.attention.key_shift.layers, std::vector<int>{0});
  EXPECT_EQ(c.model.attention.key_shift.offset, 1);
  EXPECT_EQ(c.model.d_model, 128);
  EXPECT_EQ(c.model.n_heads, 4);
  EXPECT_EQ(c.model.n_layers, 4);
  EXPECT_EQ(c.model.norm, "rmsnorm");
  EXPECT_EQ(c.model.mlp.kind, "gelu");
  EXPECT_EQ(c.model.canon.set, "");
  EXPECT_EQ(c.task.name, "copy");
  EXPECT_EQ(c.task.n_symbols, 24);
  EXPECT_EQ(c.task.vocab, 64);
  EXPECT_EQ(c.train.steps, 3000);
  EXPECT_EQ(c.train.batch_size, 64);
  EXPECT_EQ(c.train.seed, 42u);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  EXPECT_EQ(c.train.schedule, "cosine");
  EXPECT_EQ(c.train.warmup_steps, 100);
  EXPECT_DOUBLE_EQ(c.train.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(c.train.grad_clip, 1.0);
  EXPECT_EQ(c.train.eval_every, 500);
  EXPECT_EQ(c.train.checkpoint_every, 1000);
}

// Each variant must equal the base with exactly its documented change.
TEST(ConfigFiles, VariantsDifferFromBaseOnlyWhereTheyMust) {
  const RunConfig base = load_config(config_file("E1-Bk0.yaml"), {});
  auto expect_variant = [&](const std::string& file, const std::function<void(RunConfig&)>& change) {
    SCOPED_TRACE(file);
    RunConfig expected = base;
    change(expected);
    resolve_and_validate(expected);
    EXPECT_EQ(config_to_yaml(load_config(config_file(file), {})), config_to_yaml(expected));
  };
  expect_variant("E1-Bk0-alibi-off.yaml", [](RunConfig& c) { c.model.attention.position = "nope"; });
  expect_variant("E1-Bk0-offset2.yaml", [](RunConfig& c) { c.model.attention.key_shift.offset = 2; });
  expect_variant("E1-Bk0-ks-L1.yaml", [](RunConfig& c) { c.model.attention.key_shift.layers = {1}; });
  expect_variant("E1-Bk0-ks-L2.yaml", [](RunConfig& c) { c.model.attention.key_shift.layers = {2}; });
  expect_variant("E1-Bk0-ks-L3.yaml", [](RunConfig& c) { c.model.attention.key_shift.layers = {3}; });
  expect_variant("E1-Bk0-canon-AC.yaml", [](RunConfig& c) { c.model.canon.set = "AC"; });
  expect_variant("E1-Bk0-canon-ABCD.yaml", [](RunConfig& c) { c.model.canon.set = "ABCD"; });
  expect_variant("E1-Bk0-canon-ABCD-nores.yaml", [](RunConfig& c) {
    c.model.canon.set = "ABCD";
    c.model.canon.residual = false;
  });
  expect_variant("canon-config-alias.yaml", [](RunConfig& c) {
    c.model.canon = CanonConfig{.set = "AC", .kernel_size = 3, .residual = true, .activation = "silu", .groups = 4,
                                .norm = "layernorm"};
  });
}

TEST(ConfigFiles, DemoIsSmall) {
  RunConfig c = load_config(config_file("demo.yaml"), {});
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.model.n_layers, 2);
  EXPECT_EQ(c.model.canon.set, "ABCD");
  EXPECT_EQ(c.model.attention.position, "nope");
  EXPECT_LE(c.train.steps * c.train.batch_size, 1000 * 32);
}

// ---------------------------------------------------------------------------------------------- base:

TEST(ConfigBase, OverlayAppliesBaseThenFileAndOverrides) {
  fs::path dir = write_files("overlay", {{"root.yaml", "model: {d_model: 64, n_heads: 2}\ntrain: {steps: 10}\n"},
                                         {"mid.yaml", "base: root.yaml\ntrain: {steps: 20, batch_size: 8}\n"}});
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "leaf.yaml") << "base: ../mid.yaml\nmodel: {n_heads: 4}\n";
  RunConfig c = load_config((dir / "sub" / "leaf.yaml").string(), {"train.batch_size=3"});
  EXPECT_EQ(c.model.d_model, 64);     // from root
  EXPECT_EQ(c.model.n_heads, 4);      // leaf over root
  EXPECT_EQ(c.train.steps, 20);       // mid over root
  EXPECT_EQ(c.train.batch_size, 3);   // --set over everything
}

TEST(ConfigBase, ListsAreReplacedNotMerged) {
  fs::path dir = write_files("lists", {{"a.yaml", "train: {decay_on: [linear, embedding]}\n"},
                                       {"b.yaml", "base: a.yaml\ntrain: {decay_on: [canon]}\n"}});
  EXPECT_EQ(load_config((dir / "b.yaml").string(), {}).train.decay_on, std::vector<std::string>{"canon"});
}

TEST(ConfigBase, CycleIsDetected) {
  fs::path dir = write_files("cycle", {{"a.yaml", "base: b.yaml\n"}, {"b.yaml", "base: c.yaml\n"},
                                       {"c.yaml", "base: a.yaml\n"}});
  expect_error([&] { load_config((dir / "a.yaml").string(), {}); }, {"cycle", "a.yaml", "b.yaml", "c.yaml"});
  fs::path self = write_files("self", {{"s.yaml", "base: s.yaml\n"}});
  expect_error([&] { load_config((self / "s.yaml").string(), {}); }, {"cycle", "s.yaml"});
}

TEST(ConfigBase, MissingBaseNamesBothFiles) {
  fs::path dir = write_files("missing", {{"a.yaml", "base: nowhere.yaml\n"}});
  expect_error([&] { load_config((dir / "a.yaml").string(), {}); }, {"a.yaml", "base", "nowhere.yaml"});
}

TEST(ConfigBase, BaseIsRejectedOutsideFiles) {
  expect_override_error("base=E1-Bk0.yaml", {"base", "config file"});
  expect_error([] { config_from_json(nlohmann::json{{"base", "x.yaml"}}); }, {"base"});
}

TEST(ConfigBase, MissingFileIsAnError) {
  expect_error([] { load_config("/nonexistent/dir/x.yaml", {}); }, {"cannot read", "/nonexistent/dir/x.yaml"});
}

// ---------------------------------------------------------------------------------------------- --set

TEST(ConfigOverrides, ScalarsListsAndStrings) {
  RunConfig c = load_config(config_file("E1-Bk0.yaml"),
                            {"model.attention.key_shift.layers=[0,2]", "model.canon.set=ABCD", "train.lr=3e-4",
                             "model.tie_embeddings=true", "train.decay_on=[linear, canon]"});
  EXPECT_EQ(c.model.attention.key_shift.layers, (std::vector<int>{0, 2}));
  EXPECT_EQ(c.model.canon.set, "ABCD");
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(c.train.decay_on, (std::vector<std::string>{"linear", "canon"}));
}

TEST(ConfigOverrides, CreateKeysTheFileDoesNotHave) {
  // E1-Bk0.yaml sets no probe section and no mlp.hidden_dim.
  RunConfig c = load_config(config_file("E1-Bk0.yaml"), {"probe.top_heads=9", "model.mlp.hidden_dim=200"});
  EXPECT_EQ(c.probe.top_heads, 9);
  EXPECT_EQ(c.model.mlp.hidden_dim, 200);
}

TEST(ConfigOverrides, AppliedInOrder) {
  EXPECT_EQ(config_from_yaml_string("", {"train.steps=5", "train.steps=7"}).train.steps, 7);
}

TEST(ConfigOverrides, SectionValueAliasAndEmptyValue) {
  RunConfig c = config_from_yaml_string("model: {canon: {set: AC}}",
                                        {"model.attention={position: nope, scoring: sign_ste}",
                                         "canon_config.kernel_size=2", "model.canon_config.norm=rmsnorm"});
  EXPECT_EQ(c.model.attention.position, "nope");
  EXPECT_EQ(c.model.attention.scoring, "sign_ste");
  EXPECT_EQ(c.model.canon.kernel_size, 2);
  EXPECT_EQ(c.model.canon.norm, "rmsnorm");
  EXPECT_EQ(config_from_yaml_string("model: {canon: {set: AC}}", {"model.canon.set="}).model.canon.set, "");
}

TEST(ConfigOverrides, ValueMayContainEquals) {
  // Only the first '=' separates key and value.
  expect_override_error("model.norm=a=b", {"model.norm", "'a=b'", "allowed: rmsnorm, layernorm"});
}

TEST(ConfigOverrides, MalformedIsAnError) {
  expect_override_error("train.steps", {"malformed --set 'train.steps'", "key.path=value"});
  expect_override_error("=5", {"malformed --set '=5'"});
}

TEST(ConfigOverrides, UnknownKeySuggests) {
  expect_override_error("train.lrr=1", {"unknown key 'train.lrr'", "did you mean 'train.lr'?", "--set train.lrr=1"});
}

TEST(ConfigOverrides, WrongTypeNamesTheOverride) {
  expect_override_error("train.steps=many", {"train.steps: expected an integer, got 'many'", "--set train.steps=many"});
  expect_override_error("model.attention.key_shift.layers=0",
                        {"model.attention.key_shift.layers: expected a list of integers", "got '0'"});
}

// ---------------------------------------------------------------------------------------------- unknown keys

TEST(ConfigErrors, UnknownKeyDidYouMean) {
  expect_yaml_error("model:\n  atention:\n    position: rope\n",
                    {"unknown key 'model.atention.position'; did you mean 'model.attention.position'?"});
  expect_yaml_error("model: {dmodel: 64}", {"unknown key 'model.dmodel'", "did you mean 'model.d_model'?"});
  expect_yaml_error("trian: {steps: 3}", {"unknown key 'trian.steps'", "did you mean 'train.steps'?"});
}

TEST(ConfigErrors, KeyInTheWrongSectionSuggestsByName) {
  expect_yaml_error("model: {rope_dim: 8}", {"unknown key 'model.rope_dim'", "did you mean 'model.attention.rope_dim'?"});
}

TEST(ConfigErrors, UnknownKeyWithoutNeighbourListsKeys) {
  expect_yaml_error("probe: {zzzzzzzzzzzzzz: 1}", {"unknown key 'probe.zzzzzzzzzzzzzz'", "n_sequences, seed, top_heads"});
}

TEST(ConfigErrors, ErrorsNameFileAndLine) {
  fs::path dir = write_files("lines", {{"bad.yaml", "model:\n  d_model: 64\n  n_layres: 2\n"}});
  expect_error([&] { load_config((dir / "bad.yaml").string(), {}); },
               {"bad.yaml:3:", "unknown key 'model.n_layres'", "did you mean 'model.n_layers'?"});
}

TEST(ConfigErrors, DuplicateKey) {
  expect_yaml_error("train:\n  steps: 1\n  steps: 2\n", {"duplicate key 'train.steps'"});
}

TEST(ConfigErrors, StructuralMistakes) {
  expect_yaml_error("- model", {"top level must be a mapping"});
  expect_yaml_error("model: {attention: rope}", {"model.attention", "is a section", "position"});
  expect_yaml_error("model: {d_model: [1, 2]}", {"model.d_model: expected an integer, got a list"});
  expect_yaml_error("model: {d_model: 64", {"invalid YAML"});
}

// ---------------------------------------------------------------------------------------------- types

TEST(ConfigErrors, WrongTypes) {
  expect_yaml_error("model: {d_model: abc}", {"model.d_model: expected an integer, got 'abc'"});
  expect_yaml_error("model: {d_model: 64.0}", {"model.d_model: expected an integer, got '64.0'"});
  expect_yaml_error("model: {d_model: \"64\"}", {"model.d_model: expected an integer, got quoted string '64'"});
  expect_yaml_error("model: {d_model: 99999999999}", {"model.d_model: expected an integer"});
  expect_yaml_error("model: {d_model: }", {"model.d_model: expected an integer, got nothing"});
  expect_yaml_error("train: {lr: fast}", {"train.lr: expected a number, got 'fast'"});
  expect_yaml_error("train: {lr: .nan}", {"train.lr: expected a number"});
  expect_yaml_error("train: {seed: -1}", {"train.seed: expected a non-negative integer, got '-1'"});
  expect_yaml_error("model: {attention: {key_shift: {layers: [0, x]}}}",
                    {"model.attention.key_shift.layers[1]: expected an integer, got 'x'"});
}

TEST(ConfigErrors, BooleansAreTrueOrFalseOnly) {
  for (const char* word : {"yes", "True", "1", "on"}) {
    expect_yaml_error(std::string("model: {tie_embeddings: ") + word + "}",
                      {"model.tie_embeddings: expected true or false, got '" + std::string(word) + "'"});
  }
  EXPECT_FALSE(config_from_yaml_string("model: {attention: {qkv_bias: false}}").model.attention.qkv_bias);
}

// ---------------------------------------------------------------------------------------------- ranges, sets

TEST(ConfigErrors, NotInAllowedSet) {
  expect_yaml_error("model: {attention: {position: rotary}}",
                    {"model.attention.position: 'rotary' is not allowed; allowed: rope, nope, alibi, learned"});
  expect_yaml_error("model: {norm: batchnorm}", {"model.norm", "'batchnorm'", "allowed: rmsnorm, layernorm"});
  expect_yaml_error("model: {family: mamba}", {"model.family", "'mamba'", "allowed: transformer"});
  expect_yaml_error("task: {name: recall}", {"task.name", "'recall'", "allowed: copy"});
  expect_yaml_error("train: {decay_on: [linear, bias, gain]}",
                    {"train.decay_on[2]: 'gain' is not allowed", "linear, embedding, canon, norm, bias"});
  expect_yaml_error("train: {decay_on: [linear, linear]}", {"train.decay_on[1]: 'linear' is listed twice"});
  expect_yaml_error("model: {canon: {activation: relu}}", {"model.canon.activation", "allowed: none, silu, elu"});
}

TEST(ConfigErrors, OutOfRange) {
  expect_yaml_error("train: {steps: 0}", {"train.steps: must be in [1, 1000000000], got 0"});
  expect_yaml_error("train: {batch_size: -3}", {"train.batch_size: must be in [1, 65536], got -3"});
  expect_yaml_error("train: {lr: 0}", {"train.lr: must be > 0, got 0.0"});
  expect_yaml_error("train: {min_lr_frac: 1.5}", {"train.min_lr_frac: must be in [0, 1], got 1.5"});
  expect_yaml_error("train: {beta2: 1.0}", {"train.beta2: must be in [0, 1), got 1.0"});
  expect_yaml_error("train: {warmup_steps: -1}", {"train.warmup_steps: must be in [0, 1000000000], got -1"});
  expect_yaml_error("model: {attention: {key_shift: {offset: 0}}}", {"model.attention.key_shift.offset: must be in [1, 65536], got 0"});
  expect_yaml_error("model: {canon: {kernel_size: 0}}", {"model.canon.kernel_size: must be in [1, 1024], got 0"});
  expect_yaml_error("task: {n_symbols: 0}", {"task.n_symbols: must be in [1, 32767], got 0"});
  EXPECT_NO_THROW(config_from_yaml_string("train: {min_lr_frac: 0, beta1: 0, warmup_steps: 0, grad_clip: 0}"));
}

// ---------------------------------------------------------------------------------------------- cross-key rules

TEST(ConfigErrors, HeadsMustDivideWidth) {
  expect_yaml_error("model: {d_model: 130, n_heads: 4}", {"model.d_model: 130", "model.n_heads = 4"});
}

TEST(ConfigErrors, RopeDim) {
  expect_yaml_error("model: {attention: {rope_dim: 64}}", {"model.attention.rope_dim: 64", "head_dim 32"});
  expect_yaml_error("model: {attention: {rope_dim: 7}}", {"model.attention.rope_dim: 7 is odd", "even"});
  expect_yaml_error("model: {attention: {position: alibi, rope_dim: 16}}",
                    {"model.attention.rope_dim: 16", "'alibi'", "allowed: 0"});
  expect_yaml_error("model: {d_model: 20, n_heads: 4}", {"model.attention.rope_dim", "head_dim 5 is odd"});
  EXPECT_EQ(config_from_yaml_string("model: {attention: {rope_dim: 8}}").model.attention.rope_dim, 8);
}

TEST(ConfigErrors, KeyShiftLayers) {
  expect_yaml_error("model: {n_layers: 4, attention: {key_shift: {layers: [0, 4]}}}",
                    {"model.attention.key_shift.layers[1]: layer 4", "0 to 3"});
  expect_yaml_error("model: {attention: {key_shift: {layers: [-1]}}}", {"model.attention.key_shift.layers[0]: layer -1"});
  expect_yaml_error("model: {attention: {key_shift: {layers: [1, 2, 1]}}}",
                    {"model.attention.key_shift.layers[2]: layer 1 is listed twice"});
}

TEST(ConfigErrors, CrossLayerCanon) {
  // The last layer has no next layer to feed: 0 .. n_layers - 2.
  expect_yaml_error("model: {n_layers: 4, canon: {cross_layer: {layers: [0, 3]}}}",
                    {"model.canon.cross_layer.layers[1]: layer 3 has no next layer", "0 to 2", "model.n_layers = 4"});
  expect_yaml_error("model: {canon: {cross_layer: {layers: [-1]}}}", {"model.canon.cross_layer.layers[0]: layer -1"});
  expect_yaml_error("model: {canon: {cross_layer: {layers: [1, 1]}}}",
                    {"model.canon.cross_layer.layers[1]: layer 1 is listed twice"});
  expect_yaml_error("model: {canon: {cross_layer: {activation: relu}}}", {"model.canon.cross_layer.activation", "relu"});
  expect_yaml_error("model: {canon: {cross_layer: {kernel_size: 0}}}", {"model.canon.cross_layer.kernel_size"});
  const RunConfig c = config_from_yaml_string("model: {n_layers: 3, canon: {cross_layer: {layers: [1, 0]}}}");
  EXPECT_EQ(c.model.canon.cross_layer.layers, (std::vector<int>{1, 0}));
}

TEST(ConfigErrors, CanonLetters) {
  expect_yaml_error("model: {canon: {set: AbC}}",
                    {"model.canon.set", "lowercase 'b'", "transformer family has no built-in conv", "linear-time"});
  expect_yaml_error("model: {canon: {set: AE}}", {"model.canon.set", "'E'", "allowed letters: A, B, C, D"});
  expect_yaml_error("model: {canon: {set: ac}}", {"model.canon.set", "'a'", "uppercase"});
  expect_yaml_error("model: {canon: {set: ACA}}", {"model.canon.set", "'A' appears twice"});
}

TEST(ConfigErrors, CanonGroupsMustDivideEveryChannelCount) {
  // d_model 128: A/C 128 channels, B 384, D 512 (gelu) or 2 * 341 = 682 (swiglu).
  EXPECT_NO_THROW(config_from_yaml_string("model: {canon: {set: B, groups: 3}}"));
  expect_yaml_error("model: {canon: {set: AB, groups: 3}}", {"model.canon.groups: 3", "128 channels of Canon-A"});
  expect_yaml_error("model: {canon: {set: C, groups: 3}}", {"model.canon.groups: 3", "Canon-C"});
  expect_yaml_error("model: {canon: {set: B, groups: 256}}", {"model.canon.groups: 256", "384 channels of Canon-B"});
  expect_yaml_error("model: {mlp: {kind: swiglu}, canon: {set: D, groups: 4}}",
                    {"model.canon.groups: 4", "682 channels of Canon-D", "2 * mlp.hidden_dim"});
  EXPECT_NO_THROW(config_from_yaml_string("model: {mlp: {kind: swiglu}, canon: {set: D, groups: 2}}"));
  EXPECT_NO_THROW(config_from_yaml_string("model: {canon: {set: '', groups: 7}}"));  // no Canon, nothing to divide
}

TEST(ConfigErrors, TaskAndVocab) {
  expect_yaml_error("task: {vocab: 10, n_symbols: 11}", {"task.n_symbols: 11", "task.vocab = 10"});
  expect_yaml_error("model: {vocab_size: 64}", {"model.vocab_size: 64", "task.vocab + 1 = 65"});
  expect_yaml_error("model: {max_seq_len: 40}", {"model.max_seq_len: 40", "49"});
  expect_yaml_error("model: {tie_embeddings: true, vocab_size: 80}", {"model.tie_embeddings", "65", "80"});
  EXPECT_NO_THROW(config_from_yaml_string("model: {tie_embeddings: true}"));
}

TEST(ConfigErrors, ValidateRunsOnCodeBuiltConfigs) {
  RunConfig c;
  c.train.steps = 0;
  expect_error([&] { resolve_and_validate(c); }, {"train.steps"});
}

// ---------------------------------------------------------------------------------------------- alias

TEST(ConfigAlias, CanonConfigAtTopLevelAndUnderModel) {
  for (const char* yaml : {"canon_config: {set: AC, kernel_size: 3, residual: true, groups: 4, activation: silu, norm: layernorm}",
                           "model: {canon_config: {set: AC, kernel_size: 3, residual: true, groups: 4, activation: silu, norm: layernorm}}"}) {
    SCOPED_TRACE(yaml);
    RunConfig c = config_from_yaml_string(yaml);
    EXPECT_EQ(c.model.canon.set, "AC");
    EXPECT_EQ(c.model.canon.kernel_size, 3);
    EXPECT_EQ(c.model.canon.groups, 4);
    EXPECT_EQ(c.model.canon.activation, "silu");
    EXPECT_EQ(c.model.canon.norm, "layernorm");
    std::string resolved = config_to_yaml(c);
    EXPECT_EQ(resolved.find("canon_config"), std::string::npos);
    EXPECT_NE(resolved.find("  canon:\n    set: AC\n    kernel_size: 3\n"), std::string::npos) << resolved;
  }
}

TEST(ConfigAlias, DifferentKeysMayMix) {
  RunConfig c = config_from_yaml_string("model: {canon: {set: AC}}\ncanon_config: {kernel_size: 2}");
  EXPECT_EQ(c.model.canon.set, "AC");
  EXPECT_EQ(c.model.canon.kernel_size, 2);
}

TEST(ConfigAlias, SameKeyTwiceIsAnError) {
  expect_yaml_error("model: {canon: {kernel_size: 3}}\ncanon_config: {kernel_size: 2}",
                    {"model.canon.kernel_size", "'model.canon.kernel_size'", "'canon_config.kernel_size'"});
  expect_yaml_error("model: {canon_config: {set: A}}\ncanon_config: {set: C}",
                    {"model.canon.set", "'model.canon_config.set'", "'canon_config.set'"});
}

TEST(ConfigAlias, TyposInsideAliasAreCaught) {
  expect_yaml_error("canon_config: {kernal_size: 3}", {"unknown key 'canon_config.kernal_size'", "model.canon.kernel_size"});
}

// ---------------------------------------------------------------------------------------------- round trips

TEST(ConfigRoundTrip, YamlIsExactForEveryConfigFile) {
  test_support::ensure_text_presets_data();
  for (const auto& file : all_config_files()) {
    SCOPED_TRACE(file.string());
    std::string first = config_to_yaml(load_config(file.string(), {}));
    EXPECT_EQ(config_to_yaml(config_from_yaml_string(first)), first);
  }
}

TEST(ConfigRoundTrip, JsonIsExactForEveryConfigFile) {
  test_support::ensure_text_presets_data();
  for (const auto& file : all_config_files()) {
    SCOPED_TRACE(file.string());
    RunConfig c = load_config(file.string(), {});
    nlohmann::json json = config_to_json(c);
    EXPECT_EQ(config_to_json(config_from_json(json)), json);
    EXPECT_EQ(config_to_yaml(config_from_json(json)), config_to_yaml(c));
    // Through text too, as checkpoint metadata is stored.
    EXPECT_EQ(config_to_json(config_from_json(nlohmann::json::parse(json.dump()))), json);
  }
}

TEST(ConfigRoundTrip, AwkwardDoublesAndLargeSeedsSurvive) {
  RunConfig c = config_from_yaml_string(
      "train: {lr: 0.30000000000000004, min_lr_frac: 1e-300, seed: 18446744073709551615, weight_decay: 3}\n"
      "model: {norm_eps: 1.0e-12, init_std: 0.1}");
  EXPECT_EQ(c.train.seed, 18446744073709551615ull);
  for (const RunConfig& back : {config_from_yaml_string(config_to_yaml(c)), config_from_json(config_to_json(c))}) {
    EXPECT_EQ(back.train.lr, c.train.lr);  // bit-exact, not DOUBLE_EQ
    EXPECT_EQ(back.train.min_lr_frac, c.train.min_lr_frac);
    EXPECT_EQ(back.model.norm_eps, c.model.norm_eps);
    EXPECT_EQ(back.train.seed, c.train.seed);
    EXPECT_EQ(back.train.weight_decay, 3.0);
  }
}

TEST(ConfigRoundTrip, YamlWritesEveryKeyNestedInSchemaOrder) {
  std::string yaml = config_to_yaml(config_from_yaml_string(""));
  EXPECT_EQ(yaml.rfind("model:\n  family: transformer\n", 0), 0u) << yaml;
  EXPECT_NE(yaml.find("  attention:\n    position: rope\n"), std::string::npos);
  EXPECT_NE(yaml.find("    key_shift:\n      layers: []\n      offset: 1\n"), std::string::npos);
  EXPECT_NE(yaml.find("    set: \"\"\n"), std::string::npos);
  EXPECT_NE(yaml.find("  lr: 0.001\n"), std::string::npos);
  EXPECT_NE(yaml.find("  decay_on: [linear]\n"), std::string::npos);
  size_t leaf_lines = 0;
  std::istringstream lines(yaml);
  for (std::string line; std::getline(lines, line);)
    if (line.back() != ':') ++leaf_lines;
  EXPECT_EQ(leaf_lines, config_detail::all_keys().size());
}

TEST(ConfigRoundTrip, JsonHasTheYamlShape) {
  nlohmann::json json = config_to_json(config_from_yaml_string(""));
  EXPECT_EQ(json["model"]["attention"]["rope_dim"], 32);
  EXPECT_EQ(json["model"]["canon"]["set"], "");
  EXPECT_EQ(json["train"]["decay_on"], nlohmann::json::array({"linear"}));
  EXPECT_TRUE(json["train"]["seed"].is_number_unsigned());
}

TEST(ConfigRoundTrip, JsonIsStrict) {
  nlohmann::json json = config_to_json(config_from_yaml_string(""));
  json["model"]["d_model"] = "128";
  expect_error([&] { config_from_json(json); }, {"model.d_model: expected an integer, got quoted string '128'"});
  json = config_to_json(config_from_yaml_string(""));
  json["train"]["lrr"] = 1.0;
  expect_error([&] { config_from_json(json); }, {"unknown key 'train.lrr'", "did you mean 'train.lr'?"});
  json = config_to_json(config_from_yaml_string(""));
  json["train"]["steps"] = 0;
  expect_error([&] { config_from_json(json); }, {"train.steps: must be in [1, 1000000000]"});
}

// ---------------------------------------------------------------------------------------------- schema, docs

TEST(ConfigSchema, PathsAreUniqueAndSectionsContiguous) {
  std::vector<std::string> closed_sections;
  std::string current;
  std::set<std::string_view> paths;
  for (const auto& key : config_detail::all_keys()) {
    EXPECT_TRUE(paths.insert(key.path).second) << key.path;
    std::string section(key.path.substr(0, key.path.rfind('.')));
    if (section == current) continue;
    EXPECT_EQ(std::ranges::find(closed_sections, section), closed_sections.end()) << "split section " << section;
    closed_sections.push_back(current);
    current = section;
  }
}

TEST(ConfigSchema, DocsContainTheGeneratedReference) {
  std::ifstream in(kSourceDir / "docs" / "config.md");
  ASSERT_TRUE(in) << "docs/config.md missing";
  std::stringstream docs;
  docs << in.rdbuf();
  EXPECT_NE(docs.str().find(config_reference_markdown()), std::string::npos)
      << "docs/config.md is out of date; paste the output of config_reference_markdown()";
}

// ---------------------------------------------------------------------------------------------- linear families

TEST(ConfigLinearFamilies, CanonLettersFollowTheFamily) {
  EXPECT_EQ(config_from_yaml_string("model: {family: gdn, canon: {set: DCbA}}").model.canon.set, "AbCD");
  EXPECT_EQ(config_from_yaml_string("model: {family: gla, canon: {set: AbbCD}}").model.canon.set, "AbCD");
  EXPECT_EQ(config_from_yaml_string("model: {family: hybrid, n_layers: 2, layer_pattern: MA, canon: {set: bB}}").model.canon.set, "bB");
}

TEST(ConfigLinearFamilies, ErrorsNameTheKeyAndWhatIsAllowed) {
  auto expect = [](const std::vector<std::string>& sets, std::initializer_list<std::string> fragments) {
    expect_error([&] { config_from_yaml_string("", sets); }, fragments);
  };
  expect({"model.family=mamba2", "model.canon.set=AbC"}, {"model.canon.set", "Canon-C", "model.mamba2.mlp", "A, b, B"});
  expect({"model.family=gdn", "model.canon.set=Abx"}, {"model.canon.set", "'x'", "A, b, B, C, D"});
  expect({"model.family=gla", "model.canon.set=bAb"}, {"model.canon.set", "'b' appears twice"});
  expect({"model.family=hybrid", "model.layer_pattern=MMA"}, {"model.layer_pattern", "3 letters", "n_layers is 4"});
  expect({"model.family=hybrid", "model.n_layers=2", "model.layer_pattern=MX"}, {"model.layer_pattern", "'X'", "layer 1", "S sliding-window"});
  expect({"model.family=gla", "model.layer_pattern=GG"}, {"model.layer_pattern", "only read when model.family is 'hybrid'"});
  expect({"model.family=mamba2", "model.mamba2.headdim=48"}, {"model.mamba2.headdim", "48", "does not divide d_inner", "256"});
  expect({"model.family=mamba2", "model.mamba2.ngroups=3"}, {"model.mamba2.ngroups", "3", "does not divide", "4 SSM heads"});
  expect({"model.family=gla", "model.gla.expand_k=0.3"}, {"model.gla.expand_k", "0.3", "38", "n_heads = 4"});
  expect({"model.family=gdn", "model.delta.expand_v=0.01"}, {"model.delta.expand_v", "positive multiple"});
  expect({"model.family=gla", "model.gla.feature_map=tanh"}, {"model.gla.feature_map", "'tanh'", "elu_plus_one"});
  expect({"model.family=gla", "model.gla.clamp_min=0.5"}, {"model.gla.clamp_min", "0.5"});
  expect({"model.family=gdn", "model.attention.key_shift.layers=[0]"}, {"model.attention.key_shift.layers[0]", "'D' layer", "attention layers only"});
  expect({"model.family=mamba2", "model.canon.set=B", "model.canon.groups=3"}, {"model.canon.groups", "3", "Mamba2 in_proj"});
  expect({"model.recurrent.kernel=fast"}, {"model.recurrent.kernel", "'fast'", "chunked, naive"});
  expect({"model.family=transformer", "model.canon.set=b"}, {"model.canon.set", "lowercase 'b'"});
}

TEST(ConfigLinearFamilies, MambaHeadDimIsResolved) {
  RunConfig c = config_from_yaml_string("model: {family: mamba2, d_model: 64, n_heads: 4}");
  EXPECT_EQ(c.model.mamba2.headdim, 32);  // expand 2 * 64 / 4 heads
}

}  // namespace
}  // namespace canonlab

namespace canonlab {
namespace {

// The token-shift family (docs/token-shift.md): mode and dims, resolved and refused.
TEST(Config, KeyShiftModesAndPartialDims) {
  const std::string base = "model: {d_model: 64, n_heads: 4, attention: {key_shift: {layers: [0], ";
  const RunConfig nope = config_from_yaml_string(base + "mode: partial}, position: nope}}");
  EXPECT_EQ(nope.model.attention.key_shift.dims, (std::vector<int>{0, 16}));
  const RunConfig partial_rope =
      config_from_yaml_string(base + "mode: partial}, position: rope, rope_dim: 4}}");
  EXPECT_EQ(partial_rope.model.attention.key_shift.dims, (std::vector<int>{4, 16}));  // the dims RoPE leaves alone
  const RunConfig explicit_dims = config_from_yaml_string(base + "mode: partial, dims: [2, 6]}, position: rope}}");
  EXPECT_EQ(explicit_dims.model.attention.key_shift.dims, (std::vector<int>{2, 6}));
  EXPECT_EQ(config_from_yaml_string(config_to_yaml(partial_rope)).model.attention.key_shift.dims,
            (std::vector<int>{4, 16}));
  expect_yaml_error(base + "mode: partial}, position: rope}}",
                    {"model.attention.key_shift.dims: [] means the dims RoPE leaves alone", "rotates all 16 dims"});
  expect_yaml_error(base + "mode: partial, dims: [6, 2]}, position: nope}}",
                    {"model.attention.key_shift.dims: [6, 2] is not a range of head dims", "head_dim 16"});
  expect_yaml_error(base + "mode: partial, dims: [0, 17]}, position: nope}}", {"[0, 17] is not a range"});
  expect_yaml_error(base + "mode: kv, dims: [0, 4]}}}", {"only applies with mode 'partial'", "is 'kv'"});
  expect_yaml_error(base + "mode: shifted}}}", {"model.attention.key_shift.mode", "'shifted' is not allowed",
                                               "add, replace, smeared, kv, partial"});
}

TEST(Config, KeyValueHeadsResolveAndMustDivideTheQueryHeads) {
  EXPECT_EQ(config_from_yaml_string("model: {n_heads: 4}").model.n_kv_heads, 4);  // 0: as many as the query heads
  const RunConfig gqa = config_from_yaml_string("model: {n_heads: 4, n_kv_heads: 2}");
  EXPECT_EQ(gqa.model.n_kv_heads, 2);
  EXPECT_EQ(config_from_yaml_string(config_to_yaml(gqa)).model.n_kv_heads, 2);
  EXPECT_EQ(config_from_yaml_string("model: {family: mamba2, n_kv_heads: 4, canon: {set: b}}").model.n_kv_heads, 4);
  expect_yaml_error("model: {n_heads: 4, n_kv_heads: 3}",
                    {"model.n_kv_heads: 3 does not divide model.n_heads = 4", "allowed: a divisor of 4, or 0"});
  expect_yaml_error("model: {family: gla, n_heads: 4, n_kv_heads: 2, canon: {set: b}}",
                    {"model.n_kv_heads: 2 only applies to attention layers", "'gla' has none", "allowed: 0 or"});
  expect_yaml_error("model: {n_kv_heads: -1}", {"model.n_kv_heads"});
}

}  // namespace
}  // namespace canonlab
