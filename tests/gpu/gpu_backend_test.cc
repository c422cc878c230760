// The GPU backend against the CPU deformers. Every test runs twice: on CUDA devices (skipped,
// with the reason, where there is none) and on the CPU emulation of a device, which runs the
// kernels' own per-vertex code, so batching, memory accounting and placement are tested on
// every machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "core/deformer/deformer.h"
#include "core/deformer/skeletal.h"
#include "core/dqs/dqs.h"
#include "core/normals/normals.h"
#include "core/baseline/baseline.h"
#include "core/procedural/limb.h"
#include "core/procedural/point_bar.h"
#include "core/swingtwist/method.h"
#include "core/util/half.h"
#include "gpu/backend.h"
#include "tests/gpu/gpu_test_util.h"

namespace sinew::gpu {
namespace {

std::shared_ptr<const Rig> Limb(uint32_t vertices, uint32_t bones, uint32_t influences) {
  LimbOptions o;
  o.segments = 100;
  o.rings = vertices / 100;
  o.bones = bones;
  o.max_influences = influences;
  auto rig = BuildRig(MakeLimb(o));
  EXPECT_TRUE(rig.ok()) << rig.status();
  return std::make_shared<const Rig>(std::move(*rig));
}

// The per-joint frame data of `method` ("lbs": matrices, "dqs": dual quaternions).
std::vector<float> FrameJointData(const Rig& rig, const std::string& method, const Pose& pose) {
  std::vector<Similarity> world(rig.joint_count());
  std::vector<Affine34d> transforms(rig.joint_count());
  std::vector<float> data(kJointFloats * rig.joint_count());
  const JointData kind = method == "dqs" ? JointData::kDualQuat : JointData::kMatrix;
  EXPECT_TRUE(SkeletalJointData(rig, kind, {&pose, {}}, world, transforms, data).ok());
  return data;
}

std::vector<float> Cpu(std::shared_ptr<const Rig> rig, const std::string& method, const Pose& pose) {
  auto d = CreateDeformer(rig, {method, nullptr});
  std::vector<float> out(rig->positions.size());
  EXPECT_TRUE((*d)->Deform({&pose, {}}, out, nullptr).ok());
  return out;
}

// The largest difference; infinite where either side is not finite (an unwritten NaN output).
double MaxDiff(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a[i]) - b[i]);
    m = std::isfinite(d) ? std::max(m, d) : HUGE_VAL;
    if (!std::isfinite(d)) break;
  }
  return m;
}

class GpuBackendTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    auto b = Make(GetParam());
    if (!b.ok()) GTEST_SKIP() << "no GPU: " << b.status().message();
  }
};
INSTANTIATE_TEST_SUITE_P(Backends, GpuBackendTest, ::testing::Values(Kind::kCuda, Kind::kEmulated),
                         [](const auto& info) { return Name(info.param); });

// Every kernel equals its CPU version within 1e-5 of the bounding-box diagonal.
TEST_P(GpuBackendTest, KernelsEqualCpuDeformers) {
  auto backend = *Make(GetParam());
  for (auto [vertices, bones, influences] : {std::tuple{20000u, 3u, 2u}, std::tuple{100000u, 8u, 4u}}) {
    auto rig = Limb(vertices, bones, influences);
    auto on_gpu = backend->Upload(*rig);
    ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
    for (auto [method, gm] : {std::pair{std::string("lbs"), GpuMethod::kLbs}, std::pair{std::string("dqs"), GpuMethod::kDqs}}) {
      auto session = backend->CreateSession(*on_gpu, gm);
      ASSERT_TRUE(session.ok()) << session.status();
      for (double t : {0.0, 0.3, 0.5}) {
        Pose pose = LimbPose(rig->skeleton, t);
        if (t == 0.5) {  // joints scaled apart: each scales about its own rest centre (the DQS shift)
          pose.scales.assign(rig->joint_count(), 1.f);
          pose.scales[1] = 1.3f;
          pose.scales[2] = 0.8f;
        }
        const auto joints = FrameJointData(*rig, method, pose);
        std::vector<float> out(rig->positions.size());
        Latch latch;
        backend->Submit(**session, joints, out.data(), OutputFormat::kFloat32, &Latch::Done, &latch);
        latch.Wait();
        ASSERT_TRUE(latch.status.ok()) << latch.status;
        EXPECT_LE(MaxDiff(out, Cpu(rig, method, pose)), 1e-5 * rig->bbox_diagonal())
            << vertices << " vertices, t " << t << (method == "lbs" ? " LBS" : " DQS");
      }
    }
  }
}

