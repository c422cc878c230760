// Properties of LBS and DQS that must hold whatever the rig: the rest pose returns the rest
// mesh, a rigid motion of the whole skeleton moves the mesh rigidly, the two agree with one
// influence per vertex, DQS keeps a twisted limb's cross-section where LBS collapses it, and a
// quaternion's sign never matters.
#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/blend/blend.h"
#include "core/deformer/deformer.h"
#include "core/dqs/dqs.h"
#include "core/lbs/lbs.h"
#include "core/procedural/limb.h"
#include "tests/core/test_util.h"

// The replacement operator new below pairs malloc with free; GCC cannot see that.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

// Counts heap allocations so that a test can check that frames allocate nothing.
// Every replaceable form is replaced, so that allocation and release always pair up (also under
// AddressSanitizer).
static std::atomic<long> g_allocations{0};
static void* Allocate(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void* operator new(size_t n) {
  if (void* p = Allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  if (void* p = Allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, const std::nothrow_t&) noexcept { return Allocate(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return Allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace sinew {
namespace {

using testing::MaxAbsDiff;

// A rig with a non-trivial bind pose: a random tree of joints with rotated, scaled rest
// frames, random points, and 1..max_influences random weights per vertex.
// `offset` moves the whole rig (its points and its root's rest frame).
Rig RandomRig(uint32_t seed, uint32_t max_influences, bool with_scale = true,
              const Eigen::Vector3d& offset = Eigen::Vector3d::Zero()) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  RigInput in;
  const int joints = 7;
  for (int j = 0; j < joints; ++j) {
    in.rig.skeleton.names.push_back(absl::StrCat("j", j));
    in.rig.skeleton.parents.push_back(j == 0 ? -1 : int(rng() % j));
    Similarity s;
    s.rotation = Eigen::Quaterniond(u(rng), u(rng), u(rng), u(rng)).normalized();
    s.translation = Eigen::Vector3d(u(rng), u(rng), u(rng));
    s.scale = with_scale ? 0.8 + 0.4 * (u(rng) + 1) / 2 : 1.0;
    if (j == 0) s.translation += offset;
    in.rig.skeleton.rest_local.push_back(s);
  }
  const int n = 500;
  in.weights.offsets.push_back(0);
  for (int v = 0; v < n; ++v) {
    for (int k = 0; k < 3; ++k) in.rig.positions.push_back(float(u(rng) + offset[k]));
    const uint32_t m = 1 + rng() % max_influences;
    for (uint32_t k = 0; k < m; ++k) {
      in.weights.joints.push_back(rng() % joints);
      in.weights.weights.push_back(float(0.05 + (u(rng) + 1)));
    }
    in.weights.offsets.push_back(uint32_t(in.weights.joints.size()));
  }
  in.weights.normalize = true;
  return testing::BuildOrDie(std::move(in));
}

Pose RandomPose(const Skeleton& sk, uint32_t seed, bool with_scale = true) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Pose p = RestPose(sk);
  p.scales.assign(sk.size(), 1.0f);
  for (size_t j = 0; j < sk.size(); ++j) {
    testing::SetRotation(p, j, Eigen::Quaterniond(u(rng), u(rng), u(rng), u(rng)).normalized());
    testing::SetTranslation(p, j, Eigen::Vector3d(u(rng), u(rng), u(rng)));
    if (with_scale) p.scales[j] = float(0.7 + 0.3 * (u(rng) + 1));
  }
  return p;
}

// The method with its parameters: the LBS/DQS blend mixes the two at 0.37 (the blend's own
// properties are in blend_test.cc; here it must keep every property both of its ends have).
DeformerConfig ConfigOf(const std::string& method) {
  if (method != "blend") return {method, nullptr};
  auto p = std::make_shared<BlendParams>();
  p->weight = 0.37;
  return {method, p};
}

std::vector<float> Deformed(const Rig& rig, const std::string& method, const Pose& pose, ThreadPool* pool = nullptr) {
  auto shared = std::make_shared<const Rig>(rig);
  auto d = CreateDeformer(shared, ConfigOf(method));
  EXPECT_TRUE(d.ok()) << d.status();
  std::vector<float> out(rig.positions.size());
  FrameInput frame{&pose, {}};
  auto st = (*d)->Deform(frame, out, pool);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

class BothMethods : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Skinning, BothMethods,
                         ::testing::Values(std::string("lbs"), std::string("dqs"), std::string("blend")),
                         [](const auto& info) {
                           return info.param == "lbs" ? "LBS" : info.param == "dqs" ? "DQS" : "Blend";
                         });

TEST_P(BothMethods, RestPoseReturnsRestMesh) {
  for (const Rig& rig : {testing::SmallLimb(2), testing::SmallLimb(4, 6), RandomRig(1, 4),
                         RandomRig(2, 1)}) {
    const auto out = Deformed(rig, GetParam(), RestPose(rig.skeleton));
    EXPECT_LE(MaxAbsDiff(out, rig.positions), 1e-6) << rig.name;
  }
}

// A rigid motion G of the whole skeleton (applied at the roots in local space, or to every
// joint in world space) moves every vertex by G.
TEST_P(BothMethods, RigidPoseOfAllBonesMovesMeshRigidly) {
  const Rig rig = RandomRig(3, 4);
  const Eigen::Quaterniond gq = Eigen::Quaterniond(0.3, -0.5, 0.7, 0.2).normalized();
  const Eigen::Vector3d gt(0.4, -1.2, 2.5);
  std::vector<float> expected(rig.positions.size());
  for (size_t v = 0; v < rig.vertex_count(); ++v) {
    const Eigen::Vector3d p(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
    const Eigen::Vector3d q = gq * p + gt;
    for (int k = 0; k < 3; ++k) expected[3 * v + k] = float(q[k]);
  }
  Similarity g;
  g.rotation = gq;
  g.translation = gt;

  Pose local = RestPose(rig.skeleton);  // rest scales included
  if (local.scales.empty()) local.scales.assign(rig.joint_count(), 1.0f);
  for (size_t j = 0; j < rig.joint_count(); ++j) {
    if (rig.skeleton.parents[j] >= 0) continue;
    const Similarity moved = g * rig.skeleton.rest_local[j];
    testing::SetRotation(local, j, moved.rotation);
    testing::SetTranslation(local, j, moved.translation);
    local.scales[j] = float(moved.scale);
  }
  EXPECT_LE(MaxAbsDiff(Deformed(rig, GetParam(), local), expected), 2e-5);

  // The same motion stated in world space.
  std::vector<Similarity> world(rig.joint_count());
  for (int32_t j : rig.skeleton.order) {
    const int32_t p = rig.skeleton.parents[j];
    world[j] = p < 0 ? rig.skeleton.rest_local[j] : world[p] * rig.skeleton.rest_local[j];
  }
  Pose ws = local;
  ws.space = PoseSpace::kWorld;
  for (size_t j = 0; j < rig.joint_count(); ++j) {
    const Similarity moved = g * world[j];
    testing::SetRotation(ws, j, moved.rotation);
    testing::SetTranslation(ws, j, moved.translation);
    ws.scales[j] = float(moved.scale);
  }
  EXPECT_LE(MaxAbsDiff(Deformed(rig, GetParam(), ws), expected), 2e-5);
}

// q and -q are the same rotation: negating any joint's quaternion changes nothing.
TEST_P(BothMethods, AntipodalQuaternionsGiveSameResult) {
  const Rig rig = RandomRig(4, 4);
  const Pose pose = RandomPose(rig.skeleton, 5);
  Pose negated = pose;
  for (size_t j = 0; j < rig.joint_count(); j += 2) {
    for (int k = 0; k < 4; ++k) negated.rotations[4 * j + k] *= -1;
  }
  EXPECT_LE(MaxAbsDiff(Deformed(rig, GetParam(), pose), Deformed(rig, GetParam(), negated)), 1e-6);
}

// Splitting the vertices across threads does not change a single bit.
TEST_P(BothMethods, ParallelEqualsSerial) {
  LimbOptions o;
  o.rings = 400;
  o.segments = 100;
  o.bones = 6;
  o.max_influences = 4;
  const Rig rig = testing::BuildOrDie(MakeLimb(o));
  const Pose pose = LimbPose(rig.skeleton, 0.4);
  ThreadPool pool(3);
  EXPECT_EQ(Deformed(rig, GetParam(), pose, &pool), Deformed(rig, GetParam(), pose, nullptr));
}

// Steady-state frames allocate nothing (with and without a thread pool).
TEST_P(BothMethods, FramesDoNotAllocate) {
  LimbOptions o;
  o.rings = 200;
  o.segments = 100;
  auto rig = std::make_shared<const Rig>(testing::BuildOrDie(MakeLimb(o)));
  auto d = CreateDeformer(rig, ConfigOf(GetParam()));
  ASSERT_TRUE(d.ok());
  std::vector<float> out(rig->positions.size());
  const Pose pose = LimbPose(rig->skeleton, 0.3);
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    ASSERT_TRUE((*d)->Deform({&pose, {}}, out, p).ok());  // warm-up
    const long before = g_allocations.load();
    for (int i = 0; i < 5; ++i) ASSERT_TRUE((*d)->Deform({&pose, {}}, out, p).ok());
    EXPECT_EQ(g_allocations.load() - before, 0);
  }
}

// The cage methods' steady-state frames allocate nothing either, through operator new (Eigen's
// own heap, malloc, is not counted here: cage-mvc's and supercages' fresh matrix of the cage's
// offsets every frame, until 2026-12-07, was not seen by this test).
TEST(CageFrames, DoNotAllocate) {
  // 3 200 vertices: several of the frame's 1 024-row chunks, so that the pool's workers run them.
  auto rig = std::make_shared<const Rig>(testing::BuildOrDie(testing::LimbWithCage(200, 16)));
  std::vector<float> offsets(rig->cages[0].positions.size());
  for (size_t k = 0; k < offsets.size(); ++k) offsets[k] = 0.01f * float(k % 7);
  const CageFrame cage{0, CageInputMode::kOffsets, offsets};
  const Pose pose = LimbPose(rig->skeleton, 0.3);
  ThreadPool pool(2);
  for (const char* name : {"cage-mvc", "cage-green", "supercages"}) {
    const MethodInfo* method = FindMethod(name);
    ASSERT_NE(method, nullptr);
    auto config = ParseDeformerConfig(*method, {}, "deformer");
    ASSERT_TRUE(config.ok()) << config.status();
    auto prepared = method->prepare(*rig, *config, nullptr, {});
    ASSERT_TRUE(prepared.ok()) << name << ": " << prepared.status();
    auto d = method->create(rig, *prepared, *config);
    ASSERT_TRUE(d.ok()) << name << ": " << d.status();
    std::vector<float> out(rig->positions.size());
    const FrameInput frame{std::string_view(name) == "supercages" ? &pose : nullptr, std::span(&cage, 1)};
    std::vector<float> alone(rig->positions.size());
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      ASSERT_TRUE((*d)->Deform(frame, out, p).ok()) << name;  // warm-up
      const long before = g_allocations.load();
      for (int i = 0; i < 5; ++i) ASSERT_TRUE((*d)->Deform(frame, out, p).ok());
      EXPECT_EQ(g_allocations.load() - before, 0) << name << (p ? " on a pool" : " alone");
      if (!p) alone = out;
    }
    EXPECT_EQ(out, alone) << name << ": the pool's frame is the calling thread's";
  }
}

TEST_P(BothMethods, RejectsBadFrames) {
  auto rig = std::make_shared<const Rig>(testing::SmallLimb());
  auto d = CreateDeformer(rig, ConfigOf(GetParam()));
  ASSERT_TRUE(d.ok());
  std::vector<float> out(rig->positions.size());
  Pose pose = RestPose(rig->skeleton);
  pose.rotations[4 * 1 + 3] = 0.5f;
  auto st = (*d)->Deform({&pose, {}}, out, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("pose.rotations[1]"));
  pose = RestPose(rig->skeleton);
  pose.translations.pop_back();
  st = (*d)->Deform({&pose, {}}, out, nullptr);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("pose.translations"));
  st = (*d)->Deform({nullptr, {}}, out, nullptr);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("pose: required"));
  pose = RestPose(rig->skeleton);
  const CageFrame cage{0, CageInputMode::kAbsolute, {0, 0, 0}};
  st = (*d)->Deform({&pose, std::span(&cage, 1)}, out, nullptr);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("cages[0].cage: index 0 but the rig has 0 cages"));
}

// With one influence per vertex both methods apply that joint's transform exactly, including
// uniform scale.
TEST(Skinning, LbsEqualsDqsWithOneInfluence) {
  const Rig rig = RandomRig(6, 1);
  ASSERT_EQ(rig.max_influences, 1u);
  for (uint32_t seed : {7u, 8u, 9u}) {
    const Pose pose = RandomPose(rig.skeleton, seed);
    const auto lbs = Deformed(rig, "lbs", pose), dqs = Deformed(rig, "dqs", pose);
    EXPECT_LE(MaxAbsDiff(lbs, dqs), 1e-5 * rig.bbox_diagonal() * 10) << seed;
  }
}

// Moving a rig and its pose together moves the skin with them, whatever the joints' scales:
// each joint scales about its own rest centre. Until 2026-12-07 DQS scaled about the model's
// origin, so vertices blended between joints of different scales slid by (s_i − s_j) times their
// distance from it (here some 30 units: a hand 1.2 beside an unscaled forearm slid 2 cm on a
// character in centimetres).
TEST_P(BothMethods, MovingTheRigAndItsPoseMovesTheSkin) {
  const Eigen::Vector3d offset(100, -50, 30);
  const Rig rig = RandomRig(11, 3), moved = RandomRig(11, 3, true, offset);
  for (uint32_t seed : {21u, 22u}) {
    const Pose pose = RandomPose(rig.skeleton, seed);
    Pose moved_pose = pose;
    ASSERT_EQ(rig.skeleton.parents[0], -1);
    testing::SetTranslation(moved_pose, 0, pose.joint(0).translation + offset);
    const auto a = Deformed(rig, GetParam(), pose), b = Deformed(moved, GetParam(), moved_pose);
    double worst = 0;
    for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::abs(double(b[k]) - offset[k % 3] - a[k]));
    EXPECT_LT(worst, 1e-3) << "seed " << seed;  // float positions near 100: ~1e-5 apart
  }
}

