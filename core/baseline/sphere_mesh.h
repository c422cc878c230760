// A rig's sphere-mesh as baseline skinning uses it (seed 003, spec §3.1–3.2, §3.7.0): the bones'
// cones with their azimuth frames at rest, the tree they form, and each frame's pose of it — the
// posed spheres, each bone's rigid rotation with its own twist taken out, and that twist.
//
// Poses come two ways: a skeleton pose, when the rig's sphere-mesh names the joint that carries
// each bone (SphereMesh::bone_joints: each sphere moves with the joint of the bone that ends at
// it, a root sphere with its first bone's; a bone's rotation is its joint's, split into a swing
// and a twist about its rest axis relative to its parent bone); or explicit sphere centres and
// per-bone twists (SphereFrame), the bones' frames carried from the root by minimal rotations.
// Either way a frame may set new radii (anatomy).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include <Eigen/Core>
#include <Eigen/Geometry>

#include "absl/status/statusor.h"
#include "core/baseline/geometry.h"
#include "core/deformer/deformer.h"
#include "core/rig/pose.h"
#include "core/rig/rig.h"

namespace sinew::baseline {

struct SphereSkeleton {
  std::vector<Eigen::Vector3d> centres;        // rest, per sphere
  std::vector<double> radii;
  std::vector<std::array<uint32_t, 2>> bones;  // root-side sphere, far sphere
  std::vector<int32_t> parent;                 // per bone: the bone ending at its first sphere, or -1
  std::vector<std::vector<uint32_t>> at;       // per sphere: the bones touching it
  std::vector<Eigen::Vector3d> e0;             // per bone: azimuth 0, ⟂ its rest axis
  std::vector<int32_t> joint;                  // per bone: its skeleton joint, or -1
  std::vector<int32_t> carrier;                // per sphere: the bone whose joint carries it
  std::vector<uint32_t> order;                 // bones, parents first

  size_t bone_count() const { return bones.size(); }
  Eigen::Vector3d Axis(uint32_t bone) const {
    return (centres[bones[bone][1]] - centres[bones[bone][0]]).normalized();
  }
  // The side (0: first sphere, 1: far sphere) by which `bone` touches `sphere`.
  int SideAt(uint32_t bone, uint32_t sphere) const { return bones[bone][0] == sphere ? 0 : 1; }
};

// From a rig whose sphere-mesh BuildRig has checked. FAILED_PRECONDITION without bones.
absl::StatusOr<SphereSkeleton> MakeSphereSkeleton(const Rig& rig);

// One frame's sphere-mesh.
struct PosedSpheres {
  std::vector<Eigen::Vector3d> centres;
  std::vector<double> radii;
  std::vector<Eigen::Quaterniond> rigid;  // per bone: rest frame → posed frame, its own twist removed
  std::vector<double> twist;              // per bone, radians, about its axis from its first sphere
};

// Scratch for PoseSpheres, reused from frame to frame.
struct PoseScratch {
  std::vector<Similarity> world;
  std::vector<Affine34d> skinning;
  std::vector<Eigen::Quaterniond> full;  // per bone: the rotation with its twist
};

// The frame's sphere-mesh: from `frame.spheres` centres when given, else from `frame.pose` (the
// rig's bone_joints); radii from `frame.spheres` when given. INVALID_ARGUMENT for a frame that
// gives neither, or that leaves a bone without a cone; the pose and sphere frame must have passed
// ValidatePose / ValidateSphereFrame. Allocates only while the scratch grows.
absl::Status PoseSpheres(const SphereSkeleton& sk, const Rig& rig, const FrameInput& frame, PoseScratch& scratch,
                         PosedSpheres& out);

// The rest pose: every rotation the identity, no twist.
void RestSpheres(const SphereSkeleton& sk, PosedSpheres& out);

// `bone` seen from its side `side` (0: its first sphere) in the posed sphere-mesh, its azimuth
// frame carried by its rigid rotation.
End<double> EndOf(const SphereSkeleton& sk, const PosedSpheres& posed, uint32_t bone, int side);

}  // namespace sinew::baseline
