// The requests `sinew play` streams for an asset's clip (client::ClipRequests).

#include <gtest/gtest.h>

#include <numbers>

#include "clients/lib/client.h"
#include "core/procedural/limb.h"

namespace sinew::client {
namespace {

// Each frame carries the clip's time step, 1 / its rate (within the server's [1e-6, 60] s), so
// that a method with dynamics steps by the clip's time as a DeformClip batch of it does (until
// 2026-12-07 none was sent: pbs stepped by its own 10 ms, a jiggle clip played at 30 frames/s
// moved 3.3 times slower than its bake); and the pose at f / rate.
TEST(ClipRequests, EachFrameStepsByTheClipsTimeAndHoldsItsPose) {
  const Rig limb = [] {
    auto r = BuildRig(MakeLimb());
    EXPECT_TRUE(r.ok()) << r.status();
    return std::move(*r);
  }();
  Clip clip;
  clip.name = "bend";
  clip.duration = 1;
  clip.tracks.resize(limb.joint_count());
  JointTrack& elbow = clip.tracks[1];
  elbow.rotation_times = {0, 1};
  elbow.rotations = {Eigen::Quaterniond::Identity(),
                     Eigen::Quaterniond(Eigen::AngleAxisd(std::numbers::pi / 2, Eigen::Vector3d::UnitY()))};
  for (double fps : {30.0, 1e6, 1.0 / 60}) {
    const auto requests = ClipRequests(clip, nullptr, limb.skeleton, fps, 4);
    ASSERT_EQ(requests.size(), 4u);
    for (const auto& r : requests) {
      EXPECT_GE(r.time_step(), 1e-6) << fps;
      EXPECT_LE(r.time_step(), 60.0) << fps;
      if (fps == 30.0) EXPECT_DOUBLE_EQ(r.time_step(), 1.0 / 30);
    }
  }
  const auto requests = ClipRequests(clip, nullptr, limb.skeleton, 2.0, 3);  // t = 0, 0.5, 1
  Pose at_half;
  SampleClip(clip, limb.skeleton, 0.5, at_half);
  v1::Pose expected;
  PoseToProto(at_half, expected);
  EXPECT_EQ(requests[1].pose().SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(requests[1].cages_size(), 0);
}

}  // namespace
}  // namespace sinew::client
