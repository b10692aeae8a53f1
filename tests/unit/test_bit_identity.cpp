// The backend seam changed no bit of CPU fp32 training. Each case trains 20 steps at train.threads=2 and compares
// the data checksums of its final model and optimizer files (xxh64 of every tensor byte, canonlab.data_checksum)
// with values recorded from the engine before the seam (commit ac9a2be) by
//   scripts/bit-identity.sh <ac9a2be build>/canonlab OUT 20
// A refactor that is meant to change no number must keep these; a change that is meant to change numbers (a new
// kernel, another summation order) updates them with the same command, saying so in its commit.
//
// The values hold for oneDNN's AVX2 GEMM kernels, which is what the recording machine had. oneDNN picks its kernels
// by the CPU (an AVX-512 machine trains other bits: E1-Bk0 gives model checksum e2abb4687cffa8e6 there, and
// ONEDNN_MAX_CPU_ISA=AVX or SSE41 gives others again), so each case first caps oneDNN at AVX2 for its process, as
// scripts/bit-identity.sh does. Record with the same cap.
#include <gtest/gtest.h>
#include <oneapi/dnnl/dnnl.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "config/config.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;

struct Recorded {
  const char* name;
  const char* config;
  std::vector<std::string> sets;
  const char* model_checksum;  // of step_00000020.model.safetensors
  const char* state_checksum;  // of step_00000020.state.safetensors (AdamW m, v)
};
std::ostream& operator<<(std::ostream& os, const Recorded& r) { return os << r.name; }

// Keep in step with scripts/bit-identity.sh.
const std::vector<Recorded>& recorded() {
  static const std::vector<Recorded> cases = {
      {"e1_bk0", "configs/E1-Bk0.yaml", {}, "8fe87e6f6712b4ec", "5f17e8badeb16834"},
      {"mamba2_mlp_AbCD", "configs/linear/mamba2-mlp-4L128-canon-AbCD.yaml", {}, "5e3c9139701303dc",
       "1325604ba1e0e0e0"},
      {"mamba2_noconv_mimetic",
       "configs/linear/mamba2-4L128.yaml",
       {"model.canon.set=", "model.mamba2.init=mimetic"},
       "aaf06121f2ed1488",
       "e39eb72c50a1e8a3"},
      {"gla_AbCD", "configs/linear/gla-4L128-canon-AbCD.yaml", {}, "b0f83cce1f475025", "20f6f07dfd9ffac8"},
      {"gla_featmap_clamp",
       "configs/linear/gla-4L128.yaml",
       {"model.gla.feature_map=elu_plus_one", "model.gla.clamp_min=-0.1", "model.canon.set=bB"},
       "b103b450d7664d9f",
       "7439e7562aeeff31"},
      {"gdn_AbCD", "configs/linear/gdn-4L128-canon-AbCD.yaml", {}, "4fe30b411cb0e331", "0f341261799323bb"},
      {"deltanet_AbCD", "configs/linear/deltanet-4L128-canon-AbCD.yaml", {}, "2a0d1ae49150834a",
       "9652da41e5de5a65"},
      {"hybrid_MMMA_AbCD", "configs/linear/hybrid-MMMA-4L128-canon-AbCD.yaml", {}, "cbbfc38dcddddf68",
       "b98db160d84d040c"},
      {"hybrid_DDDS", "configs/linear/hybrid-DDDS-4L128.yaml", {}, "32e4607131d67325", "df0b9f42ab5a4c76"},
      {"nope_canon_ABCD_depo", "configs/small/depo.yaml", {}, "ad6d2f3e7082f026",
       "9557801754cd4a81"},
      {"rope_induction", "configs/demo-induction.yaml", {}, "14178f39c9c3ce77", "86d5ca0afc75cb3b"},
      {"learned_layernorm_relu2",
       "configs/E1-Bk0.yaml",
       {"model.attention.position=learned", "model.attention.scoring=softmax", "model.norm=layernorm",
        "model.mlp.kind=relu2", "model.mlp.bias=true", "model.attention.qkv_bias=true", "model.canon.set=ABCD",
        "model.canon.activation=silu", "model.canon.norm=rmsnorm", "model.attention.key_shift.layers=[1]",
        "model.attention.ste_grad=clipped"},
       "7ac0df5ece212df3",
       "cda38b93af9a8e35"},
      {"partial_rope_swiglu_tied",
       "configs/E1-Bk0.yaml",
       {"model.attention.position=rope", "model.attention.rope_dim=16", "model.mlp.kind=swiglu", "model.mlp.bias=true",
        "model.tie_embeddings=true", "model.vocab_size=65", "model.canon.set=AC", "model.canon.activation=elu",
        "model.canon.norm=layernorm", "model.canon.residual=false"},
       "d19086e1478bf309",
       "73c1735325545e0f"},
  };
  return cases;
}

class BitIdentity : public ::testing::TestWithParam<Recorded> {};

TEST_P(BitIdentity, CpuFp32TrainingMatchesTheEngineBeforeTheBackendSeam) {
  const Recorded& r = GetParam();
  // Fails once oneDNN has chosen its kernels in this process; ctest runs every test in a process of its own.
  const bool capped = dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2) == dnnl_success;
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  if (isa != dnnl_cpu_isa_avx2) {
    if (!capped)
      GTEST_SKIP() << "oneDNN already runs its kernels for ISA 0x" << std::hex << int(isa)
                   << " in this process, and the values are those of AVX2: run this test in a process of its own "
                      "(as ctest does) or with ONEDNN_MAX_CPU_ISA=AVX2";
    GTEST_SKIP() << "this CPU has no AVX2 (oneDNN ISA 0x" << std::hex << int(isa)
                 << "), and the values are those of oneDNN's AVX2 kernels";
  }
  std::vector<std::string> sets = r.sets;
  sets.insert(sets.end(), {"train.steps=20", "train.threads=2", "train.checkpoint_every=0"});
  const RunConfig cfg = load_config(std::string(CANONLAB_SOURCE_DIR) + "/" + r.config, sets);
  ASSERT_EQ(cfg.train.device, "cpu");
  ASSERT_EQ(cfg.train.precision, "fp32");
  const fs::path dir = fs::temp_directory_path() / ("canonlab_bitid_" + std::string(r.name) + "_" +
                                                    std::to_string(::getpid()));
  fs::remove_all(dir);
  TrainOptions options;
  options.out_dir = dir.string();
  options.progress = false;
  options.probe_at_end = false;
  train(cfg, options);
  const std::string stem = (dir / "checkpoints/step_00000020").string();
  EXPECT_EQ(read_safetensors(stem + ".model.safetensors").metadata.at(kChecksumKey), r.model_checksum)
      << "the final weights differ from the engine before the seam";
  EXPECT_EQ(read_safetensors(stem + ".state.safetensors").metadata.at(kChecksumKey), r.state_checksum)
      << "the final AdamW moments differ from the engine before the seam";
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Configs, BitIdentity, ::testing::ValuesIn(recorded()),
                         [](const ::testing::TestParamInfo<Recorded>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace canonlab
