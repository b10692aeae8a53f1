#pragma once
// Typed reads of a Hugging Face config.json for import (hf_config.cpp, hf_linear_import.cpp).
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "engine/error.h"
#include "io/json_read.h"

namespace canonlab {

// Typed reads of config.json keys; every failure names the file, the key, its value (brief: a bounded prefix) and
// what is allowed. A size that becomes one of canonlab's keys is checked against that key's limit under its own name
// ("hidden_size = 1000000000: exceeds canonlab's model.d_model limit of 16384"), in 64 bits before it becomes an int.
class HfKeys {
 public:
  // prefix: how a nested object's keys are named in messages ("rope_parameters.").
  HfKeys(const nlohmann::json& j, std::string path, std::string prefix = "") : j_(j), path_(std::move(path)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw Error("Hugging Face config '" + path_ + "': " + prefix_ + brief_text(key) + " = " +
                (has(key) ? brief(j_.at(key)) : "(absent)") + ": " + why);
  }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const nlohmann::json& at(const std::string& key) const { return j_.at(key); }

  // An integer >= min; `ours` names the canonlab key it becomes, whose upper limit then applies (else 10^9).
  int integer(const std::string& key, std::optional<int> fallback, int min, std::string_view ours = {}) const {
    if (!has(key)) {
      if (!fallback) fail(key, "required; allowed: an integer >= " + std::to_string(min));
      return *fallback;
    }
    const nlohmann::json& v = j_.at(key);
    const int64_t limit = upper_limit(ours);
    if (!v.is_number_integer() || v.get<int64_t>() < min)
      fail(key, "allowed: an integer from " + std::to_string(min) + " to " + std::to_string(limit));
    if (v.get<int64_t>() > limit)
      fail(key, ours.empty() ? "allowed: an integer from " + std::to_string(min) + " to " + std::to_string(limit)
                             : "exceeds canonlab's " + std::string(ours) + " limit of " + std::to_string(limit));
    return int(v.get<int64_t>());
  }
  // A size canonlab derives from config.json keys (`formula`, e.g. "hidden_size * 8 // 3"), computed by the caller in
  // 64 bits from values integer() bounded; refused under `key` when it leaves [1, limit of `ours`].
  int derived(const std::string& key, const std::string& formula, int64_t value, std::string_view ours) const {
    const int64_t limit = upper_limit(ours);
    if (value < 1 || value > limit)
      fail(key, formula + " = " + std::to_string(value) + (value < 1 ? " is below 1" : " exceeds canonlab's " +
                                                               std::string(ours) + " limit of " + std::to_string(limit)));
    return int(value);
  }
  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_number() || !(j_.at(key).get<double>() > 0)) fail(key, "allowed: a number > 0");
    return j_.at(key).get<double>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) fail(key, "allowed: true or false");
    return j_.at(key).get<bool>();
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_string()) fail(key, "allowed: a string");
    return j_.at(key).get<std::string>();
  }

 private:
  static int64_t upper_limit(std::string_view ours) {
    constexpr int64_t kAnyInteger = 1'000'000'000;
    if (ours.empty()) return kAnyInteger;
    const double limit = config_key_upper_limit(ours);
    return std::isfinite(limit) && limit < double(kAnyInteger) ? int64_t(limit) : kAnyInteger;
  }

  const nlohmann::json& j_;
  std::string path_, prefix_;
};

}  // namespace canonlab
