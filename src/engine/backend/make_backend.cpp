#include "engine/backend/make_backend.h"

#include "engine/backend/cpu_backend.h"
#include "engine/error.h"
#include "engine/cuda/cuda_provider.h"

namespace canonlab {

Precision parse_precision(const std::string& text) { return text == "bf16" ? Precision::bf16 : Precision::fp32; }

AttentionKernel parse_attention_kernel(const std::string& text) {
  if (text == "flash") return AttentionKernel::flash;
  if (text == "cudnn") return AttentionKernel::cudnn;
  CANONLAB_CHECK(text == "auto", "train.attention_kernel: '" + text + "' is not allowed; allowed: auto, flash, cudnn");
  return AttentionKernel::automatic;
}

bool built_with_cuda() { return cuda_backend_kind() != "none"; }

void check_device_available(const std::string& device_text) {
  const std::optional<DeviceSpec> device = parse_device(device_text);
  CANONLAB_CHECK(device.has_value(), "train.device: '" + device_text + "' is not a device; allowed: cpu, cuda, cuda:N");
  if (device->device == Device::cpu) return;
  const std::string why = cuda_unavailable(device->index);
  CANONLAB_CHECK(why.empty(), "train.device: '" + device_text + "' " + why + " (allowed here: cpu)");
}

std::shared_ptr<Backend<float>> make_backend(const TrainConfig& train) {
  check_device_available(train.device);
  const DeviceSpec device = *parse_device(train.device);
  const Precision precision = parse_precision(train.precision);
  if (device.device == Device::cuda) return make_cuda_backend(
        {device.index, precision, train.cuda_graph, parse_attention_kernel(train.attention_kernel)});
  return std::make_shared<CpuBackend<float>>(precision);
}

std::shared_ptr<Backend<float>> make_backend(const std::string& device, const std::string& precision) {
  TrainConfig train;
  train.device = device;
  train.precision = precision;
  return make_backend(train);
}

}  // namespace canonlab
