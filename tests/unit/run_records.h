#pragma once
// A run directory's metrics.jsonl as the tests compare it: one JSON record per line, without the wall-clock fields
// (tokens_per_s, elapsed_s), so an interrupted-and-resumed run and an uninterrupted one must agree exactly.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace canonlab::test_support {

inline std::vector<nlohmann::json> metrics_records(const std::filesystem::path& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    j.erase("tokens_per_s");
    j.erase("elapsed_s");
    out.push_back(j);
  }
  return out;
}

}  // namespace canonlab::test_support