// The candy wrapper: twist the last joint 180° about the bone axis. Where the two bones blend
// 50/50, LBS averages opposite points and the cross-section collapses to the axis; DQS rotates
// them by 90° and keeps the radius.
TEST(Skinning, DqsKeepsTwistedCrossSectionWhereLbsCollapses) {
  LimbOptions o;
  o.rings = 301;  // a ring exactly at each joint
  o.segments = 64;
  const Rig rig = testing::BuildOrDie(MakeLimb(o));
  LimbMotion twist;
  twist.bend_degrees = 0;
  twist.twist_degrees = 180;
  const Pose pose = LimbPose(rig.skeleton, 0.5, twist);
  const double wrist = 2.0;  // joint 2 of 3 on a limb of length 3
  const double lbs = LimbRingRadius(o, Deformed(rig, "lbs", pose), wrist);
  const double dqs = LimbRingRadius(o, Deformed(rig, "dqs", pose), wrist);
  EXPECT_LT(lbs, 0.05 * o.radius) << "LBS should collapse";
  EXPECT_GT(dqs, 0.98 * o.radius) << "DQS should keep the cross-section";
  EXPECT_GT(dqs - lbs, 0.9 * o.radius);
  // Both keep the rigid parts: far from the joint the radius is the rest radius.
  EXPECT_NEAR(LimbRingRadius(o, Deformed(rig, "lbs", pose), 0.5), o.radius, 1e-5);
}

