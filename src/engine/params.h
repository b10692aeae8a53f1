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
#include "engine/int8_weights.h"
#include "engine/rng.h"

namespace canonlab {

// log_uniform: log U[lo, hi] (Mamba2's A_log). inverse_softplus_dt: softplus^-1(dt) with dt log-uniform in
// [lo, hi] and floored at `scale` (the dt_bias init of Mamba2 and Gated DeltaNet).
// complementary_uniform: a (2, n) pair, row 0 ~ U[0, 1), row 1 = 1 − row 0 (KV shifting's α1, α2 = 1 − α1).
enum class InitKind { normal, uniform, ones, zeros, constant, log_uniform, inverse_softplus_dt, complementary_uniform };

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
  static InitSpec complementary_uniform() { return {InitKind::complementary_uniform, 0}; }
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
  // The (out, in) weight of a GEMM y = x Wᵀ in forward (every Linear, the tied embedding as the head): what int8
  // inference quantizes (engine/int8_weights.h).
  bool gemm_weight = false;
  uint64_t init_stream = 0;    // the CounterRng stream its initial values draw from (ParameterStore::add)
};

// Which range of init streams a parameter draws from. Ordinary parameters use 1000 + their ordinal among ordinary
// parameters. Optional extras that a config can add to an existing model (the dynamic Canon maps) draw from a
// separate range, so switching them on shifts no ordinary parameter's stream: the model's other parameters start
// from exactly the values they have without the extras, for the same seed.
enum class InitStream { ordinary, extra };
inline constexpr uint64_t kOrdinaryInitStreamBase = 1000;
inline constexpr uint64_t kExtraInitStreamBase = uint64_t(1) << 40;

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
  // The int8 copy of the (OUT, IN) GEMM starting at this weight, or an empty block (no int8 copy, or not a GEMM
  // weight): see ParameterStore::quantize_int8.
  Int8Block int8_block(int OUT, int IN) const;
};

template <class T>
class ParameterStore {
 public:
  ParameterStore() = default;
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  Param<T> add(std::string name, std::vector<int64_t> shape, InitSpec init, ParamGroup group,
               InitStream stream = InitStream::ordinary) {
    CANONLAB_CHECK(!finalized_, "parameter '" + name + "' registered after finalize()");
    ParamInfo info;
    info.name = std::move(name);
    info.shape = std::move(shape);
    info.numel = 1;
    for (int64_t d : info.shape) info.numel *= size_t(d);
    info.offset = total_;
    info.init = init;
    info.group = group;
    info.init_stream = stream == InitStream::ordinary ? kOrdinaryInitStreamBase + n_ordinary_++
                                                      : kExtraInitStreamBase + n_extra_++;
    total_ += info.numel;
    infos_.push_back(std::move(info));
    return Param<T>{this, infos_.size() - 1};
  }

  // The initial values, drawn on the host. Each parameter uses the random stream (seed, init_stream), so its values
  // do not depend on the other parameters' values, on threads or on the device the run uses.
  std::vector<T> initial_values(uint64_t seed) const {
    std::vector<T> values(total_, T(0));
    for (size_t i = 0; i < infos_.size(); i++) {
      const ParamInfo& p = infos_[i];
      CounterRng rng(seed, p.init_stream);
      T* v = values.data() + p.offset;
      for (size_t j = 0; j < p.numel; j++) {
        switch (p.init.kind) {
          case InitKind::normal: v[j] = T(rng.normal() * p.init.scale); break;
          case InitKind::uniform: v[j] = T((2.0 * rng.uniform() - 1.0) * p.init.scale); break;
          case InitKind::ones: v[j] = T(1); break;
          case InitKind::zeros: v[j] = T(0); break;
          case InitKind::constant: v[j] = T(p.init.scale); break;
          case InitKind::log_uniform: v[j] = T(std::log(p.init.hi - rng.uniform() * (p.init.hi - p.init.lo))); break;  // (lo, hi]: never log 0
          case InitKind::complementary_uniform:
            v[j] = j < p.numel / 2 ? T(rng.uniform()) : T(1) - v[j - p.numel / 2];
            break;
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

  // Marks a registered tensor as a GEMM weight (ParamInfo::gemm_weight).
  void mark_gemm_weight(const Param<T>& p) {
    CANONLAB_CHECK(!finalized_, "mark_gemm_weight('" + infos_[p.id].name + "') after finalize()");
    CANONLAB_CHECK(infos_[p.id].shape.size() == 2, "mark_gemm_weight: '" + infos_[p.id].name + "' is not a matrix");
    infos_[p.id].gemm_weight = true;
  }

  // Post-training int8 (canonlab eval / generate --int8): quantizes every GEMM weight per output row into a host
  // copy that the forward GEMMs and the decode step read from then on (Param::int8_block). The fp32 values stay (the
  // embedding lookup, norms, convolutions, biases and SSM parameters read them). set_values() re-quantizes, so the
  // copy always matches the values; training (which updates the values in place) must not run on such a store.
  void quantize_int8() {
    CANONLAB_CHECK(finalized_, "quantize_int8 before finalize()");
    CANONLAB_CHECK(shadow_.empty(), "int8 needs fp32 GEMMs; this store has a bf16 shadow (train.precision=bf16)");
    CANONLAB_CHECK(memory().host_accessible(), "int8 inference runs on the CPU; the parameters are in device memory");
    const std::vector<T> host = host_values();
    int8_.build(infos_, host.data());
  }
  bool has_int8() const { return !int8_.empty(); }
  const Int8Weights& int8() const { return int8_; }

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
  // Allocates values, gradients (and the shadow) without values to upload: a counting backend's store (the resource
  // estimate), where nothing is ever read.
  void finalize_unfilled(DeviceMemory& memory, bool gemm_shadow) {
    finalized_ = true;
    values_ = DeviceBuffer<T>(memory, total_);
    grads_ = DeviceBuffer<T>(memory, total_);
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
    if (!int8_.empty()) int8_.build(infos_, host.data());  // keep the int8 copy in step with the values
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
  Int8Weights int8_;  // empty unless quantize_int8()
  size_t total_ = 0;
  uint64_t n_ordinary_ = 0, n_extra_ = 0;  // parameters registered in each InitStream range so far
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
Int8Block Param<T>::int8_block(int OUT, int IN) const {
  return store->has_int8() ? store->int8().block(store->infos(), id, OUT, IN) : Int8Block{};
}
template <class T>
T* Param<T>::in(std::span<T> flat) const { return flat.data() + store->infos()[id].offset; }

}  // namespace canonlab
