#pragma once
// The whole description of a run. Parsed from YAML (config/config.h), validated with key paths in
// every message, written back as config.resolved.yaml and embedded as JSON in checkpoint metadata.
// Field names match the YAML keys one to one: `model.attention.key_shift.offset` is
// RunConfig::model.attention.key_shift.offset.
#include <cstdint>
#include <string>
#include <vector>

namespace canonlab {

struct CanonConfig {
  std::string set;              // letters from "ABCD" (lowercase b reserved for families with a built-in conv)
  int kernel_size = 4;          // >= 1
  bool residual = true;         // h + conv(h)
  std::string activation = "none";  // none | silu | elu
  int groups = 0;               // 0 = depthwise (groups = channels); must divide the channel count
  std::string norm = "none";    // none | layernorm | rmsnorm  (applied to the conv output before the residual add)
};

struct KeyShiftConfig {
  std::vector<int> layers;      // layers whose keys are computed from x[t] + x[t - offset]
  int offset = 1;               // >= 1
};

struct AttentionConfig {
  std::string position = "rope";  // rope | nope | alibi | learned
  double rope_base = 10000.0;
  int rope_dim = 0;               // rotated dims per head; 0 = head_dim (full RoPE); must be even, <= head_dim
  std::string scoring = "softmax";  // softmax | sign_ste
  std::string ste_grad = "identity";  // identity | clipped  (clipped: gradient passes only where |x| <= 1)
  bool qkv_bias = false;
  KeyShiftConfig key_shift;
};

struct MlpConfig {
  std::string kind = "gelu";    // gelu (exact erf, 4d) | swiglu (gated SiLU, round(8d/3)) | relu2 (ReLU^2, 4d)
  int hidden_dim = 0;           // 0 = the kind's default above
  bool bias = false;
};

struct ModelConfig {
  std::string family = "transformer";
  int d_model = 128;
  int n_layers = 4;
  int n_heads = 4;
  int vocab_size = 0;           // 0 = taken from the task
  int max_seq_len = 0;          // 0 = taken from the task (needed by learned positions)
  std::string norm = "rmsnorm"; // rmsnorm | layernorm
  double norm_eps = 1e-5;
  bool tie_embeddings = false;
  double init_std = 0.02;       // normal(0, init_std) for linear and embedding weights
  AttentionConfig attention;
  MlpConfig mlp;
  CanonConfig canon;
};

struct TaskConfig {
  std::string name = "copy";
  int vocab = 64;               // number of symbols; the BOS token is id `vocab`
  int n_symbols = 24;           // n distinct symbols per sequence: [BOS] r1..rn r1..rn, T = 2n + 1 tokens
  std::string loss_on = "all";  // all | copy
};

struct TrainConfig {
  int steps = 3000;
  int batch_size = 64;
  double lr = 1e-3;
  std::string schedule = "cosine";  // cosine | linear | constant
  int warmup_steps = 100;
  double min_lr_frac = 0.1;     // cosine floor as a fraction of lr
  double weight_decay = 0.1;
  std::vector<std::string> decay_on = {"linear"};  // subset of linear, embedding, canon, norm, bias
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;       // global-norm clip; 0 disables
  uint64_t seed = 42;           // parameter init
  uint64_t data_seed = 0;       // 0 = derived from seed (seed + 1); training data stream
  int threads = 0;              // 0 = all cores
  int log_every = 10;
  int eval_every = 500;         // 0 = only at the end
  int eval_batches = 4;         // fixed held-out batches of batch_size sequences
  int checkpoint_every = 1000;  // 0 = only at the end
  int keep_checkpoints = 2;     // most recent step checkpoints kept (the final one is always kept)
};

struct ProbeConfig {
  int n_sequences = 256;        // held-out sequences for IPMR
  uint64_t seed = 12345;        // held-out stream, distinct from training data
  int top_heads = 5;
};

struct RunConfig {
  ModelConfig model;
  TaskConfig task;
  TrainConfig train;
  ProbeConfig probe;
};

}  // namespace canonlab
