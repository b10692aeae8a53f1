// resolve_and_validate: per-key ranges and allowed sets from the key table, then the cross-key rules and the
// derivation of "0 = derived" values. Runs on the struct, so YAML, --set, JSON and code-built configs all get it.
#include <algorithm>
#include <set>

#include "config/config.h"
#include "config/schema.h"
#include "engine/error.h"

namespace canonlab {
namespace {

using namespace config_detail;

[[noreturn]] void fail(const std::string& message) { throw Error(message); }

std::string single_quoted(const std::string& text) { return "'" + text + "'"; }

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

int task_sequence_length(const TaskConfig& task) { return 2 * task.n_symbols + 1; }  // copy: [BOS] r1..rn r1..rn

void check_task(const TaskConfig& task) {
  if (task.n_symbols > task.vocab) {
    fail("task.n_symbols: " + std::to_string(task.n_symbols) + " exceeds task.vocab = " + std::to_string(task.vocab) +
         " (the symbols of a sequence are distinct); allowed: 1 to " + std::to_string(task.vocab));
  }
}

void resolve_vocab_and_length(ModelConfig& model, const TaskConfig& task) {
  const int needed_vocab = task.vocab + 1;  // + the BOS token
  if (model.vocab_size == 0) model.vocab_size = needed_vocab;
  if (model.vocab_size < needed_vocab) {
    fail("model.vocab_size: " + std::to_string(model.vocab_size) + " is smaller than task.vocab + 1 = " +
         std::to_string(needed_vocab) + " (task symbols plus the BOS token); allowed: 0 (derive) or >= " +
         std::to_string(needed_vocab));
  }
  if (model.tie_embeddings && model.vocab_size != needed_vocab) {
    fail("model.tie_embeddings: requires model.vocab_size == task.vocab + 1 = " + std::to_string(needed_vocab) +
         ", got model.vocab_size " + std::to_string(model.vocab_size));
  }
  const int needed_length = task_sequence_length(task);
  if (model.max_seq_len == 0) model.max_seq_len = needed_length;
  if (model.max_seq_len < needed_length) {
    fail("model.max_seq_len: " + std::to_string(model.max_seq_len) + " is shorter than the " + task.name +
         " task's sequence length " + std::to_string(needed_length) +
         " (2 * task.n_symbols + 1); allowed: 0 (derive) or >= " + std::to_string(needed_length));
  }
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

void check_key_shift(const KeyShiftConfig& key_shift, int n_layers) {
  std::set<int> seen;
  for (size_t i = 0; i < key_shift.layers.size(); ++i) {
    const std::string path = "model.attention.key_shift.layers[" + std::to_string(i) + "]";
    const int layer = key_shift.layers[i];
    if (layer < 0 || layer >= n_layers) {
      fail(path + ": layer " + std::to_string(layer) + " does not exist; allowed: 0 to " +
           std::to_string(n_layers - 1) + " (model.n_layers = " + std::to_string(n_layers) + ")");
    }
    if (!seen.insert(layer).second) fail(path + ": layer " + std::to_string(layer) + " is listed twice");
  }
}

int default_mlp_hidden(const MlpConfig& mlp, int d_model) {
  // SwiGLU has three matrices instead of two, so 8d/3 keeps the parameter count of a 4d MLP. 8d/3 is never
  // exactly .5 away from an integer, so (8d + 1) / 3 is round(8d/3) in integers.
  return mlp.kind == "swiglu" ? (8 * d_model + 1) / 3 : 4 * d_model;
}

int mlp_up_width(const MlpConfig& mlp) { return mlp.kind == "swiglu" ? 2 * mlp.hidden_dim : mlp.hidden_dim; }

void check_canon_letters(const CanonConfig& canon, const std::string& family) {
  std::set<char> seen;
  for (char letter : canon.set) {
    if (letter == 'b') {
      fail("model.canon.set: lowercase 'b' in " + single_quoted(canon.set) +
           " means the built-in short convolution of linear-time families (Mamba, GLA, ...); the " + family +
           " family has no built-in conv. Canon-B on the Q/K/V projections is uppercase 'B'; allowed letters: A, B, C, D");
    }
    if (std::string_view("ABCD").find(letter) == std::string_view::npos) {
      fail("model.canon.set: letter " + single_quoted(std::string(1, letter)) + " in " + single_quoted(canon.set) +
           " is not allowed; allowed letters: A, B, C, D (uppercase, each at most once)");
    }
    if (!seen.insert(letter).second) {
      fail("model.canon.set: " + single_quoted(std::string(1, letter)) + " appears twice in " + single_quoted(canon.set) +
           "; each of A, B, C, D at most once");
    }
  }
}

// Channels each Canon position convolves over; groups must divide every one that is in use.
void check_canon_groups(const CanonConfig& canon, const ModelConfig& model) {
  if (canon.groups == 0) return;  // depthwise
  for (char letter : canon.set) {
    int channels = model.d_model;
    std::string what = "d_model";
    if (letter == 'B') channels = 3 * model.d_model, what = "3 * d_model, the Q/K/V width";
    if (letter == 'D') {
      channels = mlp_up_width(model.mlp);
      what = model.mlp.kind == "swiglu" ? "2 * mlp.hidden_dim, the gated up width" : "mlp.hidden_dim";
    }
    if (channels % canon.groups != 0) {
      fail("model.canon.groups: " + std::to_string(canon.groups) + " does not divide the " +
           std::to_string(channels) + " channels of Canon-" + letter + " (" + what +
           "); groups must divide every channel count in use, or be 0 for depthwise");
    }
  }
}

// Letters are validated, then written in ABCD order so equal configs compare equal as text.
void normalize_canon_set(CanonConfig& canon) {
  std::ranges::sort(canon.set, {}, [](char letter) { return std::string_view("ABCD").find(letter); });
}

}  // namespace

void resolve_and_validate(RunConfig& config) {
  for (const auto& key : all_keys()) check_key(key, config);
  check_task(config.task);

  ModelConfig& model = config.model;
  resolve_vocab_and_length(model, config.task);
  const int head_dim = head_dim_of(model);
  resolve_rope_dim(model.attention, head_dim);
  check_key_shift(model.attention.key_shift, model.n_layers);
  if (model.mlp.hidden_dim == 0) model.mlp.hidden_dim = default_mlp_hidden(model.mlp, model.d_model);
  check_canon_letters(model.canon, model.family);
  check_canon_groups(model.canon, model);
  normalize_canon_set(model.canon);

  if (config.train.data_seed == 0) config.train.data_seed = config.train.seed + 1;
}

}  // namespace canonlab
