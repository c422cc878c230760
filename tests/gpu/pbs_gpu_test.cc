// Position-based skinning on the GPU backend (gpu/pbs/) against core's CPU deformer. Every test
// runs on CUDA devices (skipped, with the reason, where there is none) and on the CPU emulation
// of a device, which runs the device program's own frame. Properties:
// - without jiggle a frame equals the CPU's within the CPU's own sensitivity to a 1e-5 rad turn
//   (the recovery passes' inside-out test is discontinuous), or 1e-5 of the diagonal;
// - with jiggle and gravity (state on the device between frames) 40 frames of a swing and stop,
//   a reset and the swing again stay within 1e-4 of the CPU's, and the replay after the reset
//   equals the first run bit for bit;
// - sessions batched together (two pbs sessions and an LBS one) get exactly what they get alone;
// - a session's state read from the device while frames are queued is the state after them, and
//   restores into another session bit for bit;
// - the model and each session's particles are counted against the device's memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>

#include "core/deformer/deformer.h"
#include "core/deformer/skeletal.h"
#include "core/pbs/pbs.h"
#include "gpu/backend.h"
#include "tests/core/test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace sinew::gpu {
namespace {

using V3 = Eigen::Vector3d;

class PbsGpu : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    auto b = Make(GetParam());
    if (!b.ok()) GTEST_SKIP() << "no GPU: " << b.status().message();
    backend_ = std::move(*b);
  }
  std::unique_ptr<GpuBackend> backend_;
};
INSTANTIATE_TEST_SUITE_P(Backends, PbsGpu, ::testing::Values(Kind::kCuda, Kind::kEmulated),
                         [](const auto& info) { return Name(info.param); });

// The elbow cylinder with its far third (x > 4.5) painted to jiggle.
std::shared_ptr<const Rig> PaintedElbow() {
  RigInput in = testing::ElbowCylinder();
  std::vector<float> alpha(in.rig.positions.size() / 3);
  for (size_t v = 0; v < alpha.size(); ++v) alpha[v] = in.rig.positions[3 * v] > 4.5f ? 1.f : 0.f;
  in.rig.attributes.push_back({"pbs_jiggle", 1, alpha});
  return std::make_shared<const Rig>(testing::BuildOrDie(std::move(in)));
}

DeformerConfig Config(bool jiggle, double gravity = 0) {
  auto p = std::make_shared<PbsParams>();
  p->tets = PbsParams::Tets::kVoxels;
  p->voxel_size = 1.0 / 3;
  p->weights = PbsParams::Weights::kPaper;
  p->jiggle = jiggle;
  p->gravity = gravity;
  return DeformerConfig("pbs", p);
}

// The elbow at `degrees` about z.
Pose Elbow(const Rig& rig, double degrees) {
  Pose pose = RestPose(rig.skeleton);
  pose.set_rotation(1, Eigen::Quaterniond(Eigen::AngleAxisd(degrees * std::numbers::pi / 180, V3::UnitZ())));
  return pose;
}

// One session on the CPU (core's deformer) and its twin on the device.
struct Pair {
  std::shared_ptr<const Rig> rig;
  std::unique_ptr<Deformer> cpu, stage;  // `stage` computes the device frames' parameters
  std::unique_ptr<GpuSession> gpu;
  std::vector<float> params;

