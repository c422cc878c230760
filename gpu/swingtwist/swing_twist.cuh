// GPU twin of core/swingtwist (SwingTwistSkinning, Eq. 5–6 of Kavan & Sorkine 2012): one vertex
// of the swing/twist joint deformers. Its data is core's device layout (swing_twist.h): per
// vertex a row of `cols` floats, kSwingTwistRowFloats per influence (joint as a float, d, s, t;
// padding has d = 0); per joint a JointRecord padded to kSwingTwistJointFloats floats.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/runtime/hd.h"

namespace sinew::gpu {

inline constexpr uint32_t kSwingTwistRowFloats = 4;
inline constexpr uint32_t kSwingTwistJointFloats = 48;
// Offsets of JointRecord's fields, in floats (checked against core's struct in gpu/kernels.cc).
inline constexpr uint32_t kSwingTwistA = 0, kSwingTwistB = 12, kSwingTwistTheta = 21, kSwingTwistInverse = 22,
                          kSwingTwistTranslation = 34;

// `rows` and `joints` are 16-byte aligned (cols is a multiple of 4; the batch aligns each item's
// parameters): each influence is one 16-byte load, each joint record ten.
SINEW_HD void SwingTwistVertex(const float* rest, const float* rows, uint32_t cols, const float* joints, uint32_t v,
                               float* out) {
  const float px = rest[size_t{3} * v], py = rest[size_t{3} * v + 1], pz = rest[size_t{3} * v + 2];
  const float* row = rows + size_t(v) * cols;
  float ox = 0, oy = 0, oz = 0;
  for (uint32_t k = 0; k < cols; k += kSwingTwistRowFloats) {
    float e[4];
    Load4<1>(row + k, e);
    const float d = e[1];
    if (d == 0.f) continue;  // padding (and influences that carry no weight)
    const float s = e[2], t = e[3];
    float r[40];  // the record's first 37 floats, and 3 of padding
    Load4<10>(joints + kSwingTwistJointFloats * uint32_t(e[0]), r);
    // x̃ = R⁻¹ p̃, twisted about z by t·θ.
    const float* m = r + kSwingTwistInverse;
    const float x = m[0] * px + m[1] * py + m[2] * pz + m[3];
    const float y = m[4] * px + m[5] * py + m[6] * pz + m[7];
    const float z = m[8] * px + m[9] * py + m[10] * pz + m[11];
    float c, sn;
    SinCosSmall(t * r[kSwingTwistTheta], &sn, &c);
    const float y0 = c * x - sn * y, y1 = sn * x + c * y, y2 = z;
    // g = y + s ((σ Q_swing − I) y + τ), then p += d A g.
    const float* b = r + kSwingTwistB;
    const float* tau = r + kSwingTwistTranslation;
    const float g0 = y0 + s * (b[0] * y0 + b[1] * y1 + b[2] * y2 + tau[0]);
    const float g1 = y1 + s * (b[3] * y0 + b[4] * y1 + b[5] * y2 + tau[1]);
    const float g2 = y2 + s * (b[6] * y0 + b[7] * y1 + b[8] * y2 + tau[2]);
    const float* a = r + kSwingTwistA;
    ox += d * (a[0] * g0 + a[1] * g1 + a[2] * g2 + a[3]);
    oy += d * (a[4] * g0 + a[5] * g1 + a[6] * g2 + a[7]);
    oz += d * (a[8] * g0 + a[9] * g1 + a[10] * g2 + a[11]);
  }
  out[0] = ox;
  out[1] = oy;
  out[2] = oz;
}

}  // namespace sinew::gpu
