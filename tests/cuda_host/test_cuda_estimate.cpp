// The resource estimate of a GPU run (train.device=cuda, `--dry-run`): its GPU memory is counted by CudaBackend's own
// code over a layer that launches nothing (engine/cuda/counting_cuda.h). Held here against what the same run really
// allocates through the host stand-in of the CUDA layer, whose device memory is real (host storage behind device
// addresses) and whose peak the stand-in records.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "cli_runner.h"
#include "config/config.h"
#include "host_cuda.h"
#include "train/resource_estimate.h"
#include "train/trainer.h"

namespace canonlab {
namespace {

namespace fs = std::filesystem;

double counted_device_bytes(const ResourceEstimate& e) {
  double bytes = 0;
  for (const MemoryItem& item : e.items)
    if (item.on_device && item.what.find("not counted") == std::string::npos && !item.what.starts_with("cuBLASLt"))
      bytes += item.bytes;
  return bytes;
}

// Each case trains 3 steps on the stand-in (evaluation and IPMR probe at the end) and compares the stand-in's peak of
// device memory with the estimate's counted GPU items. The stand-in's own buffers (the bias GEMMs' ones vector) are
// the only allocations the estimate does not count: within 1%.
TEST(CudaBackendOnHost, TheDryRunCountsWhatTheGpuRunAllocates) {
  for (const auto& [config, sets] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"E1-Bk0.yaml", {"model.d_model=64"}},
           {"E1-Bk0.yaml", {"model.d_model=64", "train.precision=bf16", "model.canon.set=ABCD", "model.mlp.bias=true"}},
           {"linear/gla-4L128-canon-AbCD.yaml", {"model.d_model=64", "train.micro_batches=2"}},
           {"linear/hybrid-MMMA-4L128-canon-AbCD.yaml", {"model.d_model=64", "model.attention.position=alibi"}}}) {
    std::vector<std::string> all = {"train.device=cuda", "train.steps=3", "train.batch_size=8", "train.threads=2",
                                    "train.eval_every=0", "train.checkpoint_every=0", "probe.n_sequences=8"};
    all.insert(all.end(), sets.begin(), sets.end());
    const RunConfig cfg = load_config(std::string(CANONLAB_SOURCE_DIR) + "/configs/" + config, all);
    const ResourceEstimate e = estimate_resources(cfg, Purpose::train);
    const fs::path dir = fs::temp_directory_path() / ("canonlab_cuda_estimate_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    cuda_host::reset_peak_device_bytes();
    const size_t before = cuda_host::live_device_bytes();
    TrainOptions o;
    o.out_dir = dir.string();
    o.progress = false;
    train(cfg, o);
    const double measured = double(cuda_host::peak_device_bytes() - before);
    const double counted = counted_device_bytes(e);
    std::string label = config + " ";
    for (const std::string& s : sets) label += s + " ";
    std::printf("[ gpu memory ] %s: counted %.0f bytes, the stand-in's peak %.0f bytes\n", label.c_str(), counted,
                measured);
    EXPECT_NEAR(counted, measured, 0.01 * measured) << label;
    EXPECT_GT(e.device_peak_bytes, counted) << "the context and cuBLASLt's workspace are on top";
    fs::remove_all(dir);
  }
}

// `canonlab train CONFIG --set train.device=cuda --dry-run` prints the GPU's memory by item, the host's apart, and a
// time from a GPU's matrix rate (here nominal: the stand-in has none to measure); it creates nothing.
TEST(CudaBackendOnHost, DryRunOnCudaPrintsGpuMemoryAndTime) {
  const fs::path dir = fs::temp_directory_path() / ("canonlab_cuda_dry_run_" + std::to_string(::getpid()));
  const auto r = test_support::run_cli("train " + std::string(CANONLAB_SOURCE_DIR) +
                                       "/configs/text/75m.yaml --set train.device=cuda --set train.precision=bf16"
                                       " --set task.text.path=/usr/share/games/fortunes/fortunes --dry-run --out " +
                                       (dir / "run").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const std::string part :
       {"GPU memory at the peak (cuda, bf16; counted from the run's own allocations):", "activation arena",
        "AdamW moments", "CudaBackend's own buffers", "host memory at the peak", "TFLOP/s (nominal bf16 rate of an H100",
        "no run directory was created"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << " missing from:\n" << r.output;
  EXPECT_FALSE(fs::exists(dir / "run"));
}

}  // namespace
}  // namespace canonlab