  Pair(GpuBackend& backend, std::shared_ptr<const Rig> r, std::shared_ptr<const Prepared> model,
       const DeformerConfig& config, std::shared_ptr<GpuRig> on_gpu, std::shared_ptr<GpuModel> dev_model)
      : rig(std::move(r)) {
    cpu = *CreatePbsDeformer(rig, model, config);
    stage = *CreatePbsDeformer(rig, model, config);
    stage->RunsOnDevice();
    EXPECT_EQ(stage->device_stage().kernel, "pbs");
    SessionSpec spec;
    spec.method = GpuMethod::kPbs;
    spec.model = std::move(dev_model);
    spec.params = config.params;
    auto s = backend.CreateSession(std::move(on_gpu), spec);
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) gpu = std::move(*s);
  }
  std::vector<float> Cpu(const Pose& pose) {
    std::vector<float> out(rig->positions.size());
    EXPECT_TRUE(cpu->Deform({&pose, {}}, out, nullptr).ok());
    return out;
  }
  void Submit(GpuBackend& backend, const Pose& pose, std::vector<float>& out, Latch& latch) {
    out.assign(rig->positions.size(), 0.f);
    ASSERT_TRUE(stage->DeviceFrame({&pose, {}}, params).ok());
    backend.Submit(*gpu, params, out.data(), OutputFormat::kFloat32, &Latch::Done, &latch);
  }
  std::vector<float> Gpu(GpuBackend& backend, const Pose& pose) {
    std::vector<float> out;
    Latch latch;
    Submit(backend, pose, out, latch);
    latch.Wait();
    EXPECT_TRUE(latch.status.ok()) << latch.status;
    return out;
  }
};

struct Uploaded {
  std::shared_ptr<const Prepared> model;
  std::shared_ptr<GpuRig> on_gpu;
  std::shared_ptr<GpuModel> dev_model;
};
Uploaded Upload(GpuBackend& backend, const Rig& rig, const DeformerConfig& config) {
  Uploaded u;
  auto p = PreparePbs(rig, config, nullptr, {});
  EXPECT_TRUE(p.ok()) << p.status();
  u.model = *p;
  u.on_gpu = *backend.Upload(rig);
  auto m = backend.UploadModel(u.on_gpu, GpuMethod::kPbs, *u.model);
  EXPECT_TRUE(m.ok()) << m.status();
  u.dev_model = *m;
  return u;
}

// The recovery passes decide per tet whether it is inside out, a discontinuous decision that float
// rounding can flip (the device sums in its own order), so the device must agree with the CPU as
// closely as the CPU agrees with itself at the pose turned by 1e-5 rad more, or within 1e-5 of the
// diagonal where the CPU is not that sensitive.
TEST_P(PbsGpu, WithoutJiggleAFrameEqualsTheCpuWithinItsOwnSensitivity) {
  auto rig = PaintedElbow();
  const DeformerConfig config = Config(false);
  const Uploaded u = Upload(*backend_, *rig, config);
  Pair p(*backend_, rig, u.model, config, u.on_gpu, u.dev_model);
  const double diag = rig->bbox_diagonal();
  for (double degrees : {0.0, 45.0, 90.0, 120.0, 30.0}) {
    const Pose pose = Elbow(*rig, degrees);
    const std::vector<float> want = p.Cpu(pose), got = p.Gpu(*backend_, pose);
    const std::vector<float> nearby = p.Cpu(Elbow(*rig, degrees + 1e-5 * 180 / std::numbers::pi));
    ASSERT_EQ(got.size(), want.size());
    const double diff = testing::MaxAbsDiff(got, want), sensitivity = testing::MaxAbsDiff(nearby, want);
    std::printf("%s, %3.0f°: device − CPU %.2e, CPU at 1e-5 rad more %.2e (diagonal %.2f)\n", Name(GetParam()).c_str(),
                degrees, diff, sensitivity, diag);
    EXPECT_LE(diff, std::max(1e-5 * diag, 2 * sensitivity)) << degrees << "°";
  }
}

// A device program's frames are never shed (FrameOutput::shed_after): its state goes on from
// each. A jiggling frame submitted long past its shed time runs, and the session's frames go on
// equal to the CPU's (within the jiggle test's bound).
TEST_P(PbsGpu, ADeviceProgramsFramesAreNeverShed) {
  auto rig = PaintedElbow();
  const DeformerConfig config = Config(true, 30);
  const Uploaded u = Upload(*backend_, *rig, config);
  Pair p(*backend_, rig, u.model, config, u.on_gpu, u.dev_model);
  const double diag = rig->bbox_diagonal();
  for (int k = 0; k < 3; ++k) {
    const Pose pose = Elbow(*rig, 30.0 * (k + 1));
    std::vector<float> got(rig->positions.size(), -7.f);
    ASSERT_TRUE(p.stage->DeviceFrame({&pose, {}}, p.params).ok());
    FrameOutput output;
    output.positions = got.data();
    output.shed_after = std::chrono::steady_clock::now() - std::chrono::hours(1);
    Latch latch;
    backend_->Submit(*p.gpu, p.params, output, &Latch::Done, &latch);
    latch.Wait();
    ASSERT_TRUE(latch.status.ok()) << "frame " << k << ": " << latch.status;
    const std::vector<float> want = p.Cpu(pose);
    EXPECT_LE(testing::MaxAbsDiff(got, want), 1e-4 * diag) << "frame " << k;
  }
}

