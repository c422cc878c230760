// GPU twin of core/dqs: one vertex of dual quaternion skinning with uniform scale (the same
// hemisphere flip towards the dominant influence and the same scale-first convention).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "gpu/runtime/hd.h"

namespace sinew::gpu {

// q: 12 floats per joint: real x,y,z,w, dual x,y,z,w, scale, shift x,y,z (core/dqs/dqs.h's
// DualQuat). Skins the rest point (px, py, pz) of vertex v into out.
SINEW_HD void DqsPoint(const uint32_t* offsets, const uint16_t* joints, const float* weights,
                       const float* q, uint32_t v, float px, float py, float pz, float* out) {
  const uint32_t e0 = offsets[v], e1 = offsets[v + 1];
  const float* pivot = q + 12 * uint32_t(joints[e0]);
  float b[8] = {}, s = 0, hx = 0, hy = 0, hz = 0;
  for (uint32_t e = e0; e < e1; ++e) {
    const float* qj = q + 12 * uint32_t(joints[e]);
    const float dot = qj[0] * pivot[0] + qj[1] * pivot[1] + qj[2] * pivot[2] + qj[3] * pivot[3];
    // By the sign bit, as core (std::copysign; SignBit on AVX2): a dot of exactly −0 (a 180° turn
    // about an axis, exact zeros) flips too (until 2026-12-07 it did not here: the other way round).
    const float w = copysignf(weights[e], dot);
    for (int k = 0; k < 8; ++k) b[k] += w * qj[k];
    s += weights[e] * qj[8];
    hx += weights[e] * qj[9];
    hy += weights[e] * qj[10];
    hz += weights[e] * qj[11];
  }
  const float inv = 1.0f / sqrtf(b[0] * b[0] + b[1] * b[1] + b[2] * b[2] + b[3] * b[3]);
  const float rx = b[0] * inv, ry = b[1] * inv, rz = b[2] * inv, rw = b[3] * inv;
  const float dx = b[4] * inv, dy = b[5] * inv, dz = b[6] * inv, dw = b[7] * inv;
  const float tx = 2 * (rw * dx - dw * rx + (ry * dz - rz * dy));
  const float ty = 2 * (rw * dy - dw * ry + (rz * dx - rx * dz));
  const float tz = 2 * (rw * dz - dw * rz + (rx * dy - ry * dx));
  const float x = s * px + hx, y = s * py + hy, z = s * pz + hz;
  const float cx = ry * z - rz * y, cy = rz * x - rx * z, cz = rx * y - ry * x;
  const float ccx = ry * cz - rz * cy, ccy = rz * cx - rx * cz, ccz = rx * cy - ry * cx;
  out[0] = x + 2 * (rw * cx + ccx) + tx;
  out[1] = y + 2 * (rw * cy + ccy) + ty;
  out[2] = z + 2 * (rw * cz + ccz) + tz;
}

SINEW_HD void DqsVertex(const float* rest, const uint32_t* offsets, const uint16_t* joints,
                        const float* weights, const float* q, uint32_t v, float* out) {
  DqsPoint(offsets, joints, weights, q, v, rest[size_t{3} * v], rest[size_t{3} * v + 1], rest[size_t{3} * v + 2], out);
}

}  // namespace sinew::gpu
