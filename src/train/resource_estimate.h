#pragma once
// What a run will need, computed from its resolved config before anything big is allocated: the exact parameter
// count, the peak memory item by item (with the config keys that drive each item; on a GPU, the device's and the
// host's apart), FLOPs and tokens per step, and an estimated wall time. The device memory is counted from the run's
// own model on a counting backend (engine/backend/counting_backend.h), never tallied by hand. check_resources refuses
// a run the machine cannot hold, naming the total, the biggest items and their keys; `canonlab train CONFIG
// --dry-run` prints the estimate (docs/resources.md).
#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "engine/device.h"
#include "engine/params.h"

namespace canonlab {

// What the process will do with the config, which decides what is resident at its peak.
//   train:  parameters, gradients, AdamW moments, the training arena, eval batches, the IPMR probe at the end
//   resume: train, plus the two checkpoint files read into memory before training starts
//   eval:   `canonlab eval`: a checkpoint is read, then evaluation and (copy task) IPMR
//   probe:  `canonlab probe`: eval, plus the attention maps of a few heads and examples
enum class Purpose { train, resume, eval, probe };

// When an item is resident: for the whole run, only while a checkpoint is read (before the arenas and batches
// exist), or only once the run computes (arenas, batches). The peak is whole_run + max(loading, running).
enum class MemoryPhase { whole_run, loading, running };

struct MemoryItem {
  std::string what;        // "activation arena: one training step (forward + backward)"
  double bytes = 0;
  std::string keys;        // the config keys that drive it, most important first
  MemoryPhase phase = MemoryPhase::whole_run;
  bool on_device = false;  // in a GPU's memory (train.device = cuda); false: the host's (for the CPU, everything)
};

struct ResourceEstimate {
  Purpose purpose = Purpose::train;
  int threads = 1;                 // train.threads, or the OpenMP default it resolves to
  uint64_t parameters = 0;         // equals the built model's params().total()
  int batch = 0, seq_len = 0;      // train.batch_size, the task's window
  std::string seq_len_key;         // the key that sets seq_len ("task.n_symbols (T = 2n + 1)", "task.context")
  double training_arena_bytes = 0; // Arena::high_water_bytes() after one forward_backward (0 unless training)
  double eval_arena_bytes = 0;     // the same for one evaluation forward pass
  std::vector<MemoryItem> items;   // largest first
  double peak_bytes = 0;           // predicted peak resident set size of the whole process
  Device device = Device::cpu;     // train.device's kind
  std::string device_name;         // train.device
  double device_peak_bytes = 0;    // a GPU run's peak of GPU memory (0 on the CPU: peak_bytes holds everything)
  double tokens_per_step = 0;      // batch * seq_len
  double flops_per_step = 0;       // model FLOPs of one training step (eval/flops.h)
  double total_flops = 0;          // every step, every evaluation and the IPMR probe of the run
  int evaluations = 0;             // evaluation passes the run will make
};

// Computes the estimate from a resolved config without allocating the model, its activations or its data. It
// builds the task (as config validation already does) to learn the window and the evaluation suites.
ResourceEstimate estimate_resources(const RunConfig& cfg, Purpose purpose = Purpose::train);

// Throws canonlab::Error when the estimated peak exceeds train.max_memory_gb (when set) or the memory this
// machine has available (MemAvailable, and a cgroup limit if one is lower), or when one step holds more tokens
// than the engine can index. The message names the total, the largest items and the keys that drive them.
void check_resources(const ResourceEstimate& estimate, const RunConfig& cfg);

// Bytes the kernel says can be allocated without swapping: /proc/meminfo MemAvailable, lowered to the cgroup v2
// memory.max minus memory.current when the process runs under one; 0 when neither can be read.
double available_memory_bytes();

// The pieces of the estimate, for tests and for the other entry points.
uint64_t count_parameters(const ModelConfig& model);
// The model's parameters (names and shapes, in the built model's order) without allocating them: what a pack's
// signature compares (train/pack.h).
std::vector<ParamInfo> parameter_layout(const ModelConfig& model);
// fp32: train.precision is fp32 (dynamic Canon then keeps no offsets on the CPU, nn/dynamic_canon.h)
double training_arena_bytes(const ModelConfig& model, int batch, int seq_len, int threads, bool fp32 = true);
// with_loss: training and evaluation forwards; without: the probes', which keep attention's probabilities
double forward_arena_bytes(const ModelConfig& model, int batch, int seq_len, int threads, bool with_loss,
                           bool fp32 = true);

struct TimeEstimate {
  double gemm_gflops = 0;   // this machine's float GEMM rate through the engine's own GEMM (oneDNN), or the GPU's
  std::string source;       // where gemm_gflops comes from ("this machine's GEMM, measured", a GPU's, a nominal one)
  double efficiency = 0;    // the fraction of that rate a whole step reaches (calibrated per family)
  double seconds = 0;       // estimate.total_flops / (gemm_gflops * efficiency)
};

// Measures about 0.2 s of GEMMs shaped like the model's projections at the run's thread count (it sets the
// process's OpenMP thread count to train.threads, as training does), then scales the run's FLOPs by it. On a GPU:
// its bf16 or fp32 GEMM rate through cuBLASLt, measured where the GPU is here, else an H100's nominal rate (said so).
TimeEstimate estimate_time(const ResourceEstimate& estimate, const RunConfig& cfg);

// The --dry-run report: model, step, memory items with their keys, the total against the limit, and the time.
std::string format_estimate(const ResourceEstimate& estimate, const RunConfig& cfg, const TimeEstimate* time);

}  // namespace canonlab
