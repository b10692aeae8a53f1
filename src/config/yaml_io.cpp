// YAML files and text in (with `base:` chains and --set overrides), resolved YAML out.
#include <algorithm>
#include <filesystem>

#include "config/apply.h"
#include "config/config.h"
#include "config/schema.h"
#include "config/yaml_document.h"
#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/paths.h"
#include "io/json_read.h"

namespace canonlab {
namespace {

using namespace config_detail;
namespace fs = std::filesystem;

YAML::Node parse_yaml(const std::string& text, const std::string& origin) { return parse_yaml_text(text, origin); }

// A `base:` chain longer than this is a mistake (the shipped configs use at most 3); the limit also bounds the
// recursion below, which would otherwise overflow the stack on a chain of thousands of files.
constexpr size_t kMaxBaseChain = 32;

// The `base:` value of a top-level mapping, if any (must be a non-empty plain path).
std::optional<std::string> base_reference(const YAML::Node& root, const std::string& origin) {
  if (!root.IsMap()) return std::nullopt;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (!it->first.IsScalar() || it->first.Scalar() != "base") continue;
    if (!it->second.IsScalar() || it->second.Scalar().empty()) {
      throw Error(origin + ":" + std::to_string(it->first.Mark().line + 1) +
                  ": base: expected a path to another config file (relative to this one)");
    }
    return it->second.Scalar();
  }
  return std::nullopt;
}

std::string describe_chain(const std::vector<fs::path>& chain, const fs::path& repeated) {
  std::string text;
  for (const auto& file : chain) text += file.string() + " -> ";
  return text + repeated.string();
}

void apply_yaml_file(RunConfig& config, const fs::path& file, std::vector<fs::path>& chain);

// A document with an optional `base:`: the base chain is applied first, then this document's keys over it.
void apply_yaml_text(RunConfig& config, const std::string& text, const std::string& origin, const fs::path& base_dir,
                     std::vector<fs::path>& chain) {
  YAML::Node root = parse_yaml(text, origin);
  if (auto base = base_reference(root, origin)) {
    fs::path base_file = base_dir / *base;
    require_regular_file(base_file, origin + ": base: cannot read config file");
    apply_yaml_file(config, base_file, chain);
  }
  apply_document(config, root, Origin{origin, true}, /*base_handled=*/true);
}

void apply_yaml_file(RunConfig& config, const fs::path& file, std::vector<fs::path>& chain) {
  std::error_code ec;
  fs::path identity = fs::weakly_canonical(file, ec);
  if (ec) throw Error("cannot read config file '" + file.string() + "': " + ec.message());
  if (std::ranges::find(chain, identity) != chain.end())
    throw Error("config base cycle: " + describe_chain(chain, identity));
  if (chain.size() >= kMaxBaseChain)
    throw Error("config base chain longer than " + std::to_string(kMaxBaseChain) + " files: " +
                describe_chain(chain, identity) + "; allowed: at most " + std::to_string(kMaxBaseChain));
  chain.push_back(identity);
  apply_yaml_text(config, read_text_file(file.string(), kMaxYamlFileBytes, "config file"), file.string(),
                  file.parent_path(), chain);
  chain.pop_back();
}

std::string trim(std::string_view text) {
  auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  auto last = text.find_last_not_of(" \t");
  return std::string(text.substr(first, last - first + 1));
}

void apply_override(RunConfig& config, const std::string& assignment) {
  auto equals = assignment.find('=');
  std::string key = trim(std::string_view(assignment).substr(0, equals));
  if (equals == std::string::npos || key.empty()) {
    throw Error("malformed --set '" + brief_text(assignment) +
                "': expected key.path=value, e.g. --set train.lr=3e-4 or --set model.attention.key_shift.layers=[0,2]");
  }
  const std::string origin = "in --set " + brief_text(assignment);
  if (key == "base") throw Error("base: can only be given in a config file, not with --set (" + origin + ")");
  YAML::Node value = parse_yaml(assignment.substr(equals + 1), "--set " + brief_text(assignment));
  apply_at_path(config, key, value, Origin{origin, false});
}

void apply_override(RunConfig& config, const ConfigOverride& o) {
  if (o.path == "base") throw Error(o.origin + ": base: cannot be overridden");
  apply_at_path(config, o.path, parse_yaml(o.yaml_value, o.origin), Origin{o.origin, false});
}

void apply_overrides(RunConfig& config, const std::vector<std::string>& overrides) {
  for (const auto& assignment : overrides) apply_override(config, assignment);
}

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    auto dot = path.find('.', start);
    parts.push_back(path.substr(start, dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

}  // namespace

RunConfig load_config(const std::string& yaml_path, const std::vector<std::string>& overrides) {
  RunConfig config;
  std::vector<fs::path> chain;
  apply_yaml_file(config, yaml_path, chain);
  apply_overrides(config, overrides);
  resolve_and_validate(config);
  return config;
}

RunConfig load_config_with(const std::string& yaml_path, const std::vector<ConfigOverride>& overrides) {
  RunConfig config;
  std::vector<fs::path> chain;
  apply_yaml_file(config, yaml_path, chain);
  for (const ConfigOverride& o : overrides) apply_override(config, o);
  resolve_and_validate(config);
  return config;
}

RunConfig config_from_yaml_string(const std::string& text, const std::vector<std::string>& overrides) {
  RunConfig config;
  std::vector<fs::path> chain;
  // A relative base: is taken from the working directory; an empty base directory leaves it relative, so nothing
  // fails here when the working directory is gone and the text names no base.
  apply_yaml_text(config, text, "<config text>", fs::path(), chain);
  apply_overrides(config, overrides);
  resolve_and_validate(config);
  return config;
}

std::string config_to_yaml(const RunConfig& config) {
  RunConfig readable = config;  // accessors hand out mutable pointers; emit from a copy instead of casting
  std::string out;
  std::vector<std::string_view> open_sections;
  for (const auto& key : all_keys()) {
    auto parts = split_path(key.path);
    std::vector<std::string_view> sections(parts.begin(), parts.end() - 1);
    auto [differs, unused] = std::ranges::mismatch(open_sections, sections);
    for (size_t depth = differs - open_sections.begin(); depth < sections.size(); ++depth)
      out += std::string(2 * depth, ' ') + std::string(sections[depth]) + ":\n";
    open_sections = sections;
    out += std::string(2 * sections.size(), ' ') + std::string(parts.back()) + ": " +
           format_value(key.field(readable)) + "\n";
  }
  return out;
}

}  // namespace canonlab
