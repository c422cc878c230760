#include "gpu/kernels.h"

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/baseline/device_layout.h"
#include "core/swingtwist/swing_twist.h"
#include "gpu/implicit/device_program.h"
#include "gpu/pbs/device_program.h"
#include "gpu/swingtwist/swing_twist.cuh"

namespace sinew::gpu {
namespace {

const DeviceProgram* Implicit() { return &ImplicitProgram(); }
const DeviceProgram* Pbs() { return &PbsProgram(); }
const char* OneColumn(uint32_t cols) { return cols == 1 ? nullptr : "one coefficient per vertex"; }
const char* BaselineRows(uint32_t cols) {
  return cols == baseline::kBaselineRowFloats ? nullptr : "one PointCode (20 floats) per point";
}
const char* SwingTwistRows(uint32_t cols) {
  return cols > 0 && cols % kSwingTwistRowFloats == 0 ? nullptr : "4 coefficients (joint, d, s, t) per influence";
}

// The device reads core's JointRecord by these offsets.
static_assert(kSwingTwistJointFloats == kSwingTwistDeviceJointFloats && kSwingTwistRowFloats == kSwingTwistInfluenceFloats);
static_assert(offsetof(JointRecord, a) == 4 * kSwingTwistA && offsetof(JointRecord, b) == 4 * kSwingTwistB &&
              offsetof(JointRecord, theta) == 4 * kSwingTwistTheta &&
              offsetof(JointRecord, inverse_frame) == 4 * kSwingTwistInverse &&
              offsetof(JointRecord, translation) == 4 * kSwingTwistTranslation);

constexpr KernelInfo kKernels[] = {
    {"lbs", GpuMethod::kLbs, false, 1, false, nullptr},
    {"dqs", GpuMethod::kDqs, false, 1, false, nullptr},
    {"cage", GpuMethod::kCage, true, 0, true, nullptr},
    {"cage+lbs", GpuMethod::kCageThenLbs, true, 1, true, nullptr},
    {"cage+dqs", GpuMethod::kCageThenDqs, true, 1, true, nullptr},
    {"implicit", GpuMethod::kImplicit, false, 0, false, &Implicit},
    {"elastic-implicit", GpuMethod::kElasticImplicit, false, 0, false, &Implicit},
    {"blend", GpuMethod::kBlend, true, 2, false, nullptr, &OneColumn},  // the blend weight
    {"swing-twist", GpuMethod::kSwingTwist, true, kSwingTwistJointFloats / 12, false, nullptr, &SwingTwistRows},
    {"pbs", GpuMethod::kPbs, false, 0, false, &Pbs},
    {"baseline", GpuMethod::kBaseline, true, 0, false, nullptr, &BaselineRows, true},
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
