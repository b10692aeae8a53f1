#pragma once
// Reading YAML that users wrote (configs, sweep files) with limits, so a hostile or mistaken file gets a clear
// error instead of a crash, a hang or an out-of-memory:
//   - files: regular files only (not /dev/zero, not a directory), at most kMaxYamlFileBytes;
//   - nesting: at most kMaxYamlDepth levels (yaml-cpp's own guard stops at 2000 with an unhelpful message);
//   - size after alias expansion: at most kMaxYamlNodes nodes. yaml-cpp shares an aliased node instead of copying
//     it, so a 1 KB "billion laughs" file parses instantly but any walk over it (emitting, converting, labelling)
//     visits every expansion. Counting expansions once, here, bounds every later walk.
#include <cstdint>
#include <string>

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

namespace canonlab {

inline constexpr uint64_t kMaxYamlFileBytes = uint64_t(1) << 20;  // 1 MiB: the largest shipped config is ~4 KB
inline constexpr int kMaxYamlDepth = 64;
inline constexpr uint64_t kMaxYamlNodes = 100'000;

// Parses `text`; `origin` (a file path, "--set k=v") prefixes every error, with the line where known.
YAML::Node parse_yaml_text(const std::string& text, const std::string& origin);

// Reads and parses a YAML file. `what` says what the file is for in errors ("config file", "sweep file").
YAML::Node load_yaml_file(const std::string& path, const std::string& what);

}  // namespace canonlab
