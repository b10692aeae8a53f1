#pragma once
// What a forward/backward pass needs besides its inputs: the backend whose ops it runs, the step's arena (on the
// backend's device), the hook that lets probes read attention patterns, and a trace of module outputs used to
// name the first module that went non-finite.
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "engine/backend/backend.h"

namespace canonlab {

template <class T>
struct ActivationTrace {
  struct Entry {
    const std::string* module;  // owned by the module, which outlives the step
    const T* data;              // device memory
    size_t count;
  };
  std::vector<Entry> entries;
};

template <class T>
struct StepContext {
  Arena& arena;
  Backend<T>& backend;
  // Called by every attention layer after its softmax: probs (B, H, T, T) in host memory.
  std::function<void(int layer, const T* probs, int B, int H, int Tn)> on_attention_probs = {};
  ActivationTrace<T>* trace = nullptr;
  // Called with the residual stream: index 0 after the embedding, l + 1 after block l (cross-layer Canon added), as
  // (B, T, C) in the backend's memory; the Python API's hidden_states.
  std::function<void(int index, const T* h, int B, int Tn, int C)> on_hidden_state = {};

  void record(const std::string& module, const T* data, size_t count) {
    if (trace) trace->entries.push_back({&module, data, count});
  }
  // A copy of host data in the step's arena (batches, ALiBi slopes): on the device for the whole step.
  template <class U>
  U* upload(std::span<const U> host) {
    U* p = arena.template alloc<U>(host.size());
    if (!host.empty()) arena.memory().copy_from_host(p, host.data(), host.size() * sizeof(U));
    return p;
  }
};

}  // namespace canonlab
