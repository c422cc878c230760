// What a preparation takes, refused up front with the field and the limit rather than found out by
// the allocator (an out-of-memory kill takes every session with it) or by the clock (a
// preparation that runs for days holds a thread); and the skeleton updater's parallel joints give
// what the joints give one by one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>


#include "core/cage/cage_deformer.h"
#include "core/cage/mec.h"
#include "core/cage/mvc.h"
#include "core/deformer/deformer.h"
#include "core/implicit/bone_fields.h"
#include "core/implicit/rotation_weights.h"
#include "core/parallel/thread_pool.h"
#include "core/procedural/limb.h"
#include "core/rig/pose.h"
#include "core/supercages/maxvol.h"
#include "core/supercages/supercages.h"
#include "core/swingtwist/method.h"
#include "core/swingtwist/weights.h"
#include "tests/core/test_util.h"

namespace sinew {
namespace {

using ::testing::HasSubstr;

DeformerConfig SuperCages(bool updater) {
  return testing::ConfigWith<SuperCagesParams>("supercages", [&](SuperCagesParams& p) { p.skeleton_updater = updater; });
}

// Ψ, one joint per task on a pool of three (joints in any order), is Ψ computed on the calling
// thread, bit for bit, with the same diagnostics.
TEST(SuperCagesLimits, SkeletonUpdaterWeightsOnAPoolAreThoseComputedAlone) {
  const Rig rig = testing::BuildOrDie(testing::LimbWithCage(40, 12));
  ThreadPool pool(3);
  auto alone = PrepareSuperCages(rig, SuperCages(true), nullptr, {});
  auto pooled = PrepareSuperCages(rig, SuperCages(true), &pool, {});
  ASSERT_TRUE(alone.ok() && pooled.ok()) << alone.status() << pooled.status();
  const auto& a = static_cast<const SuperCagesPrepared&>(**alone);
  const auto& b = static_cast<const SuperCagesPrepared&>(**pooled);
  ASSERT_EQ(a.psi.rows(), Eigen::Index(rig.joint_count()));
  EXPECT_TRUE((a.psi.array() == b.psi.array()).all());
  EXPECT_EQ(a.psi_max_error, b.psi_max_error);
  EXPECT_EQ(a.psi_fallbacks, b.psi_fallbacks);
  // Partition of unity per joint (what the cage updater's Ψ is: coordinates of the joint).
  for (Eigen::Index j = 0; j < a.psi.rows(); ++j) EXPECT_NEAR(a.psi.row(j).sum(), 1.0, 1e-9) << j;
}

// A cage of 1 106 vertices around the limb: a posed-cage frame would factor a dense 3 318²
// system (until 2026-12-02 any cage within the coordinates' 4 GiB was taken).
TEST(SuperCagesLimits, CagesPastTheLimitAreRefusedNamingTheCage) {
  RigInput in = testing::LimbWithCage(20, 8);
  in.rig.cages[0] = testing::LatLongSphere(25, 46, 2.0, Eigen::Vector3d(1.5, 0, 0));
  auto rig = BuildRig(std::move(in));
  ASSERT_TRUE(rig.ok()) << rig.status();
  ASSERT_GT(rig->cages[0].vertex_count(), size_t(kSuperCagesMaxCageVertices));
  auto refused = PrepareSuperCages(*rig, SuperCages(false), nullptr, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("deformer.supercages.cage: cage 0 has 1106 vertices; method supercages takes at most 1024"));
}

// A cage vertex on no triangle (a stray in an exported cage; uploads refuse it since 2026-12-07,
// a rig kept in --state-dir before may hold one) is refused before any work, naming it: its
// coordinate is 0 everywhere, and until 2026-12-03 the cage updater's MaxVol swapped rows of NaN
// for as long as its swap limit allowed (hours on a large mesh, uncancellable). MaxVol itself
// answers a rank-deficient matrix at once.
TEST(SuperCagesLimits, ACageVertexOnNoTriangleIsRefusedAtOnce) {
  RigInput in = testing::LimbWithCage(20, 8);
  const size_t stray = in.rig.cages[0].positions.size() / 3;
  in.rig.cages[0].positions.insert(in.rig.cages[0].positions.end(), {0.5f, 0.f, 0.f});
  auto rig = BuildRig(std::move(in));
  ASSERT_TRUE(rig.ok()) << rig.status();
  auto refused = PrepareSuperCages(*rig, SuperCages(false), nullptr, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("rig.cages[0].positions: vertex " + std::to_string(stray) + " is on no triangle"));
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> a = Eigen::MatrixXd::Random(400, 12);
  a.col(5).setZero();
  const MaxVolResult r = MaxVol(a);
  EXPECT_FALSE(std::isfinite(r.log_abs_det));
  EXPECT_EQ(r.swaps, 0);
  // Fewer rows than columns has no square submatrix: rank-deficient too, with no rows to index
  // (until 2026-12-07 log |det| read 0, a full-rank answer with an empty selection).
  const MaxVolResult few = MaxVol(a.topRows(5));
  EXPECT_EQ(few.log_abs_det, -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(few.rows.empty());
}

// The cage updater's row search stops when asked (a cancelled preparation): each swap is O(m c),
// a large mesh's thousands of them minutes that, until 2026-12-07, no cancel could end.
TEST(SuperCagesLimits, TheRowSearchStopsWhenAsked) {
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> a = Eigen::MatrixXd::Random(2000, 40);
  const MaxVolResult whole = MaxVol(a, 0);
  ASSERT_GT(whole.swaps, 2) << "the control needs a search of several swaps";
  EXPECT_FALSE(whole.stopped);
  int asked = 0;
  const MaxVolResult stopped = MaxVol(a, 0, 100000, [&] { return ++asked > 2; });
  EXPECT_TRUE(stopped.stopped);
  EXPECT_EQ(stopped.swaps, 2);
  // Through the preparation: a cancel that comes once the coordinates are done ends it there.
  auto rig = BuildRig(testing::LimbWithCage(20, 8));
  ASSERT_TRUE(rig.ok()) << rig.status();
  int at_rows = 0;
  auto cancelled = PrepareSuperCages(*rig, SuperCages(false), nullptr, [&](double f) { return f < 0.9 || ++at_rows < 2; });
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled) << cancelled.status();
  EXPECT_EQ(at_rows, 2);
}

// A joint no vertex blends around (here the limb's joint 2, its weights given to joint 1) has no
// localisation, so its skeleton-updater row comes from the plain masses (the joint's MVC on the
// skin carried to the cage), not from all-zero masses, which the entropy projection reads as
// uniform ones: the whole cage (until 2026-12-03, the control below).
TEST(SuperCagesUpdater, AJointNoVertexBlendsAroundTakesThePlainMasses) {
  RigInput in = testing::LimbWithCage(20, 8);
  for (uint32_t& j : in.weights.joints) j = j == 2 ? 1 : j;
  auto rig = BuildRig(std::move(in));
  ASSERT_TRUE(rig.ok()) << rig.status();
  ASSERT_GE(rig->joint_count(), 3u);
  for (uint16_t j : rig->weights.joints) ASSERT_NE(j, 2);
  auto prepared = PrepareSuperCages(*rig, SuperCages(true), nullptr, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const auto& p = static_cast<const SuperCagesPrepared&>(**prepared);
  const Eigen::Vector3d a = p.rest_joints.col(2);
  CageGeometry skin;
  skin.vertices = ToPoints(rig->positions);
  skin.triangles.resize(3, Eigen::Index(rig->triangle_count()));
  for (size_t t = 0; t < rig->triangle_count(); ++t) {
    for (int k = 0; k < 3; ++k) skin.triangles(k, Eigen::Index(t)) = rig->triangles[3 * t + k];
  }
  std::vector<double> mvc(rig->vertex_count());
  MeanValueCoordinates(skin, a, mvc);
  const Eigen::RowVectorXd plain = Eigen::Map<const Eigen::RowVectorXd>(mvc.data(), Eigen::Index(mvc.size()));
  const Eigen::VectorXd masses = (plain * p.phi).transpose();
  const MecResult expected = MaximumEntropyCoordinates(p.rest_cage.vertices, masses, a);
  const MecResult whole = MaximumEntropyCoordinates(p.rest_cage.vertices, Eigen::VectorXd::Zero(masses.size()), a);
  ASSERT_TRUE(expected.converged && whole.converged);
  const double off = (p.psi.row(2).transpose() - expected.weights).cwiseAbs().maxCoeff();
  const double control = (whole.weights - expected.weights).cwiseAbs().maxCoeff();
  std::printf("unblended joint's row: %.1e from the plain masses' (the whole cage's is %.3f away)\n", off, control);
  EXPECT_LE(off, 1e-9);
  EXPECT_GE(control, 0.01);
}

// A mesh flattened onto a plane through its cage (a cloth, a wing, a card in a box) does not
// determine the cage: mirror cage vertices get near-equal columns of Φ, and Φ̃, though its
// determinant is finite, gives the rest cage back far off (until 2026-12-07 the posed cage at
// rest came out 0.6–0.97 of the box away, and edits of it missed by as much). The preparation
// measures it; the posed cage and its edits are refused naming the number, while frames by
// pose and rest cage still deform (the same limb, not flattened, serves all of it).
TEST(SuperCagesUpdater, AMeshThatDoesNotDetermineItsCageRefusesThePosedCageOnly) {
  for (bool flat : {false, true}) {
    SCOPED_TRACE(flat ? "flattened" : "round");
    RigInput in = testing::LimbWithCage(10, 8);
    if (flat) {
      // Onto the plane 0.3 of the way across the mesh along its second-longest extent.
      Eigen::Map<Eigen::Matrix3Xf> v(in.rig.positions.data(), 3, Eigen::Index(in.rig.positions.size() / 3));
      const Eigen::Vector3f lo = v.rowwise().minCoeff(), hi = v.rowwise().maxCoeff();
      const Eigen::Vector3f extent = hi - lo;
      Eigen::Index longest = 0;
      extent.maxCoeff(&longest);
      const Eigen::Index across = longest == 1 ? 2 : 1;
      v.row(across).setConstant(lo[across] + 0.3f * extent[across]);
    }
    auto rig = std::make_shared<const Rig>(testing::BuildOrDie(std::move(in)));
    auto prepared = PrepareSuperCages(*rig, SuperCages(true), nullptr, {});
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    const auto& p = static_cast<const SuperCagesPrepared&>(**prepared);
    std::printf("%s: cage updater at rest %.1e of the diagonal\n", flat ? "flattened" : "round", p.cage_updater_error);
    auto deformer = FindMethod("supercages")->create(rig, *prepared, SuperCages(true));
    ASSERT_TRUE(deformer.ok()) << deformer.status();
    Pose pose = RestPose(rig->skeleton);
    pose.set_rotation(1, Eigen::Quaterniond(Eigen::AngleAxisd(0.5, Eigen::Vector3d::UnitY())));
    std::vector<float> out(rig->positions.size()), posed_cage;
    ASSERT_TRUE((*deformer)->Deform({&pose, {}}, out, nullptr).ok());
    const auto offers = (*deformer)->Offers({.posed_cage = &posed_cage});  // before a frame, as the server asks
    const auto extras = (*deformer)->Extras({.posed_cage = &posed_cage});
    const std::vector<float> edit(rig->cages[0].positions.size(), 0.01f);
    const CageFrame request{0, CageInputMode::kOffsets, edit};
    const auto edited = (*deformer)->Deform({nullptr, {}, &request}, out, nullptr);
    if (!flat) {
      EXPECT_LE(p.cage_updater_error, 1e-9);
      EXPECT_TRUE(offers.ok()) << offers;
      EXPECT_TRUE(extras.ok()) << extras;
      EXPECT_TRUE(edited.ok()) << edited;
      continue;
    }
    EXPECT_GT(p.cage_updater_error, 1e-3);
    for (const absl::Status& st : {offers, extras, edited}) {
      EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
      EXPECT_THAT(std::string(st.message()), HasSubstr("does not determine its cage"));
    }
    EXPECT_THAT(std::string(extras.message()), HasSubstr("outputs.posed_cage"));
    // A pose after the refusals still deforms.
    EXPECT_TRUE((*deformer)->Deform({&pose, {}}, out, nullptr).ok());
  }
}

// The limb `o` inside a closed lat-long sphere of 992 vertices (cage 0) around it.
Rig LimbInASphereCage(const LimbOptions& o) {
  RigInput in = MakeLimb(o);
  in.rig.cages.push_back(testing::LatLongSphere(23, 45, 2.0 * o.length, Eigen::Vector3d(o.length / 2, 0, 0)));
  Rig rig = testing::BuildOrDie(std::move(in));
  EXPECT_EQ(rig.cages[0].vertex_count(), 992u);
  return rig;
}

// 112 000 vertices in a cage of 992: Φ is 0.9 GB, within the cage methods' 4 GiB, but choosing the
// cage updater's rows holds four more copies of it; refused before any is computed.
TEST(SuperCagesLimits, CoordinatesWhoseCopiesPassTheBudgetAreRefused) {
  LimbOptions o;
  o.rings = 1400;
  o.segments = 80;
  const Rig rig = LimbInASphereCage(o);
  ASSERT_EQ(rig.vertex_count(), 112000u);
  auto refused = PrepareSuperCages(rig, SuperCages(false), nullptr, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("the coordinates of 112000 vertices in cage 0's 992 vertices, with the copies"));
}

// 15 500 joints and a cage of 992 vertices: the skeleton updater's G would keep 1.1 GB in every
// session; refused before Φ is computed, naming both counts; without the updater the same rig is
// past the check.
TEST(SuperCagesLimits, JointsTimesCageVerticesPastTheUpdatersBudgetAreRefused) {
  LimbOptions o;
  o.rings = 200;
  o.segments = 8;
  o.bones = 15500;
  const Rig rig = LimbInASphereCage(o);
  auto refused = PrepareSuperCages(rig, SuperCages(true), nullptr, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("deformer.supercages.skeleton_updater: 15500 joints x 992 cage vertices"));
  // Without the updater the check is passed: the preparation is stopped at its first progress
  // report instead (Φ alone is still seconds here).
  auto stopped = PrepareSuperCages(rig, SuperCages(false), nullptr, [](double) { return false; });
  EXPECT_NE(stopped.status().code(), absl::StatusCode::kResourceExhausted) << stopped.status();
}

// 2 000 joints along a limb voxelized at 0.02: about 70 000 grid vertices, so the weights' solve
// would keep three dense 2 000 × 70 000 matrices (3.4 GB); refused before any of it, naming the
// voxel size.
TEST(SwingTwistLimits, JointsTimesGridVerticesPastTheLimitAreRefusedNamingTheVoxelSize) {
  LimbOptions o;
  o.rings = 200;
  o.segments = 16;
  o.bones = 2000;
  auto rig = BuildRig(MakeLimb(o));
  ASSERT_TRUE(rig.ok()) << rig.status();
  const DeformerConfig config =
      testing::ConfigWith<SwingTwistParams>("swing-twist", [](SwingTwistParams& p) { p.voxel_size = 0.02; });
  const MethodInfo* method = FindMethod("swing-twist");
  ASSERT_NE(method, nullptr);
  auto refused = method->prepare(*rig, config, nullptr, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("elasticity weights: 2000 joints x "));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("(voxel size 0.02)"));
}

// Bones owning 8 vertices or more, counted before any field is fitted (each a fit and a 512 KB
// grid; until 2026-12-02 up to 65 535 were, 34 GB): past BoneFieldOptions::max_fields (4 096 by
// default, here 2 of the limb's 3) refused naming both counts; at the limit fitted as before.
TEST(ImplicitLimits, BoneFieldsPastTheLimitAreRefusedBeforeAnyIsFitted) {
  const Rig rig = testing::SmallLimb(2, 3);
  BoneFieldOptions two;
  two.max_fields = 2;
  auto refused = FitBoneFields(rig, two);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("3 bones own 8 vertices or more; at most 2 bone fields (512 KB each)"));
  BoneFieldOptions three;
  three.max_fields = 3;
  auto fitted = FitBoneFields(rig, three);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_EQ(fitted->size(), 3u);
  EXPECT_EQ(BoneFieldOptions().max_fields, 4096u);
}

// Harmonic rotation weights weigh every bone at every node and solve once per bone: 600 000
// nodes and a thousand weighted bones are refused before any of it, naming both counts.
TEST(ImplicitLimits, BoneHeatWeightsPastTheirBudgetAreRefusedBeforeTheWork) {
  LimbOptions o;
  o.rings = 1000;
  o.segments = 8;
  o.bones = 1000;
  auto rig = BuildRig(MakeLimb(o));
  ASSERT_TRUE(rig.ok()) << rig.status();
  const std::vector<float> rest(3 * 600'000, 0.f);  // as many nodes (only counted before the refusal)
  auto refused = BoneHeatWeights(*rig, rest, {}, {}, {}, {}, 1.0);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("harmonic weights for 600000 nodes x 1000 weighted bones; at most 500000000"));
}

}  // namespace
}  // namespace sinew
