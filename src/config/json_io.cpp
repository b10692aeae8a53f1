// RunConfig <-> JSON for checkpoint metadata. Reading goes through the same key table and strict typing as YAML
// (the JSON is converted to a YAML node tree), so a checkpoint cannot smuggle in a key or type the YAML would
// reject. Doubles are written by nlohmann (round-trip precision) and converted with shortest round-trip text,
// so values come back bit-exact.
#include "config/apply.h"
#include "config/config.h"
#include "config/schema.h"
#include "engine/error.h"

namespace canonlab {
namespace {

using namespace config_detail;

nlohmann::json to_json_value(const FieldRef& field) {
  return std::visit([](const auto* slot) { return nlohmann::json(*slot); }, field);
}

nlohmann::json::json_pointer pointer_for(std::string_view path) {
  std::string pointer = "/" + std::string(path);
  std::ranges::replace(pointer, '.', '/');
  return nlohmann::json::json_pointer(pointer);
}

YAML::Node quoted_scalar(const std::string& text) {
  YAML::Node node(text);
  node.SetTag("!");  // a JSON string is a string: "128" must not satisfy an integer key
  return node;
}

// A resolved config nests 4 levels (model.attention.key_shift.layers[i]); anything much deeper is not a config,
// and the limit keeps this recursion from overflowing the stack on a hostile checkpoint header ("[" x 200000).
constexpr int kMaxConfigJsonDepth = 16;

YAML::Node to_yaml_node(const nlohmann::json& value, int depth = 1) {
  using Type = nlohmann::json::value_t;
  if (depth > kMaxConfigJsonDepth && (value.is_object() || value.is_array()))
    throw Error("config JSON nests more than " + std::to_string(kMaxConfigJsonDepth) +
                " levels deep; a canonlab config has at most 4");
  switch (value.type()) {
    case Type::object: {
      YAML::Node map(YAML::NodeType::Map);
      for (const auto& [key, item] : value.items()) map[key] = to_yaml_node(item, depth + 1);
      return map;
    }
    case Type::array: {
      YAML::Node list(YAML::NodeType::Sequence);
      for (const auto& item : value) list.push_back(to_yaml_node(item, depth + 1));
      return list;
    }
    case Type::string: return quoted_scalar(value.get<std::string>());
    case Type::boolean: return YAML::Node(std::string(value.get<bool>() ? "true" : "false"));
    case Type::number_integer: return YAML::Node(std::to_string(value.get<int64_t>()));
    case Type::number_unsigned: return YAML::Node(std::to_string(value.get<uint64_t>()));
    case Type::number_float: return YAML::Node(format_double(value.get<double>()));
    default: return YAML::Node(YAML::NodeType::Null);
  }
}

}  // namespace

nlohmann::json config_to_json(const RunConfig& config) {
  RunConfig readable = config;  // accessors hand out mutable pointers; read from a copy instead of casting
  nlohmann::json json = nlohmann::json::object();
  for (const auto& key : all_keys()) json[pointer_for(key.path)] = to_json_value(key.field(readable));
  return json;
}

RunConfig config_from_json(const nlohmann::json& json) {
  RunConfig config;
  apply_document(config, to_yaml_node(json), Origin{"config JSON", false}, /*base_handled=*/false);
  resolve_and_validate(config);
  return config;
}

}  // namespace canonlab
