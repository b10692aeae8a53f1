#pragma once
// Typed reads of a Hugging Face config.json for import (hf_config.cpp, hf_linear_import.cpp).
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/error.h"

namespace canonlab {

// Typed reads of config.json keys; every failure names the file, the key, its value and what is allowed.
class HfKeys {
 public:
  // prefix: how a nested object's keys are named in messages ("rope_parameters.").
  HfKeys(const nlohmann::json& j, std::string path, std::string prefix = "") : j_(j), path_(std::move(path)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw Error("Hugging Face config '" + path_ + "': " + prefix_ + key + " = " + (has(key) ? j_.at(key).dump() : "(absent)") +
                ": " + why);
  }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const nlohmann::json& at(const std::string& key) const { return j_.at(key); }

  int integer(const std::string& key, std::optional<int> fallback, int min) const {
    if (!has(key)) {
      if (!fallback) fail(key, "required; allowed: an integer >= " + std::to_string(min));
      return *fallback;
    }
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > 1'000'000'000)
      fail(key, "allowed: an integer from " + std::to_string(min) + " to 1000000000");
    return int(v.get<int64_t>());
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
  const nlohmann::json& j_;
  std::string path_, prefix_;
};

}  // namespace canonlab
