// GPU twin of core/baseline (baseline skinning of point sets, seed 003): one point per thread,
// decoded by core's own host/device code (core/baseline/device_layout.h, point_code.h,
// section.h) in double precision: its row is the point's PointCode, the frame's parameters the
// posed bone ends. Every thread solves its joints exactly (the CPU's per-frame joint tables are
// a CPU saving), so a device frame equals the CPU's frame with exact_joints.
#pragma once

#include <cstdint>

#include "core/baseline/device_layout.h"
#include "gpu/runtime/hd.h"

namespace sinew::gpu {

SINEW_HD void BaselineVertex(const float* rows, const float* params, uint32_t v, float* out) {
  baseline::BaselinePoint(rows, params, v, out);
}

}  // namespace sinew::gpu
