// The "baseline" method: baseline skinning of point sets (Fu, Chaine & Digne 2021, seed 003;
// notes in ../shared/specs/seed-003-baseline-skinning.md). A raw point set — no triangles, no
// weights — posed by a sphere-mesh skeleton (Rig::sphere_mesh): every point is encoded once over
// a bundle of baselines on the sphere-mesh's surface (encode.h), and each frame deforms the
// baselines by the twist and bend model (section.h, geometry.h), slides the base points to the
// same curvilinear ratio and lifts them along the new detail directions. Registered in
// core/deformer/registry.cc.
//
// Frames pose the sphere-mesh with a skeleton pose (the rig's bone_joints) or explicit sphere
// centres and twists, and may change the radii (FrameInput::spheres; sphere_mesh.h). Stateless:
// a frame depends on its pose only.
//
// Data layout: per rig, the encoding (PointCode, 80 bytes a point), the sphere-mesh and the joint
// tables' plan (8 bytes a point); per frame, the posed spheres, each bone's two cone ends
// (2 × bones) and the joint tables' samples (17 bytes each, at most one per 8 points); per point
// one section built on the stack. A frame allocates nothing once the session's scratch has grown.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/baseline/device_layout.h"
#include "core/baseline/encode.h"
#include "core/baseline/joint_table.h"
#include "core/baseline/sphere_mesh.h"
#include "core/deformer/deformer.h"

namespace sinew {

struct BaselineParams : MethodParams {
  // The angle's growth along a bone (twist and bend, §3.7.1): the paper's cubic (3u² − 2u³,
  // tangents kept at both ends) or linear.
  baseline::Profile profile = baseline::Profile::kCubic;
  // Keep the normal offset of details, h' = h cos β / cos β' (cos β' clamped at 0.1; §3.10): an
  // offset surface of the sphere-mesh stays one where the detail direction tilts.
  bool modulate_detail = false;
  // Solve every point's joints itself instead of interpolating the frame's joint tables
  // (joint_table.h): slower; equal to float rounding but at arc–crease switches (≤ 1e-5 there).
  bool exact_joints = false;
};

std::span<const ParamSpec> BaselineParamSpecs();
absl::StatusOr<std::shared_ptr<const MethodParams>> ParseBaselineParams(const ParamSet& set, std::string_view field);

struct BaselineModel : Prepared {
  baseline::SphereSkeleton skeleton;
  std::vector<baseline::PointCode> codes;
  baseline::EncodeCounts counts;
  baseline::JointTables tables;  // the joint ends worth a per-frame table
  size_t Bytes() const override;
  // "2000 points: 1800 on cones, 150 on joint arcs, 50 on end caps; 3 encoded on a neighbour, ..."
  std::string Summary() const override;
};

// The per-point status bytes (FrameExtras::vertex_states) of this method: bits 0–1 the piece of
// the section the base point lies on (0: the first sphere's arc or cap, 1: the bone, 2: the far
// sphere's), bit 2 a fallback this frame (a degenerate joint), bits 3–7 the encoding's flags
// (PointFlags: retried on a neighbour, clamped, beyond the focus, degenerate at rest, residual).
inline constexpr uint8_t kBaselineStatusDegenerate = 4;

absl::StatusOr<std::shared_ptr<const Prepared>> PrepareBaseline(const Rig& rig, const DeformerConfig& config,
                                                                ThreadPool* pool, const ProgressFn& progress);
std::string BaselineKey(const DeformerConfig& config);
absl::StatusOr<std::unique_ptr<Deformer>> CreateBaselineDeformer(std::shared_ptr<const Rig> rig,
                                                                 std::shared_ptr<const Prepared> prepared,
                                                                 const DeformerConfig& config);

}  // namespace sinew
