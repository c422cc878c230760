// Swing/twist joint deformers at run time (Kavan & Sorkine 2012, Eq. 5–6; spec §2.7–2.9 and the
// properties of its §4): the decomposition, the canonical frames, and the deformer with weights
// set by hand (the energy-minimizing weights are their own suite). Checked geometrically on the
// deformed mesh: distances to the bone axis, cross-section areas, displacements.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>

#include "core/procedural/limb.h"
#include "core/rig/pose.h"
#include "core/swingtwist/swing_twist.h"
#include "tests/core/test_util.h"

namespace sinew {
namespace {

using testing::BuildOrDie;
using testing::MaxAbsDiff;

constexpr double kPi = std::numbers::pi;

// The spec's test cylinder: radius 1, length 10, along x, two collinear bones, joint at x = 5.
LimbOptions Cylinder() {
  LimbOptions o;
  o.rings = 201;  // a ring every 0.05, one exactly at the joint
  o.segments = 64;
  o.bones = 2;
  o.length = 10;
  o.radius = 1;
  o.max_influences = 2;
  return o;
}

double Smoothstep(double x, double a, double b) {
  const double u = std::clamp((x - a) / (b - a), 0.0, 1.0);
  return u * u * (3 - 2 * u);
}

// Every vertex on the elbow's deformer (d = 1), swing and twist weights ramping from 0 on the
// upper arm to 1 on the forearm over [5 - half, 5 + half] along x.
SwingTwistWeights ElbowWeights(const Rig& rig, double half) {
  SwingTwistWeights w;
  w.offsets.push_back(0);
  for (size_t v = 0; v < rig.vertex_count(); ++v) {
    const float ramp = float(Smoothstep(rig.positions[3 * v], 5 - half, 5 + half));
    w.joints.push_back(1);
    w.d.push_back(1);
    w.s.push_back(ramp);
    w.t.push_back(ramp);
    w.offsets.push_back(uint32_t(w.joints.size()));
  }
  return w;
}

// LBS with the same ramp as the weight of the forearm.
std::vector<float> LbsRamp(const Rig& rig, std::span<const Affine34d> s, double half) {
  std::vector<float> out(rig.positions.size());
  for (size_t v = 0; v < rig.vertex_count(); ++v) {
    const Eigen::Vector4d p(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2], 1);
    const double w = Smoothstep(p.x(), 5 - half, 5 + half);
    const Eigen::Vector3d q = (1 - w) * (s[0] * p) + w * (s[1] * p);
    for (int k = 0; k < 3; ++k) out[3 * v + k] = float(q[k]);
  }
  return out;
}

struct Posed {
  std::vector<Affine34d> skinning;
  std::vector<float> out;
};

absl::StatusOr<Posed> Deform(const Rig& rig, const SwingTwistWeights& w, const Pose& pose) {
  auto frames = ComputeCanonicalFrames(rig);
  if (!frames.ok()) return frames.status();
  std::vector<Similarity> world(rig.joint_count());
  Posed p;
  p.skinning.resize(rig.joint_count());
  SkinningTransforms(rig.skeleton, pose, world, p.skinning);
  std::vector<JointRecord> joints(rig.joint_count());
  if (auto st = SwingTwistJoints(rig, *frames, p.skinning, joints); !st.ok()) return st;
  p.out.resize(rig.positions.size());
  SwingTwistSkinning(rig.positions, w, joints, p.out, nullptr);
  return p;
}

// Shoelace area of the cross-section ring at rest x (the limb's vertices are ring-major).
double RingArea(const LimbOptions& o, std::span<const float> pos, size_t ring) {
  double a = 0;
  for (uint32_t s = 0; s < o.segments; ++s) {
    const size_t i = ring * o.segments + s, k = ring * o.segments + (s + 1) % o.segments;
    a += double(pos[3 * i + 1]) * pos[3 * k + 2] - double(pos[3 * k + 1]) * pos[3 * i + 2];
  }
  return std::abs(a) / 2;
}

Eigen::Quaterniond RandomRotation(std::mt19937_64& rng) {
  std::normal_distribution<double> g;
  return Eigen::Quaterniond(g(rng), g(rng), g(rng), g(rng)).normalized();
}

// The canonical frames' axis joint (a long child, else the first joint of the subtree, depth
// first, away from the joint) as a plain search from every joint: the reference the memoised
// search must equal (until 2026-12-07 the plain search was the code, O(n²) in a chain of
// coincident joints: 16 s at 65 535).
std::vector<int32_t> AxisJointsByPlainSearch(const Skeleton& sk, const std::vector<Eigen::Vector3d>& rest, double eps) {
  const size_t n = sk.size();
  std::vector<std::vector<int32_t>> children(n);
  for (size_t j = 0; j < n; ++j) {
    if (sk.parents[j] >= 0) children[sk.parents[j]].push_back(int32_t(j));
  }
  std::vector<int32_t> out(n, -1);
  for (size_t j = 0; j < n; ++j) {
    for (int32_t c : children[j]) {
      if ((rest[c] - rest[j]).norm() > eps) {
        out[j] = c;
        break;
      }
    }
    if (out[j] >= 0) continue;
    std::vector<int32_t> stack(children[j].rbegin(), children[j].rend());
    while (!stack.empty()) {
      const int32_t d = stack.back();
      stack.pop_back();
      if ((rest[d] - rest[j]).norm() > eps) {
        out[j] = d;
        break;
      }
      stack.insert(stack.end(), children[d].rbegin(), children[d].rend());
    }
  }
  return out;
}

// Random trees on the limb's mesh with clusters of joints at exactly one point (identity rest
// transforms), joints a hair apart (near, not equal) and long bones, and a chain of 3000
// coincident joints: every joint's axis and bone length are those of the plain search.
TEST(SwingTwist, CanonicalFramesOfCoincidentJointsEqualThePlainSearch) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 12; ++trial) {
    RigInput input = MakeLimb(LimbOptions{});
    Skeleton& sk = input.rig.skeleton;
    const size_t extra = trial == 11 ? 3000 : 400;
    for (size_t k = 0; k < extra; ++k) {
      const size_t n = sk.size();
      const int32_t parent = trial == 11 ? int32_t(n - 1) : int32_t(std::uniform_int_distribution<size_t>(0, n - 1)(rng));
      Similarity local;
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      if (trial != 11 && u > 0.5) {
        local.translation = Eigen::Vector3d(std::normal_distribution<double>(0, u > 0.6 ? 0.3 : 1e-9)(rng),
                                            std::normal_distribution<double>(0, 0.3)(rng) * (u > 0.6),
                                            std::normal_distribution<double>(0, 0.3)(rng) * (u > 0.6));
      }
      sk.names.push_back("j" + std::to_string(n));
      sk.parents.push_back(parent);
      sk.rest_local.push_back(local);
    }
    const Rig rig = testing::BuildOrDie(input);
    auto frames = ComputeCanonicalFrames(rig);
    ASSERT_TRUE(frames.ok()) << frames.status();
    Eigen::Vector3d lo = frames->rest[0], hi = frames->rest[0];
    for (const auto& p : frames->rest) {
      lo = lo.cwiseMin(p);
      hi = hi.cwiseMax(p);
    }
    const std::vector<int32_t> axis = AxisJointsByPlainSearch(rig.skeleton, frames->rest, 1e-6 * (hi - lo).norm());
    for (size_t j = 0; j < rig.joint_count(); ++j) {
      if (axis[j] < 0) {
        ASSERT_EQ(frames->bone_length[j], 0.0) << "trial " << trial << " joint " << j;
        continue;
      }
      const Eigen::Vector3d d = frames->rest[axis[j]] - frames->rest[j];
      ASSERT_EQ(frames->bone_length[j], d.norm()) << "trial " << trial << " joint " << j;
      ASSERT_TRUE(frames->frame[j].col(2).isApprox(d.normalized(), 1e-12)) << "trial " << trial << " joint " << j;
    }
  }
}

