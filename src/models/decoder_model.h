#pragma once
// Every family is the same pre-norm decoder; only the mixer of each layer differs (model.family, or
// model.layer_pattern for hybrids; models/mixers.h):
//   x = tok_emb[tokens] (+ pos_emb[t] for learned positions)
//   x = Block_l(x), l = 0..L-1          Block = [CanonA] mixer (+ [CanonC] MLP [CanonD])
//   logits = Norm(x) W_head^T   (W_head = tok_emb.weight when embeddings are tied)
// Cross-layer Canon (model.canon.cross_layer, docs/canon-variants.md): for each listed l, block l+1 reads
//   h'_{l+1} = h_{l+1} + X_l(h_l)          (residual: true; h_l is block l's actual input)
//   h'_{l+1} = h_{l+1} - h_l + X_l(h_l)    (residual: false: X_l(h_l) replaces block l's identity skip)
// with X = norm(act(conv_K(h))) depthwise over d_model; its parameters register after every other one, so a model
// without it has the same parameters and initial values as before.
// decode_step runs the same map one position at a time on the host, with every layer's caches (Block::DecodeState).
#include <memory>
#include <string>
#include <vector>

#include "engine/ops/linear/fast.h"
#include "models/language_model.h"
#include "models/mixers.h"
#include "nn/block.h"

namespace canonlab {

// The model's modules in checkpoint order, registered in a ParameterStore (names, shapes and initialisers only:
// nothing the size of the model is allocated until the store is finalized). The one statement of what a model is
// made of: DecoderModel keeps them, and the resource estimate registers them to count parameters and shapes
// (train/resource_estimate.cpp) without building a model.
template <class T>
struct DecoderModules {
  Param<T> tok_emb, pos_emb;
  std::vector<std::unique_ptr<Block<T>>> blocks;
  std::unique_ptr<Norm<T>> final_norm;
  std::unique_ptr<Linear<T>> lm_head;
  std::vector<std::unique_ptr<CanonLayer<T>>> cross;  // [l]: the connection from block l's input into block l+1's

  DecoderModules(ParameterStore<T>& store, const ModelConfig& cfg) {
    const int C = cfg.d_model, V = cfg.vocab_size;
    tok_emb = store.add("tok_emb.weight", {V, C}, InitSpec::normal(cfg.init_std), ParamGroup::embedding);
    // Tied: the embedding is also the output head's (V, C) GEMM weight, which int8 inference quantizes (the lookup
    // keeps reading the fp32 values).
    if (cfg.tie_embeddings) store.mark_gemm_weight(tok_emb);
    if (cfg.attention.position == "learned")
      pos_emb = store.add("pos_emb.weight", {cfg.max_seq_len, C}, InitSpec::normal(cfg.init_std),
                          ParamGroup::embedding);
    const std::string letters = mixer_letters(cfg);
    for (int l = 0; l < cfg.n_layers; l++) {
      const std::string name = "layers." + std::to_string(l);
      const char letter = letters[size_t(l)];
      auto make = [&](ParameterStore<T>& s) { return make_mixer<T>(s, name, l, letter, cfg); };
      blocks.push_back(std::make_unique<Block<T>>(store, name, cfg, make, layer_has_mlp(cfg, letter)));
    }
    final_norm = std::make_unique<Norm<T>>(store, "final_norm", C, parse_norm_kind(cfg.norm), cfg.norm_eps);
    if (!cfg.tie_embeddings) lm_head = std::make_unique<Linear<T>>(store, "lm_head", C, V, false, cfg.init_std);
    cross.resize(blocks.size());
    for (int l : cfg.canon.cross_layer.layers)  // registered last
      cross[size_t(l)] = std::make_unique<CanonLayer<T>>(store, "cross_layer." + std::to_string(l), C,
                                                         cross_layer_canon_config(cfg.canon.cross_layer), cfg.norm_eps);
  }
};

template <class T>
class DecoderModel final : public LanguageModel<T> {
 public:
  DecoderModel(const ModelConfig& cfg, uint64_t seed, std::shared_ptr<Backend<T>> backend)
      : cfg_(cfg), backend_(std::move(backend)), m_(store_, cfg) {
    // A backend that lacks an op the config needs refuses it here, before the one parameter allocation.
    check_supported(*backend_, backend_->name(), needs());
    if (backend_->counts_only()) {  // the resource estimate: the allocations, without drawing values nobody reads
      store_.finalize_unfilled(backend_->memory(), backend_->precision() == Precision::bf16);
      return;
    }
    // Drawn on the host, adjusted there, then uploaded: the initial weights are the same on every device.
    std::vector<T> initial = store_.initial_values(seed);
    for (auto& block : m_.blocks) block->mixer().after_init(initial);
    store_.finalize(backend_->memory(), initial, backend_->precision() == Precision::bf16);
  }

