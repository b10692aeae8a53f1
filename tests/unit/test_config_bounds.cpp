// Upper bounds of the size and count keys (config/schema.cpp): every integer key has one, one past it is refused
// with the key and the allowed range named, and the inputs of issue 12 that used to segfault, end in bad_alloc or
// run for minutes fail at once.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <variant>
#include <vector>

#include "config/config.h"
#include "config/schema.h"
#include "engine/error.h"

namespace canonlab {
namespace {

using config_detail::all_keys;
using config_detail::describe_range;
using config_detail::find_key;

struct Outcome {
  std::string error;  // empty when the config loaded
};

Outcome load_with(const std::vector<std::string>& sets) {
  Outcome out;
  try {
    config_from_yaml_string("", sets);
  } catch (const Error& e) {
    out.error = e.what();
  }
  return out;
}

std::string integer_text(double v) { return std::to_string(int64_t(v)); }

TEST(ConfigBounds, EveryIntegerKeyHasAnUpperBound) {
  RunConfig defaults;
  int integer_keys = 0;
  for (const auto& key : all_keys()) {
    const config_detail::FieldRef field = key.field(defaults);
    if (std::holds_alternative<int*>(field)) {
      integer_keys++;
      EXPECT_TRUE(key.upper.has_value()) << key.path << " has no upper bound (.at_most in config/schema.cpp)";
    }
    // uint64 keys are not range-checked at all (validate.cpp), so only seeds may be uint64.
    if (std::holds_alternative<uint64_t*>(field))
      EXPECT_TRUE(key.path.ends_with("seed")) << key.path << ": a uint64 key that is not a seed has no bound";
  }
  EXPECT_GT(integer_keys, 50);  // the table was read
}

TEST(ConfigBounds, OnePastTheBoundIsRefusedNamingTheKeyAndTheRange) {
  RunConfig defaults;
  for (const auto& key : all_keys()) {
    const config_detail::FieldRef field = key.field(defaults);
    const bool integer = std::holds_alternative<int*>(field);
    if (!key.upper || !(integer || std::holds_alternative<double*>(field))) continue;
    const double bound = key.upper->value;
    std::string past;
    if (integer) past = integer_text(key.upper->inclusive ? bound + 1 : bound);
    else past = key.upper->inclusive ? (bound == 0 ? "1.0" : std::to_string(bound * 2)) : std::to_string(bound);
    const Outcome r = load_with({std::string(key.path) + "=" + past});
    ASSERT_FALSE(r.error.empty()) << key.path << "=" << past << " was accepted";
    EXPECT_EQ(r.error.find(key.path), 0u) << r.error;
    EXPECT_NE(r.error.find(describe_range(key)), std::string::npos) << key.path << ": " << r.error;
  }
}

TEST(ConfigBounds, RangesPrintWholeNumbersAsTyped) {
  EXPECT_EQ(describe_range(*find_key("train.steps")), "[1, 1000000000]");
  EXPECT_EQ(describe_range(*find_key("model.vocab_size")), "[0, 16777216]");
  EXPECT_EQ(describe_range(*find_key("train.min_lr_frac")), "[0, 1]");
  EXPECT_EQ(describe_range(*find_key("model.gla.expand_k")), "(0, 16]");
}

// Issue 12, items 3 and 10: each failed late (a segfault in libgomp, std::bad_alloc without a key, minutes of
// work); now each is a config error naming the key and what is allowed, well under a second.
TEST(ConfigBounds, TheIssueInputsFailAtOnceNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train.threads=100000", "train.threads: must be in [0, 1024], got 100000"},
      {"model.d_model=65536", "model.d_model: must be in [1, 16384], got 65536"},
      {"model.vocab_size=2000000000", "model.vocab_size: must be in [0, 16777216], got 2000000000"},
      {"task.vocab=2000000000", "task.vocab: must be in [1, 16777216], got 2000000000"},
      {"train.batch_size=1000000", "train.batch_size: must be in [1, 65536], got 1000000"},
      {"train.eval_batches=1000000000", "train.eval_batches: must be in [1, 65536], got 1000000000"},
      {"model.canon.kernel_size=1000000000", "model.canon.kernel_size: must be in [1, 1024], got 1000000000"},
      {"model.n_layers=100000000", "model.n_layers: must be in [1, 1024], got 100000000"},
      {"probe.n_sequences=2000000000", "probe.n_sequences: must be in [1, 1048576], got 2000000000"},
  };
  for (const auto& [set, expected] : cases) {
    const Outcome r = load_with({set});
    EXPECT_NE(r.error.find(expected), std::string::npos) << set << " -> " << r.error;
  }
}

// 1e6 is a float in YAML: for an integer key the message says an integer was expected and shows what was given.
TEST(ConfigBounds, AFloatForAnIntegerKeyIsNamed) {
  for (const std::string value : {"1e6", "1e+06", "65536.0"}) {
    const Outcome r = load_with({"model.d_model=" + value});
    EXPECT_NE(r.error.find("model.d_model: expected an integer, got '" + value + "'"), std::string::npos) << r.error;
  }
}

// A checkpoint's stored config goes through the same validation (config_from_json) before any model is built
// from it, so one claiming a 2e9-token vocabulary is refused by name instead of allocating 256 GB.
TEST(ConfigBounds, ACheckpointConfigBeyondTheBoundsIsRefused) {
  nlohmann::json stored = config_to_json(config_from_yaml_string(""));
  stored["model"]["vocab_size"] = 2000000000;
  try {
    config_from_json(stored);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.vocab_size: must be in [0, 16777216], got 2000000000"),
              std::string::npos)
        << e.what();
  }
}

// The bounds are generous: the largest shapes a researcher could mean are still configs (the resource estimate,
// not the table, decides whether they fit the machine).
TEST(ConfigBounds, LargeButPlausibleShapesAreAccepted) {
  const Outcome r = load_with({"model.d_model=16384", "model.n_layers=1024", "model.n_heads=128",
                               "train.batch_size=65536", "train.threads=1024", "task.vocab=16777215",
                               "train.max_memory_gb=1024"});
  EXPECT_EQ(r.error, "");
}

TEST(ConfigBounds, MaxMemoryIsANonNegativeNumberOfGiB) {
  EXPECT_EQ(config_from_yaml_string("train: {max_memory_gb: 2.5}").train.max_memory_gb, 2.5);
  EXPECT_EQ(config_from_yaml_string("").train.max_memory_gb, 0.0);
  EXPECT_NE(load_with({"train.max_memory_gb=-1"}).error.find("train.max_memory_gb: must be in [0, 1048576], got -1.0"),
            std::string::npos);
}

}  // namespace
}  // namespace canonlab
