// The key table and the helpers that only need the table (lookup, did-you-mean, value formatting, docs).
#include "config/schema.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "config/config.h"
#include "data/cfg_grammar.h"
#include "engine/error.h"

namespace canonlab::config_detail {
namespace {

// Upper bounds of the size and count keys. They sit far above anything a researcher runs here (GPT-3 175B has
// d_model 12288, 96 layers and a 50k vocabulary; this trainer is CPU-only) and exist so that a slip -- an extra
// zero, 1e9 for 1e3 -- fails at once with the key named instead of allocating until the machine gives out or
// looping for hours. Whether a legal config fits the machine is the resource estimate's question
// (train/resource_estimate.h, docs/resources.md), so these need not be tight.
constexpr double kMaxWidth = 16384;          // d_model, n_heads, rope_dim, gate rank: above every published model
constexpr double kMaxHidden = 262144;        // MLP width: 16 * kMaxWidth
constexpr double kMaxChannels = 1 << 20;     // channel counts and their divisors (Canon groups, Mamba2 head dim)
constexpr double kMaxExpand = 16;            // width multipliers (Mamba2 expand 2, GLA/GDN 0.5..2 in the papers)
constexpr double kMaxLayers = 1024;
constexpr double kMaxHeads = kMaxLayers * kMaxWidth;  // every head of the largest model
constexpr double kMaxVocab = 1 << 24;        // 16.8M token ids; the largest LLM vocabularies have ~256k
constexpr double kMaxSequence = 65536;       // tokens per window, attention window, key-shift distance
constexpr double kMaxCopySymbols = 32767;    // copy: T = 2n + 1 <= kMaxSequence
constexpr double kMaxKernel = 1024;          // convolution taps (the papers use 4)
constexpr double kMaxChunk = 1024;           // chunked kernels keep chunk^2 scratch per thread (64 is the usual)
constexpr double kMaxState = 1024;           // Mamba2 state size N (16..256 in the papers; keeps 2 G N in int)
constexpr double kMaxBatch = 65536;          // sequences per step, held-out batches
constexpr double kMaxKeptCheckpoints = 65536;
constexpr double kMaxSteps = 1000000000;     // step counts and intervals
constexpr double kMaxThreads = 1024;         // no machine this runs on has more hardware threads
constexpr double kMaxCount = 1 << 20;        // counts of generated items: sequences, samples, eval people, modulus
constexpr double kMaxPeople = 1 << 30;       // Capo people are drawn, not stored (Physics of LMs 3.3 goes to 20M)
constexpr double kMaxGraph = 16384;          // Depo/Brevo vertices, hops, queries, degrees; Mano operators
constexpr double kMaxNameVocab = 1 << 22;    // Depo/Brevo name tokens: 2V ids stay below kMaxVocab
constexpr double kMaxNameLength = 64;        // tokens per vertex name
constexpr double kMaxGrammarDepth = 32;      // Lano rule levels (cfg3f: 6)
constexpr double kMaxGrammarSymbols = 4096;  // Lano symbols per level, rules per symbol
constexpr double kMaxRuleLength = 16;        // Lano symbols per rule (cfg3f: 2..3)
constexpr double kMaxMemoryGb = 1048576;     // train.max_memory_gb: a pebibyte

// The key path is the stringified member expression, so a path can never drift from the struct's nesting.
#define CANONLAB_KEY(member, description) \
  KeySpec { #member, [](RunConfig& c) -> FieldRef { return &c.member; }, description }

// Order here is the order of config_to_yaml, config_to_json and the docs table; keep sections contiguous.
std::vector<KeySpec> build_table() {
  std::vector<KeySpec> keys;
  auto add = [&](KeySpec key) { keys.push_back(std::move(key)); };

  add(CANONLAB_KEY(model.family, "model family: the mixer of every layer (docs/linear-families.md); hybrid reads layer_pattern")
          .one_of({"transformer", "mamba2", "gla", "gdn", "deltanet", "hybrid"}));
  add(CANONLAB_KEY(model.layer_pattern, "hybrid only: one mixer letter per layer, A attention, S sliding-window attention, M Mamba2, G GLA, D Gated DeltaNet, N DeltaNet")
          .with_rule("exactly n_layers letters when family is hybrid; empty otherwise"));
  add(CANONLAB_KEY(model.d_model, "residual stream width")
          .at_least(1)
          .at_most(kMaxWidth)
          .with_rule("divisible by model.n_heads"));
  add(CANONLAB_KEY(model.n_layers, "number of transformer blocks").at_least(1).at_most(kMaxLayers));
  add(CANONLAB_KEY(model.n_heads, "attention heads per layer; head_dim = d_model / n_heads")
          .at_least(1)
          .at_most(kMaxWidth));
  add(CANONLAB_KEY(model.n_kv_heads, "key/value heads of attention layers (grouped-query attention: n_heads / n_kv_heads query heads share one); 0 = n_heads")
          .at_least(0)
          .at_most(kMaxWidth)
          .with_rule("divides model.n_heads; n_heads or 0 without attention layers"));
  add(CANONLAB_KEY(model.vocab_size, "embedding and output rows; 0 = the task's vocabulary (copy: task.vocab + 1, the +1 is the BOS token)")
          .at_least(0)
          .at_most(kMaxVocab)
          .with_rule("nonzero: >= the task's vocabulary, exactly it with tie_embeddings"));
  add(CANONLAB_KEY(model.max_seq_len, "longest sequence; 0 = the task's window (copy: 2 * n_symbols + 1)")
          .at_least(0)
          .at_most(kMaxSequence)
          .with_rule("nonzero: >= the task's sequence length"));
  add(CANONLAB_KEY(model.norm, "normalisation before attention, MLP and the output head").one_of({"rmsnorm", "layernorm"}));
  add(CANONLAB_KEY(model.norm_eps, "epsilon inside the norm").above(0));
  add(CANONLAB_KEY(model.tie_embeddings, "output head shares the token embedding matrix"));
  add(CANONLAB_KEY(model.init_std, "std of normal(0, std) init for linear and embedding weights").above(0));

  add(CANONLAB_KEY(model.attention.position, "position scheme (exactly one)").one_of({"rope", "nope", "alibi", "learned"}));
  add(CANONLAB_KEY(model.attention.alibi_slopes, "ALiBi head slopes: geometric = the paper's 2^(-8h/H), h = 1..H; press = the reference code's get_slopes (BLOOM, MPT), which differs when H is not a power of two")
          .one_of({"geometric", "press"})
          .with_rule("geometric unless position is alibi"));
  add(CANONLAB_KEY(model.attention.rope_base, "RoPE frequency base (used only with position: rope)").above(0));
  add(CANONLAB_KEY(model.attention.rope_dim, "rotated dims per head; 0 = head_dim with rope (full RoPE)")
          .at_least(0)
          .at_most(kMaxWidth)
          .with_rule("even, <= head_dim; must be 0 unless position is rope"));
  add(CANONLAB_KEY(model.attention.scoring, "softmax: usual attention; sign_ste: softmax over sign(q.k) with a straight-through gradient")
          .one_of({"softmax", "sign_ste"}));
  add(CANONLAB_KEY(model.attention.ste_grad, "sign_ste backward: identity, or clipped (passes only where |x| <= 1)")
          .one_of({"identity", "clipped"}));
  add(CANONLAB_KEY(model.attention.qkv_bias, "bias on the Q, K, V projections"));
  add(CANONLAB_KEY(model.attention.window, "sliding-window size of S layers: a query at t sees keys t-window+1 .. t")
          .at_least(1)
          .at_most(kMaxSequence));
  add(CANONLAB_KEY(model.attention.key_shift.layers, "layers whose keys are shifted (model.attention.key_shift.mode)")
          .with_rule("each in [0, n_layers), no duplicates"));
  add(CANONLAB_KEY(model.attention.key_shift.offset, "how far back the key shift looks")
          .at_least(1)
          .at_most(kMaxSequence));
  add(CANONLAB_KEY(model.attention.key_shift.mode, "add: key = W_K(x[t] + x[t-o]); replace: key = W_K(x[t-o]); smeared: k[t] = s k[t] + (1-s) k[t-o], s = sigmoid(alpha) per head; kv: k = a1 k + a2 k[t-o], v = b1 v + b2 v[t-o] per head; partial: k[t] = k[t-o] in head dims `dims` (docs/token-shift.md)")
          .one_of({"add", "replace", "smeared", "kv", "partial"}));
  add(CANONLAB_KEY(model.attention.key_shift.dims, "partial: the head dims [from, to) whose keys come from t - offset; [] = the dims RoPE leaves alone ([rope_dim, head_dim)), or the whole head without RoPE")
          .with_rule("partial only: [] or two numbers 0 <= from < to <= head_dim"));

  add(CANONLAB_KEY(model.mlp.kind, "gelu (exact erf), swiglu (gated SiLU) or relu2 (ReLU squared)").one_of({"gelu", "swiglu", "relu2"}));
  add(CANONLAB_KEY(model.mlp.hidden_dim, "MLP width; 0 = 4 * d_model (gelu, relu2) or round(8 * d_model / 3) (swiglu)")
          .at_least(0)
          .at_most(kMaxHidden));
  add(CANONLAB_KEY(model.mlp.bias, "bias on the MLP projections"));

  add(CANONLAB_KEY(model.canon.set, "Canon layers: A before the mixer, B on the mixer inputs (QKV), C before MLP, D inside the MLP; b = the linear family's own conv1d; empty = none")
          .with_rule("letters from ABCD, each once; b (or bb) only in linear-time families"));
  add(CANONLAB_KEY(model.canon.kernel_size, "causal conv kernel length").at_least(1).at_most(kMaxKernel));
  add(CANONLAB_KEY(model.canon.residual, "h + conv(h) instead of conv(h)"));
  add(CANONLAB_KEY(model.canon.activation, "activation on the conv output").one_of({"none", "silu", "elu"}));
  add(CANONLAB_KEY(model.canon.groups, "conv groups; 0 = depthwise (groups = channels)")
          .at_least(0)
          .at_most(kMaxChannels)
          .with_rule("divides each channel count it applies to: A/C d_model, B 3*d_model, D the MLP up width"));
  add(CANONLAB_KEY(model.canon.norm, "norm on the conv output before the residual add").one_of({"none", "layernorm", "rmsnorm"}));
  add(CANONLAB_KEY(model.canon.dynamic, "dynamic Canon: rank R of the map from the hidden state to a per-position kernel offset (docs/canon-variants.md); 0 = static")
          .at_least(0)
          .at_most(256)
          .with_rule("> 0 needs depthwise convs (canon.groups 0)"));
  add(CANONLAB_KEY(model.canon.cross_layer.layers, "cross-layer Canon: block l's input, convolved, is added to block l+1's input; empty = none")
          .with_rule("each in [0, n_layers - 1), no duplicates"));
  add(CANONLAB_KEY(model.canon.cross_layer.kernel_size, "cross-layer Canon: causal conv kernel length").at_least(1).at_most(kMaxKernel));
  add(CANONLAB_KEY(model.canon.cross_layer.residual, "cross-layer Canon: h_{l+1} + X(h_l); false: X(h_l) replaces block l's skip"));
  add(CANONLAB_KEY(model.canon.cross_layer.activation, "cross-layer Canon: activation on the conv output").one_of({"none", "silu", "elu"}));
  add(CANONLAB_KEY(model.canon.cross_layer.norm, "cross-layer Canon: norm on the conv output").one_of({"none", "layernorm", "rmsnorm"}));

  add(CANONLAB_KEY(model.recurrent.chunk_size, "chunk length of the chunked linear-time kernels")
          .at_least(1)
          .at_most(kMaxChunk));
  add(CANONLAB_KEY(model.recurrent.conv_kernel, "kernel of the linear families' own short conv (Canon-b)")
          .at_least(1)
          .at_most(kMaxKernel));
  add(CANONLAB_KEY(model.recurrent.kernel, "chunked (fast) or naive (per-step reference recurrence)").one_of({"chunked", "naive"}));

  add(CANONLAB_KEY(model.mamba2.d_state, "SSM state size N").at_least(1).at_most(kMaxState));
  add(CANONLAB_KEY(model.mamba2.expand, "d_inner = expand * d_model").at_least(1).at_most(kMaxExpand));
  add(CANONLAB_KEY(model.mamba2.headdim, "SSM head dim P; 0 = d_inner / n_heads")
          .at_least(0)
          .at_most(kMaxChannels)
          .with_rule("divides d_inner"));
  add(CANONLAB_KEY(model.mamba2.ngroups, "groups sharing B and C")
          .at_least(1)
          .at_most(kMaxChannels)
          .with_rule("divides the number of SSM heads"));
  add(CANONLAB_KEY(model.mamba2.mlp, "Mamba2(mlp): a gated MLP after the mixer in every Mamba2 layer"));
  add(CANONLAB_KEY(model.mamba2.dt_min, "dt init: log-uniform lower end").above(0));
  add(CANONLAB_KEY(model.mamba2.dt_max, "dt init: log-uniform upper end").above(0).with_rule(">= dt_min"));
  add(CANONLAB_KEY(model.mamba2.dt_init_floor, "dt init floor").above(0));
  add(CANONLAB_KEY(model.mamba2.a_min, "A_log = log U[a_min, a_max]").above(0));
  add(CANONLAB_KEY(model.mamba2.a_max, "A_log = log U[a_min, a_max]").above(0).with_rule(">= a_min"));
  add(CANONLAB_KEY(model.mamba2.init, "default, or mimetic (decay near 1, dt near 1, C = B projections, identity conv1d)").one_of({"default", "mimetic"}));

  add(CANONLAB_KEY(model.gla.expand_k, "key width = expand_k * d_model").above(0).at_most(kMaxExpand));
  add(CANONLAB_KEY(model.gla.expand_v, "value width = expand_v * d_model").above(0).at_most(kMaxExpand));
  add(CANONLAB_KEY(model.gla.feature_map, "feature map on q and k").one_of({"none", "elu_plus_one", "relu", "silu"}));
  add(CANONLAB_KEY(model.gla.gate_low_rank_dim, "rank of the forget-gate projection").at_least(1).at_most(kMaxWidth));
  add(CANONLAB_KEY(model.gla.gate_logit_normalizer, "log forget gate = logsigmoid(.) / normalizer").above(0));
  add(CANONLAB_KEY(model.gla.clamp_min, "lower clamp of the log forget gate; 0 = none").at_most(0));
  add(CANONLAB_KEY(model.gla.output_gate, "swish output gate after the per-head norm"));

  add(CANONLAB_KEY(model.delta.expand_k, "Gated DeltaNet / DeltaNet key width = expand_k * d_model")
          .above(0)
          .at_most(kMaxExpand));
  add(CANONLAB_KEY(model.delta.expand_v, "value width = expand_v * d_model").above(0).at_most(kMaxExpand));
  add(CANONLAB_KEY(model.delta.output_gate, "swish output gate after the per-head norm"));
  add(CANONLAB_KEY(model.delta.allow_neg_eigval, "beta in (0, 2) instead of (0, 1)"));

  add(CANONLAB_KEY(task.name, "synthetic task (docs/tasks.md)").one_of({"copy", "depo", "brevo", "mano", "lano", "capo", "mqar", "text"}));
  add(CANONLAB_KEY(task.context, "tokens per training window (instances are packed left-aligned); 0 = the task's default")
          .at_least(0)
          .at_most(kMaxSequence)
          .with_rule("copy: 0 only (its length is 2 * n_symbols + 1); others: >= the longest instance"));
  add(CANONLAB_KEY(task.loss_on, "positions with loss: the paper's choice for the task, every next token, only answers, or (copy) only the copy half")
          .one_of({"default", "all", "answers", "copy"})
          .with_rule("copy only with the copy task; answers not with copy, lano or text"));
  add(CANONLAB_KEY(task.eval_samples, "generated sequences per evaluation (brevo, lano)")
          .at_least(1)
          .at_most(kMaxCount));
  add(CANONLAB_KEY(task.vocab, "copy: number of task symbols; the BOS token is id `vocab`")
          .at_least(1)
          .at_most(kMaxVocab));
  add(CANONLAB_KEY(task.n_symbols, "copy: distinct symbols per sequence: [BOS] r1..rn r1..rn, T = 2n + 1")
          .at_least(1)
          .at_most(kMaxCopySymbols)
          .with_rule("<= task.vocab"));
  add(CANONLAB_KEY(task.depo.n_max, "Depo N: cycle sizes 3..N drawn with p(n) ~ 1/(n + sqrt(N)); evaluated at n = N")
          .at_least(3)
          .at_most(kMaxGraph));
  add(CANONLAB_KEY(task.depo.k_max, "Depo K: training hops uniform in 1..K; evaluated at k = K and K/2")
          .at_least(1)
          .at_most(kMaxGraph));
  add(CANONLAB_KEY(task.depo.name_vocab, "Depo V: a name's last token from [V, 2V), the others from [0, V)")
          .at_least(1)
          .at_most(kMaxNameVocab));
  add(CANONLAB_KEY(task.depo.name_len_min, "Depo: fewest tokens per vertex name").at_least(1).at_most(kMaxNameLength));
  add(CANONLAB_KEY(task.depo.name_len_max, "Depo: most tokens per vertex name")
          .at_least(1)
          .at_most(kMaxNameLength)
          .with_rule(">= name_len_min; enough names for N vertices"));
  add(CANONLAB_KEY(task.depo.queries, "Depo: queries per instance, min(queries, n)").at_least(1).at_most(kMaxGraph));
  add(CANONLAB_KEY(task.brevo.n_max, "Brevo N: DAG sizes 3..N drawn with p(n) ~ 1/(n + sqrt(N)); evaluated at n = N")
          .at_least(3)
          .at_most(kMaxGraph));
  add(CANONLAB_KEY(task.brevo.name_vocab, "Brevo: 0 = one-token names from N symbols (Brevo1); V > 0 = multi-token names as in Depo (Brevo2: 4)")
          .at_least(0)
          .at_most(kMaxNameVocab));
  add(CANONLAB_KEY(task.brevo.name_len_min, "Brevo: fewest tokens per vertex name (name_vocab > 0)")
          .at_least(1)
          .at_most(kMaxNameLength));
  add(CANONLAB_KEY(task.brevo.name_len_max, "Brevo: most tokens per vertex name (name_vocab > 0)")
          .at_least(1)
          .at_most(kMaxNameLength)
          .with_rule(">= name_len_min; enough names for N vertices"));
  add(CANONLAB_KEY(task.brevo.max_degree, "Brevo: in- and out-degree bound").at_least(1).at_most(kMaxGraph));
  add(CANONLAB_KEY(task.brevo.query_from, "Brevo: query vertex from the last quarter (paper text) or the last vertex (released generator)").one_of({"last_quarter", "last"}));
  add(CANONLAB_KEY(task.mano.max_ops, "Mano L: operators per expression uniform in 1..L; evaluated at L")
          .at_least(1)
          .at_most(kMaxGraph));
  add(CANONLAB_KEY(task.mano.modulus, "Mano: arithmetic modulus").at_least(2).at_most(kMaxCount));
  add(CANONLAB_KEY(task.mano.ops, "Mano: operators").one_of({"+", "-", "*"}).with_rule("at least one, no duplicates"));
  add(CANONLAB_KEY(task.mano.knowledge_augment, "Mano: each operator also has an alternate token, chosen at random"));
  add(CANONLAB_KEY(task.lano.grammar, "Lano: grammar JSON in the paper's format (a relative path is read from the working directory, else from the canonlab checkout), or 'generate'"));
  add(CANONLAB_KEY(task.lano.depth, "Lano, generated grammar: rule levels including the root; terminals sit at level depth (the JSON's depth; cfg3f: 6)")
          .at_least(1)
          .at_most(kMaxGrammarDepth));
  add(CANONLAB_KEY(task.lano.num_sym, "Lano, generated grammar: non-terminals per level, and terminals")
          .at_least(1)
          .at_most(kMaxGrammarSymbols));
  add(CANONLAB_KEY(task.lano.deg_min, "Lano, generated grammar: fewest rules per non-terminal")
          .at_least(1)
          .at_most(kMaxGrammarSymbols));
  add(CANONLAB_KEY(task.lano.deg_max, "Lano, generated grammar: most rules per non-terminal")
          .at_least(1)
          .at_most(kMaxGrammarSymbols)
          .with_rule(">= deg_min; (1 + (depth - 1) * num_sym) * deg_max * len_max <= 1048576"));
  static_assert(kMaxGrammarRuleSymbols == 1048576, "the rule above states the limit check_generated_grammar applies");
  add(CANONLAB_KEY(task.lano.len_min, "Lano, generated grammar: fewest symbols per rule")
          .at_least(1)
          .at_most(kMaxRuleLength));
  add(CANONLAB_KEY(task.lano.len_max, "Lano, generated grammar: most symbols per rule")
          .at_least(1)
          .at_most(kMaxRuleLength)
          .with_rule(">= len_min"));
  add(CANONLAB_KEY(task.lano.grammar_seed, "Lano, generated grammar: seed"));
  add(CANONLAB_KEY(task.lano.max_sentence, "Lano: longest generated sentence at evaluation; 0 = the context length")
          .at_least(0)
          .at_most(kMaxSequence));
  add(CANONLAB_KEY(task.capo.people, "Capo N: people in the biography set").at_least(1).at_most(kMaxPeople));
  add(CANONLAB_KEY(task.capo.exposures, "Capo: times each biography is seen in train.steps (sets the steps of the presets)")
          .at_least(1)
          .at_most(kMaxCount));
  add(CANONLAB_KEY(task.capo.fields, "Capo: folder of the name and attribute lists (the paper's fields/*.txt format; relative: working directory, else the canonlab checkout)"));
  add(CANONLAB_KEY(task.capo.eval_people, "Capo: people whose attribute loss estimates the stored bits")
          .at_least(1)
          .at_most(kMaxCount));
  add(CANONLAB_KEY(task.mqar.vocab, "MQAR V: keys from [1, V/2), values from [V/2, V)").at_least(4).at_most(kMaxVocab));
  add(CANONLAB_KEY(task.mqar.pairs, "MQAR: key-value pairs per sequence")
          .at_least(1)
          .at_most(kMaxSequence / 4)
          .with_rule("4 * pairs <= context"));
  add(CANONLAB_KEY(task.mqar.power_a, "MQAR: query gaps drawn with p(i) ~ a * i^(a-1)").above(0));
  add(CANONLAB_KEY(task.mqar.random_non_queries, "MQAR: fill non-query positions with random tokens instead of 0"));
  add(CANONLAB_KEY(task.text.path, "text: a data directory made by canonlab data prepare (token shards, docs/text-data.md), or a text file read as bytes (relative: working directory, else the canonlab checkout)"));
  add(CANONLAB_KEY(task.text.heldout_frac, "text, plain files only: the last fraction of the file is held out (a data directory has its split from data prepare --val-fraction)").above(0).below(1));
  add(CANONLAB_KEY(task.text.eval_whole_split, "text: evaluate bpb/bpc on every held-out window (as many batches as that takes) instead of the first train.eval_batches batches"));

  add(CANONLAB_KEY(train.steps, "optimizer steps").at_least(1).at_most(kMaxSteps));
  add(CANONLAB_KEY(train.batch_size, "sequences per step: the global batch, over all ranks and micro-batches").at_least(1).at_most(kMaxBatch));
  add(CANONLAB_KEY(train.micro_batches, "gradient accumulation: each process computes its share of the batch in this many passes, folding their gradients in order (docs/cluster.md#data-parallel-training-mpi-nccl)")
          .at_least(1)
          .at_most(kMaxBatch)
          .with_rule("divides train.batch_size (with the rank count: ranks x micro_batches divides it)"));
  add(CANONLAB_KEY(train.lr, "peak learning rate").above(0));
  add(CANONLAB_KEY(train.schedule, "learning-rate schedule after warmup").one_of({"cosine", "linear", "constant"}));
  add(CANONLAB_KEY(train.warmup_steps, "linear warmup steps from 0 to lr").at_least(0).at_most(kMaxSteps));
  add(CANONLAB_KEY(train.min_lr_frac, "cosine floor as a fraction of lr").at_least(0).at_most(1));
  add(CANONLAB_KEY(train.weight_decay, "AdamW decoupled weight decay").at_least(0));
  add(CANONLAB_KEY(train.decay_on, "parameter groups that get weight decay")
          .one_of({"linear", "embedding", "canon", "norm", "bias", "ssm"})
          .with_rule("no duplicates"));
  add(CANONLAB_KEY(train.beta1, "AdamW beta1").at_least(0).below(1));
  add(CANONLAB_KEY(train.beta2, "AdamW beta2").at_least(0).below(1));
  add(CANONLAB_KEY(train.eps, "AdamW epsilon").above(0));
  add(CANONLAB_KEY(train.grad_clip, "global gradient-norm clip; 0 disables").at_least(0));
  add(CANONLAB_KEY(train.seed, "parameter-init seed"));
  add(CANONLAB_KEY(train.data_seed, "training data stream seed; 0 = seed + 1"));
  add(CANONLAB_KEY(train.threads, "worker threads; 0 = all cores").at_least(0).at_most(kMaxThreads));
  add(CANONLAB_KEY(train.device, "where the run computes: parameters, gradients, optimizer state and activations live there (docs/engine.md#backends)")
          .with_rule("cpu, cuda (GPU 0) or cuda:N; cuda needs a build with the CUDA backend"));
  add(CANONLAB_KEY(train.precision,
                   "fp32, or bf16: the linear layers' GEMMs take bf16 inputs with fp32 accumulation; master weights, "
                   "gradient sums, AdamW, norms, softmax and loss stay fp32. Pays on CPUs with AVX512-BF16 or AMX "
                   "(E1-Bk0 step 1.28–1.37× fp32 on a Zen 4, BENCHMARKS.md); elsewhere emulated and no faster, which "
                   "`train` says once at its start")
          .one_of({"fp32", "bf16"}));
  add(CANONLAB_KEY(train.cuda_graph,
                   "cuda: capture the training step as one CUDA graph and replay it (after a few eager steps; the same "
                   "bits as eager launches, docs/gpu.md#the-step-as-one-graph); false launches every kernel each step"));
  add(CANONLAB_KEY(train.attention_kernel,
                   "cuda: who runs softmax attention. auto: with precision bf16, cuDNN's fused attention (bf16 tensor "
                   "cores, deterministic backward) where it takes the case, else canonlab's flash kernel, each choice "
                   "printed once and written to summary.json; flash: always canonlab's fp32 flash kernel; cudnn: cuDNN "
                   "for every attention layer, a case it refuses is an error (needs precision bf16). fp32 precision "
                   "always runs the fp32 flash kernel (docs/gpu.md#attention-kernels)")
          .one_of({"auto", "flash", "cudnn"}));
  add(CANONLAB_KEY(train.log_every, "steps between log lines").at_least(1).at_most(kMaxSteps));
  add(CANONLAB_KEY(train.eval_every, "steps between evaluations; 0 = only at the end").at_least(0).at_most(kMaxSteps));
  add(CANONLAB_KEY(train.eval_batches, "fixed held-out batches of batch_size sequences")
          .at_least(1)
          .at_most(kMaxBatch));
  add(CANONLAB_KEY(train.checkpoint_every, "steps between checkpoints; 0 = only at the end")
          .at_least(0)
          .at_most(kMaxSteps));
  add(CANONLAB_KEY(train.keep_checkpoints, "most recent step checkpoints kept (the final one is always kept)")
          .at_least(0)
          .at_most(kMaxKeptCheckpoints));
  add(CANONLAB_KEY(train.max_memory_gb, "refuse a run whose estimated peak memory exceeds this many GiB (docs/resources.md); 0 = only what the machine has available")
          .at_least(0)
          .at_most(kMaxMemoryGb));

  add(CANONLAB_KEY(probe.n_sequences, "held-out sequences for IPMR").at_least(1).at_most(kMaxCount));
  add(CANONLAB_KEY(probe.seed, "held-out stream seed, distinct from the training data"));
  add(CANONLAB_KEY(probe.top_heads, "heads reported by the probe").at_least(1).at_most(kMaxHeads));
  add(CANONLAB_KEY(log.tensorboard, "write TensorBoard event files beside the metrics (RUN_DIR/tb/): scalars, the config, the IPMR table; tensorboard --logdir RUN_DIR or a sweep's directory"));
  return keys;
}

#undef CANONLAB_KEY

struct Alias {
  std::string_view spelled;
  std::string_view canonical;
};
// The user's own documents write the Canon block as `canon_config:`; both placements mean model.canon.
constexpr std::array kAliases = {Alias{"canon_config", "model.canon"}, Alias{"model.canon_config", "model.canon"}};

bool has_prefix_path(std::string_view path, std::string_view prefix) {
  return path.size() > prefix.size() && path.starts_with(prefix) && path[prefix.size()] == '.';
}

std::string_view last_segment(std::string_view path) {
  auto dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t substitute = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitute});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::vector<std::string> all_sections() {
  std::set<std::string> seen;
  std::vector<std::string> sections;
  for (const auto& key : all_keys()) {
    std::string_view path = key.path;
    for (auto dot = path.find('.'); dot != std::string_view::npos; dot = path.find('.', dot + 1)) {
      std::string section(path.substr(0, dot));
      if (seen.insert(section).second) sections.push_back(section);
    }
  }
  return sections;
}

// Closest known path (leaf or section) by edit distance over the whole path, if close enough to be a typo.
std::optional<std::string> closest_by_path(std::string_view path) {
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, path.size() / 4) + 1;
  auto consider = [&](std::string_view candidate) {
    size_t d = edit_distance(path, candidate);
    if (d < best_distance) best_distance = d, best = std::string(candidate);
  };
  for (const auto& key : all_keys()) consider(key.path);
  for (const auto& section : all_sections()) consider(section);
  return best;
}

// Catches a key put in the wrong section (model.rope_dim): match on the last path segment alone.
std::optional<std::string> closest_by_leaf_name(std::string_view path) {
  std::string_view leaf = last_segment(path);
  std::optional<std::string> best;
  size_t best_distance = leaf.size() <= 4 ? 1 : 3;
  for (const auto& key : all_keys()) {
    size_t d = edit_distance(leaf, last_segment(key.path));
    if (d < best_distance) best_distance = d, best = std::string(key.path);
  }
  return best;
}

std::string deepest_known_section(std::string_view path) {
  std::string section;
  for (auto dot = path.find('.'); dot != std::string_view::npos; dot = path.find('.', dot + 1)) {
    if (!is_section(path.substr(0, dot))) break;
    section = std::string(path.substr(0, dot));
  }
  return section;
}

std::string join_strings(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? std::string(separator) : "") + items[i];
  return out;
}

