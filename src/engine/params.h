#pragma once
// All parameters of a model live in one allocation, and so do their gradients. Modules register their
// tensors during construction (name, shape, init, decay group); finalize() draws the initial values on the host
// and uploads them to the run's device (engine/backend/memory.h), where values and gradients then live. The
// optimizer, gradient clipping and checkpoints work on the flat buffers; host code reads or writes them through
// host_values() / set_values() (checkpoints, probes), or directly where the memory is host RAM (the CPU backend).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/memory.h"
#include "engine/error.h"
#include "engine/rng.h"

namespace canonlab {

// log_uniform: log U[lo, hi] (Mamba2's A_log). inverse_softplus_dt: softplus^-1(dt) with dt log-uniform in
// [lo, hi] and floored at `scale` (the dt_bias init of Mamba2 and Gated DeltaNet).
enum class InitKind { normal, uniform, ones, zeros, constant, log_uniform, inverse_softplus_dt };

// Which weight-decay group a parameter belongs to (config `train.decay_on`).
// ssm: the decay and skip parameters of the linear-time mixers (A_log, dt_bias, D), never decayed by default.
enum class ParamGroup { linear, embedding, canon, norm, bias, ssm };
inline const char* param_group_name(ParamGroup g) {
  switch (g) {
    case ParamGroup::linear: return "linear";
    case ParamGroup::embedding: return "embedding";
    case ParamGroup::canon: return "canon";
    case ParamGroup::norm: return "norm";
    case ParamGroup::bias: return "bias";
    case ParamGroup::ssm: return "ssm";
  }
  return "?";
}

struct InitSpec {
  InitKind kind = InitKind::normal;
  double scale = 0.02;  // std for normal, half-width for uniform, the value for constant, the floor for dt
  double lo = 0, hi = 0;
  static InitSpec normal(double std) { return {InitKind::normal, std}; }
  static InitSpec uniform(double bound) { return {InitKind::uniform, bound}; }
  static InitSpec ones() { return {InitKind::ones, 0}; }
  static InitSpec zeros() { return {InitKind::zeros, 0}; }
  static InitSpec constant(double value) { return {InitKind::constant, value}; }
  static InitSpec log_uniform(double lo, double hi) { return {InitKind::log_uniform, 0, lo, hi}; }
  static InitSpec inverse_softplus_dt(double dt_min, double dt_max, double floor) {
    return {InitKind::inverse_softplus_dt, floor, dt_min, dt_max};
  }
};

struct ParamInfo {
  std::string name;            // checkpoint name, e.g. "layers.0.attn.q_proj.weight"
  std::vector<int64_t> shape;  // PyTorch layout
  size_t offset = 0;           // into the flat buffer
  size_t numel = 0;
  InitSpec init;
  ParamGroup group = ParamGroup::linear;
};

template <class T>
class ParameterStore;

// A handle to one registered tensor; valid for the lifetime of its store.
template <class T>
struct Param {
  ParameterStore<T>* store = nullptr;
  size_t id = 0;
  T* value() const;  // device memory
  T* grad() const;
  // What a GEMM reads as this weight: the bf16 shadow under bf16 precision, else value()
  T* gemm_value() const;
  size_t numel() const;
  // This tensor inside a host copy of the flat values (initial_values(), host_values()).
  T* in(std::span<T> flat) const;
};

template <class T>
class ParameterStore {
 public:
  ParameterStore() = default;
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  Param<T> add(std::string name, std::vector<int64_t> shape, InitSpec init, ParamGroup group) {
    CANONLAB_CHECK(!finalized_, "parameter '" + name + "' registered after finalize()");
    ParamInfo info;
    info.name = std::move(name);
    info.shape = std::move(shape);
    info.numel = 1;
    for (int64_t d : info.shape) info.numel *= size_t(d);
    info.offset = total_;
    info.init = init;
    info.group = group;
    total_ += info.numel;
    infos_.push_back(std::move(info));
    return Param<T>{this, infos_.size() - 1};
  }

