// Parsed YAML -> RunConfig fields, strictly typed, through the key table. Only single-value type errors are found
// here; ranges and cross-key rules are checked on the struct in validate.cpp so JSON and code-built configs get
// the same checks.
#include "config/apply.h"

#include <map>
#include <optional>

#include "config/schema.h"
#include "engine/error.h"
#include "io/strict_number.h"
#include "io/json_read.h"

namespace canonlab::config_detail {
namespace {

// yaml-cpp tags quoted scalars "!" and plain ones "?": `d_model: "128"` is a string in YAML, so numeric and
// boolean keys reject it instead of guessing.
bool is_quoted(const YAML::Node& node) { return node.IsScalar() && node.Tag() == "!"; }

std::string describe_node(const YAML::Node& node) {
  if (node.IsNull()) return "nothing (an empty value)";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return (is_quoted(node) ? "quoted string '" : "'") + brief_text(node.Scalar()) + "'";
}

[[noreturn]] void fail_type(const std::string& path, const FieldRef& field, const YAML::Node& node) {
  throw Error(path + ": expected " + type_name(field) + ", got " + describe_node(node));
}

// One scalar into one typed slot; `expect` names the slot's type for the error.
template <class T>
T parse_scalar(const std::string& path, const YAML::Node& node, const FieldRef& expect) {
  bool plain = node.IsScalar() && !is_quoted(node);
  if constexpr (std::is_same_v<T, std::string>) {
    if (node.IsNull()) return {};
    if (node.IsScalar()) return node.Scalar();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (plain && node.Scalar() == "true") return true;
    if (plain && node.Scalar() == "false") return false;
  } else if constexpr (std::is_same_v<T, double>) {
    if (plain)
      if (auto value = parse_finite_double(node.Scalar())) return *value;
  } else {
    if (plain)
      if (auto value = parse_integer<T>(node.Scalar())) return *value;
  }
  fail_type(path, expect, node);
}

template <class T>
std::vector<T> parse_list(const std::string& path, const YAML::Node& node, const FieldRef& list_field) {
  if (node.IsNull()) return {};
  if (!node.IsSequence()) {
    throw Error(path + ": expected " + type_name(list_field) + " such as [" +
                (std::is_same_v<T, int> ? "0, 2" : "linear, embedding") + "], got " + describe_node(node));
  }
  T element_type{};
  std::vector<T> items;
  for (size_t i = 0; i < node.size(); ++i)
    items.push_back(parse_scalar<T>(path + "[" + std::to_string(i) + "]", node[i], FieldRef(&element_type)));
  return items;
}

void assign(const FieldRef& field, const std::string& path, const YAML::Node& node) {
  std::visit(
      [&](auto* slot) {
        using T = std::remove_pointer_t<decltype(slot)>;
        if constexpr (std::is_same_v<T, std::vector<int>> || std::is_same_v<T, std::vector<std::string>>)
          *slot = parse_list<typename T::value_type>(path, node, field);
        else
          *slot = parse_scalar<T>(path, node, field);
      },
      field);
}

// For an unknown key whose value is a mapping, the full path to its first leaf is what the user meant to set
// (model: {atention: {position: rope}} -> model.atention.position), and matches best against known paths.
std::string path_to_first_leaf(std::string path, YAML::Node node) {
  while (node.IsMap() && node.size() > 0 && node.begin()->first.IsScalar()) {
    path += "." + node.begin()->first.Scalar();
    node = node.begin()->second;
  }
  return path;
}

std::string join_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

class DocumentApplier {
 public:
  DocumentApplier(RunConfig& config, const Origin& origin) : config_(config), origin_(origin) {}

  void apply_root(const YAML::Node& root, bool base_handled) {
    if (root.IsNull()) return;  // an empty file is all defaults
    if (!root.IsMap()) {
      fail_at(root.Mark(), "the top level must be a mapping of sections (" +
                               join_children("") + "), got " + describe_node(root));
    }
    for (auto it = root.begin(); it != root.end(); ++it) {
      std::string key = key_text(it->first);
      if (key == "base") {
        if (!base_handled) fail_at(it->first.Mark(), "base: only allowed at the top level of a config file");
        continue;
      }
      apply(key, it->second, it->first.Mark());
    }
  }

  void apply(const std::string& spelled, const YAML::Node& value, const YAML::Mark& mark) {
    std::string canonical = canonical_path(spelled);
    if (const KeySpec* key = find_key(canonical)) return apply_leaf(*key, spelled, value, mark);
    if (is_section(canonical)) return apply_section(canonical, spelled, value, mark);
    std::string full = path_to_first_leaf(spelled, value);
    fail_at(mark, "unknown key '" + brief_text(full) + "'; " + unknown_key_hint(full));
  }

 private:
  void apply_section(const std::string& canonical, const std::string& spelled, const YAML::Node& value,
                     const YAML::Mark& mark) {
    if (value.IsNull()) return;  // `probe:` with nothing under it keeps the defaults
    if (!value.IsMap()) {
      fail_at(mark, brief_text(spelled) + " is a section; expected a mapping with keys " + join_children(canonical) +
                        ", got " + describe_node(value));
    }
    for (auto it = value.begin(); it != value.end(); ++it)
      apply(join_path(spelled, key_text(it->first)), it->second, it->first.Mark());
  }

  void apply_leaf(const KeySpec& key, const std::string& spelled, const YAML::Node& value, const YAML::Mark& mark) {
    // One document may set a key once: a repeated YAML key or model.canon plus its canon_config alias is almost
    // certainly a mistake, and silently keeping the later one would hide it.
    auto [previous, inserted] = spelled_by_canonical_.try_emplace(std::string(key.path), spelled);
    if (!inserted) {
      if (previous->second == spelled) fail_at(mark, "duplicate key '" + brief_text(spelled) + "'");
      fail_at(mark, std::string(key.path) + ": set twice, as '" + previous->second + "' and as '" + spelled +
                        "' (canon_config is an alias of model.canon); keep one");
    }
    try {
      assign(key.field(config_), std::string(key.path), value);
    } catch (const Error& e) {
      fail_at(mark, e.what());
    }
  }

  std::string key_text(const YAML::Node& key) const {
    if (!key.IsScalar()) fail_at(key.Mark(), "keys must be plain names, got " + describe_node(key));
    return key.Scalar();
  }

  static std::string join_children(const std::string& section) {
    std::string out;
    for (const auto& child : section_children(section)) out += (out.empty() ? "" : ", ") + child;
    return out;
  }

  [[noreturn]] void fail_at(const YAML::Mark& mark, const std::string& message) const {
    if (origin_.has_lines && !mark.is_null())
      throw Error(origin_.name + ":" + std::to_string(mark.line + 1) + ": " + message);
    throw Error(message + " (" + origin_.name + ")");
  }

  RunConfig& config_;
  const Origin& origin_;
  std::map<std::string, std::string> spelled_by_canonical_;
};

}  // namespace

void apply_document(RunConfig& config, const YAML::Node& root, const Origin& origin, bool base_handled) {
  DocumentApplier(config, origin).apply_root(root, base_handled);
}

void apply_at_path(RunConfig& config, const std::string& path, const YAML::Node& value, const Origin& origin) {
  DocumentApplier(config, origin).apply(path, value, YAML::Mark::null_mark());
}

}  // namespace canonlab::config_detail