// Whole bounds print as integers (1000000000, not 1e+09), so the docs and messages show numbers one can type.
std::string format_bound_number(double v) {
  if (v == std::floor(v) && std::abs(v) < 1e15) return std::to_string(int64_t(v));
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, v);
  return std::string(buffer, result.ptr);
}

}  // namespace

std::string describe_range(const KeySpec& key) {
  if (key.lower && key.upper) {
    return std::string(key.lower->inclusive ? "[" : "(") + format_bound_number(key.lower->value) + ", " +
           format_bound_number(key.upper->value) + (key.upper->inclusive ? "]" : ")");
  }
  if (key.lower) return (key.lower->inclusive ? ">= " : "> ") + format_bound_number(key.lower->value);
  if (key.upper) return (key.upper->inclusive ? "<= " : "< ") + format_bound_number(key.upper->value);
  return {};
}

std::span<const KeySpec> all_keys() {
  static const std::vector<KeySpec> table = build_table();
  return table;
}

const KeySpec* find_key(std::string_view path) {
  for (const auto& key : all_keys())
    if (key.path == path) return &key;
  return nullptr;
}

bool is_section(std::string_view path) {
  return std::ranges::any_of(all_keys(), [&](const KeySpec& key) { return has_prefix_path(key.path, path); });
}

