// CPU fp32 training is deterministic: the same build, configuration and seed give the same bits, run after run and
// machine after machine. Each case trains 8 steps at train.threads=2 and compares the data checksums of its final
// model and optimizer files (xxh64 of every tensor byte, canonlab.data_checksum) with values recorded for this
// version of the engine with
//   scripts/bit-identity.sh build/canonlab OUT 8
// (run twice: the same lines). Identity with an older version is not required (docs/engine.md, "Determinism"): a
// change meant to change numbers (a new kernel, another summation order, other element math) re-records them with
// the same command and says so in its commit; a refactor meant to change none must keep them. History: first
// recorded at the backend seam (ac9a2be), again when the build gained -ffp-contract=off, and again for issue 47's
// element math (explicit FMAs in vec_exp / vec_erfc, the norms' lane sums, SLEEF's expm1 in ELU), recorded on an
// AVX-512 machine (Zen 4). The values should not depend on the instruction set the compiler targets: contractions
// are off, every fused multiply-add is an explicit std::fma (one rounding whether an instruction or libm does it),
// SLEEF's finz functions give the same bits at every vector width, and the lane sums have a fixed order. (Native and
// SSE2 builds were last compared when -ffp-contract=off came in; before it, AVX-512 trained other bits for GELU.)
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
      {"e1_bk0", "configs/E1-Bk0.yaml", {}, "64cc07e9d44e925f", "2372fe9c77784ab2"},
      {"mamba2_mlp_AbCD", "configs/linear/mamba2-mlp-4L128-canon-AbCD.yaml", {}, "bb34e238dd007694",
       "39a4b7d2236818b9"},
      {"mamba2_noconv_mimetic",
       "configs/linear/mamba2-4L128.yaml",
       {"model.canon.set=", "model.mamba2.init=mimetic"},
       "5713014c2414a938",
       "36443894cdc16b02"},
      {"gla_AbCD", "configs/linear/gla-4L128-canon-AbCD.yaml", {}, "aa596643b8cfd395", "f1dc362cf4a763a9"},
      {"gla_featmap_clamp",
       "configs/linear/gla-4L128.yaml",
       {"model.gla.feature_map=elu_plus_one", "model.gla.clamp_min=-0.1", "model.canon.set=bB"},
       "907f6afb4d0b8332",
       "584a92fb580e0f30"},
      {"gdn_AbCD", "configs/linear/gdn-4L128-canon-AbCD.yaml", {}, "fbeb702bcff28d4f", "b7a95bad59e1b440"},
      {"deltanet_AbCD", "configs/linear/deltanet-4L128-canon-AbCD.yaml", {}, "db8650046ce83acb",
       "e9be96ce648e7b82"},
      {"hybrid_MMMA_AbCD", "configs/linear/hybrid-MMMA-4L128-canon-AbCD.yaml", {}, "5a264146908a1bc2",
       "f1a9f800bc6d8a38"},
      {"hybrid_DDDS", "configs/linear/hybrid-DDDS-4L128.yaml", {}, "5fbef6ccb7ffa1af", "4caaca03016748a9"},
      {"nope_canon_ABCD_depo", "configs/small/depo.yaml", {}, "f028cf7f070e954b",
       "c51dfd7ef26c76fa"},
      {"rope_induction", "configs/demo-induction.yaml", {}, "c22c89297b856ab4", "4fa522d61309d294"},
      {"learned_layernorm_relu2",
       "configs/E1-Bk0.yaml",
       {"model.attention.position=learned", "model.attention.scoring=softmax", "model.norm=layernorm",
        "model.mlp.kind=relu2", "model.mlp.bias=true", "model.attention.qkv_bias=true", "model.canon.set=ABCD",
        "model.canon.activation=silu", "model.canon.norm=rmsnorm", "model.attention.key_shift.layers=[1]",
        "model.attention.ste_grad=clipped"},
       "51c363fdb88d0881",
       "9e41c108646b1904"},
      {"partial_rope_swiglu_tied",
       "configs/E1-Bk0.yaml",
       {"model.attention.position=rope", "model.attention.rope_dim=16", "model.mlp.kind=swiglu", "model.mlp.bias=true",
        "model.tie_embeddings=true", "model.vocab_size=65", "model.canon.set=AC", "model.canon.activation=elu",
        "model.canon.norm=layernorm", "model.canon.residual=false"},
       "c91ddbaeb23a210c",
       "5ce9bee8a9bd0676"},
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