// Spec §4.9: Q = Q_swing · Q_twist on 10⁵ random rotations; the swing has no z part, the twist
// is about z, both keep the bone axis's image, and q, −q give the same split.
TEST(SwingTwist, DecompositionReassemblesEveryRotation) {
  std::mt19937_64 rng(7);
  double worst = 0, worst_z = 0, worst_axis = 0, worst_sign = 0;
  for (int i = 0; i < 100000; ++i) {
    Eigen::Quaterniond q = RandomRotation(rng);
    if (i % 1000 == 0) q = Eigen::Quaterniond(0, 1e-7 * (i % 3), 1, 0).normalized();  // near the singular swing
    const SwingTwistSplit s = SplitSwingTwist(q);
    const Eigen::Matrix3d twist = Eigen::AngleAxisd(s.theta, Eigen::Vector3d::UnitZ()).toRotationMatrix();
    const Eigen::Matrix3d m = q.toRotationMatrix();
    worst = std::max(worst, (m - s.swing.toRotationMatrix() * twist).norm());
    if (!s.singular) worst_z = std::max(worst_z, std::abs(s.swing.z()));
    worst_axis = std::max(worst_axis, (m * Eigen::Vector3d::UnitZ() - s.swing * Eigen::Vector3d::UnitZ()).norm());
    const SwingTwistSplit n = SplitSwingTwist(Eigen::Quaterniond(-q.w(), -q.x(), -q.y(), -q.z()));
    worst_sign = std::max({worst_sign, std::abs(n.theta - s.theta),
                           (n.swing.toRotationMatrix() - s.swing.toRotationMatrix()).norm()});
    ASSERT_TRUE(std::isfinite(s.theta) && s.theta > -kPi && s.theta <= kPi) << i;
  }
  EXPECT_LE(worst, 1e-6);
  EXPECT_LE(worst_z, 1e-7);
  EXPECT_LE(worst_axis, 1e-6);
  EXPECT_LE(worst_sign, 1e-12);
  // The tie at w = 0: (0, x, y, −1) and its negation both twist by +π.
  EXPECT_DOUBLE_EQ(SplitSwingTwist(Eigen::Quaterniond(0, 0, 0, -1)).theta, kPi);
  EXPECT_DOUBLE_EQ(SplitSwingTwist(Eigen::Quaterniond(0, 0, 0, 1)).theta, kPi);
}

