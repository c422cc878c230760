// The LBS/DQS blend: its two ends are LBS and DQS, it is the per-vertex linear mix of the two in
// between, the per-vertex weights come from the rig's "dqs_blend" attribute, and bad weights are
// refused naming the vertex or the field. (Rest pose, rigid motion, antipodal quaternions,
// threading and allocation are in skinning_test.cc, shared with LBS and DQS.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/blend/blend.h"
#include "core/deformer/deformer.h"
#include "core/procedural/limb.h"
#include "tests/core/test_util.h"

namespace sinew {
namespace {

using testing::MaxAbsDiff;

RigInput LimbInput(std::vector<float> blend = {}) {
  LimbOptions o;
  o.rings = 80;
  o.segments = 24;
  o.bones = 3;
  o.max_influences = 3;
  RigInput in = MakeLimb(o);
  if (!blend.empty()) in.rig.attributes.push_back({std::string(kBlendAttribute), 1, std::move(blend)});
  return in;
}

std::shared_ptr<const Rig> Limb(std::vector<float> blend = {}) {
  return std::make_shared<const Rig>(testing::BuildOrDie(LimbInput(std::move(blend))));
}

size_t LimbVertices() { return Limb()->vertex_count(); }

// A pose that both bends and twists, so that LBS and DQS differ everywhere along the limb.
Pose BentAndTwisted(const Skeleton& sk) {
  Pose p = LimbPose(sk, 0.8);
  for (size_t j = 1; j < sk.size(); ++j) {
    const Eigen::Quaterniond q = p.joint(j).rotation * Eigen::Quaterniond(Eigen::AngleAxisd(1.1, Eigen::Vector3d::UnitY()));
    testing::SetRotation(p, j, q);
  }
  return p;
}

std::vector<float> Skin(std::shared_ptr<const Rig> rig, const DeformerConfig& config, const Pose& pose) {
  auto d = CreateDeformer(rig, config);
  EXPECT_TRUE(d.ok()) << d.status();
  if (!d.ok()) return {};
  std::vector<float> out(rig->positions.size());
  EXPECT_TRUE((*d)->Deform({&pose, {}}, out, nullptr).ok());
  return out;
}

DeformerConfig Blend(std::optional<double> weight) {
  auto p = std::make_shared<BlendParams>();
  p->weight = weight;
  return {"blend", p};
}

TEST(Blend, WeightZeroIsLbsAndOneIsDqs) {
  auto rig = Limb();
  const Pose pose = BentAndTwisted(rig->skeleton);
  const auto lbs = Skin(rig, DeformerConfig{"lbs", nullptr}, pose), dqs = Skin(rig, DeformerConfig{"dqs", nullptr}, pose);
  ASSERT_GT(MaxAbsDiff(lbs, dqs), 0.05);  // the pose separates the two
  EXPECT_EQ(Skin(rig, Blend(0.0), pose), lbs);
  EXPECT_LE(MaxAbsDiff(Skin(rig, Blend(1.0), pose), dqs), 1e-6);
}

// Between the ends every vertex moves on the straight segment from its LBS to its DQS position,
// at the fraction its weight gives.
TEST(Blend, IsTheLinearMixOfLbsAndDqs) {
  auto rig = Limb();
  const Pose pose = BentAndTwisted(rig->skeleton);
  const auto lbs = Skin(rig, DeformerConfig{"lbs", nullptr}, pose), dqs = Skin(rig, DeformerConfig{"dqs", nullptr}, pose);
  for (double b : {0.25, 0.5, 0.9}) {
    const auto got = Skin(rig, Blend(b), pose);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - (lbs[i] + b * (dqs[i] - lbs[i]))));
    EXPECT_LE(worst, 1e-5) << b;
  }
}

// Vertex weights from the rig: vertices painted 0 follow LBS, vertices painted 1 follow DQS, and
// a session weight overrides the painting.
TEST(Blend, PerVertexWeightsComeFromTheRigAttribute) {
  const size_t n = LimbVertices();
  std::vector<float> paint(n);
  for (size_t v = 0; v < n; ++v) paint[v] = v % 3 == 0 ? 1.0f : 0.0f;
  auto rig = Limb(paint);
  const Pose pose = BentAndTwisted(rig->skeleton);
  const auto lbs = Skin(rig, DeformerConfig{"lbs", nullptr}, pose), dqs = Skin(rig, DeformerConfig{"dqs", nullptr}, pose);
  const auto got = Skin(rig, Blend(std::nullopt), pose);
  for (size_t v = 0; v < n; ++v) {
    const auto& want = paint[v] == 1 ? dqs : lbs;
    for (int k = 0; k < 3; ++k) ASSERT_NEAR(got[3 * v + k], want[3 * v + k], 1e-5) << v;
  }
  EXPECT_EQ(Skin(rig, Blend(0.0), pose), lbs);
}

TEST(Blend, RefusesMissingOrBadWeights) {
  auto plain = Limb();
  auto st = CreateDeformer(plain, Blend(std::nullopt)).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("\"dqs_blend\""));

  // A weight outside [0, 1] is refused when the rig is built (at upload, issue 17).
  std::vector<float> paint(LimbVertices(), 0.5f);
  paint[17] = 1.5f;
  st = BuildRig(LimbInput(paint)).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("(dqs_blend).values[17]: 1.5"));

  ParamSet set;
  set.Set("weight", ParamValue::Number(-0.1));
  auto parsed = ParseDeformerConfig(*FindMethod("blend"), set, "deformer.blend");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()), ::testing::HasSubstr("deformer.blend.weight"));
}

TEST(Blend, DeviceStageCarriesTheWeightsAndBothJointBlocks) {
  auto rig = Limb();
  auto d = CreateDeformer(rig, Blend(0.25));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->device_stage().kernel, "blend");
  std::vector<float> coeffs;
  uint32_t cols = 0;
  (*d)->DeviceCoefficients(coeffs, cols);
  EXPECT_EQ(cols, 1u);
  EXPECT_EQ(coeffs, std::vector<float>(rig->vertex_count(), 0.25f));
  EXPECT_EQ((*d)->device_param_count(), 24 * rig->joint_count());
}

// Weights that differ as floats name different device copies (a GPU rig keeps one per key):
// until 2026-12-07 the key held six digits, and 0.5000001 and 0.5000004 shared one buffer.
TEST(Blend, WeightsThatDifferAsFloatsHaveTheirOwnDeviceCopy) {
  auto rig = Limb();
  auto a = CreateDeformer(rig, Blend(0.5000001)), b = CreateDeformer(rig, Blend(0.5000004));
  auto c = CreateDeformer(rig, Blend(0.5000001000000001));  // the same float: may share
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_NE(float(0.5000001), float(0.5000004));
  EXPECT_NE((*a)->device_stage().device_data_key, (*b)->device_stage().device_data_key);
  EXPECT_EQ((*a)->device_stage().device_data_key, (*c)->device_stage().device_data_key);
}

}  // namespace
}  // namespace sinew
