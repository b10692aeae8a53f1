// CPU fp32 training gives the same bits on every x86-64 machine. Each case trains 8 steps at train.threads=2 and
// compares the data checksums of its final model and optimizer files (xxh64 of every tensor byte,
// canonlab.data_checksum) with recorded values. The engine first matched values recorded before the backend seam
// (commit ac9a2be); the values below were re-recorded when the build gained -ffp-contract=off (CMakeLists.txt), with
//   scripts/bit-identity.sh build/canonlab OUT 8
// and the same lines came from a build for this machine (-march=native, AVX2 + FMA) and from a baseline x86-64 build
// (SSE2, no FMA), so they do not depend on the instruction set the compiler targets. Before that flag an AVX-512
// machine trained other bits for the configurations whose kernels GCC vectorises only with AVX-512 (GELU, GLA).
// A refactor that is meant to change no number must keep these; a change that is meant to change numbers (a new
// kernel, another summation order) updates them with the same command, saying so in its commit.
//
// oneDNN picks its GEMM kernels by the CPU at run time (an AVX-512 machine multiplies in another order, and
// ONEDNN_MAX_CPU_ISA=AVX or SSE41 gives other bits again), so each case first caps oneDNN at AVX2 for its process,
// as scripts/bit-identity.sh does. Record with the same cap.
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
  const char* model_checksum;  // of step_00000008.model.safetensors
  const char* state_checksum;  // of step_00000008.state.safetensors (AdamW m, v)
};
std::ostream& operator<<(std::ostream& os, const Recorded& r) { return os << r.name; }

// Keep in step with scripts/bit-identity.sh.
const std::vector<Recorded>& recorded() {
  static const std::vector<Recorded> cases = {
      {"e1_bk0", "configs/E1-Bk0.yaml", {}, "d2bcbc43eaaec57d", "4a86df2d238a1288"},
      {"mamba2_mlp_AbCD", "configs/linear/mamba2-mlp-4L128-canon-AbCD.yaml", {}, "c2233f1f18abeb47",
       "a124eee455ba0a6e"},
      {"mamba2_noconv_mimetic",
       "configs/linear/mamba2-4L128.yaml",
       {"model.canon.set=", "model.mamba2.init=mimetic"},
       "447db60b00363964",
       "fac7e826b59879a5"},
      {"gla_AbCD", "configs/linear/gla-4L128-canon-AbCD.yaml", {}, "9c45d733f010d0fa", "5d7a5d6581b7c2dc"},
      {"gla_featmap_clamp",
       "configs/linear/gla-4L128.yaml",
       {"model.gla.feature_map=elu_plus_one", "model.gla.clamp_min=-0.1", "model.canon.set=bB"},
       "2c4f334b75a6a1b9",
       "e4f631b6b6cc0a4d"},
      {"gdn_AbCD", "configs/linear/gdn-4L128-canon-AbCD.yaml", {}, "3d208f2872267b1d", "791a8a56b5220d20"},
      {"deltanet_AbCD", "configs/linear/deltanet-4L128-canon-AbCD.yaml", {}, "8eb8cc61d64a98b4",
       "25b9483d184a6d7d"},
      {"hybrid_MMMA_AbCD", "configs/linear/hybrid-MMMA-4L128-canon-AbCD.yaml", {}, "a8ed5df5ec616e2f",
       "c6928477541cebcb"},
      {"hybrid_DDDS", "configs/linear/hybrid-DDDS-4L128.yaml", {}, "5187aac8dfe76d0f", "cc17b1645a9b035c"},
      {"nope_canon_ABCD_depo", "configs/small/depo.yaml", {}, "01c59d8093123a4c",
       "4091345730f6e3cc"},
      {"rope_induction", "configs/demo-induction.yaml", {}, "a3734561a2a6c3ff", "04a6513d8511827d"},
      {"learned_layernorm_relu2",
       "configs/E1-Bk0.yaml",
       {"model.attention.position=learned", "model.attention.scoring=softmax", "model.norm=layernorm",
        "model.mlp.kind=relu2", "model.mlp.bias=true", "model.attention.qkv_bias=true", "model.canon.set=ABCD",
        "model.canon.activation=silu", "model.canon.norm=rmsnorm", "model.attention.key_shift.layers=[1]",
        "model.attention.ste_grad=clipped"},
       "699d81ba9f2afaf9",
       "258b84d76ec9630e"},
      {"partial_rope_swiglu_tied",
       "configs/E1-Bk0.yaml",
       {"model.attention.position=rope", "model.attention.rope_dim=16", "model.mlp.kind=swiglu", "model.mlp.bias=true",
        "model.tie_embeddings=true", "model.vocab_size=65", "model.canon.set=AC", "model.canon.activation=elu",
        "model.canon.norm=layernorm", "model.canon.residual=false"},
       "56d7e08017e0154e",
       "5daa360afd37f080"},
  };
  return cases;
}

class BitIdentity : public ::testing::TestWithParam<Recorded> {};

TEST_P(BitIdentity, CpuFp32TrainingGivesTheRecordedBits) {
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
  sets.insert(sets.end(), {"train.steps=8", "train.threads=2", "train.checkpoint_every=0"});
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
  const std::string stem = (dir / "checkpoints/step_00000008").string();
  EXPECT_EQ(read_safetensors(stem + ".model.safetensors").metadata.at(kChecksumKey), r.model_checksum)
      << "the final weights differ from the recorded ones";
  EXPECT_EQ(read_safetensors(stem + ".state.safetensors").metadata.at(kChecksumKey), r.state_checksum)
      << "the final AdamW moments differ from the recorded ones";
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Configs, BitIdentity, ::testing::ValuesIn(recorded()),
                         [](const ::testing::TestParamInfo<Recorded>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace canonlab