// Frames come from joint positions, not the client's joint axes: on a chain whose joints carry
// random rest orientations and random poses — with a joint translated and one scaled, as
// animated rigs do — an influence with s = t = 1 moves exactly by its joint's skinning matrix and
// one with s = t = 0 by its parent's (spec §2.8, §4.12).
TEST(SwingTwist, FullAndZeroWeightsMoveByTheJointAndItsParent) {
  LimbOptions o = Cylinder();
  o.bones = 4;
  RigInput in = MakeLimb(o);
  std::mt19937_64 rng(3);
  // Random world orientations for the joints, keeping their positions.
  std::vector<Eigen::Quaterniond> world(o.bones);
  for (auto& q : world) q = RandomRotation(rng);
  for (uint32_t j = 0; j < o.bones; ++j) {
    const Eigen::Quaterniond parent = j == 0 ? Eigen::Quaterniond::Identity() : world[j - 1];
    in.rig.skeleton.rest_local[j].rotation = parent.conjugate() * world[j];
    const Eigen::Vector3d step(j == 0 ? 0.0 : o.length / o.bones, 0, 0);
    in.rig.skeleton.rest_local[j].translation = parent.conjugate() * step;
  }
  const Rig rig = BuildOrDie(std::move(in));
  Pose pose = RestPose(rig.skeleton);
  for (size_t j = 0; j < rig.joint_count(); ++j) {
    pose.set_rotation(j, rig.skeleton.rest_local[j].rotation * RandomRotation(rng));
  }
  pose.translations[0] += 0.75f;  // the root may move
  pose.translations[3 * 2 + 1] += 0.4f;  // joint 2 slides off its parent's bone
  pose.scales.assign(rig.joint_count(), 1.f);
  pose.scales[3] = 1.3f;  // joint 3 grows
  for (size_t j = 0; j < rig.joint_count(); ++j) {
    for (float full : {0.f, 1.f}) {
      SwingTwistWeights w;
      w.offsets.assign(1, 0);
      for (size_t v = 0; v < rig.vertex_count(); ++v) {
        w.joints.push_back(uint16_t(j));
        w.d.push_back(1);
        w.s.push_back(full);
        w.t.push_back(full);
        w.offsets.push_back(uint32_t(w.joints.size()));
      }
      auto posed = Deform(rig, w, pose);
      ASSERT_TRUE(posed.ok()) << posed.status();
      const int32_t parent = rig.skeleton.parents[j];
      const Affine34d& s = posed->skinning[full == 1 || parent < 0 ? j : size_t(parent)];
      double err = 0;
      for (size_t v = 0; v < rig.vertex_count(); ++v) {
        const Eigen::Vector3d want = s * Eigen::Vector4d(rig.positions[3 * v], rig.positions[3 * v + 1],
                                                         rig.positions[3 * v + 2], 1);
        for (int k = 0; k < 3; ++k) err = std::max(err, std::abs(want[k] - posed->out[3 * v + k]));
      }
      EXPECT_LE(err, 1e-5 * rig.bbox_diagonal()) << "joint " << j << " weight " << full;
    }
  }
}

