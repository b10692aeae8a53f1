#include "engine/backend/make_backend.h"

#include <charconv>

#include "engine/backend/cpu_backend.h"
#include "engine/error.h"

namespace canonlab {

std::optional<DeviceSpec> parse_device(const std::string& text) {
  if (text == "cpu") return DeviceSpec{Device::cpu, 0};
  if (text == "cuda") return DeviceSpec{Device::cuda, 0};
  const std::string prefix = "cuda:";
  if (!text.starts_with(prefix) || text.size() == prefix.size() || text.size() > prefix.size() + 4) return std::nullopt;
  int index = -1;
  const char* first = text.data() + prefix.size();
  const char* last = text.data() + text.size();
  if (*first < '0' || *first > '9') return std::nullopt;        // from_chars would accept a leading '-'
  if (*first == '0' && last - first > 1) return std::nullopt;  // one spelling per device: cuda:1, not cuda:01
  const auto [end, ec] = std::from_chars(first, last, index);
  if (ec != std::errc() || end != last || index < 0 || index > kMaxDeviceIndex) return std::nullopt;
  return DeviceSpec{Device::cuda, index};
}

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
