#pragma once
// What a forward/backward pass needs besides its inputs: the step's arena, the hook that lets probes read
// attention patterns, and a trace of module outputs used to name the first module that went non-finite.
#include <functional>
#include <string>
#include <vector>

#include "engine/arena.h"

namespace canonlab {

template <class T>
struct ActivationTrace {
  struct Entry {
    const std::string* module;  // owned by the module, which outlives the step
    const T* data;
    size_t count;
  };
  std::vector<Entry> entries;
};

template <class T>
struct StepContext {
  Arena& arena;
  // Called by every attention layer after its softmax: probs (B, H, T, T).
  std::function<void(int layer, const T* probs, int B, int H, int Tn)> on_attention_probs = {};
  ActivationTrace<T>* trace = nullptr;

  void record(const std::string& module, const T* data, size_t count) {
    if (trace) trace->entries.push_back({&module, data, count});
  }
};

}  // namespace canonlab