std::vector<std::string> section_children(std::string_view section) {
  std::vector<std::string> children;
  for (const auto& key : all_keys()) {
    std::string_view path = key.path;
    if (!section.empty()) {
      if (!has_prefix_path(path, section)) continue;
      path.remove_prefix(section.size() + 1);
    }
    std::string child(path.substr(0, path.find('.')));
    if (std::ranges::find(children, child) == children.end()) children.push_back(child);
  }
  return children;
}

std::string canonical_path(std::string_view path) {
  for (const auto& alias : kAliases) {
    if (path == alias.spelled) return std::string(alias.canonical);
    if (has_prefix_path(path, alias.spelled))
      return std::string(alias.canonical) + std::string(path.substr(alias.spelled.size()));
  }
  return std::string(path);
}

std::string unknown_key_hint(std::string_view path) {
  std::string canonical = canonical_path(path);
  auto suggestion = closest_by_path(canonical);
  if (!suggestion) suggestion = closest_by_leaf_name(canonical);
  if (suggestion) return "did you mean '" + *suggestion + "'?";
  std::string section = deepest_known_section(canonical);
  if (section.empty()) return "top-level sections are: " + join_strings(section_children(""), ", ") + " (and base)";
  return "keys under '" + section + "' are: " + join_strings(section_children(section), ", ");
}

