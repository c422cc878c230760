// Position-based skinning's device program (gpu/runtime/program.h): the rig's PbsModel resident,
// each session's particles, velocities and XPBD multipliers on the device between frames, and
// the frame of gpu/pbs/pbs.cuh run by one team per session (a CUDA block; one host thread in the
// emulation). Serves the kernel "pbs".
#pragma once

#include "gpu/runtime/program.h"

namespace sinew::gpu {

const DeviceProgram& PbsProgram();

}  // namespace sinew::gpu