TEST_P(PbsGpu, JiggleStateStaysOnTheDeviceAndReplaysAfterReset) {
  auto rig = PaintedElbow();
  const DeformerConfig config = Config(true, 30);
  const Uploaded u = Upload(*backend_, *rig, config);
  Pair p(*backend_, rig, u.model, config, u.on_gpu, u.dev_model);
  const double diag = rig->bbox_diagonal();
  auto swing = [&](int k) { return Elbow(*rig, 6.0 * std::min(k, 9)); };
  std::vector<std::vector<float>> first;
  double worst = 0, moved_after_stop = 0;
  for (int k = 0; k < 40; ++k) {
    const std::vector<float> want = p.Cpu(swing(k)), got = p.Gpu(*backend_, swing(k));
    worst = std::max(worst, testing::MaxAbsDiff(got, want));
    if (k >= 11 && k <= 13) moved_after_stop = std::max(moved_after_stop, testing::MaxAbsDiff(got, first.back()));
    first.push_back(got);
  }
  std::printf("%s: 40 jiggle frames, device − CPU at most %.2e (diagonal %.2f); after the stop the painted part moves "
              "%.3f per frame\n",
              Name(GetParam()).c_str(), worst, diag, moved_after_stop);
  EXPECT_LE(worst, 1e-4 * diag);
  EXPECT_GT(moved_after_stop, 1e-3);  // the state is carried: a stateless frame would not move
  p.stage->Reset();
  for (int k = 0; k < 40; ++k) ASSERT_EQ(p.Gpu(*backend_, swing(k)), first[k]) << "frame " << k << " after reset";
}

// A session's state read while its frames are still queued is the state after all of them (the
// read waits for them): restored into a second session, the next frames are bit for bit the
// first session's; the bytes are the CPU deformer's format, and a wrong size is refused.
TEST_P(PbsGpu, StateIsReadAfterTheQueuedFramesAndRestoresBitForBit) {
  auto rig = PaintedElbow();
  const DeformerConfig config = Config(true, 30);
  const Uploaded u = Upload(*backend_, *rig, config);
  Pair a(*backend_, rig, u.model, config, u.on_gpu, u.dev_model), b(*backend_, rig, u.model, config, u.on_gpu, u.dev_model);
  auto swing = [&](int k) { return Elbow(*rig, 6.0 * std::min(k, 9)); };
  std::vector<std::vector<float>> outs(12);
  Latch latch;
  latch.remaining = 12;
  for (int k = 0; k < 12; ++k) a.Submit(*backend_, swing(k), outs[k], latch);  // not waited for
  auto resident = backend_->ReadState(*a.gpu);
  ASSERT_TRUE(resident.ok()) << resident.status();
  latch.Wait();
  ASSERT_TRUE(latch.status.ok()) << latch.status;
  auto bytes = a.stage->SaveDeviceState(*resident);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  // The CPU twin after the same 12 frames saves the same layout: restorable on the CPU too.
  for (int k = 0; k < 12; ++k) a.Cpu(swing(k));
  auto on_cpu = a.cpu->SaveState();
  ASSERT_TRUE(on_cpu.ok());
  EXPECT_EQ(on_cpu->size(), bytes->size());
  auto target = backend_->ReadState(*b.gpu);
  ASSERT_TRUE(target.ok());
  ASSERT_TRUE(b.stage->LoadDeviceState(*bytes, *target).ok());
  ASSERT_TRUE(backend_->WriteState(*b.gpu, *target).ok());
  EXPECT_FALSE(backend_->WriteState(*b.gpu, std::span<const float>(target->data(), target->size() - 1)).ok());
  for (int k = 12; k < 30; ++k) {
    ASSERT_EQ(a.Gpu(*backend_, swing(k)), b.Gpu(*backend_, swing(k))) << "frame " << k;
  }
}

