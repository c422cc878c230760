#include "gpu/kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gpu/implicit/device_program.h"

namespace sinew::gpu {
namespace {

const DeviceProgram* Implicit() { return &ImplicitProgram(); }

constexpr KernelInfo kKernels[] = {
    {"lbs", GpuMethod::kLbs, false, 1, false, nullptr},
    {"dqs", GpuMethod::kDqs, false, 1, false, nullptr},
    {"cage", GpuMethod::kCage, true, 0, true, nullptr},
    {"cage+lbs", GpuMethod::kCageThenLbs, true, 1, true, nullptr},
    {"cage+dqs", GpuMethod::kCageThenDqs, true, 1, true, nullptr},
    {"implicit", GpuMethod::kImplicit, false, 0, false, &Implicit},
    {"elastic-implicit", GpuMethod::kElasticImplicit, false, 0, false, &Implicit},
    {"blend", GpuMethod::kBlend, true, 2, false, nullptr},  // one coefficient: the blend weight
};

}  // namespace

absl::StatusOr<GpuMethod> KernelByName(std::string_view kernel) {
  for (const KernelInfo& k : kKernels) {
    if (k.name == kernel) return k.kernel;
  }
  return absl::FailedPreconditionError(absl::StrCat("gpu: no device kernel \"", std::string(kernel), "\""));
}

const KernelInfo* FindKernel(GpuMethod kernel) {
  for (const KernelInfo& k : kKernels) {
    if (k.kernel == kernel) return &k;
  }
  return nullptr;
}

bool KernelHasModel(GpuMethod kernel) {
  const KernelInfo* k = FindKernel(kernel);
  return k && k->program;
}
bool KernelHasCoefficients(GpuMethod kernel) {
  const KernelInfo* k = FindKernel(kernel);
  return k && k->coefficients;
}

}  // namespace sinew::gpu
