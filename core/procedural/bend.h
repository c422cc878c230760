// A joint bent beyond its rest pose, for tests, benchmarks and pictures that bend a real
// character beyond its clip (an elbow to 150°): the bind pose with `joint` and everything below
// it turned about the joint. The turn's axis is either the normal of the plane the two bones span
// at rest (BendJoint) or one given, such as the axis the character's own clip turns the joint
// about (ClipBendAxis, BendJointAbout). The two can differ a lot: a joint nearly straight at rest
// has a rest plane that says little (BCN_Epileptic's left elbow, 16° at rest, turns in its clip
// about an axis 44° from that plane's normal; its knees, 5°, about ones 29° from it).
#pragma once

#include <cstdint>

#include <Eigen/Core>

#include "absl/status/statusor.h"
#include "core/clip/clip.h"
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

// The same bend reached by turning the subtree about `axis` (world space at the bind pose, any
// length > 0) through the smallest positive angle that makes the bones `degrees` apart. Where
// the axis is not perpendicular to the child bone, the turn is larger than `degrees` minus the
// rest bend, and some bends cannot be reached: INVALID_ARGUMENT then, and for `degrees` below
// the rest bend (by more than 1e-4°: the pose is stored in float), besides BendJoint's cases.
absl::StatusOr<BentJoint> BendJointAbout(const Skeleton& skeleton, uint32_t joint, uint32_t end, double degrees,
                                         const Eigen::Vector3d& axis);

// The axis (world space at the bind pose, unit) that `clip` turns `joint` about, relative to its
// bind rotation in its parent's frame, at the clip's sample of deepest bend (sampled at 60 per
// second; the bend as in BendJoint, towards `end`), oriented as the clip turns. INVALID_ARGUMENT
// as for BendJoint, and when the clip never bends the joint more than a degree beyond its rest
// bend.
absl::StatusOr<Eigen::Vector3d> ClipBendAxis(const Skeleton& skeleton, const Clip& clip, uint32_t joint, uint32_t end);

}  // namespace sinew