  // Every op group the model needs from its backend, with the module and setting that needs it
  // (engine/backend/capabilities.h): the core ops, then each block's mixer and Canon layers, then cross-layer Canon.
  std::vector<OpNeed> needs() const {
    std::vector<OpNeed> out = {{OpGroup::core, "every model (embeddings, linear layers, norms, loss, AdamW)"}};
    for (const auto& block : m_.blocks) block->needs(out);
    for (const auto& cross : m_.cross)
      if (cross) cross->needs(out);
    return out;
  }

  const T* forward(StepContext<T>& ctx, const int* tokens, int B, int Tn) override {
    CANONLAB_CHECK(Tn <= cfg_.max_seq_len || cfg_.attention.position != "learned",
                   "sequence length " + std::to_string(Tn) + " exceeds model.max_seq_len " +
                       std::to_string(cfg_.max_seq_len));
    const int C = cfg_.d_model, V = cfg_.vocab_size, N = B * Tn;
    const size_t n = size_t(N) * C;
    Backend<T>& be = ctx.backend;
    // bf16 precision: this pass's GEMM weights, the master weights rounded once (they changed since the last pass)
    if (store_.has_gemm_shadow()) be.round_to_bf16(store_.gemm_shadow().data(), store_.values().data(), store_.total());
    tokens_ = tokens;
    acts_.assign(m_.blocks.size() + 1, nullptr);
    acts_[0] = ctx.arena.template alloc<T>(n);
    be.embedding_forward(acts_[0], tokens, m_.tok_emb.value(), N, C, V);
    if (m_.pos_emb.store) be.add_positions(acts_[0], m_.pos_emb.value(), B, Tn, C);
    ctx.record(embedding_name_, acts_[0], n);
    if (ctx.on_hidden_state) ctx.on_hidden_state(0, acts_[0], B, Tn, C);
    for (size_t l = 0; l < m_.blocks.size(); l++) {
      acts_[l + 1] = ctx.arena.template alloc<T>(n);
      m_.blocks[l]->forward(ctx, acts_[l + 1], acts_[l], B, Tn);
      if (m_.cross[l]) {  // acts_[l + 1] becomes block l+1's input h'_{l+1}
        T* branch = ctx.arena.template alloc<T>(n);
        m_.cross[l]->forward(ctx, branch, acts_[l], B, Tn);
        be.add_into(acts_[l + 1], branch, n);
        if (!cfg_.canon.cross_layer.residual) subtract_into(be, acts_[l + 1], acts_[l], branch, n);
      }
      if (ctx.on_hidden_state) ctx.on_hidden_state(int(l) + 1, acts_[l + 1], B, Tn, C);
    }
    normed_ = ctx.arena.template alloc<T>(n);
    m_.final_norm->forward(ctx, normed_, acts_.back(), N);
    T* logits = ctx.arena.template alloc<T>(size_t(N) * V);
    if (m_.lm_head)
      m_.lm_head->forward(be, logits, V, normed_, C, N);
    else
      gemm_weight_forward(be, logits, V, normed_, C, m_.tok_emb, static_cast<const T*>(nullptr), N, C, V);
    ctx.record(logits_name_, logits, size_t(N) * V);
    return logits;
  }

  void backward(StepContext<T>& ctx, const T* dlogits, int B, int Tn) override {
    const int C = cfg_.d_model, V = cfg_.vocab_size, N = B * Tn;
    const size_t n = size_t(N) * C;
    Backend<T>& be = ctx.backend;
    T* dnormed = ctx.arena.template alloc<T>(n);
    if (m_.lm_head)
      m_.lm_head->backward(be, dnormed, C, dlogits, V, normed_, C, N);
    else
      be.linear_backward(dnormed, C, m_.tok_emb.grad(), static_cast<T*>(nullptr), dlogits, V, normed_, C,
                         m_.tok_emb.gemm_value(), N, C, V);
    T* dx = ctx.arena.template alloc<T>(n);
    m_.final_norm->backward(ctx, dx, dnormed, N);
    T* dprev = ctx.arena.template alloc<T>(n);
    T* dcross = cfg_.canon.cross_layer.layers.empty() ? nullptr : ctx.arena.template alloc<T>(n);
    for (size_t l = m_.blocks.size(); l-- > 0;) {
      m_.blocks[l]->backward(ctx, dprev, dx, B, Tn);  // dx = d h'_{l+1} = d h_{l+1}
      if (m_.cross[l]) {
        m_.cross[l]->backward(ctx, dcross, dx, B, Tn);
        be.add_into(dprev, dcross, n);
        if (!cfg_.canon.cross_layer.residual) subtract_into(be, dprev, dx, dcross, n);
      }
      std::swap(dx, dprev);
    }
    be.embedding_backward(m_.tok_emb.grad(), dx, tokens_, N, C, V);
    if (m_.pos_emb.store) be.add_positions_backward(m_.pos_emb.grad(), dx, B, Tn, C);
  }

