#pragma once
// AdamW with decoupled weight decay (PyTorch semantics), over the model's flat parameter buffer, plus
// global-norm gradient clipping. Which parameter groups are decayed is a config choice (train.decay_on). The
// moments and the decay mask live on the run's device beside the parameters; the kernels are the backend's
// (engine/ops/adamw/adamw.h, clip_coefficient there), the per-step scalars are computed here and the step itself is
// train/step.h's.
#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "engine/backend/backend.h"
#include "engine/params.h"

namespace canonlab {

struct AdamWState {
  DeviceBuffer<float> m, v;  // first and second moments, same layout as the parameters; empty before the first update
  int64_t t = 0;             // number of updates applied
};

// Per-element decay mask from parameter groups: 1 where weight decay applies.
template <class T>
std::vector<uint8_t> decay_mask(const ParameterStore<T>& store, const std::vector<std::string>& decay_on) {
  std::vector<uint8_t> mask(store.total(), 0);
  for (const ParamInfo& p : store.infos()) {
    const bool decay = std::find(decay_on.begin(), decay_on.end(), param_group_name(p.group)) != decay_on.end();
    std::fill(mask.begin() + p.offset, mask.begin() + p.offset + p.numel, decay ? 1 : 0);
  }
  return mask;
}
// The same mask on the store's device.
template <class T>
DeviceBuffer<uint8_t> device_decay_mask(const ParameterStore<T>& store, const std::vector<std::string>& decay_on) {
  const std::vector<uint8_t> mask = decay_mask(store, decay_on);
  return DeviceBuffer<uint8_t>(store.memory(), mask);
}

// The per-step scalars of update t (1-based) at learning rate lr.
inline AdamWCoefficients adamw_coefficients(const TrainConfig& c, int64_t t, double lr) {
  const double bc1 = 1.0 - std::pow(c.beta1, double(t));
  const double bc2 = 1.0 - std::pow(c.beta2, double(t));
  AdamWCoefficients k;
  k.beta1 = float(c.beta1), k.beta2 = float(c.beta2);
  k.step = float(lr / bc1), k.rsqrt_bc2 = float(1.0 / std::sqrt(bc2)), k.eps = float(c.eps);
  k.decay_shrink = float(1.0 - lr * c.weight_decay);
  return k;
}

// The moments, zero, on the parameters' device, when the state has none yet (a fresh run).
inline void ensure_moments(AdamWState& st, DeviceMemory& memory, size_t n) {
  if (!st.m.empty()) return;
  st.m = DeviceBuffer<float>(memory, n);
  st.v = DeviceBuffer<float>(memory, n);
  st.m.fill_zero();
  st.v.fill_zero();
}

}  // namespace canonlab