// The hemisphere flip by the sign bit, as core: two joints turned 180° about axes at right angles
// have real parts whose dot is exactly −0 (exact zeros), which core flips (std::copysign, the AVX2
// sign mask) and the device did not (until 2026-12-07: vertices between them ended on the other
// side, (−2.2, 0.14, −0.48) for (2.2, 0.5, 0)).
TEST_P(GpuBackendTest, DqsFlipsAMinusZeroDotAsTheCpuDoes) {
  auto backend = *Make(GetParam());
  auto rig = Limb(2000, 2, 2);
  std::vector<DualQuat> joints(rig->joint_count());
  for (DualQuat& q : joints) q = DualQuat{{0, 0, 0, 1, 0, 0, 0, 0}, 1, {0, 0, 0}};
  joints[0] = DualQuat{{1, 0, 0, 0, 0, 0, 0, 0}, 1, {0, 0, 0}};            // 180° about x
  joints[1] = DualQuat{{-0.f, -0.6f, -0.8f, -0.f, 0, 0, 0, 0}, 1, {0, 0, 0}};  // 180° about (0, −0.6, −0.8)
  std::vector<float> want(rig->positions.size());
  DualQuaternionSkinning(rig->positions, rig->weights, joints, want, nullptr);
  std::vector<float> data(kJointFloats * joints.size());
  for (size_t j = 0; j < joints.size(); ++j) {
    std::copy(joints[j].v, joints[j].v + 8, &data[kJointFloats * j]);
    data[kJointFloats * j + 8] = joints[j].scale;
    std::copy(joints[j].shift, joints[j].shift + 3, &data[kJointFloats * j + 9]);
  }
  auto on_gpu = backend->Upload(*rig);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  auto session = backend->CreateSession(*on_gpu, GpuMethod::kDqs);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<float> out(rig->positions.size());
  Latch latch;
  backend->Submit(**session, data, out.data(), OutputFormat::kFloat32, &Latch::Done, &latch);
  latch.Wait();
  ASSERT_TRUE(latch.status.ok()) << latch.status;
  EXPECT_LE(MaxDiff(out, want), 1e-5 * rig->bbox_diagonal());
}

// A deformer's device stage set up as the server sets it up (Service::CreateGpuSession): its
// kernel by name, its per-vertex coefficients uploaded once, one session.
struct StageOnDevice {
  GpuMethod kernel;
  uint32_t cols = 0;
  std::shared_ptr<GpuRig> on_gpu;
  SessionSpec spec;
  std::unique_ptr<GpuSession> session;
};
absl::StatusOr<StageOnDevice> UploadStage(GpuBackend& backend, const Rig& rig, const Deformer& d) {
  StageOnDevice s;
  auto kernel = KernelByName(d.device_stage().kernel);
  if (!kernel.ok()) return kernel.status();
  s.kernel = *kernel;
  std::vector<float> values;
  d.DeviceCoefficients(values, s.cols);
  if (values.size() != size_t{s.cols} * rig.vertex_count()) return absl::InternalError("coefficients: not one row per vertex");
  auto on_gpu = backend.Upload(rig);
  if (!on_gpu.ok()) return on_gpu.status();
  s.on_gpu = *on_gpu;
  auto coeffs = backend.UploadCoefficients(*s.on_gpu, values, s.cols);
  if (!coeffs.ok()) return coeffs.status();
  s.spec.method = s.kernel;
  s.spec.coefficients = *coeffs;
  s.spec.with_rest = d.device_stage().with_rest;  // as the server sets it (CreateGpuSession)
  s.spec.frame_floats = uint32_t(d.device_param_count());
  auto session = backend.CreateSession(s.on_gpu, s.spec);
  if (!session.ok()) return session.status();
  s.session = std::move(*session);
  return s;
}
// One frame through the device (NaN where the kernel wrote nothing) and the CPU's for comparison.
absl::Status DeviceAndCpu(GpuBackend& backend, StageOnDevice& s, Deformer& d, const Pose& pose, std::vector<float>& out,
                          std::vector<float>& want) {
  std::vector<float> params;
  if (auto st = d.DeviceFrame({&pose, {}}, params); !st.ok()) return st;
  out.assign(want.size(), std::nanf(""));
  Latch latch;
  backend.Submit(*s.session, params, out.data(), OutputFormat::kFloat32, &Latch::Done, &latch);
  latch.Wait();
  if (!latch.status.ok()) return latch.status;
  return d.Deform({&pose, {}}, want, nullptr);
}