// Spec §4.1–4.2: the rest pose gives the rest mesh; a rigid motion of the root moves the mesh
// rigidly.
TEST(SwingTwist, RestPoseAndRigidMotion) {
  const LimbOptions o = Cylinder();
  const Rig rig = BuildOrDie(MakeLimb(o));
  const SwingTwistWeights w = ElbowWeights(rig, 1.0);
  ASSERT_TRUE(CheckSwingTwistWeights(w, rig.vertex_count(), rig.joint_count()).ok());
  Pose pose = RestPose(rig.skeleton);
  auto rest = Deform(rig, w, pose);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_LE(MaxAbsDiff(rest->out, rig.positions), 1e-5 * rig.bbox_diagonal());

  const Eigen::Quaterniond g = Eigen::Quaterniond(Eigen::AngleAxisd(1.1, Eigen::Vector3d(1, 2, 3).normalized()));
  pose.set_rotation(0, g);
  for (int k = 0; k < 3; ++k) pose.translations[k] = float(k + 1);
  auto moved = Deform(rig, w, pose);
  ASSERT_TRUE(moved.ok());
  std::vector<float> want(rig.positions.size());
  for (size_t v = 0; v < rig.vertex_count(); ++v) {
    const Eigen::Vector3d p = g * Eigen::Vector3d(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]) +
                              Eigen::Vector3d(1, 2, 3);
    for (int k = 0; k < 3; ++k) want[3 * v + k] = float(p[k]);
  }
  EXPECT_LE(MaxAbsDiff(moved->out, want), 1e-5 * rig.bbox_diagonal());
}

