// A joint bent in the plane of its bones, for tests, benchmarks and pictures that bend a real
// character beyond its clip (an elbow to 150°): the bind pose with `joint` and everything below
// it turned about the joint.
#pragma once

#include <cstdint>

#include <Eigen/Core>

#include "absl/status/statusor.h"
#include "core/rig/pose.h"

namespace sinew {

struct BentJoint {
  Pose pose;                  // world space
  Eigen::Vector3d pivot;      // the joint's position (it does not move)
  Eigen::Vector3d parent_dir; // unit, from the parent joint into the joint
  Eigen::Vector3d child_dir;  // unit, posed, from the joint towards `end`
  double rest_degrees = 0;    // the bend at rest: the angle between the two bones
};

// Turns `joint`'s subtree so that the bone towards `end` (a descendant of `joint`) makes
// `degrees` with the bone from joint's parent into joint (0: straight on), in the plane the two
// bones span at rest. INVALID_ARGUMENT for a root joint, an `end` not below `joint`, bones of
// zero length, or bones in one line (no plane to bend in).
absl::StatusOr<BentJoint> BendJoint(const Skeleton& skeleton, uint32_t joint, uint32_t end, double degrees);

}  // namespace sinew