// Green coordinates far from the origin keep their rest point on the device: the stage is the rest
// position plus [φ ψ]·[v' − v; s n' − n] in float, exact at the rest cage. Until 2026-12-07 it
// was [φ ψ]·[v'; s n'], whose float products lost the points' own magnitude: a limb 1e4 from the
// origin read several float steps off at rest. At rest and with the cage moved along x, the
// device equals the CPU within a float step there.
TEST_P(GpuBackendTest, GreenCageFarFromTheOriginIsExactAtRestOnTheDevice) {
  auto backend = *Make(GetParam());
  LimbOptions o;
  o.segments = 24;
  o.rings = 40;
  RigInput in = MakeLimb(o);
  in.rig.cages.push_back(MakeLimbCage(o, 4));
  constexpr float kFar = 1e4f;
  for (float& x : in.rig.positions) x += kFar;
  for (float& x : in.rig.cages[0].positions) x += kFar;
  auto built = BuildRig(std::move(in));
  ASSERT_TRUE(built.ok()) << built.status();
  auto rig = std::make_shared<const Rig>(std::move(*built));
  auto d = CreateDeformer(rig, DeformerConfig("cage-green", nullptr));
  ASSERT_TRUE(d.ok()) << d.status();
  auto stage = UploadStage(*backend, *rig, **d);
  ASSERT_TRUE(stage.ok()) << stage.status();
  const float step = std::nextafter(kFar * 2, INFINITY) - kFar * 2;  // a float step at the limb's coordinates
  for (float move : {0.f, 0.5f}) {
    CageFrame cage{0, CageInputMode::kAbsolute, rig->cages[0].positions};
    for (size_t k = 0; k < cage.positions.size(); k += 3) cage.positions[k] += move;
    const FrameInput frame{nullptr, std::span<const CageFrame>(&cage, 1)};
    std::vector<float> params, out(rig->positions.size(), std::nanf("")), want(rig->positions.size());
    ASSERT_TRUE((*d)->DeviceFrame(frame, params).ok());
    Latch latch;
    backend->Submit(*stage->session, params, out.data(), OutputFormat::kFloat32, &Latch::Done, &latch);
    latch.Wait();
    ASSERT_TRUE(latch.status.ok()) << latch.status;
    ASSERT_TRUE((*d)->Deform(frame, want, nullptr).ok());
    std::printf("cage moved %.1f: device %.3g from the CPU (a float step: %.3g)\n", move, MaxDiff(out, want), step);
    EXPECT_LE(MaxDiff(out, want), step) << "cage moved " << move;
    if (move == 0) EXPECT_EQ(out, rig->positions) << "the rest cage gives the rest mesh";
  }
}

// The LBS/DQS blend, run as the server runs it (the deformer's device stage, its per-vertex
// weights as a one-column coefficient matrix, its frame parameters), equals the CPU blend.
TEST_P(GpuBackendTest, BlendKernelEqualsCpuBlend) {
  auto backend = *Make(GetParam());
  LimbOptions o;
  o.segments = 100;
  o.rings = 100;
  o.bones = 4;
  o.max_influences = 3;
  RigInput in = MakeLimb(o);
  std::vector<float> paint(in.rig.positions.size() / 3);
  for (size_t v = 0; v < paint.size(); ++v) paint[v] = float(v % 7) / 6;
  in.rig.attributes.push_back({"dqs_blend", 1, paint});
  auto rig = std::make_shared<const Rig>(*BuildRig(std::move(in)));
  auto d = CreateDeformer(rig, {"blend", nullptr});
  ASSERT_TRUE(d.ok()) << d.status();
  auto stage = UploadStage(*backend, *rig, **d);
  ASSERT_TRUE(stage.ok()) << stage.status();
  ASSERT_EQ(stage->kernel, GpuMethod::kBlend);
  EXPECT_EQ(stage->session->param_count(), (*d)->device_param_count());
  std::vector<float> out, want(rig->positions.size());
  for (double t : {0.0, 0.4, 0.9}) {
    Pose pose = LimbPose(rig->skeleton, t);
    if (t == 0.9) {  // joints scaled apart (the DQS half's shift)
      pose.scales.assign(rig->joint_count(), 1.f);
      pose.scales[2] = 1.25f;
    }
    ASSERT_TRUE(DeviceAndCpu(*backend, *stage, **d, pose, out, want).ok());
    EXPECT_LE(MaxDiff(out, want), 1e-5 * rig->bbox_diagonal()) << "t " << t;
  }
}

// The swing/twist deformers run as the server runs them (the deformer's device stage, its
// influences as fixed-width coefficient rows, its joint records as frame parameters) equal the
// CPU's, through the clip's bend, the wrist's 180° twist and the elbow's 150°, and at rest.
TEST_P(GpuBackendTest, SwingTwistKernelEqualsCpuSwingTwist) {
  auto backend = *Make(GetParam());
  LimbOptions o;
  o.segments = 24;
  o.rings = 60;
  o.bones = 3;
  o.max_influences = 2;
  auto rig = std::make_shared<const Rig>(*BuildRig(MakeLimb(o)));
  DeformerConfig config("swing-twist");
  auto params = std::make_shared<SwingTwistParams>();
  params->voxel_size = rig->bbox_diagonal() / 40;  // a coarse grid: the kernel is under test, not the weights
  config.params = params;
  auto d = CreateDeformer(rig, config);
  ASSERT_TRUE(d.ok()) << d.status();
  auto stage = UploadStage(*backend, *rig, **d);
  ASSERT_TRUE(stage.ok()) << stage.status();
  ASSERT_EQ(stage->kernel, GpuMethod::kSwingTwist);
  ASSERT_EQ(stage->cols % 4, 0u);
  EXPECT_EQ(stage->session->param_count(), (*d)->device_param_count());
  std::vector<float> out, want(rig->positions.size());
  for (double t : {0.0, 0.25, 0.5, 0.7}) {
    // The clip twists the wrist, a leaf with its own twist weights; the elbow twists too, so that the
    // interpolated twist angles t·θ of the vertices around it are exercised.
    Pose pose = LimbPose(rig->skeleton, t);
    Similarity elbow = pose.joint(1);
    elbow.rotation = (elbow.rotation * Eigen::Quaterniond(Eigen::AngleAxisd(2.6 * t, Eigen::Vector3d::UnitX()))).normalized();
    pose.set_joint(1, elbow);
    ASSERT_TRUE(DeviceAndCpu(*backend, *stage, **d, pose, out, want).ok());
    EXPECT_LE(MaxDiff(out, want), 1e-5 * rig->bbox_diagonal()) << "t " << t;  // NaN (unwritten) fails too
    if (t == 0) {
      EXPECT_LE(MaxDiff(out, rig->positions), 1e-5 * rig->bbox_diagonal());
    }
  }
  // A coefficient matrix of the wrong shape is refused by name.
  auto bad = backend->UploadCoefficients(*stage->on_gpu, std::vector<float>(3 * rig->vertex_count(), 0.f), 3);
  ASSERT_TRUE(bad.ok());
  SessionSpec spec = stage->spec;
  spec.coefficients = *bad;
  auto refused = backend->CreateSession(stage->on_gpu, spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("swing-twist needs 4 coefficients"));
}

