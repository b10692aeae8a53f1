#pragma once
// Post-training weight-only int8 for canonlab eval and canonlab generate (--int8; docs/engine.md "int8 inference"):
// after the checkpoint is loaded, every GEMM weight (each Linear: q|k|v, o, MLP up/gate/down, the linear
// families' projections, an untied lm_head; and the tied embedding as the output head) is quantized per output row
// (ParameterStore::quantize_int8), and every forward GEMM and decode-step GEMV reads the int8 copy from then on.
// Canon and short convolutions, norms, SSM parameters, biases, the embedding lookup and learned positions stay fp32.
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "config/run_config.h"
#include "models/language_model.h"

namespace canonlab {

// Why --int8 cannot apply to a model of this config ("" where it can): it replaces fp32 GEMMs on the CPU.
std::string int8_unavailable(const RunConfig& cfg);

struct Int8Summary {
  size_t tensors = 0;            // quantized weight matrices
  size_t quantized_params = 0;   // their elements
  size_t total_params = 0;       // every parameter of the model
  size_t int8_bytes = 0;         // int8 values + fp32 scales
  size_t fp32_gemm_bytes = 0;    // the same weights in fp32
  nlohmann::json to_json() const;
  std::string text() const;      // "weights int8: 14 matrices, 98.2% of 1.2M parameters, ..."
};

// Quantizes the model's GEMM weights in place (an Error naming the reason where int8_unavailable says one).
Int8Summary quantize_for_inference(LanguageModel<float>& model, const RunConfig& cfg);

}  // namespace canonlab