// Spec §4.10, the candy wrapper: twisting the forearm by 90°, 170° and 180° keeps every vertex at
// its distance from the bone axis and the joint's cross-section area within 0.1 %; LBS with the
// same weights (0.5 at the joint ring) shrinks that area to cos²(θ/2) of it.
TEST(SwingTwist, TwistKeepsTheCrossSectionWhereLbsCollapses) {
  const LimbOptions o = Cylinder();
  const Rig rig = BuildOrDie(MakeLimb(o));
  const SwingTwistWeights w = ElbowWeights(rig, 1.0);
  const size_t joint_ring = 100;  // x = 5
  ASSERT_NEAR(rig.positions[3 * joint_ring * o.segments], 5.0, 1e-6);
  const double rest_area = RingArea(o, rig.positions, joint_ring);
  for (double degrees : {90.0, 170.0, 180.0}) {
    Pose pose = RestPose(rig.skeleton);
    pose.set_rotation(1, Eigen::Quaterniond(Eigen::AngleAxisd(degrees * kPi / 180, Eigen::Vector3d::UnitX())));
    auto posed = Deform(rig, w, pose);
    ASSERT_TRUE(posed.ok()) << posed.status();
    double radius_error = 0;
    for (size_t v = 0; v < rig.vertex_count(); ++v) {
      const double r0 = std::hypot(rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
      const double r1 = std::hypot(posed->out[3 * v + 1], posed->out[3 * v + 2]);
      radius_error = std::max(radius_error, std::abs(r1 - r0));
    }
    EXPECT_LE(radius_error, 1e-5) << degrees;
    // Beyond the ramp the forearm turns with its bone and the upper arm stays.
    double rigid_error = 0;
    for (size_t v = 0; v < rig.vertex_count(); ++v) {
      const double x = rig.positions[3 * v];
      if (std::abs(x - 5) < 1) continue;
      const Eigen::Vector3d want = posed->skinning[x > 5 ? 1 : 0] *
                                   Eigen::Vector4d(x, rig.positions[3 * v + 1], rig.positions[3 * v + 2], 1);
      for (int k = 0; k < 3; ++k) rigid_error = std::max(rigid_error, std::abs(want[k] - posed->out[3 * v + k]));
    }
    EXPECT_LE(rigid_error, 1e-5) << degrees;
    EXPECT_NEAR(RingArea(o, posed->out, joint_ring) / rest_area, 1.0, 1e-3) << degrees;
    const double lbs = RingArea(o, LbsRamp(rig, posed->skinning, 1.0), joint_ring) / rest_area;
    const double c = std::cos(degrees * kPi / 360);
    EXPECT_NEAR(lbs, c * c, 0.01) << degrees;
  }
}

// Spec §4.11: a pure swing is LBS between parent and child with weight s — at 90° the joint ring
// with s = 0.5 keeps its extent across the bend plane and is squashed by cos 45° in it.
TEST(SwingTwist, PureSwingEqualsLbs) {
  const LimbOptions o = Cylinder();
  const Rig rig = BuildOrDie(MakeLimb(o));
  const SwingTwistWeights w = ElbowWeights(rig, 1.0);
  Pose pose = RestPose(rig.skeleton);
  pose.set_rotation(1, Eigen::Quaterniond(Eigen::AngleAxisd(kPi / 2, Eigen::Vector3d::UnitZ())));
  auto posed = Deform(rig, w, pose);
  ASSERT_TRUE(posed.ok());
  EXPECT_LE(MaxAbsDiff(posed->out, LbsRamp(rig, posed->skinning, 1.0)), 1e-5 * rig.bbox_diagonal());
  // The joint ring: its z extent (the bend axis) is kept, its y extent becomes the bend plane's
  // diagonal squashed by cos 45°.
  const size_t ring = 100;
  double z_extent = 0, plane_extent = 0;
  for (uint32_t s = 0; s < o.segments; ++s) {
    const size_t v = ring * o.segments + s;
    z_extent = std::max(z_extent, std::abs(double(posed->out[3 * v + 2])));
    const Eigen::Vector2d in_plane(posed->out[3 * v] - 5.0, posed->out[3 * v + 1]);
    plane_extent = std::max(plane_extent, in_plane.norm());
  }
  EXPECT_NEAR(z_extent, 1.0, 1e-4);
  EXPECT_NEAR(plane_extent, std::cos(kPi / 4), 1e-3);
}

// Spec §4.14: sweeping the twist from 0° to 179° in 1° steps moves no vertex by more than the
// arc of one degree at the largest radius: no jumps.
TEST(SwingTwist, TwistSweepIsContinuous) {
  const LimbOptions o = Cylinder();
  const Rig rig = BuildOrDie(MakeLimb(o));
  const SwingTwistWeights w = ElbowWeights(rig, 1.0);
  std::vector<float> previous = rig.positions;
  double worst = 0;
  for (int degrees = 1; degrees <= 179; ++degrees) {
    Pose pose = RestPose(rig.skeleton);
    pose.set_rotation(1, Eigen::Quaterniond(Eigen::AngleAxisd(degrees * kPi / 180, Eigen::Vector3d::UnitX())));
    auto posed = Deform(rig, w, pose);
    ASSERT_TRUE(posed.ok());
    for (size_t v = 0; v < rig.vertex_count(); ++v) {
      const double step = std::sqrt(std::pow(posed->out[3 * v] - previous[3 * v], 2) +
                                    std::pow(posed->out[3 * v + 1] - previous[3 * v + 1], 2) +
                                    std::pow(posed->out[3 * v + 2] - previous[3 * v + 2], 2));
      worst = std::max(worst, step);
    }
    previous = posed->out;
  }
  EXPECT_LE(worst, 2 * kPi / 180 * o.radius);
  EXPECT_GT(worst, 0.5 * kPi / 180 * o.radius);  // the forearm did turn, a degree per step
}

// Coincident and branching joints get an axis from the first joint that does not coincide
// (spec §2.8); a joint that shears relative to its parent is refused, naming it.
TEST(SwingTwist, FramesOfCoincidentJointsAndShearRefused) {
  LimbOptions o = Cylinder();
  o.bones = 3;
  RigInput in = MakeLimb(o);
  in.rig.skeleton.rest_local[1].translation.setZero();  // joint 1 sits on joint 0
  const Rig rig = BuildOrDie(std::move(in));
  auto frames = ComputeCanonicalFrames(rig);
  ASSERT_TRUE(frames.ok());
  for (size_t j = 0; j < 2; ++j) {
    // Joints 0 and 1 (coincident at x = 0) point along the bone to joint 2.
    EXPECT_LE((frames->frame[j].col(2) - Eigen::Vector3d::UnitX()).norm(), 1e-12) << j;
  }
  EXPECT_LE((frames->frame[2].col(2) - Eigen::Vector3d::UnitX()).norm(), 1e-12);  // a leaf: its parent's axis
  for (size_t j = 0; j < 3; ++j) {
    const Eigen::Matrix3d r = frames->frame[j].leftCols<3>();
    EXPECT_LE((r.transpose() * r - Eigen::Matrix3d::Identity()).norm(), 1e-12);
    EXPECT_NEAR(r.determinant(), 1.0, 1e-12);
  }
  // A joint whose motion relative to its parent shears is refused, naming it.
  std::vector<Affine34d> s(3, IdentityAffine());
  s[2](0, 1) = 0.5;
  std::vector<JointRecord> records(3);
  const absl::Status st = SwingTwistJoints(rig, *frames, s, records);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("joint 2 (bone2) shears"));
}

