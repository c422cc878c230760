// One point's encoding in baseline skinning (seed 003) and the per-frame decoding that turns it
// back into a point over a deformed section: plain structs and host/device templates, so that
// the CPU deformer (baseline.cc) and the GPU kernel (gpu/baseline/) decode with the same code.
#pragma once

#include <cstdint>

#include "core/baseline/section.h"

namespace sinew::baseline {

inline constexpr uint32_t kFree = 0xffffffffu;  // no neighbour: a free extremity

enum PointFlags : uint8_t {
  kRetried = 1,      // encoded on the neighbour of the bone first tried
  kClamped = 2,      // its base point was clamped to its section's end
  kBeyondFocus = 4,  // at or beyond the focus of its detail line
  // Its rest section needed a fallback (geometry.h): such a section jumps under the smallest
  // move (a pose a rounding error off the rest pose moved such points by 0.2 on a character), so
  // the point moves rigidly with its bone instead (`side`: p − c in the bone's frame at its first
  // sphere, RigidPoint).
  kDegenerate = 8,
  kResidual = 16,    // p − b is not along d (a clamped base point): the rest is kept in `side`
};

// The smallest cos β modulation divides by (§3.10: h cos β / cos β'), at rest and posed alike.
SINEW_BL_HD constexpr double MinCosBeta() { return 0.1; }

// One point's encoding (80 bytes).
struct PointCode {
  uint32_t bone = 0;
  uint32_t other[2] = {kFree, kFree};  // the neighbour at the bone's first / far sphere
  uint8_t other_side[2] = {0, 0};       // by which of its spheres the neighbour touches it
  uint8_t piece = 1;                    // Piece of the base point (at rest)
  uint8_t flags = 0;                    // PointFlags
  double phi = 0;                       // the baseline's azimuth on the bone
  double psi_other[2] = {0, 0};         // ... on each neighbour, at rest
  double ratio = 0;                     // curvilinear ratio of the base point in its section
  double height = 0;                    // h
  double cos_beta = 1;                  // d · surface normal at the base point, at least MinCosBeta()
  // kResidual: what p − b − h d leaves, in the bone's generatrix frame at b (SectionFrame): a
  // frame moves it with that frame, so that the rest pose returns the point and a clamped point
  // turns with its bone. kDegenerate: the point in the bone's frame (RigidPoint).
  float side[3] = {0, 0, 0};
};

// Fills `s.ends` for `code` from the frame's bone ends — end_at(bone, side), as EndOf — and
// twists, twist_at(bone); BuildSection makes the rest.
template <class EndAt, class TwistAt>
SINEW_BL_HD void SectionEndsOf(const PointCode& code, const EndAt& end_at, const TwistAt& twist_at, Section<double>& s) {
  const uint32_t k = code.bone;
  for (int side = 0; side < 2; ++side) {
    EndView<double>& v = s.ends[side];
    v.self = end_at(k, side);
    v.psi = code.phi + (side == 1 ? twist_at(k) : 0.0);
    v.joint = code.other[side] != kFree;
    v.given = false;
    if (v.joint) {
      const uint32_t o = code.other[side];
      v.other = end_at(o, code.other_side[side]);
      v.psi_other = code.psi_other[side] + (code.other_side[side] == 1 ? twist_at(o) : 0.0);
      v.first = k < o;
    }
  }
}

// A kDegenerate point: c + side[0] e0 + side[1] e1 + side[2] u of the bone's first end (the
// bone's rigid motion, its twist left out).
SINEW_BL_HD V3<double> RigidPointOf(const PointCode& code, const End<double>& first) {
  return first.c + double(code.side[0]) * first.e0 + double(code.side[1]) * first.e1 + double(code.side[2]) * first.u;
}

// p's position from its code over the frame's built section `s`: b + h d at the code's ratio, plus
// the residual (kResidual) in the section's frame; `modulate` scales h by cos β / cos β' (§3.10).
SINEW_BL_HD SectionPoint<double> DecodePoint(const PointCode& code, const Section<double>& s, bool modulate,
                                             V3<double>& p) {
  const SectionPoint<double> at = PointAt(s, code.ratio * s.length);
  double h = code.height;
  if (modulate) h = h * code.cos_beta / std::max(at.cos_beta, MinCosBeta());
  p = at.b + h * at.d;
  if (code.flags & kResidual) {
    V3<double> f[3];
    SectionFrame(s, at, f[0], f[1], f[2]);
    for (int k = 0; k < 3; ++k) p = p + double(code.side[k]) * f[k];
  }
  return at;
}

}  // namespace sinew::baseline
