// GPU twin of core/lbs: one vertex of linear blend skinning.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/runtime/hd.h"

namespace sinew::gpu {

// m: 12 floats per joint (row-major 3x4); skins the rest point (x, y, z) of vertex v into out.
SINEW_HD void LbsPoint(const uint32_t* offsets, const uint16_t* joints, const float* weights,
                       const float* m, uint32_t v, float x, float y, float z, float* out) {
  float a[12] = {};
  for (uint32_t e = offsets[v]; e < offsets[v + 1]; ++e) {
    const float* mj = m + 12 * uint32_t(joints[e]);
    const float w = weights[e];
    for (int k = 0; k < 12; ++k) a[k] += w * mj[k];
  }
  out[0] = a[0] * x + a[1] * y + a[2] * z + a[3];
  out[1] = a[4] * x + a[5] * y + a[6] * z + a[7];
  out[2] = a[8] * x + a[9] * y + a[10] * z + a[11];
}

SINEW_HD void LbsVertex(const float* rest, const uint32_t* offsets, const uint16_t* joints,
                        const float* weights, const float* m, uint32_t v, float* out) {
  LbsPoint(offsets, joints, weights, m, v, rest[size_t{3} * v], rest[size_t{3} * v + 1], rest[size_t{3} * v + 2], out);
}

}  // namespace sinew::gpu
