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
#include "core/baseline/point_code.h"
#include "core/baseline/section.h"
#include "core/baseline/sphere_mesh.h"
#include "core/deformer/deformer.h"

namespace sinew::baseline {

struct EncodeCounts {
  size_t cone = 0, arc = 0, pole = 0;  // where base points lie (cone: a generatrix)
  size_t retried = 0, clamped = 0, beyond_focus = 0, degenerate = 0;
};

// Encodes the rig's points (positions) over its sphere-mesh. CANCELLED when `progress` says stop.
absl::StatusOr<std::vector<PointCode>> EncodePoints(const SphereSkeleton& sk, const Rig& rig, ThreadPool* pool,
                                                    const ProgressFn& progress, EncodeCounts* counts);

// A kDegenerate point (point_code.h), on the CPU's end layout.
inline V3<double> RigidPoint(const PointCode& code, const End<double>& first) { return RigidPointOf(code, first); }

// p's position from its code over the frame's section `s` (point_code.h).
inline SectionPoint<double> Decode(const PointCode& code, const Section<double>& s, bool modulate, V3<double>& p) {
  return DecodePoint(code, s, modulate, p);
}

// Fills `s.ends` for `code` from the frame's bone ends (2 per bone: EndOf(bone, 0), EndOf(bone, 1))
// and twists, with `profile`; BuildSection makes the rest.
void SectionEnds(const PointCode& code, std::span<const End<double>> ends, std::span<const double> twist,
                 Section<double>& s);

// The bone of smallest signed distance to p.
uint32_t NearestBone(std::span<const End<double>> rest_ends, const V3<double>& p);

}  // namespace sinew::baseline
