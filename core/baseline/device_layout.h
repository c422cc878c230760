// Baseline skinning's device stage (gpu/baseline/baseline.cuh): what the CPU writes and the kernel
// reads. No packing: the per-point rows are the PointCodes' own bytes (20 floats each) and a
// frame's parameters carry the bones' posed ends (End<double>) and twists as raw doubles, so the
// device decodes with the CPU's numbers and code (point_code.h) and, without the CPU's joint
// tables, solves every point's joints itself (BaselineParams::exact_joints).
//
// A frame's parameters: a header of 4 floats — the bone count (as uint32 bits), the profile,
// modulate_detail (0 or 1), 0 — then per bone kBaselineBoneFloats: its two ends (EndOf(bone, 0)
// and EndOf(bone, 1)), its twist, 8 bytes of padding.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/baseline/point_code.h"

namespace sinew::baseline {

inline constexpr uint32_t kBaselineRowFloats = sizeof(PointCode) / sizeof(float);
inline constexpr uint32_t kBaselineHeaderFloats = 4;
inline constexpr uint32_t kBaselineBoneFloats = (2 * sizeof(End<double>) + 2 * sizeof(double)) / sizeof(float);
static_assert(sizeof(PointCode) % 16 == 0 && sizeof(End<double>) % 8 == 0, "rows and ends stay 8-byte aligned");
static_assert(std::is_trivially_copyable_v<PointCode> && std::is_trivially_copyable_v<End<double>>,
              "copied as bytes to and from the device");

inline constexpr uint32_t BaselineFrameFloats(uint32_t bones) { return kBaselineHeaderFloats + kBaselineBoneFloats * bones; }

// Bone `bone`'s end `side` and twist, from a frame's parameters.
SINEW_BL_HD End<double> FrameEnd(const float* params, uint32_t bone, int side) {
  End<double> e;
  std::memcpy(static_cast<void*>(&e), params + kBaselineHeaderFloats + kBaselineBoneFloats * bone + side * (sizeof(End<double>) / 4),
              sizeof(e));
  return e;
}
SINEW_BL_HD double FrameTwist(const float* params, uint32_t bone) {
  double t;
  std::memcpy(&t, params + kBaselineHeaderFloats + kBaselineBoneFloats * bone + 2 * (sizeof(End<double>) / 4),
              sizeof(t));
  return t;
}

// Point v of a device frame: its row (a PointCode's bytes) decoded over the frame's bones, as the
// CPU's exact-joint frame does it.
SINEW_BL_HD void BaselinePoint(const float* rows, const float* params, uint32_t v, float* out) {
  PointCode code;
  std::memcpy(static_cast<void*>(&code), rows + size_t(v) * kBaselineRowFloats, sizeof(code));
  V3<double> p;
  if (code.flags & kDegenerate) {
    p = RigidPointOf(code, FrameEnd(params, code.bone, 0));
  } else {
    Section<double> s;
    uint32_t profile;
    std::memcpy(&profile, params + 1, sizeof(profile));
    s.profile = Profile(profile);
    SectionEndsOf(
        code, [&](uint32_t bone, int side) { return FrameEnd(params, bone, side); },
        [&](uint32_t bone) { return FrameTwist(params, bone); }, s);
    BuildSection(s);
    DecodePoint(code, s, params[2] != 0.f, p);
  }
  out[0] = float(p.x);
  out[1] = float(p.y);
  out[2] = float(p.z);
}

}  // namespace sinew::baseline
