#pragma once
// The whole description of a run. Parsed from YAML (config/config.h), validated with key paths in
// every message, written back as config.resolved.yaml and embedded as JSON in checkpoint metadata.
// Field names match the YAML keys one to one: `model.attention.key_shift.offset` is
// RunConfig::model.attention.key_shift.offset.
#include <cstdint>
#include <string>
#include <vector>

namespace canonlab {

// Cross-layer Canon (docs/canon-variants.md): block l+1 reads h_{l+1} + X_l(h_l), X = norm(act(conv_K(h))).
struct CrossLayerCanonConfig {
  std::vector<int> layers;          // l in [0, n_layers - 1): a connection from block l's input to block l+1's; empty = off
  int kernel_size = 4;              // >= 1
  bool residual = true;             // false: X_l(h_l) replaces block l's identity skip instead of adding to it
  std::string activation = "none";  // none | silu | elu
  std::string norm = "none";        // none | layernorm | rmsnorm
};

struct CanonConfig {
  std::string set;              // letters from "ABCD", and "b" (the family's own conv) in linear-time families
  int kernel_size = 4;          // >= 1
  bool residual = true;         // h + conv(h)
  std::string activation = "none";  // none | silu | elu
  int groups = 0;               // 0 = depthwise (groups = channels); must divide the channel count
  std::string norm = "none";    // none | layernorm | rmsnorm  (applied to the conv output before the residual add)
  CrossLayerCanonConfig cross_layer;
  int dynamic = 0;              // rank R of the dynamic kernel map (docs/canon-variants.md); 0 = static; needs depthwise
};

// The token-shift family on the keys (and values) of chosen layers (docs/token-shift.md):
//   add      key = W_K(x[t] + x[t - o])                      (canonlab's key shift; the default)
//   replace  key = W_K(x[t - o])                             (zeros before the start)
//   smeared  k[t] <- s_h k[t] + (1 - s_h) k[t - o], s_h = sigmoid(alpha_h) learned per head (Olsson et al. 2022)
//   kv       k <- a1 k + a2 Shift_o(k), v <- b1 v + b2 Shift_o(v), four learned scalars per head (Xu et al. 2025)
//   partial  k[t] <- k[t - o] in head dims [dims[0], dims[1]) (the modded-nanogpt partial key offset)
struct KeyShiftConfig {
  std::vector<int> layers;      // layers whose keys are shifted
  int offset = 1;               // >= 1
  std::string mode = "add";     // add | replace | smeared | kv | partial
  std::vector<int> dims;        // partial: the head dims [from, to); resolved from rope_dim when empty
};

struct AttentionConfig {
  std::string position = "rope";  // rope | nope | alibi | learned
  std::string alibi_slopes = "geometric";  // geometric (the paper's 2^(-8h/H)) | press (the reference code's get_slopes)
  double rope_base = 10000.0;
  int rope_dim = 0;               // rotated dims per head; 0 = head_dim (full RoPE); must be even, <= head_dim
  std::string scoring = "softmax";  // softmax | sign_ste
  std::string ste_grad = "identity";  // identity | clipped  (clipped: gradient passes only where |x| <= 1)
  bool qkv_bias = false;
  int window = 64;                // sliding-window size of `S` layers in hybrid patterns: a query at t sees t-window+1 .. t
  KeyShiftConfig key_shift;
};

struct MlpConfig {
  std::string kind = "gelu";    // gelu (exact erf, 4d) | swiglu (gated SiLU, round(8d/3)) | relu2 (ReLU^2, 4d)
  int hidden_dim = 0;           // 0 = the kind's default above
  bool bias = false;
};

// Shared by the linear-time families (docs/linear-families.md).
struct RecurrentConfig {
  int chunk_size = 64;          // chunk length of the chunked kernels; any value >= 1
  int conv_kernel = 4;          // kernel of the family's own short convolution (Canon-b)
  std::string kernel = "chunked";  // chunked | naive (the per-step reference recurrence)
};

struct Mamba2Config {
  int d_state = 64;             // N
  int expand = 2;               // d_inner = expand * d_model
  int headdim = 0;              // P; 0 = d_inner / n_heads
  int ngroups = 1;              // G: B and C are shared by n_heads / G heads
  bool mlp = false;             // "Mamba2(mlp)": a gated MLP after the mixer in every Mamba2 layer
  double dt_min = 1e-3;
  double dt_max = 0.1;
  double dt_init_floor = 1e-4;
  double a_min = 1.0;           // A_log = log U[a_min, a_max]
  double a_max = 16.0;
  std::string init = "default"; // default | mimetic
};

struct GlaConfig {
  double expand_k = 0.5;
  double expand_v = 1.0;
  std::string feature_map = "none";  // none | elu_plus_one | relu | silu
  int gate_low_rank_dim = 16;
  double gate_logit_normalizer = 16.0;
  double clamp_min = 0.0;       // lower bound of the log forget gate; 0 = no clamp
  bool output_gate = true;
};

struct DeltaConfig {             // Gated DeltaNet and DeltaNet
  double expand_k = 0.75;
  double expand_v = 1.5;
  bool output_gate = true;
  bool allow_neg_eigval = false; // beta in (0, 2) instead of (0, 1)
};

struct ModelConfig {
  std::string family = "transformer";  // transformer | mamba2 | gla | gdn | deltanet | hybrid
  std::string layer_pattern;    // hybrid only: one letter per layer from A M G D N S
  int d_model = 128;
  int n_layers = 4;
  int n_heads = 4;
  int n_kv_heads = 0;           // grouped-query attention: key/value heads; 0 = n_heads (must divide n_heads)
  int vocab_size = 0;           // 0 = taken from the task
  int max_seq_len = 0;          // 0 = taken from the task (needed by learned positions)
  std::string norm = "rmsnorm"; // rmsnorm | layernorm
  double norm_eps = 1e-5;
  bool tie_embeddings = false;
  double init_std = 0.02;       // normal(0, init_std) for linear and embedding weights
  AttentionConfig attention;
  MlpConfig mlp;
  CanonConfig canon;
  RecurrentConfig recurrent;
  Mamba2Config mamba2;
  GlaConfig gla;
  DeltaConfig delta;
};

// Depo: k-hop successor queries on one shuffled directed n-cycle (docs/tasks.md#depo).
struct DepoConfig {
  int n_max = 225;          // N: cycle sizes n in 3..N with p(n) ~ 1/(n + sqrt(N)); evaluation uses n = N
  int k_max = 8;            // K: training hops k uniform in 1..K; evaluation at k = K and k = K/2
  int name_vocab = 50;      // V: a name's last token is in [V, 2V), its other tokens in [0, V)
  int name_len_min = 1;     // tokens per vertex name
  int name_len_max = 2;
  int queries = 10;         // queries per instance: min(queries, n)
};

// Brevo: all ancestors of a query vertex of a random DAG, in topological order (docs/tasks.md#brevo).
struct BrevoConfig {
  int n_max = 70;           // N: vertices n in 3..N with p(n) ~ 1/(n + sqrt(N)); evaluation uses n = N
  int name_vocab = 0;       // 0 = N one-token names (Brevo1); else multi-token names as in Depo (Brevo2: 4)
  int name_len_min = 1;
  int name_len_max = 1;
  int max_degree = 4;       // in- and out-degree bound
  std::string query_from = "last_quarter";  // last_quarter (paper text) | last (the released generator)
};

// Mano: prefix modular arithmetic with l operators (docs/tasks.md#mano).
struct ManoConfig {
  int max_ops = 10;         // L: l uniform in 1..L; evaluation at l = L
  int modulus = 23;
  std::vector<std::string> ops = {"+", "-", "*"};
  bool knowledge_augment = false;  // each operator also has an alternate token, chosen at random
};

// Lano: sentences of a context-free grammar (docs/tasks.md#lano).
struct LanoConfig {
  std::string grammar = "data/physicslm4/lano-cfg/cfg3f.json";  // the paper's JSON format, or "generate"
  // Shape of a generated grammar (grammar: generate), like cfg3f: depth levels of num_sym symbols each.
  int depth = 6;
  int num_sym = 3;          // non-terminals per level and terminals
  int deg_min = 3;          // rules per non-terminal
  int deg_max = 4;
  int len_min = 2;          // symbols per rule
  int len_max = 3;
  uint64_t grammar_seed = 1;
  int max_sentence = 0;     // longest sentence sampled at evaluation; 0 = the context length
};

// Capo: bioS biographies of N people, 6 attributes, fresh templates per exposure (docs/tasks.md#capo).
struct CapoConfig {
  int people = 10000;       // N
  int exposures = 100;      // times each person's biography is seen; sets the length of one pass
  std::string fields = "data/physicslm4/capo-fields";  // folder of the name / attribute lists
  int eval_people = 1000;   // people whose attribute loss estimates the stored bits
};

// MQAR: multi-query associative recall in the Zoology format (docs/tasks.md#mqar).
struct MqarConfig {
  int vocab = 8192;         // keys from [1, V/2), values from [V/2, V)
  int pairs = 8;            // key-value pairs per sequence
  double power_a = 0.01;    // query gaps ~ a * i^(a-1)
  bool random_non_queries = true;
};

// Natural text: windows of a prepared data directory (token shards) or of a plain file read as bytes; bits per byte
// and per character on held-out text (docs/tasks/text.md).
struct TextConfig {
  std::string path = "/usr/share/games/fortunes/fortunes";  // a data directory (canonlab data prepare) or a text file
  double heldout_frac = 0.1;  // plain files: the last fraction of the file is held out
  bool eval_whole_split = false;  // evaluate on every held-out window instead of train.eval_batches batches
};

struct TaskConfig {
  std::string name = "copy";    // copy | depo | brevo | mano | lano | capo | mqar | text
  int context = 0;              // tokens per window for packed tasks; 0 = the task's default
  std::string loss_on = "default";  // default (the paper's choice for the task) | all | answers | copy
  int eval_samples = 64;        // generated sequences per evaluation (brevo, lano)
  int vocab = 64;               // copy: number of symbols; the BOS token is id `vocab`
  int n_symbols = 24;           // copy: n distinct symbols per sequence: [BOS] r1..rn r1..rn, T = 2n + 1 tokens
  DepoConfig depo;
  BrevoConfig brevo;
  ManoConfig mano;
  LanoConfig lano;
  CapoConfig capo;
  MqarConfig mqar;
  TextConfig text;
};

struct TrainConfig {
  int steps = 3000;
  int batch_size = 64;          // sequences per step, over all ranks and micro-batches (the global batch)
  int micro_batches = 1;        // gradient accumulation: each rank's share is computed in this many passes
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
  std::string device = "cpu";   // cpu | cuda | cuda:N: where parameters, optimizer state and activations live
  std::string precision = "fp32";  // fp32 | bf16 (bf16 inputs to the linear layers' GEMMs, fp32 accumulation)
  bool cuda_graph = true;       // cuda: the training step as one captured CUDA graph (false: eager launches)
  std::string attention_kernel = "auto";  // cuda: auto | flash | cudnn: who runs softmax attention in bf16
  int log_every = 10;
  int eval_every = 500;         // 0 = only at the end
  int eval_batches = 4;         // fixed held-out batches of batch_size sequences
  int checkpoint_every = 1000;  // 0 = only at the end
  int keep_checkpoints = 2;     // most recent step checkpoints kept (the final one is always kept)
  double max_memory_gb = 0;     // refuse a run whose estimated peak memory exceeds this (GiB); 0 = MemAvailable only
};

struct ProbeConfig {
  int n_sequences = 256;        // held-out sequences for IPMR
  uint64_t seed = 12345;        // held-out stream, distinct from training data
  int top_heads = 5;
};

struct LogConfig {
  bool tensorboard = true;  // RUN_DIR/tb/events.out.tfevents.* beside the metrics (train/tensorboard_log.h)
};

struct RunConfig {
  ModelConfig model;
  TaskConfig task;
  TrainConfig train;
  ProbeConfig probe;
  LogConfig log;
};

}  // namespace canonlab
