// Encoding a point set over its sphere-mesh (seed 003, spec §3.6): every point becomes a base
// point on a baseline section of one bone, at a curvilinear ratio in it, and a height along the
// detail direction there, p = b + h·d. The section is the same function the frames deform
// (section.h), built here in the rest pose.
//
// Choices the paper leaves open (spec §5's list; each pinned by a test):
// - a point's bone: the rig's point_bones, else the bone of smallest signed distance (outside
//   all bones the nearest; inside two at a joint, the one whose surface is farther);
// - on a cone, the base point is where the line from the detail field's focus X through the point
//   meets the generatrix (p and its detail line lie in the meridian plane); past an arc end it is
//   the radial projection onto that sphere; past a crease (over the neighbour's fan) the point is
//   encoded on the neighbour instead; if that fails too, the base point is clamped to the section's
//   end and the point counted;
// - points at or beyond the focus X along their line (h ≥ |X − b|) are encoded the same way and
//   flagged (kBeyondFocus): near X a small move of p sweeps b far along the generatrix;
// - at a junction sphere a baseline continues onto the neighbour whose Voronoi cell (largest γ,
//   geometry.h) borders the bone's at the baseline's anchor.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/baseline/section.h"
#include "core/baseline/sphere_mesh.h"
#include "core/deformer/deformer.h"

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
  double cos_beta = 1;                  // d · surface normal at the base point (modulation)
  // kResidual: what p − b − h d leaves, in the bone's generatrix frame at b (SectionFrame): a
  // frame moves it with that frame, so that the rest pose returns the point and a clamped point
  // turns with its bone. kDegenerate: the point in the bone's frame (RigidPoint).
  float side[3] = {0, 0, 0};
};

struct EncodeCounts {
  size_t cone = 0, arc = 0, pole = 0;  // where base points lie (cone: a generatrix)
  size_t retried = 0, clamped = 0, beyond_focus = 0, degenerate = 0;
};

// Encodes the rig's points (positions) over its sphere-mesh. CANCELLED when `progress` says stop.
absl::StatusOr<std::vector<PointCode>> EncodePoints(const SphereSkeleton& sk, const Rig& rig, ThreadPool* pool,
                                                    const ProgressFn& progress, EncodeCounts* counts);

// A kDegenerate point: c + side[0] e0 + side[1] e1 + side[2] u of the bone's first end (the
// bone's rigid motion, its twist left out).
V3<double> RigidPoint(const PointCode& code, const End<double>& first);

// p's position from its code over the frame's section `s`: b + h d, plus the residual (kResidual)
// in the section's frame; `modulate` scales h by cos β / cos β' (§3.10).
SectionPoint<double> Decode(const PointCode& code, const Section<double>& s, bool modulate, V3<double>& p);

// Fills `s.ends` for `code` from the frame's bone ends (2 per bone: EndOf(bone, 0), EndOf(bone, 1))
// and twists, with `profile`; BuildSection makes the rest.
void SectionEnds(const PointCode& code, std::span<const End<double>> ends, std::span<const double> twist,
                 Section<double>& s);

// The bone of smallest signed distance to p.
uint32_t NearestBone(std::span<const End<double>> rest_ends, const V3<double>& p);

}  // namespace sinew::baseline
