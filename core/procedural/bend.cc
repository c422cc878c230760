#include "core/procedural/bend.h"

#include <cmath>
#include <numbers>
#include <vector>

#include <Eigen/Geometry>

#include "absl/strings/str_cat.h"

namespace sinew {
namespace {

constexpr double kDegree = std::numbers::pi / 180;

double Degrees(const Eigen::Vector3d& a, const Eigen::Vector3d& c) {
  return std::atan2(a.cross(c).norm(), a.dot(c)) / kDegree;
}

bool Below(const Skeleton& skeleton, uint32_t j, uint32_t joint) {
  for (int32_t k = int32_t(j); k >= 0; k = skeleton.parents[size_t(k)]) {
    if (k == int32_t(joint)) return true;
  }
  return false;
}

// The bind pose's joint, its bones' directions and rest bend; what both bends start from.
absl::StatusOr<BentJoint> AtRest(const Skeleton& skeleton, uint32_t joint, uint32_t end) {
  const size_t n = skeleton.size();
  if (joint >= n || end >= n) return absl::InvalidArgumentError("BendJoint: joint index out of range");
  const int32_t parent = skeleton.parents[joint];
  if (parent < 0) return absl::InvalidArgumentError(absl::StrCat("BendJoint: joint ", joint, " is a root"));
  if (end == joint || !Below(skeleton, end, joint)) {
    return absl::InvalidArgumentError(absl::StrCat("BendJoint: joint ", end, " is not below joint ", joint));
  }
  BentJoint b;
  b.pose = BindPose(skeleton);
  auto at = [&](uint32_t j) { return b.pose.joint(j).translation; };
  b.pivot = at(joint);
  const Eigen::Vector3d a = b.pivot - at(uint32_t(parent)), c = at(end) - b.pivot;
  if (!(a.norm() > 0) || !(c.norm() > 0)) return absl::InvalidArgumentError("BendJoint: a bone of zero length");
  b.parent_dir = a.normalized();
  b.child_dir = c.normalized();
  b.rest_degrees = Degrees(b.parent_dir, b.child_dir);
  return b;
}

// Turns the subtree below `joint` by `turn` about the pivot.
void Turn(const Skeleton& skeleton, uint32_t joint, const Eigen::Quaterniond& turn, BentJoint& b) {
  for (uint32_t j = 0; j < skeleton.size(); ++j) {
    if (!Below(skeleton, j, joint)) continue;
    Similarity s = b.pose.joint(j);
    s.rotation = (turn * s.rotation).normalized();
    s.translation = b.pivot + turn * (s.translation - b.pivot);
    b.pose.set_joint(j, s);
  }
  b.child_dir = turn * b.child_dir;
}

}  // namespace

absl::StatusOr<BentJoint> BendJoint(const Skeleton& skeleton, uint32_t joint, uint32_t end, double degrees) {
  auto b = AtRest(skeleton, joint, end);
  if (!b.ok()) return b.status();
  const Eigen::Vector3d axis = b->parent_dir.cross(b->child_dir);
  if (axis.norm() < 1e-9) return absl::InvalidArgumentError("BendJoint: the two bones are in one line");
  Turn(skeleton, joint, Eigen::Quaterniond(Eigen::AngleAxisd((degrees - b->rest_degrees) * kDegree, axis.normalized())),
       *b);
  return b;
}

absl::StatusOr<BentJoint> BendJointAbout(const Skeleton& skeleton, uint32_t joint, uint32_t end, double degrees,
                                         const Eigen::Vector3d& axis) {
  auto b = AtRest(skeleton, joint, end);
  if (!b.ok()) return b.status();
  if (!(axis.norm() > 0) || !axis.allFinite()) return absl::InvalidArgumentError("BendJointAbout: no axis");
  if (!(degrees >= b->rest_degrees - 1e-4) || !(degrees <= 180)) {  // (the pose is float)
    return absl::InvalidArgumentError(
        absl::StrCat("BendJointAbout: ", degrees, "° is not between the rest bend (", b->rest_degrees, "°) and 180°"));
  }
  const Eigen::Vector3d u = axis.normalized();
  auto bend = [&](double phi) { return Degrees(b->parent_dir, Eigen::AngleAxisd(phi, u) * b->child_dir); };
  // The first half-degree step of the turn that reaches the bend, then bisection inside it.
  double lo = 0, hi = -1;
  for (int k = 1; k <= 720; ++k) {
    const double phi = k * 0.5 * kDegree;
    if (bend(phi) >= degrees) {
      hi = phi;
      break;
    }
    lo = phi;
  }
  if (degrees <= b->rest_degrees) hi = lo = 0;
  if (hi < 0) {
    return absl::InvalidArgumentError(absl::StrCat("BendJointAbout: turning about that axis never bends the joint to ",
                                                   degrees, "°"));
  }
  for (int i = 0; i < 60 && hi - lo > 1e-15; ++i) {
    const double mid = 0.5 * (lo + hi);
    (bend(mid) >= degrees ? hi : lo) = mid;
  }
  Turn(skeleton, joint, Eigen::Quaterniond(Eigen::AngleAxisd(hi, u)), *b);
  return b;
}

absl::StatusOr<Eigen::Vector3d> ClipBendAxis(const Skeleton& skeleton, const Clip& clip, uint32_t joint, uint32_t end) {
  auto rest = AtRest(skeleton, joint, end);
  if (!rest.ok()) return rest.status();
  const uint32_t parent = uint32_t(skeleton.parents[joint]);
  const Pose local_rest = RestPose(skeleton);
  const Eigen::Quaterniond parent_at_bind = BindPose(skeleton).joint(parent).rotation;
  std::vector<Similarity> world(skeleton.size());
  std::vector<Affine34d> skinning(skeleton.size());
  Pose local;
  double deepest = rest->rest_degrees + 1;
  Eigen::Vector3d axis = Eigen::Vector3d::Zero();
  const int samples = int(std::ceil(clip.duration * 60));
  for (int k = 0; k <= samples; ++k) {
    SampleClip(clip, skeleton, samples > 0 ? clip.duration * k / samples : 0, local);
    SkinningTransforms(skeleton, local, world, skinning);
    const double bend = Degrees(world[joint].translation - world[parent].translation,
                                world[end].translation - world[joint].translation);
    if (!(bend > deepest)) continue;
    deepest = bend;
    // The joint's turn from its bind rotation, in its parent's frame: local = turn * local_rest.
    const Eigen::Quaterniond turn = (Eigen::Quaterniond(local.joint(joint).rotation) *
                                     Eigen::Quaterniond(local_rest.joint(joint).rotation).conjugate())
                                        .normalized();
    const Eigen::AngleAxisd aa(turn);
    axis = parent_at_bind * aa.axis();
  }
  if (axis.isZero()) {
    return absl::InvalidArgumentError(absl::StrCat("ClipBendAxis: the clip never bends joint ", joint,
                                                   " more than 1° beyond its rest bend (", rest->rest_degrees, "°)"));
  }
  return axis.normalized();
}

}  // namespace sinew
