// Per-bone implicit fields of implicit skinning (seed 000 §2.1–2.3), precomputation steps 1–2:
// segment the mesh by the largest skinning weight, Poisson-disk sample each bone's piece (its
// vertices, or on request points drawn over a low-poly piece's triangles; no two samples within
// core/geometry/weld.h's tolerance: copies of one point),
// cull samples near the joints (Eq. 4.2, b = 0.05), add the two closure points on the bone
// axis, fit an HRBF, and choose the compact-support radius (the distance from the bone to its
// farthest sample), so that f_i = t_r(d_i) is 0.5 on the piece and ≈ 1 on the bone.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/implicit/hrbf.h"
#include "core/rig/rig.h"

namespace sinew {

struct BoneFieldOptions {
  int target_samples = 80;   // the thesis finds 50–100 always sufficient
  // Fewer surface samples than this (after culling) give no field: a handful of points do not
  // define a limb's surface (facial and helper bones); their vertices keep the initial skinning.
  int min_samples = 16;
  double cull = 0.05;        // b of Eq. 4.2
  uint32_t seed = 1;         // sample order (deterministic)
  // Points drawn over a piece's triangles when its vertices offer fewer than min_samples distinct
  // points between its culling planes and its skin goes round its bone (a low-poly limb or torso;
  // see FitPiece in bone_fields.cc); 0 (the default): vertices only, as before 2026-12-05.
  size_t surface_samples = 0;
  // A bone whose start is free (FitBoneFields: the joint across it owns a piece without a field
  // and has this one child) and whose piece reaches back past its joint farther than the culling
  // band starts as far back as its piece reaches; false: every bone starts at its joint, as
  // before 2026-12-05.
  bool extend_free_starts = true;
  // More bones owning 8 vertices or more (the fields there can be) is RESOURCE_EXHAUSTED, before
  // any is fitted: each field becomes a 32³ grid of value and gradient (512 KB) and costs a fit.
  size_t max_fields = 4096;
};

struct BoneField {
  int joint = 0;                // the bone = this joint and its segment to its child (through
                                // children that own no piece)
  Eigen::Vector3d b0, b1;       // bone ends in rest model space: b0 the joint, or behind it where
                                // the bone starts free (BoneFieldOptions::extend_free_starts)
  Hrbf hrbf;                    // d: 0 on the piece, negative inside
  double radius = 0;            // support radius r of t_r
  size_t samples = 0;           // surface samples used (closure points excluded)
  double free_start = 0;        // how far behind its joint the bone starts (b0; its start is free)
  bool drawn = false;           // the samples were drawn over the piece's triangles, not its
                                // vertices (a low-poly piece; BoneFieldOptions::surface_samples)

  // f = t_r(d) ∈ [0, 1]: 0.5 on the piece's surface, > 0.5 inside.
  double Value(const Eigen::Vector3d& x) const { return CompactSupport(hrbf.Value(x), radius); }
};

// The joint each vertex belongs to (§2.1): the rig's vertex attribute named "segmentation" (one
// component, a joint index per vertex) when it has one, else the joint with the largest weight.
// INVALID_ARGUMENT names the attribute and vertex of a value that is not a joint index.
absl::StatusOr<std::vector<int32_t>> Segmentation(const Rig& rig);
// Whether the rig carries that attribute (else Segmentation falls back on the weights).
bool HasSegmentationAttribute(const Rig& rig);

// Vertices a joint's piece needs (by Segmentation) to be a piece at all: fewer own no field.
inline constexpr size_t kMinPieceVertices = 8;

// Per joint, 1 where bones reach through it: it owns fewer than kMinPieceVertices vertices
// (`segmentation`: Segmentation's) and has exactly one child — a helper bone, or one the weights
// skip (assimp-testmodels' animation_with_skeleton.fbx). A bone's segment runs on through such
// joints to the next one that owns a piece (FitBoneFields), and the pieces either side of them
// are neighbours (ImplicitModel::parent_field).
std::vector<uint8_t> PassThroughJoints(const Rig& rig, std::span<const int32_t> segmentation);

// The joints' bind positions in rest model space.
std::vector<Eigen::Vector3d> JointBindPositions(const Rig& rig);
// The far end of leaf joint j's bone (a joint without children): along its parent's direction
// (x for a root) as far as the vertices of its piece reach, at least 1e-6 beyond the joint.
Eigen::Vector3d LeafBoneEnd(const Rig& rig, std::span<const Eigen::Vector3d> positions, size_t j,
                            std::span<const uint32_t> piece);
// The point of segment [a, b] nearest to x.
Eigen::Vector3d ClosestOnSegment(const Eigen::Vector3d& x, const Eigen::Vector3d& a, const Eigen::Vector3d& b);

// What a fit found, for an error that says why no field came out: the bones whose pieces own 8
// vertices or more, and the most surface samples one of them offered (its joint; -1: none).
struct BoneFieldReport {
  size_t owning = 0;
  size_t most_samples = 0;
  int most_samples_joint = -1;
};

// One field per joint whose piece (see Segmentation) yields at least min_samples samples.
// Deterministic.
absl::StatusOr<std::vector<BoneField>> FitBoneFields(const Rig& rig, const BoneFieldOptions& options = {},
                                                     BoneFieldReport* report = nullptr);

}  // namespace sinew