// Bad weights are refused naming the vertex (or the joint, for a deformer parent).
TEST(SwingTwist, MalformedWeightsNameTheVertex) {
  const Rig rig = BuildOrDie(MakeLimb(Cylinder()));
  SwingTwistWeights w = ElbowWeights(rig, 1.0);
  w.d[17] = 0.5f;
  EXPECT_THAT(std::string(CheckSwingTwistWeights(w, rig.vertex_count(), 2).message()),
              ::testing::HasSubstr("vertex 17's d sums to 0.5"));
  w = ElbowWeights(rig, 1.0);
  w.t[9] = 1.5f;
  EXPECT_THAT(std::string(CheckSwingTwistWeights(w, rig.vertex_count(), 2).message()),
              ::testing::HasSubstr("vertex 9 has a d, s or t outside [0, 1]"));
  w = ElbowWeights(rig, 1.0);
  w.joints[3] = 2;
  EXPECT_THAT(std::string(CheckSwingTwistWeights(w, rig.vertex_count(), 2).message()),
              ::testing::HasSubstr("vertex 3 names joint 2 of 2"));
  w = ElbowWeights(rig, 1.0);
  w.parents = {-1, 0};
  EXPECT_TRUE(CheckSwingTwistWeights(w, rig.vertex_count(), 2).ok());
  w.parents = {-1, 1};
  EXPECT_THAT(std::string(CheckSwingTwistWeights(w, rig.vertex_count(), 2).message()),
              ::testing::HasSubstr("joint 1's deformer parent 1 is not another joint or -1"));
  w.parents = {-1};
  EXPECT_THAT(std::string(CheckSwingTwistWeights(w, rig.vertex_count(), 2).message()),
              ::testing::HasSubstr("1 deformer parents for 2 joints"));
}

