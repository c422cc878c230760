// The batch's normals pass (normals.cuh) as a runner the DeviceApi calls after the device
// programs: its items are NormalsItems, its limits the number of normal rows (uint32_t).
#pragma once

#include "gpu/runtime/device_api.h"

namespace sinew::gpu {

const ProgramRunner& NormalsPass();

}  // namespace sinew::gpu
