// Pipelines (core/deformer/pipeline.h): a chain of stages equals the method it decomposes
// (dual quaternion skinning then implicit correction is implicit skinning), one stage equals its
// method, each stage sees only the inputs its method reads, extras come from the stage that has
// them, and a badly built pipeline is refused naming the stage.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/deformer/deformer.h"
#include "core/deformer/pipeline.h"
#include "core/procedural/limb.h"
#include "core/util/state_bytes.h"
#include "tests/core/test_util.h"

namespace sinew {
namespace {

using ::testing::HasSubstr;

DeformerConfig Chain(std::initializer_list<const char*> methods) {
  DeformerConfig c;
  for (const char* m : methods) c.stages.push_back({m, nullptr});
  return c;
}

std::vector<float> Frame(Deformer& d, const Rig& rig, const FrameInput& in, ThreadPool* pool,
                       std::vector<uint8_t>* states = nullptr) {
  std::vector<float> out(rig.positions.size());
  const absl::Status st = d.Deform(in, out, pool);
  EXPECT_TRUE(st.ok()) << st;
  if (states) {
    EXPECT_TRUE(d.Extras({.vertex_states = states}).ok());
  }
  return out;
}

// DQS → implicit is METHOD_IMPLICIT, bit for bit (implicit skinning starts from the same DQS),
// vertex states included.
TEST(Pipeline, DqsThenImplicitEqualsImplicitSkinning) {
  ThreadPool pool(2);
  auto rig = std::make_shared<const Rig>(testing::BuildOrDie(MakeLimb(testing::TwoBoneLimb())));
  auto chain = CreateDeformer(rig, Chain({"dqs", "implicit"}), &pool);
  ASSERT_TRUE(chain.ok()) << chain.status();
  auto implicit = CreateDeformer(rig, {"implicit", nullptr}, &pool);
  ASSERT_TRUE(implicit.ok());
  for (double bend : {0.0, 60.0, 120.0}) {
    const Pose pose = LimbPose(rig->skeleton, 0.5, LimbMotion{.bend_degrees = bend, .twist_degrees = 20});
    std::vector<uint8_t> a, b;
    const auto got = Frame(**chain, *rig, {&pose, {}}, &pool, &a);
    const auto want = Frame(**implicit, *rig, {&pose, {}}, &pool, &b);
    EXPECT_EQ(got, want) << bend;
    EXPECT_EQ(a, b) << bend;
  }
  // The chain has no single device kernel: it runs on the CPU.
  EXPECT_TRUE((*chain)->device_stage().kernel.empty());
}

TEST(Pipeline, OneStageEqualsItsMethod) {
  auto rig = std::make_shared<const Rig>(testing::SmallLimb(3, 4));
  const Pose pose = LimbPose(rig->skeleton, 0.7);
  for (const char* m : {"lbs", "dqs"}) {
    auto one = CreateDeformer(rig, Chain({m}));
    auto plain = CreateDeformer(rig, {m, nullptr});
    ASSERT_TRUE(one.ok() && plain.ok());
    EXPECT_EQ(Frame(**one, *rig, {&pose, {}}, nullptr), Frame(**plain, *rig, {&pose, {}}, nullptr)) << m;
    EXPECT_EQ((*one)->device_stage().kernel, m);
    EXPECT_EQ((*one)->device_param_count(), (*plain)->device_param_count());
  }
}

// A rest-space follower skins what the stage before it made, as if it were the rest mesh: LBS
// after LBS at the rest pose is the first LBS; after a posed LBS it applies its transforms again.
TEST(Pipeline, RestFollowerSkinsThePreviousPositions) {
  auto rig = std::make_shared<const Rig>(testing::SmallLimb(2, 3));
  const Pose rest = RestPose(rig->skeleton);
  auto chain = CreateDeformer(rig, Chain({"lbs", "lbs", "lbs"}));
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_LE(testing::MaxAbsDiff(Frame(**chain, *rig, {&rest, {}}, nullptr), rig->positions), 1e-6);
  // A rigid motion G of the whole limb applied by each of three stages is G³.
  Pose moved = rest;
  const Eigen::Quaterniond g(Eigen::AngleAxisd(0.3, Eigen::Vector3d::UnitZ()));
  Similarity root = rig->skeleton.rest_local[0];
  root.rotation = g * root.rotation;
  root.translation = g * root.translation;
  moved.set_joint(0, root);
  const auto got = Frame(**chain, *rig, {&moved, {}}, nullptr);
  const Eigen::Quaterniond g3 = g * g * g;
  double worst = 0;
  for (size_t v = 0; v < rig->vertex_count(); ++v) {
    const Eigen::Vector3d p(rig->positions[3 * v], rig->positions[3 * v + 1], rig->positions[3 * v + 2]);
    const Eigen::Vector3d want = g3 * p;
    for (int k = 0; k < 3; ++k) worst = std::max(worst, std::abs(got[3 * v + k] - want[k]));
  }
  EXPECT_LE(worst, 1e-5);
}

TEST(Pipeline, BadPipelinesAreRefusedNamingTheStage) {
  auto rig = std::make_shared<const Rig>(testing::SmallLimb());
  auto st = CreateDeformer(rig, Chain({"lbs", "cage-mvc"})).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("deformer.stages[1]: method cage-mvc deforms the rig's rest mesh"));
  st = CreateDeformer(rig, Chain({"dqs", "elastic-implicit"})).status();
  EXPECT_THAT(std::string(st.message()), HasSubstr("deformer.stages[1]: method elastic-implicit"));
  DeformerConfig nested = Chain({"lbs"});
  nested.stages[0].stages.push_back({"lbs", nullptr});
  EXPECT_THAT(std::string(CreateDeformer(rig, nested).status().message()),
              HasSubstr("deformer.stages[0].stages: stages do not nest"));
  EXPECT_THAT(std::string(CreateDeformer(rig, Chain({"lbs", "nope"})).status().message()),
              HasSubstr("deformer.stages[1].method: \"nope\""));
  DeformerConfig nine;
  for (int k = 0; k < 9; ++k) nine.stages.push_back({"lbs", nullptr});
  EXPECT_THAT(std::string(CreateDeformer(rig, nine).status().message()), HasSubstr("1 to 8 stages, not 9"));
  // A stage that cannot be created on this rig says which, with the stage's field in it.
  EXPECT_THAT(std::string(CreateDeformer(rig, Chain({"cage-mvc", "lbs"})).status().message()),
              HasSubstr("deformer.stages[0].cage.cage: method cage-mvc uses cage 0"));
}

TEST(Pipeline, FramesGiveEachStageItsOwnInputs) {
  auto rig = std::make_shared<const Rig>(testing::SmallLimb());
  auto chain = CreateDeformer(rig, Chain({"lbs", "dqs"}));
  ASSERT_TRUE(chain.ok());
  std::vector<float> out(rig->positions.size());
  const Pose pose = RestPose(rig->skeleton);
  const CageFrame cage{0, CageInputMode::kAbsolute, {0, 0, 0}};
  auto st = (*chain)->Deform({&pose, std::span(&cage, 1)}, out, nullptr);
  EXPECT_THAT(std::string(st.message()), HasSubstr("cages: no stage of this pipeline takes cage input"));
  st = (*chain)->Deform({nullptr, {}}, out, nullptr);
  EXPECT_THAT(std::string(st.message()), HasSubstr("stage 0 (lbs): pose: required"));
  Pose bad = pose;
  bad.rotations[3] = 3;
  st = (*chain)->Deform({&bad, {}}, out, nullptr);
  EXPECT_THAT(std::string(st.message()), HasSubstr("stage 0 (lbs): pose.rotations[0]"));
  std::vector<uint8_t> states;
  EXPECT_THAT(std::string((*chain)->Extras({.vertex_states = &states}).message()),
              HasSubstr("outputs.vertex_states: no stage of this pipeline has it"));
}

// A stateful pipeline's snapshot holds each stage's own: restored into a new pipeline of the same
// stages, the frames after it are the original's bits; another pipeline's bytes, damaged bytes
// and a stage's refusal leave it as it was, the refusal naming the stage. (Until 2026-12-04
// pipelines answered UNIMPLEMENTED.)
TEST(Pipeline, SnapshotsCarryEachStagesStateBitForBit) {
  ThreadPool pool(2);
  auto rig = std::make_shared<const Rig>(testing::BuildOrDie(MakeLimb(testing::TwoBoneLimb())));
  auto make = [&](DeformerConfig c) {
    auto d = CreateDeformer(rig, c, &pool);
    EXPECT_TRUE(d.ok()) << d.status();
    return std::move(*d);
  };
  const DeformerConfig config = Chain({"elastic-implicit", "lbs"});
  ASSERT_TRUE(PipelineStateful(config));
  auto original = make(config), restored = make(config), one = make(Chain({"elastic-implicit"}));
  auto pose = [&](double bend) { return LimbPose(rig->skeleton, 0.5, LimbMotion{.bend_degrees = bend, .twist_degrees = bend / 3}); };
  for (double bend : {20.0, 40.0, 60.0}) {
    const Pose p = pose(bend);
    Frame(*original, *rig, {&p, {}}, &pool);
    Frame(*one, *rig, {&p, {}}, &pool);
  }
  const auto saved = original->SaveState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  const auto before = restored->SaveState();
  ASSERT_TRUE(before.ok()) << before.status();
  const auto single = one->SaveState();
  ASSERT_TRUE(single.ok()) << single.status();
  const absl::Status other = restored->LoadState(*single);
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument) << other;
  EXPECT_THAT(std::string(other.message()), HasSubstr("saved by a pipeline of 1 stages; this one has 2"));
  std::string damaged = *saved;
  damaged[damaged.size() / 2] ^= 1;
  EXPECT_EQ(restored->LoadState(damaged).code(), absl::StatusCode::kDataLoss);
  // Stage 0's bytes not its own, the whole checksummed as a client could.
  std::string refused_bytes("pipeline-state\x01", 15);
  auto put = [&](const void* p, size_t n) { refused_bytes.append(static_cast<const char*>(p), n); };
  const uint64_t stages = 2, nonsense_size = 8, none = 0;
  const uint8_t has = 1, hasnt = 0;  // lbs keeps no state
  put(&stages, 8);
  put(&has, 1);
  put(&nonsense_size, 8);
  refused_bytes += "nonsense";
  put(&hasnt, 1);
  put(&none, 8);
  const uint64_t sum = Fnv1a64(refused_bytes);
  put(&sum, 8);
  const absl::Status stage = restored->LoadState(refused_bytes);
  EXPECT_EQ(stage.code(), absl::StatusCode::kInvalidArgument) << stage;
  EXPECT_THAT(std::string(stage.message()), HasSubstr("stage 0 (elastic-implicit): state: not an elastic-implicit"));
  // No state for the stateful stage (until 2026-12-07 taken, the stage keeping the target's own).
  std::string without("pipeline-state\x01", 15);
  auto put_without = [&](const void* p, size_t n) { without.append(static_cast<const char*>(p), n); };
  put_without(&stages, 8);
  for (int k = 0; k < 2; ++k) {
    put_without(&hasnt, 1);
    put_without(&none, 8);
  }
  const uint64_t without_sum = Fnv1a64(without);
  put_without(&without_sum, 8);
  const absl::Status missing = restored->LoadState(without);
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument) << missing;
  EXPECT_THAT(std::string(missing.message()), HasSubstr("stage 0 (elastic-implicit): state: holds no state for this stage"));
  EXPECT_EQ(*restored->SaveState(), *before);
  ASSERT_TRUE(restored->LoadState(*saved).ok());
  for (double bend : {90.0, 120.0}) {
    const Pose p = pose(bend);
    ASSERT_EQ(Frame(*restored, *rig, {&p, {}}, &pool), Frame(*original, *rig, {&p, {}}, &pool)) << bend;
  }
}

TEST(Pipeline, StatefulWhenAStageIs) {
  EXPECT_FALSE(PipelineStateful(Chain({"lbs", "implicit"})));
  EXPECT_TRUE(PipelineStateful(Chain({"supercages", "implicit"})));
  EXPECT_TRUE(PipelineStateful({"elastic-implicit", nullptr}));
  EXPECT_FALSE(PipelineStateful({"dqs", nullptr}));
}

}  // namespace
}  // namespace sinew