  // The decode step reads the parameters on the host in fp32 (Linear::apply), so it gives forward()'s numbers only
  // where they live in host memory and forward() computes in fp32 too.
  std::string recurrent_decode_unavailable() const override {
    if (!backend_->memory().host_accessible())
      return std::string("the parameters are in ") + device_name(backend_->memory().device()) +
             " memory and the decode step reads them on the host";
    if (backend_->precision() == Precision::bf16)
      return "train.precision=bf16: forward() multiplies bf16-rounded weights and the fp32 decode step would not "
             "reproduce it";
    return "";
  }

  struct DecodeState final : ModelDecodeState {
    std::vector<typename Block<T>::DecodeState> layers;
    std::vector<std::vector<std::vector<T>>> cross;  // [l][row]: cross-layer Canon conv caches (empty where none)
    int rows = 0, position = 0;  // every row is at the same position: the next token's index in its sequence
  };
  std::unique_ptr<ModelDecodeState> start_decode(int B) const override {
    const std::string why = recurrent_decode_unavailable();
    CANONLAB_CHECK(why.empty(), "recurrent decoding: " + why);
    CANONLAB_CHECK(B >= 1, "recurrent decoding: " + std::to_string(B) + " rows; at least 1 is needed");
    auto s = std::make_unique<DecodeState>();
    s->rows = B;
    for (const auto& block : m_.blocks) s->layers.push_back(block->start_decode(B));
    s->cross.resize(m_.blocks.size());
    for (size_t l = 0; l < m_.blocks.size(); l++)
      if (m_.cross[l])
        for (int b = 0; b < B; b++) s->cross[l].push_back(m_.cross[l]->new_cache());
    return s;
  }
  void decode_step(ModelDecodeState& state, const int* tokens, T* logits, int B) const override {
    DecodeState& s = dynamic_cast<DecodeState&>(state);
    const int C = cfg_.d_model, V = cfg_.vocab_size, t = s.position;
    CANONLAB_CHECK(B == s.rows, "decode_step: " + std::to_string(B) + " rows, but the state was started for " +
                                    std::to_string(s.rows));
    CANONLAB_CHECK(t < cfg_.max_seq_len || cfg_.attention.position != "learned",
                   "sequence length " + std::to_string(t + 1) + " exceeds model.max_seq_len " +
                       std::to_string(cfg_.max_seq_len));
    std::vector<T> x(size_t(B) * C), next(size_t(B) * C);
    const T* emb = m_.tok_emb.value();
    for (int b = 0; b < B; b++) {
      CANONLAB_CHECK(tokens[b] >= 0 && tokens[b] < V, "token id " + std::to_string(tokens[b]) +
                                                          " is outside the model's vocabulary [0, " +
                                                          std::to_string(V) + ")");
      std::copy(emb + size_t(tokens[b]) * C, emb + size_t(tokens[b] + 1) * C, x.begin() + size_t(b) * C);
      if (m_.pos_emb.store)
        for (int c = 0; c < C; c++) x[size_t(b) * C + c] += m_.pos_emb.value()[size_t(t) * C + c];
    }
    std::vector<T> branch(static_cast<size_t>(C));
    for (size_t l = 0; l < m_.blocks.size(); l++) {
      m_.blocks[l]->decode_step(s.layers[l], next.data(), x.data(), B);
      if (m_.cross[l])
        for (int b = 0; b < B; b++) {
          T* row = next.data() + size_t(b) * C;
          const T* in = x.data() + size_t(b) * C;
          m_.cross[l]->step(branch.data(), s.cross[l][size_t(b)], in);
          for (int c = 0; c < C; c++) {
            row[c] += branch[size_t(c)];
            if (!cfg_.canon.cross_layer.residual) row[c] += -in[c];
          }
        }
      std::swap(x, next);
    }
    m_.final_norm->apply(next.data(), x.data(), B);
    if (m_.lm_head)
      m_.lm_head->apply(logits, V, next.data(), C, B);
    else
      gemm_weight_apply(logits, V, next.data(), C, m_.tok_emb, static_cast<const T*>(nullptr), B, C, V);
    s.position++;
  }

  ParameterStore<T>& params() override { return store_; }
  Backend<T>& backend() override { return *backend_; }
  const ModelConfig& config() const override { return cfg_; }

 private:
  // dst += -src, through scratch (n elements, overwritten): the backend has no subtraction, and -x is exact.
  static void subtract_into(Backend<T>& be, T* dst, const T* src, T* scratch, size_t n) {
    be.copy(scratch, src, n);
    be.scale(scratch, n, -1.0);
    be.add_into(dst, scratch, n);
  }

  ModelConfig cfg_;
  std::shared_ptr<Backend<T>> backend_;  // before store_: the store's memory is the backend's
  ParameterStore<T> store_;
  DecoderModules<T> m_;  // after store_, in which its modules register
  std::string embedding_name_ = "embedding", logits_name_ = "lm_head";
  const int* tokens_ = nullptr;
  std::vector<T*> acts_;
  T* normed_ = nullptr;
};

}  // namespace canonlab