// Baseline skinning runs as the server runs it (its device stage: each point's PointCode as a
// coefficient row, the posed bone ends as a frame's parameters, decoded in double by core's own
// code) and equals the CPU's frame with exact joints — the device solves every point's joints,
// not the CPU's per-frame tables — on a scattered striped bar bent and twisted at both joints,
// and at rest; the frame's size is the method's; rows of the wrong width are refused by name;
// vertex states, which the device does not make, are refused after a device frame.
TEST_P(GpuBackendTest, BaselineKernelEqualsCpuBaselineWithExactJoints) {
  auto backend = *Make(GetParam());
  PointBarOptions o;
  o.xs = {0, 2, 4, 6};
  o.radii = {0.6, 0.45, 0.55, 0.5};
  o.rings = 90;
  o.around = 48;
  o.scattered = true;
  auto rig = std::make_shared<const Rig>(*BuildRig(MakePointBar(o)));
  auto exact = std::make_shared<BaselineParams>();
  exact->exact_joints = true;
  auto cpu = CreateDeformer(rig, DeformerConfig("baseline", exact));
  auto device = CreateDeformer(rig, DeformerConfig("baseline"));
  ASSERT_TRUE(cpu.ok() && device.ok()) << cpu.status() << device.status();
  auto stage = UploadStage(*backend, *rig, **device);
  ASSERT_TRUE(stage.ok()) << stage.status();
  ASSERT_EQ(stage->kernel, GpuMethod::kBaseline);
  EXPECT_EQ(stage->session->param_count(), (*device)->device_param_count());
  std::vector<float> out, want(rig->positions.size());
  for (double degrees : {0.0, 40.0, 90.0, 130.0}) {
    Pose pose = RestPose(rig->skeleton);
    const double a = degrees * baseline::kPi / 180;
    pose.set_rotation(1, Eigen::Quaterniond(Eigen::AngleAxisd(a, Eigen::Vector3d(0, 0.6, 0.8))) *
                             Eigen::Quaterniond(Eigen::AngleAxisd(a / 2, Eigen::Vector3d::UnitX())));
    pose.set_rotation(2, Eigen::Quaterniond(Eigen::AngleAxisd(-a / 2, Eigen::Vector3d::UnitY())));
    std::vector<float> params;
    ASSERT_TRUE((*device)->DeviceFrame({&pose, {}}, params).ok());
    EXPECT_EQ(params.size(), (*device)->device_param_count());
    out.assign(want.size(), std::nanf(""));
    Latch latch;
    backend->Submit(*stage->session, params, out.data(), OutputFormat::kFloat32, &Latch::Done, &latch);
    latch.Wait();
    ASSERT_TRUE(latch.status.ok()) << latch.status;
    ASSERT_TRUE((*cpu)->Deform({&pose, {}}, want, nullptr).ok());
    // The emulation runs the CPU's code on the CPU: equal to rounding; a CUDA device contracts
    // multiply-adds differently, which moves points at an arc-crease switch a little (joint_table.h).
    EXPECT_LE(MaxDiff(out, want), 1e-6 * rig->bbox_diagonal()) << degrees << "°";  // NaN (unwritten) fails too
    if (degrees == 0) {
      EXPECT_LE(MaxDiff(out, rig->positions), 1e-5);
    }
  }
  std::vector<uint8_t> states;
  FrameExtras extras;
  extras.vertex_states = &states;
  EXPECT_EQ((*device)->Extras(extras).code(), absl::StatusCode::kFailedPrecondition);
  // Rows of another width are refused by name.
  auto bad = backend->UploadCoefficients(*stage->on_gpu, std::vector<float>(16 * rig->vertex_count(), 0.f), 16);
  ASSERT_TRUE(bad.ok());
  SessionSpec spec = stage->spec;
  spec.coefficients = *bad;
  auto refused = backend->CreateSession(stage->on_gpu, spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("baseline needs one PointCode"));
}

