#include "config/yaml_document.h"

#include <utility>
#include <vector>

#include "engine/error.h"
#include "io/atomic_file.h"

namespace canonlab {
namespace {

std::string line_of(const YAML::Mark& mark) { return mark.is_null() ? "" : ":" + std::to_string(mark.line + 1); }

// Walks the node graph as an emitter would (aliases expanded), iteratively so depth cannot exhaust the stack, and
// stops at the first limit crossed.
void check_expanded_size(const YAML::Node& root, const std::string& origin) {
  std::vector<std::pair<YAML::Node, int>> stack = {{root, 1}};
  uint64_t visited = 0;
  while (!stack.empty()) {
    auto [node, depth] = std::move(stack.back());
    stack.pop_back();
    if (++visited > kMaxYamlNodes)
      throw Error(origin + ": more than " + std::to_string(kMaxYamlNodes) +
                  " YAML values once aliases (*name) are expanded; configs and sweep files are far smaller, so this "
                  "is most likely aliases referring to aliases");
    if (depth > kMaxYamlDepth)
      throw Error(origin + line_of(node.Mark()) + ": YAML nested more than " + std::to_string(kMaxYamlDepth) +
                  " levels deep; allowed: at most " + std::to_string(kMaxYamlDepth));
    if (node.IsSequence()) {
      for (const YAML::Node& item : node) stack.emplace_back(item, depth + 1);
    } else if (node.IsMap()) {
      for (auto it = node.begin(); it != node.end(); ++it) {
        stack.emplace_back(it->first, depth + 1);
        stack.emplace_back(it->second, depth + 1);
      }
    }
  }
}

}  // namespace

YAML::Node parse_yaml_text(const std::string& text, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    throw Error(origin + line_of(e.mark) + ": YAML nested more than " + std::to_string(kMaxYamlDepth) +
                " levels deep; allowed: at most " + std::to_string(kMaxYamlDepth));
  } catch (const YAML::Exception& e) {
    throw Error(origin + line_of(e.mark) + ": invalid YAML: " + e.msg);
  }
  check_expanded_size(root, origin);
  return root;
}

YAML::Node load_yaml_file(const std::string& path, const std::string& what) {
  return parse_yaml_text(read_text_file(path, kMaxYamlFileBytes, what), path);
}

}  // namespace canonlab
