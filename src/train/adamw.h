#pragma once
// AdamW with decoupled weight decay (PyTorch semantics), over the model's flat parameter buffer, plus
// global-norm gradient clipping. Which parameter groups are decayed is a config choice (train.decay_on).
#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "engine/params.h"

namespace canonlab {

struct AdamWState {
  std::vector<float> m, v;  // first and second moments, same layout as the parameters
  int64_t t = 0;            // number of updates applied
};

// Global L2 norm of all gradients, accumulated in double in a fixed order (deterministic).
template <class T>
double grad_global_norm(std::span<const T> grads) {
  double s = 0;
  for (T g : grads) s += double(g) * double(g);
  return std::sqrt(s);
}

// Scales gradients so their global norm is at most max_norm (torch.nn.utils.clip_grad_norm_ semantics).
template <class T>
void clip_grad_norm(std::span<T> grads, double norm, double max_norm) {
  if (max_norm <= 0) return;
  const double coef = std::min(1.0, max_norm / (norm + 1e-6));
  if (coef < 1.0)
    for (T& g : grads) g = T(double(g) * coef);
}

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

template <class T>
void adamw_step(std::span<T> params, std::span<const T> grads, AdamWState& st, const std::vector<uint8_t>& decay,
                const TrainConfig& c, double lr) {
  if (st.m.empty()) {
    st.m.assign(params.size(), 0.f);
    st.v.assign(params.size(), 0.f);
  }
  st.t += 1;
  const double bc1 = 1.0 - std::pow(c.beta1, double(st.t));
  const double bc2 = 1.0 - std::pow(c.beta2, double(st.t));
  const float b1 = float(c.beta1), b2 = float(c.beta2);
  const float step = float(lr / bc1), rbc2 = float(1.0 / std::sqrt(bc2)), eps = float(c.eps);
  const float shrink = float(1.0 - lr * c.weight_decay);
  const size_t n = params.size();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    const float g = float(grads[i]);
    float p = float(params[i]);
    if (decay[i]) p *= shrink;
    const float m = b1 * st.m[i] + (1.f - b1) * g;
    const float v = b2 * st.v[i] + (1.f - b2) * g * g;
    st.m[i] = m;
    st.v[i] = v;
    p -= step * m / (std::sqrt(v) * rbc2 + eps);
    params[i] = T(p);
  }
}

}  // namespace canonlab
