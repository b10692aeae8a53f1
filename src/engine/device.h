#pragma once
// Every buffer is tagged with the device it lives on. Only the CPU backend exists today; kernels are
// dispatched per device so a CUDA backend can be added beside the CPU one without touching modules.

namespace canonlab {

enum class Device { cpu, cuda };

inline const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

}  // namespace canonlab
