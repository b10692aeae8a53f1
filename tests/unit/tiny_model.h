#pragma once
// A tiny model on one fixed copy-task batch, for whole-model gradient checks and kernel comparisons
// (namespace canonlab::test).
//
//   test::TinyModel<double> m(cfg);
//   double loss = m.loss(/*with_grad=*/true);   // gradients land in m.model->params().grads()
//   std::string failures = test::check_params(m, [](const std::string& name) { return true; });
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/task.h"
#include "gradcheck.h"
#include "models/language_model.h"
#include "train/loss.h"

namespace canonlab::test {

// One case of a test parameterised over models: a name and the --set overrides that make the model.
struct SetsCase {
  std::string name;
  std::vector<std::string> sets;
};
inline void PrintTo(const SetsCase& c, std::ostream* os) { *os << c.name; }

// The small copy-task model the per-family tests share: d 16, 2 layers, 2 heads, 12 symbols + BOS, a context of 40
// tokens, one thread; `sets` are applied after these and override them.
inline RunConfig tiny_copy_config(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.d_model=16",        "model.n_heads=2",          "model.n_layers=2",
                                  "task.vocab=12",           "task.n_symbols=8",         "model.max_seq_len=40",
                                  "model.init_std=0.2",      "model.recurrent.chunk_size=4", "model.mamba2.d_state=4",
                                  "model.gla.gate_low_rank_dim=3", "model.attention.window=3", "train.threads=1",
                                  "train.seed=3"};
  all.insert(all.end(), sets.begin(), sets.end());
  return config_from_yaml_string("{}", all);
}

template <class T>
struct TinyModel {
  RunConfig cfg;
  std::unique_ptr<LanguageModel<T>> model;
  Batch batch;
  Arena arena;

  explicit TinyModel(const RunConfig& c) : cfg(c) {
    model = build_model<T>(cfg.model, cfg.train.seed);
    batch = make_task(cfg.task)->make_batch(cfg.train.batch_size, 3, 0);
  }
  // The masked cross-entropy of the batch; with_grad leaves the parameter gradients in params().grads(),
  // logits_out (if given) receives the logits.
  double loss(bool with_grad, std::vector<T>* logits_out = nullptr) {
    arena.reset();
    StepContext<T> ctx{arena, model->backend()};
    const int V = model->vocab_size();
    const int* tokens = ctx.upload(std::span<const int>(batch.tokens));
    const int* targets = ctx.upload(std::span<const int>(batch.targets));
    const float* mask = ctx.upload(std::span<const float>(batch.loss_mask));
    const T* logits = model->forward(ctx, tokens, batch.B, batch.T);
    if (logits_out) logits_out->assign(logits, logits + size_t(batch.B) * batch.T * V);
    double* loss = ctx.arena.template alloc<double>(1);
    LossResult<T> r = masked_cross_entropy(ctx, logits, targets, mask, batch.B * batch.T, V, with_grad, nullptr, loss);
    if (with_grad) {
      model->params().zero_grad();
      model->backward(ctx, r.dlogits, batch.B, batch.T);
    }
    return *loss;  // host memory
  }
};

// Dynamic Canon's up maps (NAME.dyn_up.weight) start at zero, which makes the dynamic term vanish; tests of that
// term fill them with U(-scale, scale) from a fixed seed (host memory only). Returns how many tensors it filled.
template <class T>
int randomize_dynamic_canon(ParameterStore<T>& ps, double scale = 0.5, unsigned seed = 11) {
  int filled = 0;
  for (const ParamInfo& p : ps.infos()) {
    if (!p.name.ends_with(".dyn_up.weight")) continue;
    const std::vector<T> r = random_vector<T>(p.numel, seed + unsigned(filled), -scale, scale);
    std::copy(r.begin(), r.end(), ps.values().begin() + long(p.offset));
    filled++;
  }
  return filled;
}

// Finite differences of the loss for every parameter whose name passes `include` (at most max_points entries
// each); returns one line per failing parameter, or "".
inline std::string check_params(TinyModel<double>& m, const std::function<bool(const std::string&)>& include,
                                size_t max_points = 24) {
  m.loss(true);
  ParameterStore<double>& ps = m.model->params();
  std::vector<double> analytic(ps.grads().begin(), ps.grads().end());
  std::string failures;
  for (const ParamInfo& p : ps.infos()) {
    if (!include(p.name)) continue;
    GradcheckOptions opt;
    opt.max_points = max_points;
    opt.rtol = 1e-5;
    opt.atol = 1e-8;
    auto r = gradcheck([&] { return m.loss(false); }, ps.values().data() + p.offset, p.numel,
                       analytic.data() + p.offset, opt);
    if (!r.ok) failures += p.name + ": " + r.message + "\n";
  }
  return failures;
}

}  // namespace canonlab::test
