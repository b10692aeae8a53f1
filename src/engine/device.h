#pragma once
// Every buffer is tagged with the device it lives on (engine/backend/memory.h); train.device names it. Header-only:
// the config layer validates train.device with parse_device without linking the backends.
#include <charconv>
#include <optional>
#include <string>

namespace canonlab {

enum class Device { cpu, cuda };

inline const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

// train.device parsed: cpu, or cuda with a device index (cuda = cuda:0).
struct DeviceSpec {
  Device device = Device::cpu;
  int index = 0;
};
inline constexpr int kMaxDeviceIndex = 1023;

// nullopt unless `text` is cpu, cuda or cuda:N (N a whole number up to kMaxDeviceIndex: no sign, spaces or
// leading zeros).
inline std::optional<DeviceSpec> parse_device(const std::string& text) {
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

}  // namespace canonlab