// DQS' known artefact at a bend: the joint bulges outwards (the ring's radius exceeds the rest
// radius somewhere near the elbow) while LBS loses volume there. Both are measured.
TEST(Skinning, BentElbowLbsShrinksDqsDoesNot) {
  LimbOptions o;
  o.rings = 301;
  o.segments = 64;
  const Rig rig = testing::BuildOrDie(MakeLimb(o));
  LimbMotion bend;
  bend.bend_degrees = 120;
  bend.twist_degrees = 0;
  const Pose pose = LimbPose(rig.skeleton, 0.5, bend);
  const double lbs = LimbRingRadius(o, Deformed(rig, "lbs", pose), 1.0);
  const double dqs = LimbRingRadius(o, Deformed(rig, "dqs", pose), 1.0);
  EXPECT_LT(lbs, 0.85 * o.radius);
  EXPECT_GT(dqs, 0.97 * o.radius);
}

TEST(Skinning, DqsRefusesShearedInverseBind) {
  RigInput in = MakeLimb();
  in.rig.skeleton.inverse_bind.assign(3, IdentityAffine());
  in.rig.skeleton.inverse_bind[1](0, 1) = 0.5;  // shear
  auto rig = std::make_shared<const Rig>(testing::BuildOrDie(std::move(in)));
  EXPECT_FALSE(rig->skeleton.inverse_bind_is_similarity);
  const absl::Status refused = CreateDeformer(rig, {"dqs", nullptr}).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  // Which matrix, and why (until 2026-12-07 neither: "this rig's have shear or non-uniform scale",
  // said of a mirror too).
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("this rig's inverse_bind_matrices[1] has shear"));
  EXPECT_TRUE(CreateDeformer(rig, {"lbs", nullptr}).ok());
  RigInput mirrored_in = MakeLimb();
  mirrored_in.rig.skeleton.inverse_bind.assign(3, IdentityAffine());
  mirrored_in.rig.skeleton.inverse_bind[2](0, 0) = -1;  // a mirror
  auto mirrored = std::make_shared<const Rig>(testing::BuildOrDie(std::move(mirrored_in)));
  EXPECT_THAT(std::string(CreateDeformer(mirrored, {"dqs", nullptr}).status().message()),
              ::testing::HasSubstr("inverse_bind_matrices[2] is a reflection"));
}

