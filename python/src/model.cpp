// canonlab._core.Model: a checkpoint loaded with its config (eval/probe.h load_checkpoint) and the passes the
// Python API offers over it: logits, attention probabilities, the residual stream, generation, the weights.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <optional>

#include "arrays.h"
#include "bindings.h"
#include "config/config.h"
#include "engine/arena.h"
#include "eval/evaluate.h"
#include "eval/generate.h"
#include "eval/probe.h"

namespace canonlab::python {

namespace {

struct Model {
  LoadedCheckpoint checkpoint;

  LanguageModel<float>& model() { return *checkpoint.model; }
  const ModelConfig& config() { return model().config(); }

  // One forward pass over tokens (B, T); returns {"logits", "attention": [per layer (B, H, T, T) or None],
  // "hidden_states": [L + 1 of (B, T, C)]} with the parts asked for.
  nb::dict run(const TokenArray& tokens, bool want_logits, bool want_attention, bool want_hidden) {
    const int V = model().vocab_size(), L = config().n_layers, C = config().d_model;
    const int B = int(tokens.shape(0)), T = int(tokens.shape(1));
    const std::vector<int> ids = token_ids(tokens, V);
    CANONLAB_CHECK(T <= config().max_seq_len,
                   "tokens: " + std::to_string(T) + " positions, more than the model's context (model.max_seq_len) " +
                       std::to_string(config().max_seq_len));
    std::vector<float> logits;
    std::vector<std::vector<float>> attention(static_cast<size_t>(L)), hidden;
    std::vector<int> heads(static_cast<size_t>(L), 0);
    {
      nb::gil_scoped_release unlocked;
      DeviceMemory& memory = model().backend().memory();
      Arena arena(memory);
      StepContext<float> ctx{arena, model().backend()};
      if (want_attention)
        ctx.on_attention_probs = [&](int layer, const float* probs, int, int H, int) {
          heads[size_t(layer)] = H;
          attention[size_t(layer)].assign(probs, probs + size_t(B) * H * T * T);
        };
      if (want_hidden) {
        hidden.resize(size_t(L) + 1);
        ctx.on_hidden_state = [&](int index, const float* h, int, int, int) {
          std::vector<float>& out = hidden[size_t(index)];
          out.resize(size_t(B) * T * C);
          memory.copy_to_host(out.data(), h, out.size() * sizeof(float));
        };
      }
      const int* device_tokens = ctx.upload(std::span<const int>(ids));
      const float* device_logits = model().forward(ctx, device_tokens, B, T);
      if (want_logits) {
        logits.resize(size_t(B) * T * V);
        memory.copy_to_host(logits.data(), device_logits, logits.size() * sizeof(float));
      }
    }
    nb::dict out;
    const size_t b = size_t(B), t = size_t(T);
    if (want_logits) out["logits"] = owned_array(std::move(logits), {b, t, size_t(V)});
    if (want_attention) {
      nb::list layers;
      for (int l = 0; l < L; l++)
        if (attention[size_t(l)].empty())
          layers.append(nb::none());  // a layer without softmax attention (a linear mixer)
        else
          layers.append(owned_array(std::move(attention[size_t(l)]), {b, size_t(heads[size_t(l)]), t, t}));
      out["attention"] = layers;
    }
    if (want_hidden) {
      nb::list states;
      for (auto& h : hidden) states.append(owned_array(std::move(h), {b, t, size_t(C)}));
      out["hidden_states"] = states;
    }
    return out;
  }

  // Continues each prompt (token ids) by up to max_new tokens; as `canonlab generate`.
  std::vector<std::vector<int>> generate(const std::vector<std::vector<int>>& prompts, int max_new, double temperature,
                                         int top_k, uint64_t seed, bool recompute) {
    const int V = model().vocab_size(), context = config().max_seq_len;
    CANONLAB_CHECK(max_new >= 1, "max_new: " + std::to_string(max_new) + "; expected at least 1");
    CANONLAB_CHECK(temperature >= 0 && std::isfinite(temperature),
                   "temperature: " + std::to_string(temperature) + " is not allowed; expected a finite number >= 0 (0 = greedy)");
    CANONLAB_CHECK(top_k >= 0 && top_k <= V, "top_k: " + std::to_string(top_k) +
                                                 " is not allowed; expected 0 (all) to the vocabulary size " +
                                                 std::to_string(V));
    CANONLAB_CHECK(!prompts.empty(), "prompts: none given; expected at least one list of token ids");
    for (size_t i = 0; i < prompts.size(); i++) {
      const std::string name = "prompts[" + std::to_string(i) + "]";
      CANONLAB_CHECK(!prompts[i].empty(), name + " holds no tokens; give at least one");
      CANONLAB_CHECK(int(prompts[i].size()) < context,
                     name + ": " + std::to_string(prompts[i].size()) + " tokens, but the model's context " +
                         "(model.max_seq_len) is " + std::to_string(context) + ": a prompt may have at most " +
                         std::to_string(context - 1) + " tokens");
      for (int id : prompts[i])
        CANONLAB_CHECK(id >= 0 && id < V, name + ": token id " + std::to_string(id) +
                                              " is outside the model's vocabulary [0, " + std::to_string(V) + ")");
    }
    nb::gil_scoped_release unlocked;
    Arena arena(model().backend().memory());
    ModelSampler sampler(model(), arena, int(prompts.size()),
                         recompute ? GenerationPath::recompute : GenerationPath::cached, top_k);
    return sampler.continue_prompts(prompts, max_new, {}, temperature, seed);
  }

