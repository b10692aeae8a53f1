// resolve_and_validate: per-key ranges and allowed sets from the key table, then the cross-key rules and the
// derivation of "0 = derived" values. Runs on the struct, so YAML, --set, JSON and code-built configs all get it.
#include <algorithm>
#include <set>

#include "config/config.h"
#include "data/task.h"
#include "config/model_shapes.h"
#include "config/schema.h"
#include "engine/device.h"
#include "engine/error.h"
#include "io/json_read.h"

namespace canonlab {
namespace {

using namespace config_detail;

[[noreturn]] void fail(const std::string& message) { throw Error(message); }

// A value from the user, quoted and cut to a bounded prefix (an 80 KB string stays a one-line message).
std::string single_quoted(const std::string& text) { return "'" + brief_text(text) + "'"; }

bool within_bounds(const KeySpec& key, double value) {
  if (key.lower && (key.lower->inclusive ? value < key.lower->value : value <= key.lower->value)) return false;
  if (key.upper && (key.upper->inclusive ? value > key.upper->value : value >= key.upper->value)) return false;
  return true;
}

void check_bounds(const KeySpec& key, double value, const std::string& shown) {
  if (!within_bounds(key, value))
    fail(std::string(key.path) + (key.lower && key.upper ? ": must be in " : ": must be ") + describe_range(key) + ", got " + shown);
}

void check_choice(const KeySpec& key, const std::string& path, const std::string& value) {
  if (key.choices.empty() || std::ranges::find(key.choices, value) != key.choices.end()) return;
  fail(path + ": " + single_quoted(value) + " is not allowed; allowed: " + join(key.choices, ", "));
}

void check_string_list(const KeySpec& key, const std::vector<std::string>& items) {
  std::set<std::string> seen;
  for (size_t i = 0; i < items.size(); ++i) {
    std::string item_path = std::string(key.path) + "[" + std::to_string(i) + "]";
    check_choice(key, item_path, items[i]);
    if (!seen.insert(items[i]).second) fail(item_path + ": " + single_quoted(items[i]) + " is listed twice");
  }
}

// The rules a single key carries in the table: ranges and allowed sets.
void check_key(const KeySpec& key, RunConfig& config) {
  FieldRef field = key.field(config);
  if (auto* v = std::get_if<int*>(&field)) check_bounds(key, **v, std::to_string(**v));
  if (auto* v = std::get_if<double*>(&field)) check_bounds(key, **v, format_double(**v));
  if (auto* v = std::get_if<std::string*>(&field)) check_choice(key, std::string(key.path), **v);
  if (auto* v = std::get_if<std::vector<std::string>*>(&field)) check_string_list(key, **v);
}

void check_task(TaskConfig& task) {
  if (task.name == "copy" && task.n_symbols > task.vocab) {
    fail("task.n_symbols: " + std::to_string(task.n_symbols) + " exceeds task.vocab = " + std::to_string(task.vocab) +
         " (the symbols of a sequence are distinct); allowed: 1 to " + std::to_string(task.vocab));
  }
  if (task.loss_on == "copy" && task.name != "copy")
    fail("task.loss_on: 'copy' applies to the copy task only, but task.name is " + single_quoted(task.name) +
         "; allowed: default, all, answers");
  if (task.loss_on == "answers" && (task.name == "copy" || task.name == "lano" || task.name == "text"))
    fail("task.loss_on: 'answers' has no meaning for the " + task.name + " task (it has no answers); allowed: default, all" +
         std::string(task.name == "copy" ? ", copy" : ""));
  if (task.loss_on == "default") {
    task.loss_on = paper_trains_on_answers_only(task.name) ? "answers" : "all";
  }
}

// The task itself knows its vocabulary and window (some read a grammar or a folder of lists to know it).
void resolve_vocab_and_length(ModelConfig& model, TaskConfig& task) {
  const TaskShape shape = task_shape(task);
  if (task.name != "copy" && task.context == 0) task.context = shape.seq_len;
  const std::string vocab = std::to_string(shape.vocab_size);
  const std::string what = task.name == "copy" ? "task.vocab + 1 = " + vocab + " (task symbols plus the BOS token)"
                                               : "the " + task.name + " task's vocabulary " + vocab;
  if (model.vocab_size == 0) model.vocab_size = shape.vocab_size;
  if (model.vocab_size < shape.vocab_size)
    fail("model.vocab_size: " + std::to_string(model.vocab_size) + " is smaller than " + what +
         "; allowed: 0 (derive) or >= " + vocab);
  if (model.tie_embeddings && model.vocab_size != shape.vocab_size)
    fail("model.tie_embeddings: requires model.vocab_size == " + what + ", got model.vocab_size " +
         std::to_string(model.vocab_size));
  const std::string length = std::to_string(shape.seq_len);
  if (model.max_seq_len == 0) model.max_seq_len = shape.seq_len;
  if (model.max_seq_len < shape.seq_len)
    fail("model.max_seq_len: " + std::to_string(model.max_seq_len) + " is shorter than the " + task.name +
         " task's sequence length " + length + (task.name == "copy" ? " (2 * task.n_symbols + 1)" : " (task.context)") +
         "; allowed: 0 (derive) or >= " + length);
}

int head_dim_of(const ModelConfig& model) {
  if (model.d_model % model.n_heads != 0) {
    fail("model.d_model: " + std::to_string(model.d_model) + " is not divisible by model.n_heads = " +
         std::to_string(model.n_heads) + " (head_dim = d_model / n_heads must be a whole number)");
  }
  return model.d_model / model.n_heads;
}

void resolve_rope_dim(AttentionConfig& attention, int head_dim) {
  const std::string head = std::to_string(head_dim);
  if (attention.position != "rope") {
    if (attention.rope_dim != 0) {
      fail("model.attention.rope_dim: " + std::to_string(attention.rope_dim) +
           " only applies with position 'rope', but model.attention.position is " + single_quoted(attention.position) +
           "; allowed: 0");
    }
    return;
  }
  if (attention.rope_dim == 0) {
    if (head_dim % 2 != 0) {
      fail("model.attention.rope_dim: 0 means head_dim, but head_dim " + head +
           " is odd; set an even rope_dim < " + head + " or change model.d_model / model.n_heads");
    }
    attention.rope_dim = head_dim;
  }
  if (attention.rope_dim % 2 != 0 || attention.rope_dim > head_dim) {
    fail("model.attention.rope_dim: " + std::to_string(attention.rope_dim) + (attention.rope_dim % 2 ? " is odd" : " exceeds head_dim " + head) +
         "; allowed: even values <= head_dim " + head + " (d_model / n_heads), or 0 for head_dim");
  }
}

// Like rope_dim: a slope rule that nothing reads would make a config (or a sweep arm) say something it does not run.
void check_alibi_slopes(const AttentionConfig& attention) {
  if (attention.position != "alibi" && attention.alibi_slopes != "geometric")
    fail("model.attention.alibi_slopes: " + single_quoted(attention.alibi_slopes) +
         " only applies with position 'alibi', but model.attention.position is " + single_quoted(attention.position) +
         "; allowed: geometric (the default)");
}

// A list of layer indices (key `key`): each in [0, limit), none twice; `beyond` says why an index past the limit
// is refused. Key-shift layers and cross-layer Canon connections share it.
void check_layer_list(const std::vector<int>& layers, const std::string& key, int limit, const std::string& beyond,
                      int n_layers) {
  std::set<int> seen;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string path = key + "[" + std::to_string(i) + "]";
    const int layer = layers[i];
    if (layer < 0 || layer >= limit) {
      fail(path + ": layer " + std::to_string(layer) + " " + beyond + "; allowed: 0 to " + std::to_string(limit - 1) +
           " (model.n_layers = " + std::to_string(n_layers) + ")");
    }
    if (!seen.insert(layer).second) fail(path + ": layer " + std::to_string(layer) + " is listed twice");
  }
}

void check_key_shift(KeyShiftConfig& key_shift, const AttentionConfig& attention, int n_layers, int head_dim) {
  check_layer_list(key_shift.layers, "model.attention.key_shift.layers", n_layers, "does not exist", n_layers);
  const std::string head = std::to_string(head_dim);
  const auto dims_text = [&] { return brief_text(format_value(FieldRef(&key_shift.dims))); };
  if (key_shift.mode != "partial") {
    if (!key_shift.dims.empty())
      fail("model.attention.key_shift.dims: " + dims_text() + " only applies with mode 'partial', but "
           "model.attention.key_shift.mode is " + single_quoted(key_shift.mode) + "; allowed: []");
    return;
  }
  if (key_shift.dims.empty()) {
    // The modded-nanogpt offset acts on the dims RoPE leaves stationary; without RoPE every dim is.
    const bool rope = attention.position == "rope";
    if (rope && attention.rope_dim >= head_dim)
      fail("model.attention.key_shift.dims: [] means the dims RoPE leaves alone, but RoPE rotates all " + head +
           " dims of each head (model.attention.rope_dim " + std::to_string(attention.rope_dim) +
           "); set dims: [from, to) or a smaller model.attention.rope_dim");
    key_shift.dims = {rope ? attention.rope_dim : 0, head_dim};
  }
  const std::vector<int>& d = key_shift.dims;
  if (d.size() != 2 || d[0] < 0 || d[0] >= d[1] || d[1] > head_dim)
    fail("model.attention.key_shift.dims: " + dims_text() + " is not a range of head dims; allowed: [from, to) "
         "with 0 <= from < to <= head_dim " + head + ", or [] for the dims RoPE leaves alone");
}

void check_cross_layer_canon(const CrossLayerCanonConfig& cross, int n_layers) {
  check_layer_list(cross.layers, "model.canon.cross_layer.layers", n_layers - 1, "has no next layer to feed", n_layers);
}

int default_mlp_hidden(const MlpConfig& mlp, int d_model) {
  // SwiGLU has three matrices instead of two, so 8d/3 keeps the parameter count of a 4d MLP. 8d/3 is never
  // exactly .5 away from an integer, so (8d + 1) / 3 is round(8d/3) in integers.
  return mlp.kind == "swiglu" ? (8 * d_model + 1) / 3 : 4 * d_model;
}

int mlp_up_width(const MlpConfig& mlp) { return mlp.kind == "swiglu" ? 2 * mlp.hidden_dim : mlp.hidden_dim; }

// Letters are A, B, C, D (each once) and, where some layer has its own short conv, b ("bb" is the paper's
// file-name spelling of b).
void check_canon_letters(CanonConfig& canon, const ModelConfig& model, const std::string& letters) {
  const bool has_conv_family = letters.find_first_of("MGDN") != std::string::npos;
  const std::string given = canon.set;
  if (has_conv_family) {
    const size_t bb = canon.set.find("bb");
    if (bb != std::string::npos) canon.set.erase(bb, 1);
  }
  const std::string allowed = has_conv_family ? "A, b, B, C, D" : "A, B, C, D";
  std::set<char> seen;
  for (char letter : canon.set) {
    if (letter == 'b' && !has_conv_family) {
      fail("model.canon.set: lowercase 'b' in " + single_quoted(given) +
           " means the built-in short convolution of linear-time families (Mamba2, GLA, GDN, DeltaNet); the " +
           model.family + " family has no built-in conv. Canon-B on the Q/K/V projections is uppercase 'B'; allowed letters: " + allowed);
    }
    if (std::string_view("AbBCD").find(letter) == std::string_view::npos) {
      fail("model.canon.set: letter " + single_quoted(std::string(1, letter)) + " in " + single_quoted(given) +
           " is not allowed; allowed letters: " + allowed + " (uppercase, and b for the family's own conv; each at most once)");
    }
    if (!seen.insert(letter).second) {
      fail("model.canon.set: " + single_quoted(std::string(1, letter)) + " appears twice in " + single_quoted(given) +
           "; each of " + allowed + " at most once");
    }
  }
  const bool any_mlp = std::ranges::any_of(letters, [&](char l) { return layer_has_mlp(model, l); });
  for (char letter : std::string("CD"))
    if (!any_mlp && canon.set.find(letter) != std::string::npos)
      fail("model.canon.set: Canon-" + std::string(1, letter) + " in " + single_quoted(given) +
           " sits in the MLP, but Mamba2 layers have no MLP unless model.mamba2.mlp is true; allowed letters here: A, b, B");
}

// Calls visit(channels, letter, what) for the channel count of each Canon position in use (uppercase letters;
// B once per mixer kind).
template <class Visit>
void for_each_canon_width(const CanonConfig& canon, const ModelConfig& model, const std::string& letters, Visit visit) {
  for (char letter : canon.set) {
    if (letter == 'A' || letter == 'C') visit(model.d_model, letter, std::string("d_model"));
    if (letter == 'D')
      visit(mlp_up_width(model.mlp), letter,
            std::string(model.mlp.kind == "swiglu" ? "2 * mlp.hidden_dim, the gated up width" : "mlp.hidden_dim"));
    if (letter == 'B')
      for (char mixer : std::set<char>(letters.begin(), letters.end()))
        visit(canon_b_width(model, mixer), letter,
              is_attention_letter(mixer) ? std::string("3 * d_model, the Q/K/V width")
              : mixer == 'M'             ? std::string("the Mamba2 in_proj width")
                                         : "the q|k|v width of the " + std::string(1, mixer) + " layers");
  }
}

// Channels each Canon position convolves over; groups must divide every one that is in use.
void check_canon_groups(const CanonConfig& canon, const ModelConfig& model, const std::string& letters) {
  if (canon.groups == 0) return;  // depthwise
  for_each_canon_width(canon, model, letters, [&](int channels, char letter, const std::string& what) {
    if (channels % canon.groups != 0) {
      fail("model.canon.groups: " + std::to_string(canon.groups) + " does not divide the " +
           std::to_string(channels) + " channels of Canon-" + letter + " (" + what +
           "); groups must divide every channel count in use, or be 0 for depthwise");
    }
  });
}

// Dynamic Canon (docs/canon-variants.md) offsets a per-channel kernel: every Canon position must be depthwise.
void check_canon_dynamic(const CanonConfig& canon, const ModelConfig& model, const std::string& letters) {
  if (canon.dynamic == 0 || canon.groups == 0) return;
  for_each_canon_width(canon, model, letters, [&](int channels, char letter, const std::string& what) {
    if (channels != canon.groups) {
      fail("model.canon.dynamic: " + std::to_string(canon.dynamic) + " needs depthwise Canon convolutions, but " +
           "model.canon.groups: " + std::to_string(canon.groups) + " makes Canon-" + letter + " grouped (" +
           std::to_string(channels / canon.groups) + " channels per group over its " + std::to_string(channels) +
           " channels, " + what + "); allowed: model.canon.groups 0 (depthwise) with model.canon.dynamic > 0, or " +
           "model.canon.dynamic 0");
    }
  });
}

// Letters are validated, then written in AbBCD order so equal configs compare equal as text.
void normalize_canon_set(CanonConfig& canon) {
  std::ranges::sort(canon.set, {}, [](char letter) { return std::string_view("AbBCD").find(letter); });
}

void check_layer_pattern(const ModelConfig& model) {
  if (model.family != "hybrid") {
    if (!model.layer_pattern.empty())
      fail("model.layer_pattern: " + single_quoted(model.layer_pattern) + " is only read when model.family is 'hybrid' (it is " +
           single_quoted(model.family) + "); allowed: empty, or set model.family: hybrid");
    return;
  }
  if (int(model.layer_pattern.size()) != model.n_layers)
    fail("model.layer_pattern: " + single_quoted(model.layer_pattern) + " has " + std::to_string(model.layer_pattern.size()) +
         " letters but model.n_layers is " + std::to_string(model.n_layers) + "; allowed: one letter per layer");
  for (size_t i = 0; i < model.layer_pattern.size(); i++)
    if (std::string_view("AMGDNS").find(model.layer_pattern[i]) == std::string_view::npos)
      fail("model.layer_pattern: letter " + single_quoted(std::string(1, model.layer_pattern[i])) + " (layer " + std::to_string(i) +
           ") in " + single_quoted(model.layer_pattern) +
           " is not a mixer; allowed: A attention, S sliding-window attention, M Mamba2, G GLA, D Gated DeltaNet, N DeltaNet");
}

// Sizes of the linear-time mixers must come out whole; headdim 0 is resolved here.
void resolve_linear_shapes(ModelConfig& model, const std::string& letters) {
  const std::string heads = std::to_string(model.n_heads);
  if (letters.find('M') != std::string::npos) {
    Mamba2Config& m = model.mamba2;
    const int d_inner = m.expand * model.d_model;
    if (m.headdim == 0) {
      if (d_inner % model.n_heads != 0)
        fail("model.mamba2.headdim: 0 means d_inner / n_heads, but d_inner = expand * d_model = " + std::to_string(d_inner) +
             " is not divisible by model.n_heads = " + heads + "; set headdim to a divisor of " + std::to_string(d_inner));
      m.headdim = d_inner / model.n_heads;
    }
    if (d_inner % m.headdim != 0)
      fail("model.mamba2.headdim: " + std::to_string(m.headdim) + " does not divide d_inner = expand * d_model = " +
           std::to_string(d_inner) + "; allowed: divisors of " + std::to_string(d_inner) + ", or 0 for d_inner / n_heads");
    const int ssm_heads = d_inner / m.headdim;
    if (ssm_heads % m.ngroups != 0)
      fail("model.mamba2.ngroups: " + std::to_string(m.ngroups) + " does not divide the " + std::to_string(ssm_heads) +
           " SSM heads (d_inner / headdim); allowed: divisors of " + std::to_string(ssm_heads));
    if (m.dt_max < m.dt_min)
      fail("model.mamba2.dt_max: " + format_double(m.dt_max) + " is below model.mamba2.dt_min = " + format_double(m.dt_min));
    if (m.a_max < m.a_min)
      fail("model.mamba2.a_max: " + format_double(m.a_max) + " is below model.mamba2.a_min = " + format_double(m.a_min));
  }
  for (char letter : std::string("GDN")) {
    if (letters.find(letter) == std::string::npos) continue;
    const std::string section = letter == 'G' ? "model.gla" : "model.delta";
    const QkvShape s = qkv_shape(model, letter);
    const double ek = letter == 'G' ? model.gla.expand_k : model.delta.expand_k;
    const double ev = letter == 'G' ? model.gla.expand_v : model.delta.expand_v;
    if (s.key_width < model.n_heads || s.key_width % model.n_heads != 0)
      fail(section + ".expand_k: " + format_double(ek) + " gives a key width int(d_model * expand_k) = " + std::to_string(s.key_width) +
           " that is not a positive multiple of model.n_heads = " + heads);
    if (s.value_width < model.n_heads || s.value_width % model.n_heads != 0)
      fail(section + ".expand_v: " + format_double(ev) + " gives a value width int(d_model * expand_v) = " +
           std::to_string(s.value_width) + " that is not a positive multiple of model.n_heads = " + heads);
  }
}

// Grouped-query attention: n_kv_heads key/value heads, each serving n_heads / n_kv_heads query heads. 0 resolves to
// n_heads (plain multi-head attention), so the resolved config says what ran; a family without attention layers
// reads no key/value heads, and any other value there would make the config say something it does not run.
void resolve_kv_heads(ModelConfig& model, const std::string& letters) {
  const std::string heads = std::to_string(model.n_heads), kv = std::to_string(model.n_kv_heads);
  if (model.n_kv_heads == 0) model.n_kv_heads = model.n_heads;
  if (!std::ranges::any_of(letters, is_attention_letter)) {
    if (model.n_kv_heads != model.n_heads)
      fail("model.n_kv_heads: " + kv + " only applies to attention layers, but model.family '" + model.family +
           "' has none; allowed: 0 or model.n_heads = " + heads);
    return;
  }
  if (model.n_heads % model.n_kv_heads != 0)
    fail("model.n_kv_heads: " + kv + " does not divide model.n_heads = " + heads +
         " (each key/value head serves n_heads / n_kv_heads query heads); allowed: a divisor of " + heads +
         ", or 0 for " + heads);
}

}  // namespace