TEST(Skinning, MethodsNeedWeights) {
  RigInput in = MakeLimb();
  in.weights = {};
  auto rig = std::make_shared<const Rig>(testing::BuildOrDie(std::move(in)));
  auto d = CreateDeformer(rig, {"lbs", nullptr});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(d.status().message()), ::testing::HasSubstr("needs skinning weights"));
}

}  // namespace
}  // namespace sinew

namespace sinew {
namespace {

// n random rest points (coordinates in [-10, 10]) with random weights on `joints` joints: runs of
// four influences, then 1..9.
SkinWeights RandomSkin(int n, int joints, std::mt19937& rng, std::vector<float>& rest) {
  std::uniform_real_distribution<double> u(-1, 1);
  SkinWeights w;
  w.offsets.push_back(0);
  for (int v = 0; v < n; ++v) {
    for (int k = 0; k < 3; ++k) rest.push_back(float(10 * u(rng)));
    const uint32_t m = (v / 50) % 3 == 0 ? 4 : 1 + rng() % 9;
    for (uint32_t k = 0; k < m; ++k) {
      w.joints.push_back(uint16_t(rng() % joints));
      w.weights.push_back(float((u(rng) + 1.2) / m));
    }
    w.offsets.push_back(uint32_t(w.joints.size()));
  }
  return w;
}

// LBS's vectorized kernel (core/lbs/lbs.cc) against the portable loop and against a double
// reference: any influence count (the unrolled four and the others), every vertex of a range
// including its last (stored differently: the next vertex may belong to another thread), ranges
// that start and end anywhere, and a skeleton too large for the kernel (the portable loop then).
TEST(Skinning, LbsKernelEqualsThePortableLoopAndADoubleReference) {
  for (const int joints : {3, 40, 300}) {
    std::mt19937 rng(joints);
    std::uniform_real_distribution<double> u(-1, 1);
    const int n = 2000;
    std::vector<float> rest;
    const SkinWeights w = RandomSkin(n, joints, rng, rest);
    std::vector<Affine34f> t(joints);
    for (Affine34f& m : t) {
      for (int r = 0; r < 3; ++r) {
        for (int c = 0; c < 4; ++c) m(r, c) = float((c == 3 ? 5 : 1) * u(rng));
      }
    }
    std::vector<float> kernel(rest.size(), -7.f), portable(rest.size(), -7.f);
    // Ranges of odd lengths, each written by its own call, last range first: a store past a
    // range's end would clobber the next range's finished first vertex.
    std::vector<size_t> cuts = {0};
    while (cuts.back() < size_t(n)) cuts.push_back(std::min<size_t>(n, cuts.back() + 1 + rng() % 97));
    for (size_t k = cuts.size() - 1; k > 0; --k) {
      LinearBlendSkinningRange(rest, w, t, kernel, cuts[k - 1], cuts[k]);
      LinearBlendSkinningPortableRange(rest, w, t, portable, cuts[k - 1], cuts[k]);
    }
    double worst_portable = 0, worst_exact = 0;
    for (int v = 0; v < n; ++v) {
      for (int r = 0; r < 3; ++r) {
        double exact = 0, scale = 0;
        for (uint32_t e = w.offsets[v]; e < w.offsets[v + 1]; ++e) {
          const Affine34f& m = t[w.joints[e]];
          double row = m(r, 3);
          for (int c = 0; c < 3; ++c) row += double(m(r, c)) * rest[3 * v + c];
          exact += double(w.weights[e]) * row;
          scale += std::abs(double(w.weights[e])) * (std::abs(double(m(r, 3))) + 30);
        }
        const float k = kernel[3 * v + r];
        worst_portable = std::max(worst_portable, std::abs(double(k) - portable[3 * v + r]) / scale);
        worst_exact = std::max(worst_exact, std::abs(double(k) - exact) / scale);
      }
    }
    // Float sums of at most 9 terms of magnitude `scale`: a few units in the last place.
    EXPECT_LT(worst_portable, 1e-6) << joints << " joints";
    EXPECT_LT(worst_exact, 1e-6) << joints << " joints";
  }
}

// The DQS kernel (AVX2 where the CPU has it) against the portable loop and against DQS done in
// double: skeletons below and above the sign table's 64 joints, antipodal joint quaternions,
// scaled joints (each about its own centre), 1..9 influences, ranges of odd lengths written last first (a block of eight
// that stores past its range would clobber the next range's first vertices).
TEST(Skinning, DqsKernelEqualsThePortableLoopAndADoubleReference) {
  for (const int joints : {3, 40, 100}) {
    std::mt19937 rng(joints);
    std::uniform_real_distribution<double> u(-1, 1);
    const int n = 2000;
    std::vector<float> rest;
    const SkinWeights w = RandomSkin(n, joints, rng, rest);
    std::vector<DualQuat> dq(joints);
    std::vector<Eigen::Quaterniond> rot(joints);
    std::vector<Eigen::Vector3d> tr(joints);
    std::vector<double> sc(joints);
    std::vector<Eigen::Vector3d> shift(joints);
    for (int j = 0; j < joints; ++j) {
      Eigen::Quaterniond q(1, 0.6 * u(rng), 0.6 * u(rng), 0.6 * u(rng));
      q.normalize();
      rot[j] = q;
      tr[j] = Eigen::Vector3d(5 * u(rng), 5 * u(rng), 5 * u(rng));
      sc[j] = j % 3 == 0 ? 1.0 + 0.3 * u(rng) : 1.0;
      Affine34d m;
      m.leftCols<3>() = sc[j] * q.toRotationMatrix();
      m.col(3) = tr[j];
      const Eigen::Matrix3Xd centre = Eigen::Vector3d(3 * u(rng), 3 * u(rng), 3 * u(rng));  // each scales about its own
      ToDualQuats(std::span(&m, 1), std::span(&dq[j], 1), centre);
      shift[j] = (1 - sc[j]) * centre.col(0);
      tr[j] -= q * shift[j];  // the rigid part's translation
      if (j % 2) {  // the same motion as the antipodal dual quaternion
        for (float& c : dq[j].v) c = -c;
      }
    }
    std::vector<float> kernel(rest.size(), -7.f), portable(rest.size(), -7.f);
    std::vector<size_t> cuts = {0};
    while (cuts.back() < size_t(n)) cuts.push_back(std::min<size_t>(n, cuts.back() + 1 + rng() % 97));
    for (size_t k = cuts.size() - 1; k > 0; --k) {
      DualQuaternionSkinningRange(rest, w, dq, kernel, cuts[k - 1], cuts[k]);
      DualQuaternionSkinningPortableRange(rest, w, dq, portable, cuts[k - 1], cuts[k]);
    }
    DualQuaternionSkinningRange(rest, w, dq, kernel, 0, n);  // one range: the sign table's path
    double worst_portable = 0, worst_exact = 0;
    for (int v = 0; v < n; ++v) {
      // DQS in double: each influence flipped into its pivot's hemisphere, blended, normalised.
      const uint32_t e0 = w.offsets[v];
      const Eigen::Quaterniond& pivot = rot[w.joints[e0]];
      Eigen::Vector4d real = Eigen::Vector4d::Zero(), dual = Eigen::Vector4d::Zero();
      Eigen::Vector3d h = Eigen::Vector3d::Zero();
      double s = 0;
      for (uint32_t e = e0; e < w.offsets[v + 1]; ++e) {
        const int j = w.joints[e];
        const double wj = pivot.coeffs().dot(rot[j].coeffs()) < 0 ? -w.weights[e] : w.weights[e];
        const Eigen::Quaterniond d = Eigen::Quaterniond(0, tr[j].x(), tr[j].y(), tr[j].z()) * rot[j];
        real += wj * rot[j].coeffs();
        dual += wj * 0.5 * d.coeffs();
        s += w.weights[e] * sc[j];
        h += w.weights[e] * shift[j];
      }
      const double len = real.norm();
      const Eigen::Quaterniond r(real / len), d(dual / len);
      const Eigen::Quaterniond t = Eigen::Quaterniond(2 * d.coeffs()) * r.conjugate();
      const Eigen::Vector3d p(rest[3 * v], rest[3 * v + 1], rest[3 * v + 2]);
      const Eigen::Vector3d exact = r * (s * p + h) + t.vec();
      for (int c = 0; c < 3; ++c) {
        const double k = kernel[3 * v + c];
        worst_portable = std::max(worst_portable, std::abs(k - portable[3 * v + c]) / 30);
        worst_exact = std::max(worst_exact, std::abs(k - exact[c]) / 30);
      }
    }
    // Float arithmetic on positions of size ~30: a few units in the last place.
    EXPECT_LT(worst_portable, 2e-6) << joints << " joints";
    EXPECT_LT(worst_exact, 2e-6) << joints << " joints";
  }
}

}  // namespace
}  // namespace sinew