  // The index-th held-out evaluation batch (the batches eval metrics are computed on), as arrays (B, T):
  // tokens, targets, loss_mask, score_mask, and its suite's name.
  nb::dict eval_batch(int index) {
    std::vector<EvalBatch> batches;
    {
      nb::gil_scoped_release unlocked;
      batches = make_eval_batches(*checkpoint.task, checkpoint.cfg);
    }
    CANONLAB_CHECK(index >= 0 && index < int(batches.size()),
                   "eval_batch: index " + std::to_string(index) + " is out of range; this task has " +
                       std::to_string(batches.size()) + " held-out batches (0 to " +
                       std::to_string(int(batches.size()) - 1) + ")");
    Batch& b = batches[size_t(index)].batch;
    const std::vector<size_t> shape = {size_t(b.B), size_t(b.T)};
    std::vector<int64_t> tokens(b.tokens.begin(), b.tokens.end()), targets(b.targets.begin(), b.targets.end());
    nb::dict out;
    out["tokens"] = owned_array(std::move(tokens), shape);
    out["targets"] = owned_array(std::move(targets), shape);
    out["loss_mask"] = owned_array(std::move(b.loss_mask), shape);
    out["score_mask"] = owned_array(std::move(b.score_mask), shape);
    out["suite"] = checkpoint.task->eval_suites()[size_t(batches[size_t(index)].suite)];
    return out;
  }

  // name -> array viewing the model's own weights (host memory: no copy; writing to one changes the model).
  nb::dict weights(nb::handle self) {
    ParameterStore<float>& store = model().params();
    nb::dict out;
    const bool host = model().backend().memory().host_accessible();
    const std::vector<float> copy = host ? std::vector<float>{} : store.host_values();
    for (const ParamInfo& p : store.infos()) {
      std::vector<size_t> shape(p.shape.begin(), p.shape.end());
      if (host)
        out[p.name.c_str()] =
            nb::ndarray<nb::numpy, float>(store.values().data() + p.offset, shape.size(), shape.data(), self);
      else
        out[p.name.c_str()] = owned_array(std::vector<float>(copy.begin() + long(p.offset),
                                                             copy.begin() + long(p.offset + p.numel)),
                                          shape);
    }
    return out;
  }
};

}  // namespace

void bind_model(nb::module_& m) {
  nb::class_<Model>(m, "Model", "A trained model read from a checkpoint (use canonlab.Model.load)")
      .def_static(
          "load",
          [](const std::string& where, const std::vector<std::string>& overrides) {
            nb::gil_scoped_release unlocked;
            return Model{load_checkpoint(where, overrides, Purpose::eval)};
          },
          nb::arg("where"), nb::arg("overrides") = std::vector<std::string>{},
          "Loads a .model.safetensors file, a run directory or a checkpoints/ directory (its latest checkpoint)")
      .def_prop_ro("path", [](Model& m) { return m.checkpoint.path; })
      .def_prop_ro("step", [](Model& m) { return m.checkpoint.step; })
      .def_prop_ro("config_json", [](Model& m) { return config_to_json(m.checkpoint.cfg).dump(); })
      .def("run", &Model::run, nb::arg("tokens"), nb::arg("logits") = true, nb::arg("attention") = false,
           nb::arg("hidden_states") = false, "One forward pass; returns a dict of the parts asked for")
      .def("generate", &Model::generate, nb::arg("prompts"), nb::arg("max_new") = 32, nb::arg("temperature") = 0.0,
           nb::arg("top_k") = 0, nb::arg("seed") = 0, nb::arg("recompute") = false)
      .def("eval_batch", &Model::eval_batch, nb::arg("index") = 0)
      .def(
          "token_text",
          [](Model& m, int token) {
            CANONLAB_CHECK(token >= 0 && token < m.checkpoint.task->vocab_size(),
                           "token id " + std::to_string(token) + " is outside the task's vocabulary [0, " +
                               std::to_string(m.checkpoint.task->vocab_size()) + ")");
            return m.checkpoint.task->token_text(token);
          },
          nb::arg("token"), "How the task writes a token id")
      .def(
          "weights", [](nb::handle self) { return nb::cast<Model&>(self).weights(self); },
          "name -> float32 array over the model's weights (a view, no copy)");
}

}  // namespace canonlab::python
