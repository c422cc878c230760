// Clip sampling (core/clip/clip.h): what a pose between, at and past keys is, measured on the
// sampled transforms against the keys themselves.
#include "core/clip/clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

namespace sinew {
namespace {

constexpr double kPi = std::numbers::pi;

// Two joints; joint 1's rest transform is what an empty channel leaves.
Skeleton TwoJoints() {
  Skeleton sk;
  sk.names = {"root", "child"};
  sk.parents = {-1, 0};
  Similarity rest;
  sk.rest_local = {rest, rest};
  sk.rest_local[1].translation = Eigen::Vector3d(0, 2, 0);
  sk.rest_local[1].rotation = Eigen::Quaterniond(Eigen::AngleAxisd(0.3, Eigen::Vector3d::UnitX()));
  sk.rest_local[1].scale = 1.5;
  sk.order = {0, 1};
  return sk;
}

Eigen::Quaterniond About(double radians, const Eigen::Vector3d& axis) {
  return Eigen::Quaterniond(Eigen::AngleAxisd(radians, axis.normalized()));
}

// Keys given as q and as −q for the same rotations: the sampled pose between them turns along
// the short arc, half way at the middle, either way (a blend of raw components through the
// other hemisphere would pass near 180°).
TEST(Clip, RotationsTakeTheShortArcWhicheverSignTheKeysHave) {
  const Skeleton sk = TwoJoints();
  const Eigen::Vector3d axis(1, 2, 0.5);
  const Eigen::Quaterniond a = About(0.2, axis), b = About(1.0, axis);
  for (bool flip : {false, true}) {
    Clip clip;
    clip.duration = 2;
    clip.tracks.resize(1);
    clip.tracks[0].rotation_times = {0, 2};
    Eigen::Quaterniond b_key = b;
    if (flip) b_key.coeffs() = -b.coeffs();
    clip.tracks[0].rotations = {a, b_key};
    ASSERT_TRUE(ValidateClip(clip, sk.size()).ok());
    Pose pose;
    for (double t : {0.5, 1.0, 1.5}) {
      SampleClip(clip, sk, t, pose);
      const Eigen::Quaterniond q = pose.joint(0).rotation;
      const double expect = 0.2 + 0.8 * t / 2;
      EXPECT_NEAR(q.angularDistance(About(expect, axis)), 0, 1e-5) << "t " << t << (flip ? " (−q key)" : "");
    }
  }
}

// Keys 179° apart: a quarter of the way is 44.75° from the first, the middle 89.5° from each (no
// blow-up near the antipode; a normalised linear blend would be some 8° off at the quarter).
TEST(Clip, KeysNearlyOppositeInterpolateEvenly) {
  const Skeleton sk = TwoJoints();
  Clip clip;
  clip.duration = 1;
  clip.tracks.resize(1);
  clip.tracks[0].rotation_times = {0, 1};
  const Eigen::Vector3d z = Eigen::Vector3d::UnitZ();
  clip.tracks[0].rotations = {About(0, z), About(179.0 * kPi / 180, z)};
  Pose pose;
  SampleClip(clip, sk, 0.5, pose);
  const Eigen::Quaterniond q = pose.joint(0).rotation;
  EXPECT_NEAR(q.angularDistance(clip.tracks[0].rotations[0]) * 180 / kPi, 89.5, 1e-4);
  EXPECT_NEAR(q.angularDistance(clip.tracks[0].rotations[1]) * 180 / kPi, 89.5, 1e-4);
  SampleClip(clip, sk, 0.25, pose);
  EXPECT_NEAR(pose.joint(0).rotation.angularDistance(clip.tracks[0].rotations[0]) * 180 / kPi, 44.75, 1e-4);
}

// Translation and scale are linear between keys; at a key, the key; before the first and at or
// past the last (times clamped to [0, duration]), the end values; a one-key channel holds its
// key; an empty channel, and a joint without a track, the rest transform.
TEST(Clip, KeysEndsOneKeyChannelsAndEmptyChannels) {
  const Skeleton sk = TwoJoints();
  Clip clip;
  clip.duration = 3;
  clip.tracks.resize(1);
  JointTrack& t = clip.tracks[0];
  t.translation_times = {0.5, 1.5, 2.5};
  t.translations = {Eigen::Vector3d(0, 0, 0), Eigen::Vector3d(2, 4, -2), Eigen::Vector3d(3, 4, -2)};
  t.scale_times = {1};
  t.scales = {2};
  ASSERT_TRUE(ValidateClip(clip, sk.size()).ok());
  Pose pose;
  struct Want {
    double time;
    Eigen::Vector3d translation;
  };
  for (const Want& w : {Want{-1, {0, 0, 0}}, Want{0, {0, 0, 0}}, Want{0.5, {0, 0, 0}}, Want{1.0, {1, 2, -1}},
                        Want{1.5, {2, 4, -2}}, Want{2.0, {2.5, 4, -2}}, Want{2.5, {3, 4, -2}},
                        Want{3.0, {3, 4, -2}}, Want{10, {3, 4, -2}}}) {
    SampleClip(clip, sk, w.time, pose);
    const Similarity j0 = pose.joint(0), j1 = pose.joint(1);
    EXPECT_LT((j0.translation - w.translation).norm(), 1e-6) << "t " << w.time;
    EXPECT_NEAR(j0.scale, 2, 1e-6) << "t " << w.time;                                   // one key: held
    EXPECT_NEAR(j0.rotation.angularDistance(sk.rest_local[0].rotation), 0, 1e-6);        // empty channel: rest
    EXPECT_LT((j1.translation - sk.rest_local[1].translation).norm(), 1e-6);             // no track: rest
    EXPECT_NEAR(j1.rotation.angularDistance(sk.rest_local[1].rotation), 0, 1e-6);
    EXPECT_NEAR(j1.scale, sk.rest_local[1].scale, 1e-6);
  }
}

// A NaN time samples the first key (clip and cage clip): until 2026-12-07 it passed both end
// tests and read one key past the last.
TEST(Clip, ANanTimeSamplesTheFirstKey) {
  const Skeleton sk = TwoJoints();
  Clip clip;
  clip.duration = 1;
  clip.tracks.resize(1);
  clip.tracks[0].translation_times = {0, 1};
  clip.tracks[0].translations = {Eigen::Vector3d(1, 2, 3), Eigen::Vector3d(4, 5, 6)};
  ASSERT_TRUE(ValidateClip(clip, sk.size()).ok());
  Pose pose;
  SampleClip(clip, sk, std::numeric_limits<double>::quiet_NaN(), pose);
  EXPECT_TRUE(ValidatePose(pose, sk.size()).ok());
  EXPECT_LT((pose.joint(0).translation - Eigen::Vector3d(1, 2, 3)).norm(), 1e-6);
  CageClip cages;
  cages.times = {0, 1};
  cages.offsets = {{1, 2, 3}, {4, 5, 6}};
  std::vector<float> offsets;
  SampleCageClip(cages, std::numeric_limits<double>::quiet_NaN(), offsets);
  EXPECT_EQ(offsets, (std::vector<float>{1, 2, 3}));
}

// Keys are checked as the sampled pose holds them, in floats: a translation of 1e39 (finite as a
// double) and a scale of 1e-50 (0 as a float) are refused by name, so that a clip that passes
// samples only valid poses (tests/fuzz/clip_fuzz.cc's invariant; until 2026-12-07 they passed).
TEST(Clip, KeysAreCheckedAsThePoseHoldsThem) {
  Clip clip;
  clip.duration = 1;
  clip.tracks.resize(1);
  clip.tracks[0].translation_times = {0};
  clip.tracks[0].translations = {Eigen::Vector3d(1e39, 0, 0)};
  auto st = ValidateClip(clip, 2);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("clip.tracks[0].translations[0]: not finite as a float"), std::string::npos) << st;
  clip.tracks[0].translations = {Eigen::Vector3d(3e38, 0, 0)};  // below float's 3.4e38
  EXPECT_TRUE(ValidateClip(clip, 2).ok());
  clip.tracks[0].scale_times = {0};
  clip.tracks[0].scales = {1e-50};
  st = ValidateClip(clip, 2);
  EXPECT_NE(st.message().find("clip.tracks[0].scales[0]"), std::string::npos) << st;
}

TEST(Clip, FrameCountOfAnEmptyClipIsOneAtAnyRate) {
  Clip clip;
  EXPECT_EQ(ClipFrameCount(clip, std::numeric_limits<double>::infinity()), 1u);
  EXPECT_EQ(ClipFrameCount(clip, 30), 1u);
  clip.duration = 1;
  EXPECT_EQ(ClipFrameCount(clip, 30), 31u);
}

}  // namespace
}  // namespace sinew