std::string type_name(const FieldRef& field) {
  static constexpr std::array<const char*, 7> names = {"an integer",   "a non-negative integer", "a number",
                                                       "true or false", "a string", "a list of integers",
                                                       "a list of strings"};
  return names[field.index()];
}

std::string type_label(const FieldRef& field) {
  static constexpr std::array<const char*, 7> labels = {"int", "uint64", "float", "bool", "string", "list[int]",
                                                        "list[string]"};
  return labels[field.index()];
}

// Shortest text that parses back to the same double; integral values get ".0" so they read as floats.
std::string format_double(double value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

std::string format_scalar_string(const std::string& value) {
  auto is_plain_char = [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == '-' || ch == '/';
  };
  bool plain = !value.empty() && std::isalpha(static_cast<unsigned char>(value[0])) &&
               std::ranges::all_of(value, is_plain_char);
  if (plain) return value;
  std::string quoted = "\"";
  for (char ch : value) {
    if (ch == '"' || ch == '\\') quoted += '\\';
    quoted += ch;
  }
  return quoted + "\"";
}

std::string format_value(const FieldRef& field) {
  struct Formatter {
    std::string operator()(const int* v) const { return std::to_string(*v); }
    std::string operator()(const uint64_t* v) const { return std::to_string(*v); }
    std::string operator()(const double* v) const { return format_double(*v); }
    std::string operator()(const bool* v) const { return *v ? "true" : "false"; }
    std::string operator()(const std::string* v) const { return format_scalar_string(*v); }
    std::string operator()(const std::vector<int>* v) const {
      std::vector<std::string> items;
      for (int item : *v) items.push_back(std::to_string(item));
      return "[" + join_strings(items, ", ") + "]";
    }
    std::string operator()(const std::vector<std::string>* v) const {
      std::vector<std::string> items;
      for (const auto& item : *v) items.push_back(format_scalar_string(item));
      return "[" + join_strings(items, ", ") + "]";
    }
  };
  return std::visit(Formatter{}, field);
}

std::string join(std::span<const std::string_view> items, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? std::string(separator) : "") + std::string(items[i]);
  return out;
}

