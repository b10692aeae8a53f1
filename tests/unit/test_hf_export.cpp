// Hugging Face export/import mapping (io/hf): which configs map to LlamaForCausalLM or LlamaCanon, what is refused
// and how the message names it, the name table, config.json both ways, and the F32/BF16/F16 weight reader. The
// numerical checks against transformers are in tests/python/test_hf.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "engine/error.h"
#include "io/hf/hf_config.h"
#include "io/hf/hf_names.h"
#include "io/hf/hf_tensors.h"
#include "models/language_model.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;

RunConfig config_with(std::vector<std::string> sets) {
  std::vector<std::string> all = {"model.d_model=32", "model.n_heads=4", "model.n_layers=2", "model.mlp.kind=swiglu",
                                  "task.vocab=16",    "task.n_symbols=6"};
  all.insert(all.end(), sets.begin(), sets.end());
  return config_from_yaml_string("{}", all);
}

std::string refusal(const std::vector<std::string>& sets) {
  try {
    hf_export_format(config_with(sets).model);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfExport, FormatFollowsCanonAndRopeDim) {
  EXPECT_EQ(hf_export_format(config_with({}).model), HfFormat::llama);
  EXPECT_EQ(hf_export_format(config_with({"model.canon.set=AC"}).model), HfFormat::llama_canon);
  EXPECT_EQ(hf_export_format(config_with({"model.attention.rope_dim=4"}).model), HfFormat::llama_canon);
  // groups equal to the channel count is depthwise too
  EXPECT_EQ(hf_export_format(config_with({"model.canon.set=A", "model.canon.groups=32"}).model), HfFormat::llama_canon);
}

TEST(HfExport, RefusalsNameKeyAndValue) {
  EXPECT_NE(refusal({"model.attention.key_shift.layers=[1]"}).find("model.attention.key_shift.layers = [1]"), std::string::npos);
  EXPECT_NE(refusal({"model.attention.position=alibi"}).find("model.attention.position = 'alibi'"), std::string::npos);
  EXPECT_NE(refusal({"model.attention.position=learned"}).find("model.attention.position = 'learned'"), std::string::npos);
  EXPECT_NE(refusal({"model.attention.scoring=sign_ste"}).find("model.attention.scoring = 'sign_ste'"), std::string::npos);
  EXPECT_NE(refusal({"model.mlp.kind=relu2"}).find("model.mlp.kind = 'relu2'"), std::string::npos);
  EXPECT_NE(refusal({"model.norm=layernorm"}).find("model.norm = 'layernorm'"), std::string::npos);
  EXPECT_NE(refusal({"model.canon.set=A", "model.canon.dynamic=2"}).find("model.canon.dynamic = 2"), std::string::npos);
  EXPECT_NE(refusal({"model.canon.set=AB", "model.canon.groups=8"}).find("model.canon.groups = 8"), std::string::npos);
  EXPECT_NE(refusal({"model.canon.cross_layer.layers=[0]"}).find("model.canon.cross_layer.layers = [0]"), std::string::npos);
  EXPECT_NE(refusal({"model.family=deltanet"}).find("model.family = 'deltanet'"), std::string::npos);
  // every problem in one message
  const std::string both = refusal({"model.attention.position=alibi", "model.mlp.kind=gelu"});
  EXPECT_NE(both.find("model.attention.position"), std::string::npos);
  EXPECT_NE(both.find("model.mlp.kind"), std::string::npos);
}

TEST(HfExport, EveryTransformerParameterHasAName) {
  const RunConfig cfg = config_with({"model.canon.set=ABCD", "model.attention.qkv_bias=true", "model.mlp.bias=true"});
  auto model = build_model<float>(cfg.model, 1);
  for (const ParamInfo& p : model->params().infos()) EXPECT_NO_THROW(hf_tensor_name(p.name)) << p.name;
  EXPECT_EQ(hf_tensor_name("layers.1.attn.canon_b.weight"), "model.layers.1.self_attn.canonB.weight");
  EXPECT_EQ(hf_tensor_name("layers.0.mlp_norm.weight"), "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(hf_tensor_name("tok_emb.weight"), "model.embed_tokens.weight");
  EXPECT_THROW(hf_tensor_name("pos_emb.weight"), Error);
  EXPECT_THROW(hf_tensor_name("layers.0.canon_a.norm.weight"), Error);
  EXPECT_THROW(hf_tensor_name("layers.x.attn.q_proj.weight"), Error);
}

TEST(HfExport, ConfigJsonRoundTrip) {
  for (const std::vector<std::string>& sets : std::vector<std::vector<std::string>>{
           {}, {"model.canon.set=BD", "model.attention.rope_dim=4", "model.canon.kernel_size=3", "model.canon.residual=false"},
           {"model.tie_embeddings=true", "model.attention.qkv_bias=true", "model.attention.rope_base=500"}}) {
    const RunConfig cfg = config_with(sets);
    const nlohmann::json j = hf_config_json(cfg, hf_export_format(cfg.model));
    RunConfig back = cfg;
    back.model = model_config_from_hf(j, "config.json");
    resolve_and_validate(back);
    EXPECT_EQ(config_to_json(back)["model"], config_to_json(cfg)["model"]) << j.dump();
  }
}

std::string import_error(nlohmann::json j) {
  try {
    model_config_from_hf(j, "x/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfImport, GroupedQueryAttentionRoundTrips) {
  const RunConfig cfg = config_with({"model.n_kv_heads=2", "model.canon.set=B"});
  const nlohmann::json j = hf_config_json(cfg, HfFormat::llama_canon);
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["num_attention_heads"], 4);
  const ModelConfig back = model_config_from_hf(j, "x/config.json");
  EXPECT_EQ(back.n_kv_heads, 2);
  nlohmann::json absent = j;
  absent.erase("num_key_value_heads");  // null / absent: as many as the query heads
  EXPECT_EQ(model_config_from_hf(absent, "x/config.json").n_kv_heads, 4);
  EXPECT_EQ(hf_config_json(config_with({}), HfFormat::llama)["num_key_value_heads"], 4);
}

TEST(HfImport, RefusesWhatCanonlabCannotRepresent) {
  const RunConfig cfg = config_with({});
  const nlohmann::json good = hf_config_json(cfg, HfFormat::llama);
  auto with = [&](const std::string& key, nlohmann::json v) {
    nlohmann::json j = good;
    j[key] = v;
    return import_error(j);
  };
  EXPECT_EQ(import_error(good), "");
  EXPECT_NE(with("num_key_value_heads", 3).find("num_key_value_heads = 3"), std::string::npos);  // does not divide 4
  EXPECT_NE(with("rope_scaling", {{"rope_type", "linear"}}).find("rope_scaling"), std::string::npos);
  EXPECT_NE(with("hidden_act", "gelu").find("hidden_act = \"gelu\""), std::string::npos);
  EXPECT_NE(with("model_type", "mistral").find("model_type = \"mistral\""), std::string::npos);
  EXPECT_NE(with("head_dim", 16).find("head_dim = 16"), std::string::npos);
  EXPECT_NE(with("partial_rotary_factor", 0.5).find("partial_rotary_factor"), std::string::npos);
  nlohmann::json canon = hf_config_json(config_with({"model.canon.set=A"}), HfFormat::llama_canon);
  canon["qk_norm"] = true;
  EXPECT_NE(import_error(canon).find("qk_norm = true"), std::string::npos);
  canon["qk_norm"] = false;
  canon["rope_version"] = "lingua";
  EXPECT_NE(import_error(canon).find("rope_version = \"lingua\""), std::string::npos);
  canon["rope_version"] = "huggingface";
  canon["canon_set"] = "AbC";
  EXPECT_NE(import_error(canon).find("canon_set"), std::string::npos);
}

// A safetensors file with one tensor of each 16-bit dtype, written by hand.
TEST(HfTensors, WidensBf16AndF16Exactly) {
  const fs::path path = fs::temp_directory_path() / ("canonlab_hf_" + std::to_string(getpid()) + ".safetensors");
  const uint16_t bf16[3] = {0x3f80, 0xc040, 0x0001};  // 1, -3, the smallest bf16 subnormal
  const uint16_t f16[3] = {0x3c00, 0xc200, 0x0001};   // 1, -3, 2^-24
  std::string header = R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"F16","shape":[3],"data_offsets":[6,12]}})";
  while (header.size() % 8) header += ' ';
  {
    std::ofstream f(path, std::ios::binary);
    const uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(header.data(), std::streamsize(header.size()));
    f.write(reinterpret_cast<const char*>(bf16), 6);
    f.write(reinterpret_cast<const char*>(f16), 6);
  }
  const HfTensors t = read_hf_safetensors_header(path.string());
  float tiny;
  const uint32_t tiny_bits = 0x00010000;
  std::memcpy(&tiny, &tiny_bits, 4);
  EXPECT_EQ(read_hf_tensor("a", t.at("a")), (std::vector<float>{1.f, -3.f, tiny}));
  EXPECT_EQ(read_hf_tensor("b", t.at("b")), (std::vector<float>{1.f, -3.f, std::ldexp(1.f, -24)}));
  // b shortened by one element leaves trailing bytes after the last tensor: refused
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    std::string bad = header;
    bad.replace(bad.find("[6,12]"), 6, "[6,10]");
    bad.replace(bad.find("\"shape\":[3],\"data_offsets\":[6,10]"), 11, "\"shape\":[2]");
    bad.resize(header.size(), ' ');
    f.seekp(8);
    f.write(bad.data(), std::streamsize(bad.size()));
  }
  EXPECT_THROW(read_hf_safetensors_header(path.string()), Error);
  fs::remove(path);
}

}  // namespace
}  // namespace canonlab
