#include "engine/backend/make_backend.h"

#include "engine/backend/cpu_backend.h"
#include "engine/error.h"

namespace canonlab {

Precision parse_precision(const std::string& text) { return text == "bf16" ? Precision::bf16 : Precision::fp32; }

void check_device_available(const std::string& device_text) {
  const std::optional<DeviceSpec> device = parse_device(device_text);
  CANONLAB_CHECK(device.has_value(), "train.device: '" + device_text + "' is not a device; allowed: cpu, cuda, cuda:N");
  CANONLAB_CHECK(device->device == Device::cpu,
                 "train.device: '" + device_text +
                     "' needs canonlab built with the CUDA backend and a GPU; this build has no CUDA backend "
                     "(allowed here: cpu)");
}

std::shared_ptr<Backend<float>> make_backend(const std::string& device, const std::string& precision) {
  check_device_available(device);
  return std::make_shared<CpuBackend<float>>(parse_precision(precision));
}

}  // namespace canonlab
