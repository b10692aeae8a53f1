#pragma once
// Internal to src/config: the one table of config keys. Parsing, --set, emitting, validation of single keys and
// the docs table are all driven from it, so a key is declared exactly once (in schema.cpp).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/run_config.h"

namespace canonlab::config_detail {

// A pointer to the struct field a key stands for; the alternative held is the key's type.
using FieldRef = std::variant<int*, uint64_t*, double*, bool*, std::string*, std::vector<int>*,
                              std::vector<std::string>*>;
using FieldAccessor = FieldRef (*)(RunConfig&);

struct Bound {
  double value;
  bool inclusive;
};

struct KeySpec {
  std::string_view path;         // "model.attention.rope_dim"
  FieldAccessor field;
  std::string_view description;  // one line, for docs
  std::vector<std::string_view> choices = {};  // strings (or each list item) must be one of these
  std::optional<Bound> lower = {};
  std::optional<Bound> upper = {};
  std::string_view rule = {};    // cross-key rule checked in validate.cpp, shown in the docs' allowed column

  // Builders used by the table.
  KeySpec one_of(std::vector<std::string_view> allowed) && { choices = std::move(allowed); return std::move(*this); }
  KeySpec at_least(double v) && { lower = Bound{v, true}; return std::move(*this); }
  KeySpec above(double v) && { lower = Bound{v, false}; return std::move(*this); }
  KeySpec at_most(double v) && { upper = Bound{v, true}; return std::move(*this); }
  KeySpec below(double v) && { upper = Bound{v, false}; return std::move(*this); }
  KeySpec with_rule(std::string_view text) && { rule = text; return std::move(*this); }
};

std::span<const KeySpec> all_keys();
const KeySpec* find_key(std::string_view path);
bool is_section(std::string_view path);            // "model", "model.attention", ...
std::vector<std::string> section_children(std::string_view section);  // immediate child names

// Alias spellings (canon_config, model.canon_config) rewritten to their canonical path; others unchanged.
std::string canonical_path(std::string_view path);

// "did you mean" text for an unknown key, or a list of valid keys where nothing is close.
std::string unknown_key_hint(std::string_view path);

std::string type_name(const FieldRef& field);       // "an integer", "a list of strings", ...
std::string type_label(const FieldRef& field);      // short, for docs: "int", "list[str]", ...

// YAML text of a value exactly as config_to_yaml writes it (shortest round-trip doubles, flow lists).
std::string format_double(double value);
std::string format_scalar_string(const std::string& value);
std::string format_value(const FieldRef& field);

std::string describe_range(const KeySpec& key);     // ">= 1", "[0, 1)"; empty without bounds
std::string describe_allowed(const KeySpec& key);   // ">= 1", "[0, 1)", "rope, nope, ...", plus the rule
std::string join(std::span<const std::string_view> items, std::string_view separator);

}  // namespace canonlab::config_detail
