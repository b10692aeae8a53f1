#pragma once
// AdamW with decoupled weight decay (PyTorch semantics), over the model's flat parameter buffer, plus
// global-norm gradient clipping. Which parameter groups are decayed is a config choice (train.decay_on). The
// moments and the decay mask live on the run's device beside the parameters; the kernels are the backend's
// (engine/ops/adamw/adamw.h), the per-step scalars are computed here.
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

// The factor clipping multiplies gradients by (torch.nn.utils.clip_grad_norm_ semantics); 1 = no clipping.
inline double clip_coefficient(double norm, double max_norm) {
  return max_norm <= 0 ? 1.0 : std::min(1.0, max_norm / (norm + 1e-6));
}

// Scales gradients so their global norm is at most max_norm.
template <class T>
void clip_grad_norm(Backend<T>& backend, std::span<T> grads, double norm, double max_norm) {
  const double coef = clip_coefficient(norm, max_norm);
  if (coef < 1.0) backend.scale(grads.data(), grads.size(), coef);
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

template <class T>
void adamw_step(Backend<T>& backend, std::span<T> params, std::span<const T> grads, AdamWState& st,
                const DeviceBuffer<uint8_t>& decay, const TrainConfig& c, double lr) {
  if (st.m.empty()) {
    st.m = DeviceBuffer<float>(backend.memory(), params.size());
    st.v = DeviceBuffer<float>(backend.memory(), params.size());
    st.m.fill_zero();
    st.v.fill_zero();
  }
  st.t += 1;
  const AdamWCoefficients k = adamw_coefficients(c, st.t, lr);
  backend.adamw_update(params.data(), grads.data(), st.m.data(), st.v.data(), decay.data(), params.size(), k);
}

}  // namespace canonlab