void resolve_and_validate(RunConfig& config) {
  for (const auto& key : all_keys()) check_key(key, config);
  check_task(config.task);

  ModelConfig& model = config.model;
  resolve_vocab_and_length(model, config.task);
  const int head_dim = head_dim_of(model);
  resolve_rope_dim(model.attention, head_dim);
  check_alibi_slopes(model.attention);
  check_key_shift(model.attention.key_shift, model.attention, model.n_layers, head_dim);
  check_cross_layer_canon(model.canon.cross_layer, model.n_layers);
  if (model.mlp.hidden_dim == 0) model.mlp.hidden_dim = default_mlp_hidden(model.mlp, model.d_model);
  check_layer_pattern(model);
  const std::string letters = mixer_letters(model);
  resolve_kv_heads(model, letters);
  resolve_linear_shapes(model, letters);
  for (size_t i = 0; i < model.attention.key_shift.layers.size(); ++i) {
    const int layer = model.attention.key_shift.layers[i];
    if (!is_attention_letter(letters[size_t(layer)]))
      fail("model.attention.key_shift.layers[" + std::to_string(i) + "]: layer " + std::to_string(layer) + " is a '" +
           std::string(1, letters[size_t(layer)]) + "' layer (" + model.family +
           "); the key shift applies to attention layers only (A or S in model.layer_pattern)");
  }
  check_canon_letters(model.canon, model, letters);
  check_canon_groups(model.canon, model, letters);
  check_canon_dynamic(model.canon, model, letters);
  normalize_canon_set(model.canon);

  if (!parse_device(config.train.device))
    fail("train.device: " + single_quoted(config.train.device) + " is not allowed; allowed: cpu, cuda, cuda:N (N from 0 to " +
         std::to_string(kMaxDeviceIndex) + ")");

  if (config.train.attention_kernel == "cudnn" && config.train.precision != "bf16")
    fail("train.attention_kernel: 'cudnn' runs attention in bf16 and needs train.precision: bf16 (it is " +
         single_quoted(config.train.precision) + "); allowed with fp32: auto or flash, which run the fp32 flash kernel");

  if (config.train.batch_size % config.train.micro_batches != 0)
    fail("train.micro_batches: " + std::to_string(config.train.micro_batches) + " does not divide train.batch_size = " +
         std::to_string(config.train.batch_size) + "; allowed: a divisor of the batch (each micro-batch holds batch_size / " +
         "micro_batches sequences)");

  if (config.train.data_seed == 0) config.train.data_seed = config.train.seed + 1;
}

}  // namespace canonlab
