// Built instead of runtime/cuda_api.cu when nvcc was not found.
#include "gpu/runtime/device_api.h"

namespace sinew::gpu {
std::unique_ptr<DeviceApi> MakeCudaApi() { return nullptr; }
std::string CudaBuildInfo() { return "not built (nvcc was not found at build time)"; }
}  // namespace sinew::gpu