TEST_P(GpuBackendTest, Float16OutputWithinItsBound) {
  auto backend = *Make(GetParam());
  auto rig = Limb(5000, 3, 2);
  auto session = backend->CreateSession(*backend->Upload(*rig), GpuMethod::kDqs);
  ASSERT_TRUE(session.ok());
  const Pose pose = LimbPose(rig->skeleton, 0.4);
  const auto joints = FrameJointData(*rig, "dqs", pose);
  std::vector<uint16_t> half(rig->positions.size());
  Latch latch;
  backend->Submit(**session, joints, half.data(), OutputFormat::kFloat16, &Latch::Done, &latch);
  latch.Wait();
  const auto ref = Cpu(rig, "dqs", pose);
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_LE(std::abs(HalfToFloat(half[i]) - ref[i]), std::ldexp(std::abs(ref[i]), -11) + 1e-5) << i;
  }
}

// Load shedding (FrameOutput::shed_after): a frame still queued past its time is not run, its
// output is left as it was and `done` says DEADLINE_EXCEEDED with how long it waited; a frame
// whose time is ahead runs. Deterministic: the first time has passed before Submit is called.
TEST_P(GpuBackendTest, FramesStillQueuedPastTheirShedTimeAreNotRun) {
  auto backend = *Make(GetParam());
  auto rig = Limb(2000, 3, 2);
  auto session = backend->CreateSession(*backend->Upload(*rig), GpuMethod::kLbs);
  ASSERT_TRUE(session.ok()) << session.status();
  const Pose pose = LimbPose(rig->skeleton, 0.3);
  const auto joints = FrameJointData(*rig, "lbs", pose);
  std::vector<float> out(rig->positions.size(), -7.f);
  FrameOutput output;
  output.positions = out.data();
  output.shed_after = std::chrono::steady_clock::now() - std::chrono::milliseconds(1);
  const uint64_t frames_before = backend->Devices()[0].frames;
  Latch late;
  backend->Submit(**session, joints, output, &Latch::Done, &late);
  late.Wait();
  EXPECT_EQ(late.status.code(), absl::StatusCode::kDeadlineExceeded) << late.status;
  EXPECT_THAT(std::string(late.status.message()), ::testing::HasSubstr("still queued for the device after"));
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == -7.f; })) << "a shed frame wrote its output";
  EXPECT_EQ(backend->Devices()[0].frames, frames_before) << "a shed frame was counted as run";
  output.shed_after = std::chrono::steady_clock::now() + std::chrono::hours(1);
  Latch in_time;
  backend->Submit(**session, joints, output, &Latch::Done, &in_time);
  in_time.Wait();
  ASSERT_TRUE(in_time.status.ok()) << in_time.status;
  EXPECT_LE(MaxDiff(out, Cpu(rig, "lbs", pose)), 1e-5 * rig->bbox_diagonal());
}

// Only cage stages go without the rest positions: a skinning kernel reads them for every vertex,
// and a session of one without them is refused (until 2026-12-07 its first frame read null).
TEST_P(GpuBackendTest, OnlyCageStagesGoWithoutTheRestPositions) {
  auto backend = *Make(GetParam());
  auto rig = Limb(500, 3, 2);
  auto on_gpu = *backend->Upload(*rig);
  for (GpuMethod method : {GpuMethod::kLbs, GpuMethod::kDqs}) {
    const auto session = backend->CreateSession(on_gpu, method, nullptr, /*with_rest=*/false);
    EXPECT_EQ(session.status().code(), absl::StatusCode::kInvalidArgument) << session.status();
  }
  EXPECT_TRUE(backend->CreateSession(on_gpu, GpuMethod::kLbs).ok());
}