TEST_P(PbsGpu, SessionsShareBatchesAndGetWhatTheyGetAlone) {
  GpuOptions options;
  options.batch_window = std::chrono::milliseconds(20);
  auto backend = *Make(GetParam(), options);
  auto rig = PaintedElbow();
  const DeformerConfig configs[2] = {Config(false), Config(true, 10)};
  const Uploaded u = Upload(*backend, *rig, configs[0]);
  auto pose_of = [&](int s, int k) { return Elbow(*rig, s == 0 ? 20.0 * k : 70.0 - 15 * k); };
  std::vector<std::vector<float>> alone[2];
  for (int s = 0; s < 2; ++s) {
    Pair p(*backend, rig, u.model, configs[s], u.on_gpu, u.dev_model);
    for (int k = 0; k < 4; ++k) alone[s].push_back(p.Gpu(*backend, pose_of(s, k)));
  }
  std::vector<std::unique_ptr<Pair>> pairs;
  for (int s = 0; s < 2; ++s) pairs.push_back(std::make_unique<Pair>(*backend, rig, u.model, configs[s], u.on_gpu, u.dev_model));
  auto lbs = *backend->CreateSession(u.on_gpu, GpuMethod::kLbs);
  std::vector<Similarity> world(rig->joint_count());
  std::vector<Affine34d> transforms(rig->joint_count());
  std::vector<float> lbs_params(12 * rig->joint_count()), lbs_out(rig->positions.size());
  const Pose lbs_pose = Elbow(*rig, 75);
  ASSERT_TRUE(SkeletalJointData(*rig, JointData::kMatrix, {&lbs_pose, {}}, world, transforms, lbs_params).ok());
  Latch latch;
  latch.remaining = 2 * 4 + 1;
  std::vector<std::vector<float>> out[2];
  for (int s = 0; s < 2; ++s) out[s].resize(4);
  for (int k = 0; k < 4; ++k) {
    for (int s = 0; s < 2; ++s) pairs[s]->Submit(*backend, pose_of(s, k), out[s][k], latch);
    if (k == 1) backend->Submit(*lbs, lbs_params, lbs_out.data(), OutputFormat::kFloat32, &Latch::Done, &latch);
  }
  latch.Wait();
  ASSERT_TRUE(latch.status.ok()) << latch.status;
  for (int s = 0; s < 2; ++s) {
    for (int k = 0; k < 4; ++k) EXPECT_EQ(out[s][k], alone[s][k]) << "session " << s << " frame " << k;
  }
  auto cpu_lbs = CreateDeformer(rig, {"lbs", nullptr});
  std::vector<float> want_lbs(rig->positions.size());
  ASSERT_TRUE((*cpu_lbs)->Deform({&lbs_pose, {}}, want_lbs, nullptr).ok());
  EXPECT_LE(testing::MaxAbsDiff(lbs_out, want_lbs), 1e-5 * rig->bbox_diagonal());
}

TEST_P(PbsGpu, ModelAndParticlesAreCountedAgainstTheDevice) {
  auto rig = PaintedElbow();
  const DeformerConfig config = Config(true);
  const uint64_t before = backend_->Devices()[0].used_bytes;
  {
    const Uploaded u = Upload(*backend_, *rig, config);
    const uint64_t with_model = backend_->Devices()[0].used_bytes;
    EXPECT_GT(with_model, before);
    {
      Pair p(*backend_, rig, u.model, config, u.on_gpu, u.dev_model);
      const auto& m = static_cast<const PbsModel&>(*u.model);
      // At least its positions and velocities.
      EXPECT_GE(backend_->Devices()[0].used_bytes - with_model, 24 * m.mesh.rest.size());
    }
    EXPECT_EQ(backend_->Devices()[0].used_bytes, with_model);
  }
  EXPECT_EQ(backend_->Devices()[0].used_bytes, before);
}

}  // namespace
}  // namespace sinew::gpu
