#pragma once
// The run's backend from train.device and train.precision (docs/config.md, docs/engine.md#backends).
#include <memory>
#include <optional>
#include <string>

#include "engine/backend/backend.h"
#include "engine/device.h"  // DeviceSpec, parse_device

namespace canonlab {

Precision parse_precision(const std::string& text);  // fp32 | bf16 (validated with the config)

// Throws unless this build can run on `device` (a train.device value): the check a command makes before it
// creates anything, with make_backend's message.
void check_device_available(const std::string& device);

// The backend for train.device and train.precision (their config values). Throws canonlab::Error when the device
// is not available in this build (CUDA), naming the key, the value and what this build offers.
std::shared_ptr<Backend<float>> make_backend(const std::string& device, const std::string& precision);

}  // namespace canonlab
