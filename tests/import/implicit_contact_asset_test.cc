// Implicit skinning's contact on a character nobody here made (issue 15): the SuperCages Arm
// (../shared/data/supercages-arm; 2,089 vertices, its elbow between upperarm02.R and
// lowerarm01.R) bent at the elbow beyond its clip, in the plane of its bones, to 90°, 120° and
// 150°. Crossing of the bend's bisector and vertices inside the skin as on the cylinders
// (tests/core/contact_measure.h), over the arm's radius at the elbow; DQS beside them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "clients/import/supercages.h"
#include "core/deformer/deformer.h"
#include "core/implicit/implicit_params.h"
#include "core/implicit/implicit_skinning.h"
#include "core/procedural/bend.h"
#include "tests/core/contact_measure.h"

namespace sinew {
namespace {

const std::string kArmDir = std::string(SINEW_SHARED_DATA) + "/supercages-arm";

int32_t JointNamed(const Skeleton& sk, const std::string& name) {
  for (size_t j = 0; j < sk.size(); ++j) {
    if (sk.names[j] == name) return int32_t(j);
  }
  return -1;
}

DeformerConfig Config(const std::string& method) {
  DeformerConfig c;
  c.method = method;
  c.params = std::make_shared<ImplicitConfig>();
  return c;
}

TEST(ImplicitContactArm, ElbowBentTo150KeepsTheElasticMethodsGainsOverDqs) {
  if (!std::filesystem::exists(kArmDir + "/arm.obj")) GTEST_SKIP() << "Arm data not found in " << kArmDir;
  auto sc = ReadSuperCages(SuperCagesFilesIn(kArmDir, "arm"));
  ASSERT_TRUE(sc.ok()) << sc.status();
  auto built = BuildRig(sc->rig);
  ASSERT_TRUE(built.ok()) << built.status();
  auto rig = std::make_shared<const Rig>(std::move(*built));
  const Skeleton& sk = rig->skeleton;
  const int32_t elbow = JointNamed(sk, "lowerarm01.R"), wrist = JointNamed(sk, "wrist.R");
  ASSERT_GE(elbow, 0);
  ASSERT_GE(wrist, 0);
  ThreadPool pool(2);
  auto prepared = PrepareImplicit(*rig, Config("implicit"), &pool, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  auto below_elbow = [&](uint32_t j) {
    for (int32_t k = int32_t(j); k >= 0; k = sk.parents[k]) {
      if (k == elbow) return true;
    }
    return false;
  };
  const std::vector<double> child = testing::ChildWeight(*rig, below_elbow);
  // The arm's radius at the elbow: the median distance from the upper arm's axis of the skin
  // mostly its own (the forearm's weight below ½; the Arm's blend reaches far up) over the last
  // two thirds before the elbow.
  auto rest = BendJoint(sk, uint32_t(elbow), uint32_t(wrist), 0);
  ASSERT_TRUE(rest.ok()) << rest.status();
  const Eigen::Vector3d shoulder = BindPose(sk).joint(size_t(sk.parents[elbow])).translation;
  const double upper = (rest->pivot - shoulder).norm();
  std::vector<double> radii;
  for (size_t v = 0; v < rig->vertex_count(); ++v) {
    if (child[v] >= 0.5) continue;
    const Eigen::Vector3d x(rig->positions[3 * v], rig->positions[3 * v + 1], rig->positions[3 * v + 2]);
    const double along = (x - shoulder).dot(rest->parent_dir);
    if (along < upper / 3 || along > upper) continue;
    radii.push_back((x - shoulder - along * rest->parent_dir).norm());
  }
  ASSERT_GT(radii.size(), 20u) << "upper arm " << upper;
  std::nth_element(radii.begin(), radii.begin() + radii.size() / 2, radii.end());
  const double radius = radii[radii.size() / 2];
  std::printf("Arm: %zu vertices, elbow at rest %.0f°, radius there %.2f\n", rig->vertex_count(), rest->rest_degrees,
              radius);

  auto run = [&](const std::string& method, const Pose& pose, Deformer* d) {
    std::vector<float> out(rig->positions.size());
    FrameInput in;
    in.pose = &pose;
    EXPECT_TRUE(d->Deform(in, out, &pool).ok());
    return out;
  };
  auto make = [&](const std::string& method) {
    if (method == "dqs") {
      DeformerConfig c;
      c.method = "dqs";
      return std::move(*CreateDeformer(rig, c, &pool));
    }
    return std::move(*CreateImplicitDeformer(rig, *prepared, Config(method)));
  };
  for (double deg : {90.0, 120.0, 150.0}) {
    auto bent = BendJoint(sk, uint32_t(elbow), uint32_t(wrist), deg);
    ASSERT_TRUE(bent.ok()) << bent.status();
    auto measure = [&](std::span<const float> out) {
      testing::ContactSkin s = testing::MeasureContact(*rig, out, bent->pivot, bent->parent_dir, bent->child_dir, child);
      s.crossing /= radius;
      s.depth /= radius;
      return s;
    };
    const auto dqs = measure(run("dqs", bent->pose, make("dqs").get()));
    const auto is = measure(run("implicit", bent->pose, make("implicit").get()));
    // The elastic method from the rest pose in 10° steps of the elbow, and in one jump.
    auto eis = make("elastic-implicit");
    std::vector<float> out;
    const int steps = int(std::ceil((deg - rest->rest_degrees) / 10));
    for (int k = 1; k <= steps; ++k) {
      auto p = BendJoint(sk, uint32_t(elbow), uint32_t(wrist), rest->rest_degrees + (deg - rest->rest_degrees) * k / steps);
      out = run("elastic-implicit", p->pose, eis.get());
    }
    const auto eis_steps = measure(out);
    const auto eis_jump = measure(run("elastic-implicit", bent->pose, make("elastic-implicit").get()));
    for (const auto& [name, s] : {std::pair{"dqs", dqs}, {"implicit", is}, {"elastic, 10° steps", eis_steps},
                                  {"elastic, one jump", eis_jump}}) {
      std::printf("Arm elbow %3.0f°  %-19s crossing %.3f R, inside %3u, deepest %.3f R\n", deg, name, s.crossing,
                  s.inside, s.depth);
    }
    // What holds today (measured: the elastic method crosses by 0, 0 and 0.18 R in steps, 0,
    // 0.001 and 0.20 R in one jump, with 1, 8 and 13 vertices inside — every one at the elbow's
    // crease; DQS 0.02, 0.33 and 0.62 R with 0, 27 and 74). Issue 15's bounds (0.05 R, none
    // inside at 90°) are not met on this arm yet: these guard the gains.
    if (deg >= 120) {
      EXPECT_GT(dqs.crossing, 0.3) << deg << "°: the measure must see DQS's fold";
      EXPECT_LE(eis_steps.crossing, dqs.crossing / 3) << deg;
      EXPECT_LE(eis_jump.crossing, dqs.crossing / 3) << deg;
      EXPECT_LE(eis_steps.inside, dqs.inside / 2) << deg;
      EXPECT_LE(eis_jump.inside, dqs.inside / 2) << deg;
    }
    if (deg <= 120) {
      EXPECT_LE(eis_steps.crossing, 0.05) << deg;
      EXPECT_LE(eis_jump.crossing, 0.05) << deg;
    }
    if (deg == 90) {
      EXPECT_LE(eis_steps.inside, 1u);
      EXPECT_LE(is.crossing, 0.05);
    }
  }
}

}  // namespace
}  // namespace sinew