  // The initial values, drawn on the host. Parameter i uses the random stream (seed, i), so its values do not
  // depend on the other parameters, on threads or on the device the run uses.
  std::vector<T> initial_values(uint64_t seed) const {
    std::vector<T> values(total_, T(0));
    for (size_t i = 0; i < infos_.size(); i++) {
      const ParamInfo& p = infos_[i];
      CounterRng rng(seed, 1000 + i);
      T* v = values.data() + p.offset;
      for (size_t j = 0; j < p.numel; j++) {
        switch (p.init.kind) {
          case InitKind::normal: v[j] = T(rng.normal() * p.init.scale); break;
          case InitKind::uniform: v[j] = T((2.0 * rng.uniform() - 1.0) * p.init.scale); break;
          case InitKind::ones: v[j] = T(1); break;
          case InitKind::zeros: v[j] = T(0); break;
          case InitKind::constant: v[j] = T(p.init.scale); break;
          case InitKind::log_uniform: v[j] = T(std::log(p.init.hi - rng.uniform() * (p.init.hi - p.init.lo))); break;  // (lo, hi]: never log 0
          case InitKind::inverse_softplus_dt: {
            double dt = std::exp(rng.uniform() * (std::log(p.init.hi) - std::log(p.init.lo)) + std::log(p.init.lo));
            dt = std::max(dt, p.init.scale);
            v[j] = T(dt + std::log(-std::expm1(-dt)));  // softplus(v) = dt
            break;
          }
        }
      }
    }
    return values;
  }

  // Allocates values and gradients in `memory` and uploads `initial` (the host values, initial_values() possibly
  // adjusted by the modules); gradients start at zero. With gemm_shadow, also the bf16 shadow the GEMMs read
  // (refreshed by the model before each forward pass).
  void finalize(DeviceMemory& memory, std::span<const T> initial, bool gemm_shadow = false) {
    CANONLAB_CHECK(initial.size() == total_, "ParameterStore::finalize: " + std::to_string(initial.size()) +
                                                 " initial values for " + std::to_string(total_) + " parameters");
    finalized_ = true;
    values_ = DeviceBuffer<T>(memory, initial);
    grads_ = DeviceBuffer<T>(memory, total_);
    grads_.fill_zero();
    if (gemm_shadow) shadow_ = DeviceBuffer<T>(memory, total_);
  }
  // Draws and uploads in one go, in host memory (tests, stand-in models).
  void finalize(uint64_t seed) {
    const std::vector<T> initial = initial_values(seed);
    finalize(host_memory(), initial);
  }

  void zero_grad() { grads_.fill_zero(); }

  // Host copies, and writing host values back (checkpoints, probes): the only way host code reaches the values
  // of a store whose memory is not host RAM.
  std::vector<T> host_values() const { return values_.download(); }
  std::vector<T> host_grads() const { return grads_.download(); }
  void set_values(std::span<const T> host) {
    CANONLAB_CHECK(host.size() == total_, "ParameterStore::set_values: " + std::to_string(host.size()) +
                                              " values for " + std::to_string(total_) + " parameters");
    values_.upload(host);
  }
  DeviceMemory& memory() const { return values_.memory(); }

  // bf16 precision: the GEMM weights, the master values rounded to bf16 (same layout as values()).
  bool has_gemm_shadow() const { return !shadow_.empty(); }
  std::span<T> gemm_shadow() { return shadow_.span(); }

  // Device memory (dereference on the host only where memory().host_accessible()).
  std::span<T> values() { return values_.span(); }
  std::span<T> grads() { return grads_.span(); }
  std::span<const T> values() const { return values_.span(); }
  std::span<const T> grads() const { return grads_.span(); }
  const std::vector<ParamInfo>& infos() const { return infos_; }
  size_t total() const { return total_; }
  bool finalized() const { return finalized_; }
  T* value_ptr(size_t id) { return values_.data() + infos_[id].offset; }
  T* grad_ptr(size_t id) { return grads_.data() + infos_[id].offset; }
  T* gemm_ptr(size_t id) { return (shadow_.empty() ? values_.data() : shadow_.data()) + infos_[id].offset; }

 private:
  std::vector<ParamInfo> infos_;
  DeviceBuffer<T> values_, grads_, shadow_;
  size_t total_ = 0;
  bool finalized_ = false;
};

template <class T>
T* Param<T>::value() const { return store->value_ptr(id); }
template <class T>
T* Param<T>::grad() const { return store->grad_ptr(id); }
template <class T>
T* Param<T>::gemm_value() const { return store->gemm_ptr(id); }
template <class T>
size_t Param<T>::numel() const { return store->infos()[id].numel; }
template <class T>
T* Param<T>::in(std::span<T> flat) const { return flat.data() + store->infos()[id].offset; }

}  // namespace canonlab
