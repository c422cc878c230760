#include "core/procedural/bend.h"

#include <cmath>
#include <numbers>

#include <Eigen/Geometry>

#include "absl/strings/str_cat.h"

namespace sinew {

absl::StatusOr<BentJoint> BendJoint(const Skeleton& skeleton, uint32_t joint, uint32_t end, double degrees) {
  const size_t n = skeleton.size();
  if (joint >= n || end >= n) return absl::InvalidArgumentError("BendJoint: joint index out of range");
  const int32_t parent = skeleton.parents[joint];
  if (parent < 0) return absl::InvalidArgumentError(absl::StrCat("BendJoint: joint ", joint, " is a root"));
  auto below = [&](uint32_t j) {
    for (int32_t k = int32_t(j); k >= 0; k = skeleton.parents[k]) {
      if (k == int32_t(joint)) return true;
    }
    return false;
  };
  if (end == joint || !below(end)) {
    return absl::InvalidArgumentError(absl::StrCat("BendJoint: joint ", end, " is not below joint ", joint));
  }
  BentJoint b;
  b.pose = BindPose(skeleton);
  auto at = [&](uint32_t j) { return b.pose.joint(j).translation; };
  b.pivot = at(joint);
  const Eigen::Vector3d a = b.pivot - at(uint32_t(parent)), c = at(end) - b.pivot;
  if (!(a.norm() > 0) || !(c.norm() > 0)) return absl::InvalidArgumentError("BendJoint: a bone of zero length");
  b.parent_dir = a.normalized();
  const Eigen::Vector3d child = c.normalized();
  const Eigen::Vector3d axis = b.parent_dir.cross(child);
  if (axis.norm() < 1e-9) return absl::InvalidArgumentError("BendJoint: the two bones are in one line");
  b.rest_degrees = std::atan2(axis.norm(), b.parent_dir.dot(child)) * 180 / std::numbers::pi;
  const Eigen::Quaterniond turn(Eigen::AngleAxisd((degrees - b.rest_degrees) * std::numbers::pi / 180, axis.normalized()));
  for (uint32_t j = 0; j < n; ++j) {
    if (!below(j)) continue;
    Similarity s = b.pose.joint(j);
    s.rotation = (turn * s.rotation).normalized();
    s.translation = b.pivot + turn * (s.translation - b.pivot);
    b.pose.set_joint(j, s);
  }
  b.child_dir = turn * child;
  return b;
}

}  // namespace sinew
