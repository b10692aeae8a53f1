#pragma once
// What a backend can run (ggml's supports_op), asked by the model before its one parameter allocation: a config
// that needs ops a backend lacks is refused naming them and the config key that asks for them, instead of failing
// mid-step. The ops come in groups a new backend can land one at a time: the core and attention first (the
// Transformer family), then each linear-time family. Each module says what it needs (SequenceMixer::needs,
// CanonLayer::needs); nothing keeps a second list in sync with the modules.
#include <string>
#include <string_view>
#include <vector>

namespace canonlab {

enum class OpGroup {
  core,             // linear layers, norms, embeddings, elementwise ops, MLPs, the loss, clipping and AdamW
  attention,        // softmax attention with RoPE, ALiBi, sliding windows, ±1 q/k and key shift
  canon,            // Canon layers: the causal depthwise conv and its epilogues
  dynamic_canon,    // model.canon.dynamic: position-dependent Canon kernels
  mamba2,           // the chunked SSD scan and Mamba2's glue
  gla,              // the chunked GLA scan, feature maps and gates
  delta_rule,       // the chunked (gated) delta rule and DeltaNet's inputs
  reference_scans,  // model.recurrent.kernel: naive: the per-step reference recurrences, on host memory
};

inline std::string_view op_group_name(OpGroup g) {
  switch (g) {
    case OpGroup::core: return "the core ops";
    case OpGroup::attention: return "softmax attention";
    case OpGroup::canon: return "Canon layers";
    case OpGroup::dynamic_canon: return "dynamic Canon";
    case OpGroup::mamba2: return "the Mamba2 SSD scan";
    case OpGroup::gla: return "the GLA scan";
    case OpGroup::delta_rule: return "the delta-rule scan";
    case OpGroup::reference_scans: return "the reference (naive) scans";
  }
  return "?";
}

// One thing a model needs from its backend, and the config setting that makes it need it ("model.family: gla").
// size: the shape a backend may bound (attention's head dimension, a Canon layer's kernel size; 0: none), and
// size_key: what sets it. features: what else of the case a backend may refuse ("alibi"), each with what sets it.
struct OpFeature {
  std::string name;
  std::string key;
};
struct OpNeed {
  OpGroup group;
  std::string setting;
  long size = 0;
  std::string size_key = {};
  std::vector<OpFeature> features = {};
};

class BackendCapabilities {
 public:
  virtual ~BackendCapabilities() = default;
  virtual bool supports(OpGroup group) const = 0;
  // The largest OpNeed::size the backend runs for the group (a GPU kernel's tile limit); 0 = no limit.
  virtual long max_size(OpGroup group) const { return 0; }
  // Why the backend refuses a need it otherwise runs ("" = it runs it): a rule of the backend's own settings for
  // one case (train.attention_kernel: cudnn refuses ALiBi layers and head dimensions cuDNN does not take).
  virtual std::string refusal(const OpNeed& need) const { return ""; }
};

// Throws canonlab::Error naming train.device, the backend, each op group it lacks and the settings that need it.
void check_supported(const BackendCapabilities& backend, const std::string& backend_name,
                     const std::vector<OpNeed>& needs);

}  // namespace canonlab
