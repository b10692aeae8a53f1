// The Hugging Face model code compiled into canonlab (io/hf/remote_code.h): every file of src/io/hf/remote_code/ is
// embedded byte for byte, each Canon format gets its configuration/modeling pair plus the shared helper module, and
// config.json's auto_map names exactly those files and classes. That the code loads and agrees with canonlab is
// tests/python/test_hf.py's part (test_remote_code).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "io/hf/hf_config.h"
#include "io/hf/remote_code.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(HfRemoteCode, EmbedsEverySourceFileByteForByte) {
  const fs::path dir = fs::path(CANONLAB_SOURCE_DIR) / "src" / "io" / "hf" / "remote_code";
  std::set<std::string> on_disk;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".py") on_disk.insert(entry.path().filename().string());
  std::set<std::string> embedded;
  for (const HfRemoteFile& f : hf_remote_code_files()) {
    embedded.insert(std::string(f.name));
    EXPECT_EQ(std::string(f.text), read_file(dir / f.name)) << f.name;
  }
  EXPECT_EQ(embedded, on_disk);
}

TEST(HfRemoteCode, AutoMapNamesTheShippedFilesAndClasses) {
  for (const HfFormat f : {HfFormat::llama_canon, HfFormat::gla_canon, HfFormat::gdn_canon, HfFormat::mamba2_canon}) {
    const std::string type = hf_format_name(f);
    const nlohmann::json map = hf_auto_map(f);
    const std::vector<HfRemoteFile> files = hf_remote_code_for(f);
    ASSERT_EQ(files.size(), 3u) << type;
    std::set<std::string> names;
    for (const HfRemoteFile& file : files) names.insert(std::string(file.name));
    EXPECT_TRUE(names.count("canonlab_hf_layers.py")) << type;
    // "configuration_x.XConfig": the module is a shipped file, the class is defined in it
    for (const auto& [auto_class, suffix] : {std::pair{"AutoConfig", "Config"}, {"AutoModelForCausalLM", "ForCausalLM"}}) {
      const std::string entry = map.at(auto_class);
      const std::string module = entry.substr(0, entry.find('.')), cls = entry.substr(entry.find('.') + 1);
      EXPECT_EQ(cls, type + suffix);
      ASSERT_TRUE(names.count(module + ".py")) << entry;
      for (const HfRemoteFile& file : files)
        if (file.name == module + ".py") {
          EXPECT_NE(std::string(file.text).find("class " + cls + "("), std::string::npos);
        }
    }
    // The modeling file imports its siblings relatively: transformers copies only relative imports.
    for (const HfRemoteFile& file : files)
      if (file.name.starts_with("modeling_")) {
        EXPECT_NE(std::string(file.text).find("from .canonlab_hf_layers import"), std::string::npos) << file.name;
        EXPECT_NE(std::string(file.text).find("from .configuration_"), std::string::npos) << file.name;
      }
  }
  EXPECT_TRUE(hf_remote_code_for(HfFormat::llama).empty());
  EXPECT_TRUE(hf_auto_map(HfFormat::llama).is_null());
}

TEST(HfRemoteCode, ConfigJsonCarriesTheAutoMapOfCanonFormatsOnly) {
  const auto cfg = [](std::vector<std::string> sets) {
    sets.insert(sets.end(), {"model.d_model=32", "model.n_heads=4", "model.n_layers=2", "model.mlp.kind=swiglu",
                             "task.vocab=16", "task.n_symbols=6"});
    return config_from_yaml_string("{}", sets);
  };
  EXPECT_FALSE(hf_config_json(cfg({}), HfFormat::llama).contains("auto_map"));
  for (const auto& [sets, f] : std::vector<std::pair<std::vector<std::string>, HfFormat>>{
           {{"model.canon.set=A"}, HfFormat::llama_canon},
           {{"model.family=gla", "model.canon.set=b"}, HfFormat::gla_canon},
           {{"model.family=gdn"}, HfFormat::gdn_canon},
           {{"model.family=mamba2", "model.mamba2.d_state=8"}, HfFormat::mamba2_canon}}) {
    const RunConfig c = cfg(sets);
    ASSERT_EQ(hf_export_format(c.model), f);
    EXPECT_EQ(hf_config_json(c, f).at("auto_map"), hf_auto_map(f)) << hf_format_name(f);
  }
}

}  // namespace
}  // namespace canonlab