// Frames of many sessions submitted together share kernel launches, and each still gets its
// own result.
TEST_P(GpuBackendTest, FramesOfManySessionsAreBatched) {
  // The batch closes when it holds every session's frame, never on time: the window is far
  // longer than any test, so how fast the threads submit cannot change the outcome.
  constexpr int kSessions = 64;
  auto rig = Limb(2000, 3, 2);
  GpuOptions options;
  options.batch_window = std::chrono::hours(1);
  options.max_batch_vertices = kSessions * rig->vertex_count();
  auto backend = *Make(GetParam(), options);
  auto on_gpu = *backend->Upload(*rig);
  std::vector<std::unique_ptr<GpuSession>> sessions;
  for (int i = 0; i < kSessions; ++i) sessions.push_back(*backend->CreateSession(on_gpu, i % 2 ? GpuMethod::kDqs : GpuMethod::kLbs));
  std::vector<std::vector<float>> outs(kSessions, std::vector<float>(rig->positions.size()));
  std::vector<Pose> poses;
  std::vector<std::vector<float>> joints;
  for (int i = 0; i < kSessions; ++i) {
    poses.push_back(LimbPose(rig->skeleton, i / double(kSessions)));
    joints.push_back(FrameJointData(*rig, i % 2 ? "dqs" : "lbs", poses.back()));
  }
  const uint64_t batches_before = backend->Devices()[0].batches;
  Latch latch;
  latch.remaining = kSessions;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kSessions; i += 4) {
        backend->Submit(*sessions[i], joints[i], outs[i].data(), OutputFormat::kFloat32, &Latch::Done, &latch);
      }
    });
  }
  for (auto& th : threads) th.join();
  latch.Wait();
  ASSERT_TRUE(latch.status.ok());
  for (int i = 0; i < kSessions; ++i) {
    EXPECT_LE(MaxDiff(outs[i], Cpu(rig, i % 2 ? "dqs" : "lbs", poses[i])), 1e-5 * rig->bbox_diagonal()) << i;
  }
  const DeviceInfo d = backend->Devices()[0];
  EXPECT_EQ(d.batches - batches_before, 1u) << "frames were not batched";
  EXPECT_EQ(d.sessions, uint32_t(kSessions));
  EXPECT_EQ(d.rigs, 1u);
}

// The normals pass: in one batch mixing rigs, methods, output formats and frames with and
// without normals, each frame that wants them gets the area-weighted normals of its own
// deformed positions (core's VertexNormals of the float32 result), the others are untouched;
// a frame that wants normals without the rig's mesh fails alone; the mesh's bytes are returned.
TEST_P(GpuBackendTest, NormalsPassGivesEachFrameTheNormalsOfItsMesh) {
  auto small = Limb(1000, 2, 2), large = Limb(3000, 3, 2);
  GpuOptions options;
  options.batch_window = std::chrono::hours(1);  // the batch closes when full, never on time
  options.max_batch_vertices = small->vertex_count() + 2 * large->vertex_count();
  auto backend = *Make(GetParam(), options);
  const uint64_t empty = backend->Devices()[0].used_bytes;
  {
    auto small_gpu = *backend->Upload(*small), large_gpu = *backend->Upload(*large);
    const VertexNormals small_adj(*small), large_adj(*large);
    const uint64_t before_mesh = backend->Devices()[0].used_bytes;
    auto small_mesh = backend->UploadMesh(*small_gpu, small_adj);
    auto large_mesh = backend->UploadMesh(*large_gpu, large_adj);
    ASSERT_TRUE(small_mesh.ok() && large_mesh.ok()) << small_mesh.status() << large_mesh.status();
    EXPECT_EQ(backend->Devices()[0].used_bytes - before_mesh, (*small_mesh)->bytes() + (*large_mesh)->bytes());

    auto lbs = *backend->CreateSession(small_gpu, GpuMethod::kLbs);
    auto dqs = *backend->CreateSession(large_gpu, GpuMethod::kDqs);
    auto dqs_half = *backend->CreateSession(large_gpu, GpuMethod::kDqs);
    const Pose small_pose = LimbPose(small->skeleton, 0.7), large_pose = LimbPose(large->skeleton, 0.4);
    const auto lbs_joints = FrameJointData(*small, "lbs", small_pose);
    const auto dqs_joints = FrameJointData(*large, "dqs", large_pose);
    std::vector<float> lbs_out(small->positions.size()), dqs_out(large->positions.size());
    std::vector<uint16_t> half_out(large->positions.size());
    const float kUntouched = 7.f;
    std::vector<float> lbs_normals(lbs_out.size(), kUntouched), half_normals(dqs_out.size(), kUntouched);

    Latch latch;
    latch.remaining = 3;
    FrameOutput a;
    a.positions = lbs_out.data();
    a.normals = lbs_normals.data();
    a.mesh = small_mesh->get();
    backend->Submit(*lbs, lbs_joints, a, &Latch::Done, &latch);
    backend->Submit(*dqs, dqs_joints, dqs_out.data(), OutputFormat::kFloat32, &Latch::Done, &latch);
    FrameOutput c;
    c.positions = half_out.data();
    c.format = OutputFormat::kFloat16;
    c.normals = half_normals.data();
    c.mesh = large_mesh->get();
    backend->Submit(*dqs_half, dqs_joints, c, &Latch::Done, &latch);
    latch.Wait();
    ASSERT_TRUE(latch.status.ok()) << latch.status;

    std::vector<float> want(lbs_out.size());
    small_adj.Compute(lbs_out, want, nullptr);
    EXPECT_LE(MaxDiff(lbs_normals, want), 1e-6);
    // The half-precision frame's normals are those of its float32 result (the other DQS frame's).
    want.resize(dqs_out.size());
    large_adj.Compute(dqs_out, want, nullptr);
    EXPECT_LE(MaxDiff(half_normals, want), 1e-6);
    double unit = 0;
    for (size_t v = 0; v < want.size() / 3; ++v) {
      const double l = std::hypot(half_normals[3 * v], half_normals[3 * v + 1], half_normals[3 * v + 2]);
      unit = std::max(unit, std::abs(l - 1));
    }
    EXPECT_LE(unit, 1e-5);  // every vertex of the limb has triangles of non-zero area

    // Normals without the rig's mesh (here: another rig's) fail that frame only.
    Latch wrong;
    FrameOutput w = a;
    w.mesh = large_mesh->get();
    backend->Submit(*lbs, lbs_joints, w, &Latch::Done, &wrong);
    wrong.Wait();
    EXPECT_EQ(wrong.status.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(wrong.status.message()), ::testing::HasSubstr("mesh"));
  }
  EXPECT_EQ(backend->Devices()[0].used_bytes, empty);
}

