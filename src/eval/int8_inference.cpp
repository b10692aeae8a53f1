#include "eval/int8_inference.h"

#include <cstdio>

#include "engine/error.h"

namespace canonlab {

std::string int8_unavailable(const RunConfig& cfg) {
  if (cfg.train.device != "cpu")
    return "train.device is " + cfg.train.device +
           ": int8 inference runs on the CPU only (the int8 kernels are CPU kernels); add --set train.device=cpu";
  if (cfg.train.precision != "fp32")
    return "train.precision is " + cfg.train.precision +
           ": int8 replaces the fp32 GEMMs and is not combined with bf16; add --set train.precision=fp32";
  return "";
}

Int8Summary quantize_for_inference(LanguageModel<float>& model, const RunConfig& cfg) {
  const std::string why = int8_unavailable(cfg);
  if (!why.empty()) throw Error("--int8: " + why);
  ParameterStore<float>& store = model.params();
  if (!store.memory().host_accessible())
    throw Error("--int8: the parameters are in device memory; int8 inference runs on the CPU only");
  store.quantize_int8();
  Int8Summary s;
  s.tensors = store.int8().quantized_tensors();
  s.quantized_params = store.int8().quantized_elements();
  s.total_params = store.total();
  s.int8_bytes = store.int8().bytes();
  s.fp32_gemm_bytes = s.quantized_params * sizeof(float);
  return s;
}

nlohmann::json Int8Summary::to_json() const {
  return {{"scheme", "weight-only int8, per-output-channel scales, fp32 activations"},
          {"quantized_tensors", tensors},
          {"quantized_params", quantized_params},
          {"total_params", total_params},
          {"int8_bytes", int8_bytes},
          {"fp32_bytes_replaced", fp32_gemm_bytes}};
}

std::string Int8Summary::text() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "weights int8 (per-output-channel, fp32 activations): %zu matrices, %zu of %zu parameters (%.1f%%), "
                "%.2f MB int8 for %.2f MB fp32\n",
                tensors, quantized_params, total_params,
                total_params ? 100.0 * double(quantized_params) / double(total_params) : 0.0, double(int8_bytes) / 1e6,
                double(fp32_gemm_bytes) / 1e6);
  return buf;
}

}  // namespace canonlab
