// Per-frame inputs: a skeleton pose and cage positions, their validation, and forward
// kinematics to skinning transforms.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/rig/rig.h"

namespace sinew {

enum class PoseSpace { kLocal, kWorld };

// One similarity transform per joint, by joint index. Local: relative to the parent joint
// (roots: to the model). World: in model space.
struct Pose {
  PoseSpace space = PoseSpace::kLocal;
  std::vector<float> rotations;     // x,y,z,w per joint, unit
  std::vector<float> translations;  // x,y,z per joint
  std::vector<float> scales;        // empty (all 1) or one uniform scale > 0 per joint

  size_t joint_count() const { return translations.size() / 3; }
  Similarity joint(size_t j) const;
  // Writes joint j (the arrays must be sized; the scale only when `scales` is not empty).
  void set_joint(size_t j, const Similarity& s);
  void set_rotation(size_t j, const Eigen::Quaterniond& q);
};

// The skeleton's bind pose in local space.
Pose RestPose(const Skeleton& skeleton);

// The bind pose as a world-space pose: each joint at the inverse of its inverse bind matrix,
// where every skinning transform is the identity and the rig deforms to its rest mesh.
// Inverse binds that are not similarities are approximated by their nearest similarity.
Pose BindPose(const Skeleton& skeleton);

// Checks array lengths against the skeleton, finiteness, unit quaternions (|q| within 1e-3 of
// 1) and positive scales. INVALID_ARGUMENT names the field and joint ("pose.rotations[3]").
absl::Status ValidatePose(const Pose& pose, size_t joint_count);

// Forward kinematics: skinning transform of every joint, world_j(pose) ∘ inverse_bind_j, which
// maps rest-pose model space to posed model space (identity at the bind pose). `world` is
// caller-owned scratch; both spans hold joint_count entries. Allocates nothing. The pose must
// have passed ValidatePose.
void SkinningTransforms(const Skeleton& skeleton, const Pose& pose, std::span<Similarity> world,
                        std::span<Affine34d> out);

enum class CageInputMode { kAbsolute, kOffsets };

struct CageFrame {
  uint32_t cage = 0;  // index into Rig::cages
  CageInputMode mode = CageInputMode::kAbsolute;
  std::vector<float> positions;  // x,y,z per cage vertex
};

// Checks cage indices, vertex counts and finiteness ("cages[0].positions[12]").
absl::Status ValidateCageFrames(const Rig& rig, std::span<const CageFrame> frames);

// A sphere-mesh posed for one frame (baseline skinning, Rig::sphere_mesh): new sphere centres
// with a twist per bone about its axis (radians, from its root-side sphere to its far one), or,
// with a skeleton pose, nothing of those; and, either way, new radii (anatomy edits).
struct SphereFrame {
  std::vector<float> centers;  // empty (posed by the skeleton) or 3 per sphere
  std::vector<float> radii;    // empty (the rest radii, scaled with their joint) or 1 per sphere, > 0
  std::vector<float> twists;   // empty (none) or 1 per bone; only with centers
};

// Checks counts against the rig's sphere-mesh, finiteness, positive radii and, where the frame
// gives the centres, valid bones (radii differing by less than the centres' distance; posed by
// a skeleton, the posing checks them). INVALID_ARGUMENT names the field and index
// ("spheres.radii[3]").
absl::Status ValidateSphereFrame(const Rig& rig, const SphereFrame& frame);

}  // namespace sinew