// The device memory limit gives RESOURCE_EXHAUSTED, never a crash, and freed sessions and
// rigs return their bytes.
TEST_P(GpuBackendTest, MemoryLimitIsEnforced) {
  auto rig = Limb(20000, 3, 2);
  // Room for the rig and exactly one session.
  auto probe = *Make(GetParam());
  auto r = *probe->Upload(*rig);
  auto s = *probe->CreateSession(r, GpuMethod::kLbs);
  const uint64_t need = r->bytes() + s->bytes();
  s.reset();
  r.reset();
  EXPECT_EQ(probe->Devices()[0].used_bytes, 0u);

  GpuOptions options;
  options.memory_limit_bytes = need + 100;
  options.emulate_bytes = uint64_t{1} << 30;
  auto backend = *Make(GetParam(), options);
  auto on_gpu = backend->Upload(*rig);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  auto first = backend->CreateSession(*on_gpu, GpuMethod::kLbs);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = backend->CreateSession(*on_gpu, GpuMethod::kLbs);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(second.status().message()), ::testing::HasSubstr("--gpu-memory-limit"));
  first->reset();
  EXPECT_TRUE(backend->CreateSession(*on_gpu, GpuMethod::kLbs).ok());
  auto big = Limb(200000, 3, 2);
  const auto too_big = backend->Upload(*big);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
}

// The limit covers the batch buffers too (until 2026-12-02 sessions reserved room for one frame
// in one of the two batch slots, and the buffers grew by doubling past it). On an emulated device
// whose memory is exactly the limit (an allocation past it fails, as cudaMalloc's would), a device
// filled with sessions runs every frame even with three frames of each session queued at once;
// the first normals frame of a session asks for the normals' rows and fails alone, naming the
// flag, where they do not fit; and closed sessions give their room back, the buffers included.
TEST(GpuMemory, ADeviceFilledWithSessionsRunsAllTheirFramesWithinItsLimit) {
  auto rig = Limb(20000, 3, 2);
  const VertexNormals adjacency(*rig);
  uint64_t rig_bytes = 0, mesh_bytes = 0, session_bytes = 0;
  {
    auto probe = *Make(Kind::kEmulated);
    auto r = *probe->Upload(*rig);
    auto m = *probe->UploadMesh(*r, adjacency);
    auto s = *probe->CreateSession(r, GpuMethod::kLbs);
    rig_bytes = r->bytes();
    mesh_bytes = m->bytes();
    session_bytes = s->bytes();
  }
  constexpr int kSessions = 6, kFramesEach = 3;
  GpuOptions options;
  options.emulate_devices = 1;
  options.emulate_bytes = rig_bytes + mesh_bytes + kSessions * session_bytes + session_bytes / 3;
  options.memory_limit_bytes = options.emulate_bytes;
  // Every frame in one batch unless the budget cuts it: the window closes when all are queued.
  options.batch_window = std::chrono::hours(1);
  options.max_batch_vertices = uint64_t{kSessions} * kFramesEach * rig->vertex_count();
  auto backend = *GpuBackend::Create(options);
  auto on_gpu = *backend->Upload(*rig);
  auto mesh = backend->UploadMesh(*on_gpu, adjacency);
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  std::vector<std::unique_ptr<GpuSession>> sessions;
  for (;;) {
    auto s = backend->CreateSession(on_gpu, GpuMethod::kLbs);
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted) << s.status();
      EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("--gpu-memory-limit"));
      break;
    }
    sessions.push_back(std::move(*s));
  }
  ASSERT_EQ(sessions.size(), size_t{kSessions});

  const Pose pose = LimbPose(rig->skeleton, 0.6);
  const auto joints = FrameJointData(*rig, "lbs", pose);
  const auto want = Cpu(rig, "lbs", pose);
  // kSessions x kFramesEach frames (what closes the window) over the open sessions; the first
  // with normals where `normals`.
  auto run_all = [&](const std::string& when, bool normals) {
    std::vector<std::vector<float>> outs(kSessions * kFramesEach, std::vector<float>(want.size(), 7.f));
    std::vector<float> normals_out(want.size(), 7.f);
    Latch latch;
    latch.remaining = static_cast<int>(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      FrameOutput o;
      o.positions = outs[i].data();
      if (normals && i == 0) {
        o.normals = normals_out.data();
        o.mesh = mesh->get();
      }
      backend->Submit(*sessions[i % sessions.size()], joints, o, &Latch::Done, &latch);
    }
    latch.Wait();
    ASSERT_TRUE(latch.status.ok()) << when << ": " << latch.status;
    for (size_t i = 0; i < outs.size(); ++i) EXPECT_LE(MaxDiff(outs[i], want), 1e-5) << when << ", frame " << i;
    if (normals) {  // those of the frame's own positions
      std::vector<float> want_normals(want.size());
      adjacency.Compute(outs[0], want_normals, nullptr);
      EXPECT_LE(MaxDiff(normals_out, want_normals), 1e-6) << when;
    }
  };
  ASSERT_NO_FATAL_FAILURE(run_all("a full device", false));
  EXPECT_LE(backend->Devices()[0].used_bytes, options.memory_limit_bytes);

  // Normals' rows for a session do not fit beside six sessions: that frame fails alone, at once.
  std::vector<float> out(want.size()), normals(want.size());
  FrameOutput with_normals;
  with_normals.positions = out.data();
  with_normals.normals = normals.data();
  with_normals.mesh = mesh->get();
  Latch refused;
  backend->Submit(*sessions[0], joints, with_normals, &Latch::Done, &refused);
  refused.Wait();
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted) << refused.status;
  EXPECT_THAT(std::string(refused.status.message()), ::testing::HasSubstr("--gpu-memory-limit"));
  // With one session closed they do, and the frame's normals are its mesh's.
  sessions.pop_back();
  ASSERT_NO_FATAL_FAILURE(run_all("five sessions, one frame with normals", true));

  // Closed sessions give back their room, the batch buffers they covered included: as many
  // sessions as before fit again once the one with normals is closed, and run.
  sessions.clear();
  EXPECT_EQ(backend->Devices()[0].used_bytes, rig_bytes + mesh_bytes);
  for (int i = 0; i < kSessions; ++i) {
    auto s = backend->CreateSession(on_gpu, GpuMethod::kLbs);
    ASSERT_TRUE(s.ok()) << "session " << i << ": " << s.status();
    sessions.push_back(std::move(*s));
  }
  ASSERT_NO_FATAL_FAILURE(run_all("a full device again", false));
}