// The CPU kernel (joint-grouped blocks, eight influences at a time, sin and cos by polynomial)
// against the portable loop and a double-precision evaluation of Eq. 5–6 from the same records:
// random influences (one to six per vertex, joints repeated within a vertex, every d, s, t), five
// bones, three blocks and a part, run on two threads, twists from a few degrees to five turns
// either way (an unwrapped session's angles) so that every quadrant of the reduction is used.
TEST(SwingTwist, KernelEqualsThePortableLoopAndADoubleReference) {
  LimbOptions o;
  o.rings = 41;
  o.segments = 79;  // 3239 vertices: three blocks of 1024 and 167 more
  o.bones = 5;
  o.max_influences = 2;
  const Rig rig = BuildOrDie(MakeLimb(o));
  const size_t n = rig.vertex_count(), joints = rig.joint_count();
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  SwingTwistWeights w;
  w.offsets.push_back(0);
  for (size_t v = 0; v < n; ++v) {
    const int k = 1 + int(rng() % 6);
    float sum = 0;
    for (int i = 0; i < k; ++i) {
      w.joints.push_back(uint16_t(rng() % joints));
      w.d.push_back(unit(rng) + 1e-3f);
      sum += w.d.back();
      w.s.push_back(i == 0 ? 1.f : i == 1 ? 0.f : unit(rng));
      w.t.push_back(i == 0 ? 1.f : unit(rng));
    }
    for (size_t e = w.offsets.back(); e < w.joints.size(); ++e) w.d[e] /= sum;
    w.offsets.push_back(uint32_t(w.joints.size()));
  }
  ASSERT_TRUE(CheckSwingTwistWeights(w, n, joints).ok());
  auto frames = ComputeCanonicalFrames(rig);
  ASSERT_TRUE(frames.ok());
  Pose pose = RestPose(rig.skeleton);
  for (size_t j = 0; j < joints; ++j) {
    const Eigen::Quaterniond q = RandomRotation(rng);
    const float xyzw[4] = {float(q.x()), float(q.y()), float(q.z()), float(q.w())};
    std::copy(xyzw, xyzw + 4, pose.rotations.begin() + 4 * j);
  }
  std::vector<Similarity> world(joints);
  std::vector<Affine34d> skinning(joints);
  SkinningTransforms(rig.skeleton, pose, world, skinning);
  std::vector<JointRecord> records(joints);
  ASSERT_TRUE(SwingTwistJoints(rig, *frames, skinning, records).ok());
  const float thetas[] = {0.05f, -2.9f, 3.1f + 4 * float(kPi), -31.f, 7.5f};
  for (size_t j = 0; j < joints; ++j) records[j].theta = thetas[j % 5];

  // Eq. 5–6 in double from the float records.
  std::vector<float> reference(rig.positions.size());
  for (size_t v = 0; v < n; ++v) {
    const Eigen::Vector3d p(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
    Eigen::Vector3d o = Eigen::Vector3d::Zero();
    for (uint32_t e = w.offsets[v]; e < w.offsets[v + 1]; ++e) {
      const JointRecord& r = records[w.joints[e]];
      auto m34 = [](const std::array<float, 12>& m) {
        return Eigen::Matrix<float, 3, 4, Eigen::RowMajor>(m.data()).cast<double>().eval();
      };
      const Eigen::Matrix<double, 3, 4> inv = m34(r.inverse_frame), a = m34(r.a);
      const Eigen::Matrix3d b = Eigen::Matrix<float, 3, 3, Eigen::RowMajor>(r.b.data()).cast<double>();
      const Eigen::Vector3d tau = Eigen::Vector3f(r.translation.data()).cast<double>();
      const Eigen::Vector3d x = inv.leftCols<3>() * p + inv.col(3);
      const Eigen::Vector3d y = Eigen::AngleAxisd(double(w.t[e]) * r.theta, Eigen::Vector3d::UnitZ()) * x;
      const Eigen::Vector3d g = y + double(w.s[e]) * (b * y + tau);
      o += double(w.d[e]) * (a.leftCols<3>() * g + a.col(3));
    }
    for (int c = 0; c < 3; ++c) reference[3 * v + c] = float(o[c]);
  }
  std::vector<float> portable(rig.positions.size()), kernel(rig.positions.size(), -1.f);
  SwingTwistSkinningPortableRange(rig.positions, w, records, portable, 0, n);
  const double portable_error = MaxAbsDiff(portable, reference);
  EXPECT_LT(portable_error, 2e-6) << "the portable loop against the double evaluation";
  const SwingTwistBlocks blocks = SwingTwistCpuBlocks(rig.positions, w, *frames);
  if (blocks.empty()) GTEST_SKIP() << "this CPU has no AVX2 and FMA (or a baseline-ISA build): no kernel to test";
  ASSERT_EQ(blocks.block_runs.size(), 5u);  // four blocks
  EXPECT_EQ(blocks.vertex.size(), n);         // random joint sets: the vertices reordered
  ThreadPool pool(1);
  SwingTwistSkinning(rig.positions, w, records, kernel, &pool, &blocks);
  const double kernel_error = MaxAbsDiff(kernel, reference), apart = MaxAbsDiff(kernel, portable);
  EXPECT_LT(kernel_error, 2e-6) << "the kernel against the double evaluation";
  EXPECT_LT(apart, 2e-6) << "the kernel against the portable loop";
  std::printf("limb of %.2f: portable %.2e, kernel %.2e from the double evaluation; %.2e apart\n",
              rig.bbox_diagonal(), portable_error, kernel_error, apart);

  // One joint set for every vertex (the elbow's ramp, twisted 3 turns): the rig's own order, every
  // eight lanes eight vertices in a row.
  const Rig cylinder = BuildOrDie(MakeLimb(Cylinder()));
  const SwingTwistWeights elbow = ElbowWeights(cylinder, 1.0);
  auto cylinder_frames = ComputeCanonicalFrames(cylinder);
  ASSERT_TRUE(cylinder_frames.ok());
  const SwingTwistBlocks rows = SwingTwistCpuBlocks(cylinder.positions, elbow, *cylinder_frames);
  EXPECT_TRUE(rows.vertex.empty());
  EXPECT_TRUE(std::all_of(rows.dense.begin(), rows.dense.end() - 1, [](uint8_t d) { return d == 1; }));
  Pose twist = RestPose(cylinder.skeleton);
  const Eigen::Quaterniond q(Eigen::AngleAxisd(2.5, Eigen::Vector3d(1, 0.3, 0).normalized()));
  const float xyzw[4] = {float(q.x()), float(q.y()), float(q.z()), float(q.w())};
  std::copy(xyzw, xyzw + 4, twist.rotations.begin() + 4);
  std::vector<Similarity> cylinder_world(2);
  std::vector<Affine34d> cylinder_skinning(2);
  SkinningTransforms(cylinder.skeleton, twist, cylinder_world, cylinder_skinning);
  std::vector<JointRecord> cylinder_records(2);
  ASSERT_TRUE(SwingTwistJoints(cylinder, *cylinder_frames, cylinder_skinning, cylinder_records).ok());
  cylinder_records[1].theta += float(6 * kPi);
  std::vector<float> slow(cylinder.positions.size()), fast(cylinder.positions.size(), -1.f);
  SwingTwistSkinningPortableRange(cylinder.positions, elbow, cylinder_records, slow, 0, cylinder.vertex_count());
  SwingTwistSkinning(cylinder.positions, elbow, cylinder_records, fast, &pool, &rows);
  EXPECT_LT(MaxAbsDiff(fast, slow), 1e-5) << "the kernel against the portable loop on the twisted cylinder";

  // Blocks made for another mesh are not used: the portable loop's result, exactly.
  std::fill(kernel.begin(), kernel.end(), -1.f);
  SwingTwistSkinning(rig.positions, w, records, kernel, &pool, &rows);
  EXPECT_EQ(kernel, portable);

  // A record with an infinity reaches only the vertices its joint moves (the padding lanes, d = 0,
  // never add it to a block's first vertex): every other vertex stays finite and as before.
  records[3].a[3] = std::numeric_limits<float>::infinity();
  SwingTwistSkinning(rig.positions, w, records, kernel, &pool, &blocks);
  size_t untouched = 0;
  for (size_t v = 0; v < n; ++v) {
    bool moved_by_3 = false;
    for (uint32_t e = w.offsets[v]; e < w.offsets[v + 1]; ++e) moved_by_3 |= w.joints[e] == 3;
    if (moved_by_3) continue;
    ++untouched;
    for (int c = 0; c < 3; ++c) {
      ASSERT_TRUE(std::isfinite(kernel[3 * v + c])) << "vertex " << v << " not moved by joint 3";
      ASSERT_NEAR(kernel[3 * v + c], reference[3 * v + c], 2e-6) << "vertex " << v;
    }
  }
  EXPECT_GT(untouched, n / 4);
}

}  // namespace
}  // namespace sinew