std::string describe_allowed(const KeySpec& key) {
  std::vector<std::string> parts;
  if (!key.choices.empty()) parts.push_back(join(key.choices, ", "));
  if (auto range = describe_range(key); !range.empty()) parts.push_back(range);
  if (!key.rule.empty()) parts.emplace_back(key.rule);
  return join_strings(parts, "; ");
}

}  // namespace canonlab::config_detail

namespace canonlab {

std::string config_reference_markdown() {
  using namespace config_detail;
  RunConfig defaults;
  std::string out = "| key | type | default | allowed | description |\n|---|---|---|---|---|\n";
  auto cell = [](std::string text) {
    std::string escaped;
    for (char ch : text) escaped += (ch == '|') ? std::string("\\|") : std::string(1, ch);
    return escaped;
  };
  for (const auto& key : all_keys()) {
    FieldRef field = key.field(defaults);
    out += "| `" + std::string(key.path) + "` | " + type_label(field) + " | `" + format_value(field) + "` | " +
           cell(describe_allowed(key)) + " | " + cell(std::string(key.description)) + " |\n";
  }
  return out;
}

}  // namespace canonlab

namespace canonlab {

double config_key_upper_limit(std::string_view path) {
  const config_detail::KeySpec* key = config_detail::find_key(path);
  CANONLAB_CHECK(key, "config_key_upper_limit: unknown key '" + std::string(path) + "'");
  return key->upper ? key->upper->value : std::numeric_limits<double>::infinity();
}

}  // namespace canonlab
