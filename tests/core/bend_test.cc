// core/procedural/bend.h: joints bent beyond their rest pose in the plane of their bones or about
// a given axis, and the axis a clip turns a joint about.
#include "core/procedural/bend.h"

#include <cmath>
#include <numbers>

#include <Eigen/Geometry>
#include <gtest/gtest.h>

#include "core/procedural/limb.h"

namespace sinew {
namespace {

constexpr double kDeg = std::numbers::pi / 180;

double Angle(const Eigen::Vector3d& a, const Eigen::Vector3d& b) {
  return std::atan2(a.cross(b).norm(), a.dot(b)) / kDeg;
}

// The pose holds floats: positions and directions agree to about 1e-7 of the bone's length.
constexpr double kPos = 1e-6, kAngle = 1e-4;

// A three-joint chain along +x (joints 0, 1, 2 at x = 0, 1, 2), joint 1 turned at rest by
// `rest_degrees` about z, so that joint 2 leaves the line, and the whole chain by `root_degrees`
// about y.
Skeleton Chain(double rest_degrees, double root_degrees = 0) {
  LimbOptions o;
  o.rings = 6;
  o.segments = 4;
  o.bones = 3;
  RigInput input = MakeLimb(o);
  input.rig.skeleton.rest_local[1].rotation = Eigen::AngleAxisd(rest_degrees * kDeg, Eigen::Vector3d::UnitZ());
  input.rig.skeleton.rest_local[0].rotation = Eigen::AngleAxisd(root_degrees * kDeg, Eigen::Vector3d::UnitY());
  input.rig.skeleton.inverse_bind.clear();
  auto rig = BuildRig(std::move(input));
  EXPECT_TRUE(rig.ok()) << rig.status();
  return rig->skeleton;
}

Eigen::Vector3d At(const BentJoint& b, size_t j) { return b.pose.joint(j).translation; }

TEST(BendJoint, AboutTheRestPlanesNormalBothBendsAreOne) {
  const Skeleton sk = Chain(20);
  for (double deg : {20.0, 90.0, 150.0}) {
    auto in_plane = BendJoint(sk, 1, 2, deg);
    auto about = BendJointAbout(sk, 1, 2, deg, Eigen::Vector3d(0, 0, 3));
    ASSERT_TRUE(in_plane.ok()) << in_plane.status();
    ASSERT_TRUE(about.ok()) << about.status();
    EXPECT_NEAR(in_plane->rest_degrees, 20, kAngle);
    EXPECT_NEAR(Angle(about->parent_dir, about->child_dir), deg, kAngle);
    EXPECT_LT((At(*about, 2) - At(*in_plane, 2)).norm(), kPos) << deg;
    EXPECT_LT(about->pose.joint(2).rotation.angularDistance(in_plane->pose.joint(2).rotation), kPos) << deg;
    EXPECT_LT((about->child_dir - in_plane->child_dir).norm(), kPos);
  }
}

// A straight joint has no rest plane: BendJoint refuses it, an axis bends it. An axis tilted from
// the perpendicular turns the bone on a cone, which reaches only so far (45°: 90° at most).
TEST(BendJoint, AnAxisBendsAStraightJointAsFarAsItsConeReaches) {
  const Skeleton sk = Chain(0);
  EXPECT_EQ(BendJoint(sk, 1, 2, 90).status().code(), absl::StatusCode::kInvalidArgument);
  const Eigen::Vector3d tilted = Eigen::Vector3d(1, 0, 1).normalized();
  for (double deg : {0.0, 30.0, 60.0, 89.0}) {
    auto b = BendJointAbout(sk, 1, 2, deg, tilted);
    ASSERT_TRUE(b.ok()) << deg << ": " << b.status();
    EXPECT_NEAR(Angle(b->parent_dir, b->child_dir), deg, kAngle);
    EXPECT_NEAR(Angle(At(*b, 1) - At(*b, 0), At(*b, 2) - At(*b, 1)), deg, kAngle) << "the posed joints";
    EXPECT_NEAR((At(*b, 2) - At(*b, 1)).norm(), 1.0, kPos) << "the bone keeps its length";
    EXPECT_NEAR(Angle(b->child_dir, tilted), 45, kAngle) << "on the cone about the axis";
  }
  auto far = BendJointAbout(sk, 1, 2, 120, tilted);
  EXPECT_EQ(far.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(far.status().message().find("never bends"), std::string::npos) << far.status();
  EXPECT_EQ(BendJointAbout(sk, 1, 2, -10, tilted).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BendJointAbout(sk, 1, 2, 90, Eigen::Vector3d::Zero()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BendJointAbout(sk, 0, 2, 90, tilted).status().code(), absl::StatusCode::kInvalidArgument) << "a root";
}

// A clip that turns joint 1 about u (in its parent's frame) by 80° and back: the axis found is u
// turned into the world by the parent's bind rotation (not the joint's own, which differs by
// the rest bend); a clip that never bends the joint has no axis.
TEST(ClipBendAxis, IsTheAxisTheClipTurnsTheJointAboutAtItsDeepestBend) {
  const Skeleton sk = Chain(20, 30);
  const Eigen::Quaterniond parent = BindPose(sk).joint(0).rotation;
  EXPECT_LT(parent.angularDistance(Eigen::Quaterniond(Eigen::AngleAxisd(30 * kDeg, Eigen::Vector3d::UnitY()))), kPos);
  for (const Eigen::Vector3d& u : {Eigen::Vector3d(0, 0.6, 0.8), Eigen::Vector3d(0.3, 0, 1).normalized()}) {
    Clip clip;
    clip.duration = 2;
    clip.tracks.resize(sk.size());
    JointTrack& t = clip.tracks[1];
    t.rotation_times = {0, 1, 2};
    const Eigen::Quaterniond rest = sk.rest_local[1].rotation;
    t.rotations = {rest, Eigen::Quaterniond(Eigen::AngleAxisd(80 * kDeg, u)) * rest, rest};
    auto axis = ClipBendAxis(sk, clip, 1, 2);
    ASSERT_TRUE(axis.ok()) << axis.status();
    EXPECT_LT((*axis - parent * u).norm(), kPos) << axis->transpose();
    // Bending about it continues the clip's motion: at the clip's own deepest bend the end joint is
    // where the clip puts it.
    Pose local;
    SampleClip(clip, sk, 1, local);
    std::vector<Similarity> world(sk.size());
    std::vector<Affine34d> skinning(sk.size());
    SkinningTransforms(sk, local, world, skinning);
    const double deepest = Angle(world[1].translation - world[0].translation, world[2].translation - world[1].translation);
    auto bent = BendJointAbout(sk, 1, 2, deepest, *axis);
    ASSERT_TRUE(bent.ok()) << bent.status();
    EXPECT_LT((At(*bent, 2) - world[2].translation).norm(), kPos);
  }
  Clip still;
  still.duration = 1;
  still.tracks.resize(sk.size());
  EXPECT_EQ(ClipBendAxis(sk, still, 1, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sinew
