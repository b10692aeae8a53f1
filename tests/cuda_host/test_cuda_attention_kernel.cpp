// train.attention_kernel over the host stand-in: with precision bf16, auto takes each attention case to cuDNN's fused
// attention where cuDNN takes it and says so (the run's output and summary.json), else the flash kernel and why;
// cudnn refuses what cuDNN cannot run before anything is allocated; fp32 never leaves the flash kernel.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bad_inputs_support.h"
#include "config/config.h"
#include "engine/backend/make_backend.h"
#include "engine/cuda/cuda_provider.h"
#include "host_cuda.h"
#include "models/language_model.h"
#include "train/trainer.h"

namespace canonlab {
namespace {

using test_support::read_text;
using test_support::temp_dir;

RunConfig small_run(std::vector<std::string> sets) {
  std::vector<std::string> all = {"train.device=cuda", "train.steps=4", "train.batch_size=2", "train.threads=1",
                                  "train.eval_every=0", "train.log_every=2", "model.d_model=32", "model.n_layers=2",
                                  "train.eval_batches=1", "train.precision=bf16", "model.attention.position=rope",
                                  "model.attention.scoring=softmax"};
  all.insert(all.end(), sets.begin(), sets.end());
  return load_config(std::string(CANONLAB_SOURCE_DIR) + "/configs/E1-Bk0.yaml", all);
}

std::vector<std::string> trained_choices(const RunConfig& cfg, const std::string& dir) {
  TrainOptions o;
  o.out_dir = dir;
  o.progress = false;
  o.probe_at_end = false;
  train(cfg, o);
  const nlohmann::json summary = nlohmann::json::parse(read_text(dir + "/summary.json"));
  return summary.value("kernel_choices", std::vector<std::string>{});
}

bool all_contain(const std::vector<std::string>& lines, const std::string& what) {
  for (const std::string& l : lines)
    if (l.find(what) == std::string::npos) return false;
  return !lines.empty();
}

// auto: the training step's and the evaluation's attention shapes each go to cuDNN, each written to summary.json.
TEST(AttentionKernel, AutoTakesBf16AttentionToCudnnAndSaysSo) {
  const std::string dir = temp_dir("attention-auto");
  const std::vector<std::string> choices = trained_choices(small_run({}), dir);
  EXPECT_TRUE(all_contain(choices, "cuDNN fused attention")) << nlohmann::json(choices).dump();
  EXPECT_TRUE(all_contain(choices, "attention B=")) << nlohmann::json(choices).dump();
  // fp32, ALiBi and train.attention_kernel: flash keep the flash kernel
  EXPECT_TRUE(trained_choices(small_run({"train.precision=fp32"}), temp_dir("attention-fp32")).empty());
  EXPECT_TRUE(all_contain(trained_choices(small_run({"model.attention.position=alibi"}), temp_dir("attention-alibi")),
                          "flash kernel, fp32 (ALiBi: cuDNN's ALiBi computes its own slopes"));
  EXPECT_TRUE(trained_choices(small_run({"train.attention_kernel=flash"}), temp_dir("attention-flash")).empty());
}

// Without cuDNN, auto runs the flash kernel and says why; cudnn refuses the run before building anything.
TEST(AttentionKernel, WithoutCudnnAutoFallsBackAndCudnnIsRefused) {
  ASSERT_EQ(setenv("CANONLAB_HOST_CUDNN_MISSING", "1", 1), 0);
  const std::vector<std::string> choices = trained_choices(small_run({}), temp_dir("attention-missing"));
  EXPECT_TRUE(all_contain(choices, "flash kernel, fp32 (no libcudnn.so.9 found")) << nlohmann::json(choices).dump();
  try {
    make_cuda_backend({0, Precision::bf16, true, AttentionKernel::cudnn});
    FAIL() << "train.attention_kernel: cudnn was accepted without cuDNN";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.attention_kernel: 'cudnn' on cuda:0: no libcudnn.so.9 found"),
              std::string::npos)
        << e.what();
  }
  unsetenv("CANONLAB_HOST_CUDNN_MISSING");
}

// cudnn: an ALiBi layer or a head dimension cuDNN does not take is refused by the capability query, before the model's
// one allocation; with fp32 the config itself is refused.
TEST(AttentionKernel, CudnnRefusesWhatCudnnCannotRunBeforeAllocating) {
  const auto refused = [](const std::vector<std::string>& sets, const std::string& expected) {
    const RunConfig cfg = small_run(sets);
    try {
      build_model<float>(cfg.model, 1, make_cuda_backend({0, Precision::bf16, true, AttentionKernel::cudnn}));
      ADD_FAILURE() << "accepted: " << nlohmann::json(sets).dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused({"model.attention.position=alibi"}, "model.attention.position: alibi with train.attention_kernel: cudnn");
  refused({"model.d_model=36", "model.n_heads=3"},
          "head dimension (model.d_model / model.n_heads): head dimension 12: cuDNN's fused attention needs a "
          "multiple of 8");
  EXPECT_EQ(cuda_host::live_device_bytes(), 0u) << "a refused model left device memory behind";
  try {
    small_run({"train.precision=fp32", "train.attention_kernel=cudnn"});
    FAIL() << "cudnn with fp32 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.attention_kernel: 'cudnn' runs attention in bf16 and needs "
                                         "train.precision: bf16 (it is 'fp32')"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace canonlab
