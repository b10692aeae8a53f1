#pragma once
// Every family is the same pre-norm decoder; only the mixer of each layer differs (model.family, or
// model.layer_pattern for hybrids; models/mixers.h):
//   x = tok_emb[tokens] (+ pos_emb[t] for learned positions)
//   x = Block_l(x), l = 0..L-1          Block = [CanonA] mixer (+ [CanonC] MLP [CanonD])
//   logits = Norm(x) W_head^T   (W_head = tok_emb.weight when embeddings are tied)
#include <memory>
#include <string>
#include <vector>

#include "models/language_model.h"
#include "models/mixers.h"
#include "nn/block.h"

namespace canonlab {

template <class T>
class DecoderModel final : public LanguageModel<T> {
 public:
  DecoderModel(const ModelConfig& cfg, uint64_t seed, std::shared_ptr<Backend<T>> backend)
      : cfg_(cfg), backend_(std::move(backend)) {
    const int C = cfg.d_model, V = cfg.vocab_size;
    tok_emb_ = store_.add("tok_emb.weight", {V, C}, InitSpec::normal(cfg.init_std), ParamGroup::embedding);
    if (cfg.attention.position == "learned")
      pos_emb_ = store_.add("pos_emb.weight", {cfg.max_seq_len, C}, InitSpec::normal(cfg.init_std),
                            ParamGroup::embedding);
    const std::string letters = mixer_letters(cfg);
    for (int l = 0; l < cfg.n_layers; l++) {
      const std::string name = "layers." + std::to_string(l);
      const char letter = letters[size_t(l)];
      auto make = [&](ParameterStore<T>& store) { return make_mixer<T>(store, name, l, letter, cfg); };
      blocks_.push_back(std::make_unique<Block<T>>(store_, name, cfg, make, layer_has_mlp(cfg, letter)));
    }
    final_norm_ = std::make_unique<Norm<T>>(store_, "final_norm", C, parse_norm_kind(cfg.norm), cfg.norm_eps);
    if (!cfg.tie_embeddings) lm_head_ = std::make_unique<Linear<T>>(store_, "lm_head", C, V, false, cfg.init_std);
    // Drawn on the host, adjusted there, then uploaded: the initial weights are the same on every device.
    std::vector<T> initial = store_.initial_values(seed);
    for (auto& block : blocks_) block->mixer().after_init(initial);
    store_.finalize(backend_->memory(), initial, backend_->precision() == Precision::bf16);
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
    acts_.assign(blocks_.size() + 1, nullptr);
    acts_[0] = ctx.arena.template alloc<T>(n);
    be.embedding_forward(acts_[0], tokens, tok_emb_.value(), N, C);
    if (pos_emb_.store) be.add_positions(acts_[0], pos_emb_.value(), B, Tn, C);
    ctx.record(embedding_name_, acts_[0], n);
    for (size_t l = 0; l < blocks_.size(); l++) {
      acts_[l + 1] = ctx.arena.template alloc<T>(n);
      blocks_[l]->forward(ctx, acts_[l + 1], acts_[l], B, Tn);
    }
    normed_ = ctx.arena.template alloc<T>(n);
    final_norm_->forward(ctx, normed_, acts_.back(), N);
    T* logits = ctx.arena.template alloc<T>(size_t(N) * V);
    if (lm_head_)
      lm_head_->forward(be, logits, V, normed_, C, N);
    else
      be.linear_forward(logits, V, normed_, C, tok_emb_.gemm_value(), static_cast<const T*>(nullptr), N, C, V);
    ctx.record(logits_name_, logits, size_t(N) * V);
    return logits;
  }

  void backward(StepContext<T>& ctx, const T* dlogits, int B, int Tn) override {
    const int C = cfg_.d_model, V = cfg_.vocab_size, N = B * Tn;
    const size_t n = size_t(N) * C;
    Backend<T>& be = ctx.backend;
    T* dnormed = ctx.arena.template alloc<T>(n);
    if (lm_head_)
      lm_head_->backward(be, dnormed, C, dlogits, V, normed_, C, N);
    else
      be.linear_backward(dnormed, C, tok_emb_.grad(), static_cast<T*>(nullptr), dlogits, V, normed_, C,
                         tok_emb_.gemm_value(), N, C, V);
    T* dx = ctx.arena.template alloc<T>(n);
    final_norm_->backward(ctx, dx, dnormed, N);
    T* dprev = ctx.arena.template alloc<T>(n);
    for (size_t l = blocks_.size(); l-- > 0;) {
      blocks_[l]->backward(ctx, dprev, dx, B, Tn);
      std::swap(dx, dprev);
    }
    be.embedding_backward(tok_emb_.grad(), dx, tokens_, N, C);
    if (pos_emb_.store) be.add_positions_backward(pos_emb_.grad(), dx, B, Tn, C);
  }

  ParameterStore<T>& params() override { return store_; }
  Backend<T>& backend() override { return *backend_; }
  const ModelConfig& config() const override { return cfg_; }

 private:
  ModelConfig cfg_;
  std::shared_ptr<Backend<T>> backend_;  // before store_: the store's memory is the backend's
  ParameterStore<T> store_;
  Param<T> tok_emb_, pos_emb_;
  std::vector<std::unique_ptr<Block<T>>> blocks_;
  std::unique_ptr<Norm<T>> final_norm_;
  std::unique_ptr<Linear<T>> lm_head_;
  std::string embedding_name_ = "embedding", logits_name_ = "lm_head";
  const int* tokens_ = nullptr;
  std::vector<T*> acts_;
  T* normed_ = nullptr;
};

}  // namespace canonlab
