// Implicit skinning's device program (gpu/runtime/program.h): the per-rig ImplicitModel and the
// composition operators (once per device) resident, each session's tracking state on the device,
// and the passes of gpu/implicit/program.cuh run for every implicit item of a batch at once.
// Serves the kernels "implicit" and "elastic-implicit" (one block of parameters per sub-step,
// core/implicit/device_layout.h).
#pragma once

#include "gpu/runtime/program.h"

namespace sinew::gpu {

const DeviceProgram& ImplicitProgram();

}  // namespace sinew::gpu
