#include "engine/backend/counting_backend.h"

#include "engine/cuda/counting_cuda.h"
#include "engine/cuda/cuda_backend.h"

namespace canonlab {

std::shared_ptr<Backend<float>> make_counting_backend(const std::string& device, Precision precision,
                                                      CountingMemory& memory, int threads,
                                                      AttentionKernel attention) {
  const std::optional<DeviceSpec> spec = parse_device(device);
  CANONLAB_CHECK(spec.has_value(), "train.device: '" + device + "' is not a device; allowed: cpu, cuda, cuda:N");
  if (spec->device == Device::cpu) return std::make_shared<CountingCpuBackend>(memory, precision, threads);
  CudaBackendOptions options;
  options.device = spec->index;
  options.precision = precision;
  options.graphs = false;
  options.attention = attention;
  options.memory = &memory;
  options.counting = true;
  return std::make_shared<CudaBackendT<CountingCuda>>(options);
}

}  // namespace canonlab