// With several devices, each new rig goes to the device with the most free memory.
TEST(GpuPlacement, RigsGoToTheLeastLoadedDevice) {
  GpuOptions options;
  options.emulate_devices = 2;
  auto backend = *GpuBackend::Create(options);
  auto small = Limb(2000, 3, 2), large = Limb(20000, 3, 2);
  auto a = *backend->Upload(*large);
  auto b = *backend->Upload(*small);
  auto c = *backend->Upload(*small);
  EXPECT_NE(a->device(), b->device());  // the second rig avoids the loaded device
  EXPECT_EQ(b->device(), c->device());  // the small ones share the other until it is fuller
  const auto devices = backend->Devices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].rigs + devices[1].rigs, 3u);
}

// A device that a sticky error left unusable (an illegal address: every later CUDA call fails)
// says so: its frames fail FAILED_PRECONDITION naming it, it takes no new session (RESOURCE_
// EXHAUSTED, which BACKEND_AUTO turns into a CPU session) and no new rig, and Devices() shows
// why. Until 2026-12-03 nothing classified CUDA errors: such a device kept taking sessions
// whose every frame failed INTERNAL. (Emulated: its second launch fails as CUDA's would.)
TEST(GpuPlacement, ADeviceBrokenByAStickyErrorTakesNothingNewAndSaysWhy) {
  GpuOptions options;
  options.emulate_devices = 1;
  options.emulate_broken_after_launches = 1;
  auto backend = *GpuBackend::Create(options);
  auto rig = Limb(500, 3, 2);
  auto on_gpu = *backend->Upload(*rig);
  auto session = *backend->CreateSession(on_gpu, GpuMethod::kLbs);
  const Pose pose = LimbPose(rig->skeleton, 0.6);
  const auto joints = FrameJointData(*rig, "lbs", pose);
  const auto want = Cpu(rig, "lbs", pose);
  std::vector<float> out(want.size());
  auto run = [&] {
    FrameOutput o;
    o.positions = out.data();
    Latch latch;
    latch.remaining = 1;
    backend->Submit(*session, joints, o, &Latch::Done, &latch);
    latch.Wait();
    return latch.status;
  };
  ASSERT_TRUE(run().ok());
  EXPECT_LE(MaxDiff(out, want), 1e-5);
  EXPECT_TRUE(backend->Devices()[0].failed.empty());
  const absl::Status failed = run();
  EXPECT_EQ(failed.code(), absl::StatusCode::kFailedPrecondition) << failed;
  EXPECT_THAT(std::string(failed.message()), ::testing::HasSubstr("unusable until the server restarts"));
  EXPECT_THAT(backend->Devices()[0].failed, ::testing::HasSubstr("illegal memory access"));
  const auto refused = backend->CreateSession(on_gpu, GpuMethod::kLbs);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_EQ(backend->Upload(*rig).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace sinew::gpu
