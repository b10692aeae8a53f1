#pragma once
// The run's backend from train.device, train.precision and train.cuda_graph (docs/config.md, docs/engine.md#backends).
#include <memory>
#include <optional>
#include <string>

#include "config/run_config.h"
#include "engine/backend/backend.h"
#include "engine/device.h"  // DeviceSpec, parse_device

namespace canonlab {

Precision parse_precision(const std::string& text);  // fp32 | bf16 (validated with the config)

// Whether this build has the CUDA backend (the CUDA kernels were compiled in).
bool built_with_cuda();

// Throws unless this build can run on `device` (a train.device value) on this machine: the check a command makes
// before it creates anything, with make_backend's message.
void check_device_available(const std::string& device);

// The backend for the run's train.device, train.precision and train.cuda_graph. Throws canonlab::Error when the device
// is not available (a build without the CUDA backend, a machine without that GPU), naming the key, the value and
// what is available.
std::shared_ptr<Backend<float>> make_backend(const TrainConfig& train);
std::shared_ptr<Backend<float>> make_backend(const std::string& device, const std::string& precision);

}  // namespace canonlab
