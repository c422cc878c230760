// GPU sessions through a real server: with an emulated device (every machine) and with the
// machine's CUDA devices (skipped, with the server's reason, where there is none). Results equal
// the CPU backend's, AUTO picks the GPU for LBS/DQS, the device is reported, and the device
// memory limit gives RESOURCE_EXHAUSTED.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <thread>

#include "clients/lib/client.h"
#include "core/geometry/mesh_quality.h"
#include "core/normals/normals.h"
#include "core/procedural/point_bar.h"
#include "core/util/half.h"
#include "tests/service/server_process.h"
#include "tests/service/test_util.h"

namespace sinew::testing {
namespace {

using ::testing::HasSubstr;

class GpuService : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(
        std::vector<std::string>{"--gpu", GetParam(), "--shared-memory-bytes", "16000000"});
    ASSERT_TRUE(server_->started());
    client_ = std::make_unique<client::Client>(server_->target());
    ASSERT_TRUE(client_->WaitReady(std::chrono::seconds(60)).ok());
    auto info = client_->GetServerInfo();
    ASSERT_TRUE(info.ok());
    for (const auto& b : info->backends()) {
      if (b.backend() == v1::BACKEND_GPU && !b.available()) {
        GTEST_SKIP() << "no GPU: " << b.description();
      }
    }
    ASSERT_GE(info->devices_size(), 1);
  }
  void TearDown() override {
    if (server_) {
      EXPECT_EQ(server_->Terminate(), 0);
    }
  }
  // The limb with its far third (x > 2) painted for pbs's jiggle, uploaded: its rig id.
  absl::StatusOr<std::string> UploadJigglingLimb(const LimbOptions& limb) {
    RigInput in = MakeLimb(limb);
    std::vector<float> alpha(in.rig.positions.size() / 3);
    for (size_t v = 0; v < alpha.size(); ++v) alpha[v] = in.rig.positions[3 * v] > 2.0f ? 1.f : 0.f;
    in.rig.attributes.push_back({"pbs_jiggle", 1, alpha});
    auto up = client_->UploadRig(client::RigToProto(in));
    if (!up.ok()) return up.status();
    return up->rig_id();
  }
  // A jiggling pbs session on voxel tets of 0.1 (gravity: the method's default when unset).
  absl::StatusOr<v1::Session> OpenJigglingPbs(const std::string& rig, v1::Backend backend, std::optional<double> gravity,
                                             v1::OutputEncoding encoding = v1::OUTPUT_ENCODING_FLOAT32) {
    v1::CreateSessionRequest req;
    req.set_rig_id(rig);
    req.mutable_deformer()->set_method(v1::METHOD_PBS);
    req.mutable_deformer()->mutable_pbs()->set_tets(v1::PBS_TETS_VOXELS);
    req.mutable_deformer()->mutable_pbs()->set_voxel_size(0.1);
    req.mutable_deformer()->mutable_pbs()->set_jiggle(true);
    if (gravity) req.mutable_deformer()->mutable_pbs()->set_gravity(*gravity);
    req.set_backend(backend);
    req.set_encoding(encoding);
    return client_->CreateSession(req);
  }
  absl::StatusOr<v1::Session> Open(const std::string& rig, v1::Method method, v1::Backend backend) {
    v1::CreateSessionRequest req;
    req.set_rig_id(rig);
    req.mutable_deformer()->set_method(method);
    req.set_backend(backend);
    return client_->CreateSession(req);
  }
  // A 4000-vertex limb with a cage, uploaded; its rig id and the cage's float count.
  std::pair<std::string, size_t> UploadCagedLimb(const LimbOptions& limb) {
    RigInput in = MakeLimb(limb);
    in.rig.cages.push_back(MakeLimbCage(limb));
    auto up = client_->UploadRig(client::RigToProto(in));
    EXPECT_TRUE(up.ok()) << up.status();
    return {up.ok() ? up->rig_id() : "", in.rig.cages[0].positions.size()};
  }
  // Frame f of a cage clip (offsets growing with f), with the limb's pose at f / 4 if `posed`.
  static v1::DeformRequest CageClipFrame(const Skeleton& sk, size_t cage_floats, int f, bool posed) {
    std::vector<float> offsets(cage_floats);
    for (size_t i = 0; i < offsets.size(); ++i) offsets[i] = 0.05f * float(f) * std::sin(float(i));
    v1::DeformRequest r;
    r.set_frame(uint64_t(f));  // numbered upwards: stateful sessions (supercages) require it
    if (posed) client::PoseToProto(LimbPose(sk, f / 4.0), *r.mutable_pose());
    v1::CagePose* cp = r.add_cages();
    cp->set_input(v1::CAGE_INPUT_OFFSETS);
    cp->set_positions(offsets.data(), offsets.size() * 4);
    return r;
  }
  // Restarts the server with `--gpu-memory-limit limit` (bytes), shedding nothing (its tests assert
  // which frames are refused for room, which a loaded machine must not turn into "overloaded").
  void RestartWithDeviceLimit(uint64_t limit) {
    server_->Terminate();
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--gpu", GetParam(), "--gpu-memory-limit", std::to_string(limit), "--max-queue-ms", "0"});
    ASSERT_TRUE(server_->started());
    client_ = std::make_unique<client::Client>(server_->target());
    ASSERT_TRUE(client_->WaitReady(std::chrono::seconds(60)).ok());
  }
  // Device 0's bytes in use and its sessions, as GetServerInfo reports them.
  std::pair<uint64_t, uint32_t> DeviceUse() {
    auto info = client_->GetServerInfo();
    EXPECT_TRUE(info.ok() && info->devices_size() > 0);
    if (!info.ok() || info->devices_size() == 0) return {0, 0};
    return {info->devices(0).used_bytes(), info->devices(0).sessions()};
  }
  // Closes a session whose frames were all answered and waits until the device counts no session
  // (its device session goes with the call that answered last; within a minute, or a failure).
  void CloseOnDevice(const std::string& session) {
    EXPECT_TRUE(client_->CloseSession(session).ok());
    Eventually([&] { return DeviceUse().second == 0; }, std::chrono::milliseconds(20));
    EXPECT_EQ(DeviceUse().second, 0u) << "a closed session's device session was not released";
  }
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<client::Client> client_;
};
INSTANTIATE_TEST_SUITE_P(Devices, GpuService, ::testing::Values("emulate", "auto"),
                         [](const auto& info) { return std::string(info.param) == "emulate" ? "Emulated" : "Cuda"; });

// Same-host shared memory from the device: a GPU session's float32 and float16 frames are copied
// from the device straight into the client's region (no copy through the response) and equal the
// bytes the same session sends on the wire; a quality report read from the region equals the
// one of the wire frame.
TEST_P(GpuService, SharedMemoryFramesOfDeviceSessionsEqualTheWire) {
  const LimbOptions limb = LimbOf(20000, 4, 4);
  auto up = client_->UploadRig(client::RigToProto(MakeLimb(limb)));
  ASSERT_TRUE(up.ok());
  const Skeleton sk = LimbSkeleton(limb);
  const uint64_t frame_bytes = 20000 * 12;
  auto shm = client::SharedMemory::Create(*client_, 2 * frame_bytes);
  ASSERT_TRUE(shm.ok()) << shm.status();
  for (v1::OutputEncoding encoding : {v1::OUTPUT_ENCODING_FLOAT32, v1::OUTPUT_ENCODING_FLOAT16}) {
    SCOPED_TRACE(v1::OutputEncoding_Name(encoding));
    v1::CreateSessionRequest req;
    req.set_rig_id(up->rig_id());
    req.mutable_deformer()->set_method(v1::METHOD_DQS);
    req.set_backend(v1::BACKEND_GPU);
    req.set_encoding(encoding);
    auto session = client_->CreateSession(req);
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_EQ(session->backend(), v1::BACKEND_GPU);
    auto stream = client_->OpenStream();
    for (int f = 0; f < 4; ++f) {
      v1::DeformRequest r = Frame(session->session_id(), f, LimbPose(sk, f / 4.0));
      r.mutable_outputs()->set_quality(f == 3);
      v1::DeformResponse wire, shared;
      ASSERT_TRUE(stream->Write(r) && stream->Read(&wire));
      ASSERT_FALSE(wire.has_error()) << wire.error().message();
      r.mutable_outputs()->mutable_shared_memory()->set_region_id((*shm)->region_id());
      r.mutable_outputs()->mutable_shared_memory()->set_offset((f % 2) * frame_bytes);
      ASSERT_TRUE(stream->Write(r) && stream->Read(&shared));
      ASSERT_FALSE(shared.has_error()) << shared.error().message();
      EXPECT_TRUE(shared.positions().empty());
      EXPECT_EQ(shared.shared_positions().bytes(), wire.positions().size());
      auto bytes = (*shm)->Positions(shared);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      EXPECT_EQ(*bytes, wire.positions()) << "frame " << f;
      if (f == 3) {
        ASSERT_TRUE(shared.has_quality() && wire.has_quality());
        EXPECT_EQ(shared.quality().SerializeAsString(), wire.quality().SerializeAsString());
        EXPECT_GT(shared.quality().volume_ratio(), 0.5);
      }
    }
    EXPECT_TRUE(stream->Close().ok());
  }
}

// A stream that has answered its frame and waits for the next holds no session: one closed
// meanwhile releases its device session (and its rig's, its shared memory's) while the stream
// stays open. Until 2026-12-03 the stream's last frame kept it, past the limits that count it.
TEST_P(GpuService, AnIdleStreamDoesNotHoldASessionClosedAfterItsFrame) {
  const LimbOptions limb = LimbOf(2000);
  auto up = client_->UploadRig(client::RigToProto(MakeLimb(limb)));
  ASSERT_TRUE(up.ok()) << up.status();
  auto session = Open(up->rig_id(), v1::METHOD_DQS, v1::BACKEND_GPU);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_EQ(DeviceUse().second, 1u);
  auto stream = client_->OpenStream();
  v1::DeformResponse answer;
  ASSERT_TRUE(stream->Write(Frame(session->session_id(), 0, LimbPose(LimbSkeleton(limb), 0.3))) &&
              stream->Read(&answer));
  ASSERT_FALSE(answer.has_error()) << answer.error().message();
  CloseOnDevice(session->session_id());  // the stream still open and idle
  EXPECT_TRUE(stream->Close().ok());
}

TEST_P(GpuService, GpuSessionsEqualCpuSessions) {
  const LimbOptions limb = LimbOf(20000, 4, 4);
  auto up = client_->UploadRig(client::RigToProto(MakeLimb(limb)));
  ASSERT_TRUE(up.ok());
  const Skeleton sk = LimbSkeleton(limb);
  const double tolerance = 1e-5 * std::sqrt(3.0 * 3.0 + 0.5 * 0.5 * 2);
  for (v1::Method method : {v1::METHOD_LBS, v1::METHOD_DQS}) {
    auto gpu = Open(up->rig_id(), method, v1::BACKEND_GPU);
    auto automatic = Open(up->rig_id(), method, v1::BACKEND_AUTO);
    auto cpu = Open(up->rig_id(), method, v1::BACKEND_CPU);
    ASSERT_TRUE(gpu.ok() && automatic.ok() && cpu.ok()) << gpu.status() << automatic.status() << cpu.status();
    EXPECT_EQ(gpu->backend(), v1::BACKEND_GPU);
    EXPECT_EQ(automatic->backend(), v1::BACKEND_GPU);
    EXPECT_EQ(cpu->backend(), v1::BACKEND_CPU);
    auto stream = client_->OpenStream();
    for (int f = 0; f < 6; ++f) {
      const Pose pose = LimbPose(sk, f / 6.0);
      std::vector<float> a, b;
      ASSERT_TRUE(stream->Write(Frame(gpu->session_id(), f, pose)));
      v1::DeformResponse r;
      ASSERT_TRUE(stream->Read(&r));
      ASSERT_FALSE(r.has_error()) << r.error().message();
      EXPECT_EQ(r.frame(), uint64_t(f));
      ASSERT_TRUE(client::DecodePositions(r, a).ok());
      auto u = client_->Deform(Frame(cpu->session_id(), f, pose));
      ASSERT_TRUE(u.ok());
      ASSERT_TRUE(client::DecodePositions(*u, b).ok());
      EXPECT_LE(MaxAbsDiff(a, b), tolerance) << v1::Method_Name(method) << " frame " << f;
    }
    EXPECT_TRUE(stream->Close().ok());
  }
  // Bad frames on a GPU session fail like on the CPU.
  auto gpu = Open(up->rig_id(), v1::METHOD_LBS, v1::BACKEND_GPU);
  v1::DeformRequest bad = Frame(gpu->session_id(), 1, LimbPose(sk, 0.1));
  bad.mutable_pose()->mutable_rotations()->resize(8);
  const absl::Status st = client_->Deform(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("pose.rotations"));
  auto info = client_->GetServerInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_GE(info->devices(0).sessions(), 1u);
  EXPECT_GT(info->devices(0).used_bytes(), 0u);
}

// The quantized encodings of device frames: made on the host from the device's float32 result,
// within their bounds of the CPU's float32 frames (and its quality report measured from them).
TEST_P(GpuService, QuantizedEncodingsOfDeviceFramesStayWithinTheirBounds) {
  const LimbOptions limb = LimbOf(6000, 4, 4);
  auto up = client_->UploadRig(client::RigToProto(MakeLimb(limb)));
  ASSERT_TRUE(up.ok());
  auto built = BuildRig(MakeLimb(limb));
  const double diag = built->bbox_diagonal();
  auto cpu = Open(up->rig_id(), v1::METHOD_DQS, v1::BACKEND_CPU);
  ASSERT_TRUE(cpu.ok());
  for (v1::OutputEncoding encoding : {v1::OUTPUT_ENCODING_QUANTIZED16, v1::OUTPUT_ENCODING_DELTA}) {
    v1::CreateSessionRequest req;
    req.set_rig_id(up->rig_id());
    req.mutable_deformer()->set_method(v1::METHOD_DQS);
    req.set_backend(v1::BACKEND_GPU);
    req.set_encoding(encoding);
    if (encoding == v1::OUTPUT_ENCODING_DELTA) req.set_key_frame_interval(4);
    auto gpu = client_->CreateSession(req);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_EQ(gpu->backend(), v1::BACKEND_GPU);
    auto stream = client_->OpenStream();
    client::PositionDecoder decoder;
    for (int f = 0; f < 9; ++f) {
      const Pose pose = LimbPose(built->skeleton, f / 9.0);
      v1::DeformRequest r = Frame(gpu->session_id(), f, pose);
      r.mutable_outputs()->set_quality(f == 4);
      v1::DeformResponse resp;
      ASSERT_TRUE(stream->Write(r) && stream->Read(&resp));
      ASSERT_FALSE(resp.has_error()) << resp.error().message();
      std::vector<float> got, ref;
      ASSERT_TRUE(decoder.Decode(resp, got).ok()) << "frame " << f;
      auto u = client_->Deform(Frame(cpu->session_id(), f, pose));
      ASSERT_TRUE(u.ok() && client::DecodePositions(*u, ref).ok());
      const double bound = encoding == v1::OUTPUT_ENCODING_DELTA
                               ? 1e-4 * diag
                               : 0.5 * std::hypot(resp.quantization().scale_x(), resp.quantization().scale_y(),
                                                  resp.quantization().scale_z());
      for (size_t i = 0; i < ref.size(); i += 3) {
        ASSERT_LE(std::hypot(double(got[i]) - ref[i], double(got[i + 1]) - ref[i + 1], double(got[i + 2]) - ref[i + 2]),
                  bound + 1e-5 * diag)
            << v1::OutputEncoding_Name(encoding) << " frame " << f << " vertex " << i / 3;
      }
      if (f == 4) {
        EXPECT_NEAR(resp.quality().volume_ratio(), 1.0, 0.2);
      }
    }
    EXPECT_TRUE(stream->Close().ok());
  }
}

// Swing-twist runs on the GPU once its weights exist: a session opened before that serves DQS
// on the CPU (and asking for the GPU then is refused, UNAVAILABLE, naming the fallback); sessions
// opened after it run on the GPU under AUTO and GPU, report swing-twist and equal the CPU.
TEST_P(GpuService, SwingTwistRunsOnTheGpuOnceItsWeightsAreReady) {
  const LimbOptions limb = LimbOf(3000);
  auto up = client_->UploadRig(client::RigToProto(MakeLimb(limb)));
  ASSERT_TRUE(up.ok()) << up.status();
  auto open = [&](v1::Backend backend) {
    v1::CreateSessionRequest req;
    req.set_rig_id(up->rig_id());
    req.mutable_deformer()->set_method(v1::METHOD_SWING_TWIST);
    req.mutable_deformer()->mutable_swing_twist()->set_voxel_size(0.05);
    req.set_backend(backend);
    return client_->CreateSession(req);
  };
  auto early = open(v1::BACKEND_AUTO);  // starts the preparation; a fresh server has none
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(early->backend(), v1::BACKEND_CPU);
  auto asked = open(v1::BACKEND_GPU);  // refused while it runs, on the GPU if it finished already
  if (!asked.ok()) {
    EXPECT_EQ(asked.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(asked.status().message()), HasSubstr("fallback dqs"));
  } else {
    EXPECT_EQ(asked->backend(), v1::BACKEND_GPU);
  }
  ASSERT_TRUE(WaitForPreparation(*client_, up->rig_id(), "swing-twist").has_value())
      << "the weights were not ready within two minutes";
  auto gpu = open(v1::BACKEND_GPU), automatic = open(v1::BACKEND_AUTO), cpu = open(v1::BACKEND_CPU);
  ASSERT_TRUE(gpu.ok() && automatic.ok() && cpu.ok()) << gpu.status() << automatic.status() << cpu.status();
  EXPECT_EQ(gpu->backend(), v1::BACKEND_GPU);
  EXPECT_EQ(automatic->backend(), v1::BACKEND_GPU);
  EXPECT_EQ(cpu->backend(), v1::BACKEND_CPU);
  const Skeleton sk = LimbSkeleton(limb);
  for (int f = 0; f < 5; ++f) {
    const Pose pose = LimbPose(sk, f / 8.0);
    std::vector<float> a, b;
    auto rg = client_->Deform(Frame(automatic->session_id(), f, pose));
    auto rc = client_->Deform(Frame(cpu->session_id(), f, pose));
    ASSERT_TRUE(rg.ok() && rc.ok()) << rg.status() << rc.status();
    EXPECT_EQ(rg->method(), v1::METHOD_SWING_TWIST);
    EXPECT_EQ(rc->method(), v1::METHOD_SWING_TWIST);
    ASSERT_TRUE(client::DecodePositions(*rg, a).ok() && client::DecodePositions(*rc, b).ok());
    EXPECT_LE(MaxAbsDiff(a, b), 1e-5 * 3.1) << "frame " << f;
  }
}

// Baseline skinning runs on the GPU (AUTO and GPU), its encoding a coefficient row per point:
// frames posed by the skeleton and by explicit spheres equal a CPU session's with exact joints
// (the device solves every point's joints; the emulation to rounding, a CUDA device to its own
// multiply-adds); vertex states, which the device does not make, are refused by name on a GPU
// frame and the session goes on.
TEST_P(GpuService, BaselineRunsOnTheGpuAndEqualsTheCpuWithExactJoints) {
  PointBarOptions bar;
  bar.xs = {0, 2, 4};
  bar.radii = {0.6, 0.45, 0.55};
  bar.rings = 60;
  bar.around = 40;
  bar.scattered = true;
  auto up = client_->UploadRig(client::RigToProto(MakePointBar(bar)));
  ASSERT_TRUE(up.ok()) << up.status();
  auto open = [&](v1::Backend backend, bool exact) {
    v1::CreateSessionRequest req;
    req.set_rig_id(up->rig_id());
    req.mutable_deformer()->set_method(v1::METHOD_BASELINE);
    if (exact) req.mutable_deformer()->mutable_baseline()->set_exact_joints(true);
    req.set_backend(backend);
    return client_->CreateSession(req);
  };
  auto gpu = open(v1::BACKEND_GPU, false), automatic = open(v1::BACKEND_AUTO, false), cpu = open(v1::BACKEND_CPU, true);
  ASSERT_TRUE(gpu.ok() && automatic.ok() && cpu.ok()) << gpu.status() << automatic.status() << cpu.status();
  EXPECT_EQ(gpu->backend(), v1::BACKEND_GPU);
  EXPECT_EQ(automatic->backend(), v1::BACKEND_GPU);
  EXPECT_EQ(cpu->backend(), v1::BACKEND_CPU);
  const Skeleton sk = BuildRig(MakePointBar(bar))->skeleton;
  const double tolerance = 1e-6 * 5;
  for (int f = 0; f < 4; ++f) {
    v1::DeformRequest req;
    req.set_frame(uint64_t(f));
    if (f < 2) {
      Pose pose = RestPose(sk);
      pose.set_rotation(1, Eigen::Quaterniond(Eigen::AngleAxisd(0.9 * (f + 1), Eigen::Vector3d(0, 0.6, 0.8))));
      client::PoseToProto(pose, *req.mutable_pose());
    } else {
      const std::vector<float> centres = {0, 0, 0, 2, 0, 0, 3, 1.5f * float(f - 1), 0.3f}, twists = {0, 0.7f};
      req.mutable_spheres()->set_centers(centres.data(), 4 * centres.size());
      req.mutable_spheres()->set_twists(twists.data(), 4 * twists.size());
    }
    std::vector<float> a, b;
    req.set_session_id(automatic->session_id());
    auto rg = client_->Deform(req);
    req.set_session_id(cpu->session_id());
    auto rc = client_->Deform(req);
    ASSERT_TRUE(rg.ok() && rc.ok()) << rg.status() << rc.status();
    EXPECT_EQ(rg->method(), v1::METHOD_BASELINE);
    ASSERT_TRUE(client::DecodePositions(*rg, a).ok() && client::DecodePositions(*rc, b).ok());
    EXPECT_LE(MaxAbsDiff(a, b), tolerance) << "frame " << f;
  }
  v1::DeformRequest states;
  states.set_session_id(gpu->session_id());
  states.set_frame(0);
  client::PoseToProto(RestPose(sk), *states.mutable_pose());
  states.mutable_outputs()->set_vertex_states(true);
  auto refused = client_->Deform(states);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("outputs.vertex_states"));
  states.mutable_outputs()->set_vertex_states(false);
  states.set_frame(1);
  EXPECT_TRUE(client_->Deform(states).ok());
}

// Position-based skinning with jiggle runs on the GPU (AUTO) once its tets are built, its
// particles kept on the device between frames: a swing and stop streamed to it and to a CPU
// session give the same frames within 1e-4 of the diagonal (the device sums in its own order),
// the painted end still moving after the stop on both. Then, as on the CPU: its state saved from
// the device and restored into a new GPU session continues bit for bit; parameters change live
// (a softer jiggle, jiggle off and on again) and both backends follow alike.
TEST_P(GpuService, PbsRunsOnTheGpuWithItsStateOnTheDevice) {
  const LimbOptions limb = LimbOf(2000);
  auto rig = UploadJigglingLimb(limb);
  ASSERT_TRUE(rig.ok()) << rig.status();
  auto open = [&](v1::Backend backend) { return OpenJigglingPbs(*rig, backend, 5.0); };
  ASSERT_TRUE(open(v1::BACKEND_CPU).ok());  // starts the preparation
  ASSERT_TRUE(WaitForPreparation(*client_, *rig, "pbs").has_value()) << "no tets within two minutes";
  auto gpu = open(v1::BACKEND_AUTO), cpu = open(v1::BACKEND_CPU);
  ASSERT_TRUE(gpu.ok() && cpu.ok()) << gpu.status() << cpu.status();
  EXPECT_EQ(gpu->backend(), v1::BACKEND_GPU);
  const Skeleton sk = LimbSkeleton(limb);
  const double diag = 3.1;
  double worst = 0, moved = 0;
  std::vector<float> a, b, previous;
  for (int f = 0; f < 14; ++f) {
    const Pose pose = LimbPose(sk, 0.5, LimbMotion{.bend_degrees = 5.0 * std::min(f, 8), .twist_degrees = 0});
    auto rg = client_->Deform(Frame(gpu->session_id(), f, pose));
    auto rc = client_->Deform(Frame(cpu->session_id(), f, pose));
    ASSERT_TRUE(rg.ok() && rc.ok()) << rg.status() << rc.status();
    EXPECT_EQ(rg->method(), v1::METHOD_PBS);
    ASSERT_TRUE(client::DecodePositions(*rg, a).ok() && client::DecodePositions(*rc, b).ok());
    worst = std::max(worst, MaxAbsDiff(a, b));
    if (f >= 10) moved = std::max(moved, MaxAbsDiff(a, previous));
    previous = a;
  }
  std::printf("pbs on the %s device: frames within %.2e of the CPU's; the painted end moves %.4f after the stop\n",
              GetParam(), worst, moved);
  EXPECT_LE(worst, 1e-4 * diag);
  EXPECT_GT(moved, 1e-4);

  // A snapshot of the device's particles, restored into another GPU session.
  auto saved = client_->GetSessionState(gpu->session_id());
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->backend(), v1::BACKEND_GPU);
  EXPECT_FALSE(saved->method_state().empty());
  auto twin = open(v1::BACKEND_AUTO);
  ASSERT_TRUE(twin.ok()) << twin.status();
  ASSERT_TRUE(client_->SetSessionState(twin->session_id(), *saved).ok());
  // Live parameters at frame 16 (a softer jiggle), jiggle off at 19 and on again at 21, sent to
  // all three sessions.
  auto update = [&](const std::string& id, bool jiggle, double stiffness) {
    v1::DeformerConfig config;
    config.set_method(v1::METHOD_PBS);
    v1::PbsParams& p = *config.mutable_pbs();
    p.set_tets(v1::PBS_TETS_VOXELS);
    p.set_voxel_size(0.1);
    p.set_jiggle(jiggle);
    p.set_gravity(5);
    p.set_jiggle_stiffness(stiffness);
    return client_->UpdateSession(id, config).status();
  };
  double drift = 0;
  std::vector<float> c;
  for (int f = 14; f < 26; ++f) {
    if (f == 16 || f == 19 || f == 21) {
      const bool jiggle = f != 19;
      for (const auto* id : {&gpu->session_id(), &twin->session_id(), &cpu->session_id()}) {
        ASSERT_TRUE(update(*id, jiggle, 0.05).ok()) << "frame " << f;
      }
    }
    const Pose pose = LimbPose(sk, 0.5, LimbMotion{.bend_degrees = 40.0 - 4.0 * std::min(f - 14, 6), .twist_degrees = 0});
    auto rg = client_->Deform(Frame(gpu->session_id(), f, pose));
    auto rt = client_->Deform(Frame(twin->session_id(), f, pose));
    auto rc = client_->Deform(Frame(cpu->session_id(), f, pose));
    ASSERT_TRUE(rg.ok() && rt.ok() && rc.ok()) << rg.status() << rt.status() << rc.status();
    ASSERT_TRUE(client::DecodePositions(*rg, a).ok() && client::DecodePositions(*rt, b).ok() &&
                client::DecodePositions(*rc, c).ok());
    ASSERT_EQ(a, b) << "frame " << f << ": the restored GPU session differs from the one it was saved from";
    drift = std::max(drift, MaxAbsDiff(a, c));
  }
  std::printf("restored on the device: bit for bit; with live parameter changes the GPU stays within %.2e of the CPU\n",
              drift);
  EXPECT_LE(drift, 1e-4 * diag);
}

// Time steps alternating between 1e-6 s and 60 s drive pbs's jiggling particles past float's
// range within a few frames. On the CPU the method fails that frame itself and starts again from
// rest; the device keeps its particles, so for a GPU session the server does it: that frame fails
// OUT_OF_RANGE saying the session starts again, and the next frame equals a fresh session's
// first frame of the same pose bit for bit, on either backend. (Until 2026-12-02 a device
// session's particles stayed infinite and every later frame failed until a reset.) A float16
// frame beyond float16's range fails for the encoding's range only: that session is not restarted.
TEST_P(GpuService, JigglingPbsThatLeavesFloatsRangeFailsOnceAndStartsAgainOnEitherBackend) {
  const LimbOptions limb = LimbOf(2000);
  auto rig = UploadJigglingLimb(limb);
  ASSERT_TRUE(rig.ok()) << rig.status();
  auto open = [&](v1::Backend backend) { return OpenJigglingPbs(*rig, backend, 9.81); };
  auto open_encoded = [&](v1::Backend backend, v1::OutputEncoding encoding) {
    return OpenJigglingPbs(*rig, backend, std::nullopt, encoding);
  };
  ASSERT_TRUE(open(v1::BACKEND_CPU).ok());  // starts the preparation
  ASSERT_TRUE(WaitForPreparation(*client_, *rig, "pbs").has_value()) << "no tets within two minutes";
  const Skeleton sk = LimbSkeleton(limb);
  const Pose pose = LimbPose(sk, 0.5, LimbMotion{.bend_degrees = 30});
  // Frame f of `session` in a pose at a step of 0.01 s, decoded into `out`.
  auto frame = [&](const std::string& session, uint64_t f, std::vector<float>& out) {
    v1::DeformRequest r = Frame(session, f, pose);
    r.set_time_step(0.01);
    auto done = client_->Deform(r);
    return done.ok() ? client::DecodePositions(*done, out) : done.status();
  };
  for (const v1::Backend backend : {v1::BACKEND_CPU, v1::BACKEND_GPU}) {
    const std::string where = v1::Backend_Name(backend);
    // Drives `session` with the alternating steps until a frame fails; the frame it failed at
    // (-1: none did), and its state after frame 2 in `saved`.
    auto diverge = [&](const std::string& session, v1::SessionState* saved) {
      for (int f = 0; f < 200; ++f) {
        v1::DeformRequest r = Frame(session, f, LimbPose(sk, 0.5, LimbMotion{.bend_degrees = 15.0 * (f % 9)}));
        r.set_time_step(f % 2 ? 60.0 : 1e-6);
        auto out = client_->Deform(r);
        if (!out.ok()) {
          EXPECT_EQ(out.status().code(), absl::StatusCode::kOutOfRange) << where << ": " << out.status();
          EXPECT_NE(out.status().message().find("starts again from rest"), std::string::npos) << where << ": " << out.status();
          return f;
        }
        if (f == 2) {
          auto st = client_->GetSessionState(session);
          EXPECT_TRUE(st.ok()) << where << ": " << st.status();
          if (st.ok()) *saved = *st;
        }
      }
      return -1;
    };
    auto session = open(backend), restored = open(backend), fresh = open(backend), twin = open(backend);
    ASSERT_TRUE(session.ok() && restored.ok() && fresh.ok() && twin.ok()) << where;
    ASSERT_EQ(session->backend(), backend);
    v1::SessionState saved, unused;
    const int failed_at = diverge(session->session_id(), &unused);
    ASSERT_GE(failed_at, 0) << where << ": the alternating steps never left float's range: the fixture no longer shows it";
    // A snapshot taken then (before the next frame) is the session's: it starts from rest. (It
    // held the infinite particles, which every SetSessionState refused, the session's own too.)
    auto snapshot = client_->GetSessionState(session->session_id());
    ASSERT_TRUE(snapshot.ok()) << where << ": " << snapshot.status();
    auto resumed = open(backend);
    ASSERT_TRUE(resumed.ok()) << where;
    const absl::Status set = client_->SetSessionState(resumed->session_id(), *snapshot).status();
    ASSERT_TRUE(set.ok()) << where << ": the state saved after the failure does not restore: " << set;
    std::vector<float> a, b, c;
    ASSERT_TRUE(frame(session->session_id(), failed_at + 1, a).ok()) << where << ": the frame after the failure";
    ASSERT_TRUE(frame(fresh->session_id(), 0, b).ok()) << where;
    EXPECT_EQ(a, b) << where << ": the frame after the failure (at frame " << failed_at << ") is not a fresh start";
    ASSERT_TRUE(frame(resumed->session_id(), failed_at + 1, c).ok()) << where << ": the restored session's next frame";
    EXPECT_EQ(c, a) << where << ": the restored session did not go on as the session it was saved from";
    ASSERT_TRUE(frame(session->session_id(), failed_at + 2, a).ok() && frame(resumed->session_id(), failed_at + 2, c).ok())
        << where;
    EXPECT_EQ(c, a) << where << ": the restored session's second frame differs from its original's";
    // A state set after the failure is gone on from, not thrown away for a fresh start.
    ASSERT_EQ(diverge(restored->session_id(), &saved), failed_at) << where;
    ASSERT_TRUE(client_->SetSessionState(restored->session_id(), saved).ok()) << where;
    ASSERT_TRUE(client_->SetSessionState(twin->session_id(), saved).ok()) << where;
    ASSERT_TRUE(frame(restored->session_id(), 3, a).ok() && frame(twin->session_id(), 3, b).ok()) << where;
    EXPECT_EQ(a, b) << where << ": a state set after the failure was not gone on from";
    std::printf("%s: left float's range at frame %d; the next frame a fresh start, or the state set after it, bit for bit\n",
                where.c_str(), failed_at);

    // A float16 session whose positions pass 65504 (the limb carried to x ≈ 65 500, every third
    // frame 32 farther) fails those frames for the encoding's range, not the state's: its history
    // goes on, and its frames stay those of a float32 twin, in halves, also after a failed frame.
    // (The device checks its halves, the CPU its floats against the largest one that rounds to a
    // finite half: both fail from 65520 on. Half_test's range-check test proves the CPU's rule.)
    auto f16 = open_encoded(backend, v1::OUTPUT_ENCODING_FLOAT16), f32 = open_encoded(backend, v1::OUTPUT_ENCODING_FLOAT32);
    ASSERT_TRUE(f16.ok() && f32.ok()) << where;
    int after_failure = 0, failures = 0;
    bool failed_last = false;
    for (int f = 0; f < 24; ++f) {
      Pose far = LimbPose(sk, 0.5, LimbMotion{.bend_degrees = 10.0 * (f % 5)});
      far.translations[0] += f % 3 == 2 ? 65525.f : 65493.f;  // past 65520, where halves round to infinity
      auto half = client_->Deform(Frame(f16->session_id(), f, far));
      auto full = client_->Deform(Frame(f32->session_id(), f, far));
      ASSERT_TRUE(full.ok()) << where << " frame " << f << ": " << full.status();
      if (!half.ok()) {
        EXPECT_EQ(half.status().code(), absl::StatusCode::kOutOfRange) << where << ": " << half.status();
        EXPECT_EQ(half.status().message().find("starts again"), std::string::npos) << where << ": " << half.status();
        ++failures;
        failed_last = true;
        continue;
      }
      std::vector<float> x, y;
      ASSERT_TRUE(client::DecodePositions(*half, x).ok() && client::DecodePositions(*full, y).ok());
      std::vector<uint16_t> yh(y.size()), xh(x.size());
      FloatsToHalves(y.data(), yh.data(), y.size());
      FloatsToHalves(x.data(), xh.data(), x.size());
      ASSERT_EQ(xh, yh) << where << " frame " << f << ": the float16 session's history left its float32 twin's";
      after_failure += failed_last;
      failed_last = false;
    }
    EXPECT_GE(failures, 1) << where << ": no frame passed 65504: the fixture no longer shows it";
    EXPECT_GE(after_failure, 1) << where << ": no frame after a failed one was answered";
  }
}

// Admission control goes on in the device's queue (--max-queue-ms): with a batch window of 1.5 s
// every GPU frame waits there longer than the 0.5 s allowed. A frame of a session without
// history (LBS) is answered UNAVAILABLE "overloaded", unary and on a stream (whose error response
// then carries nothing but its number and the error), and sinew_frames_shed_total counts it. A stateful
// session's frame (SuperCages: its history has taken the frame when it was submitted) and a
// DeformClip's frames are deformed, equal to the CPU's. (Until 2026-12-02 only the wait for a
// worker was bounded: a GPU frame waited for the device as long as it took.) Timing cannot change
// the outcome: the window is a lower bound on the device wait; a frame shed while waiting for a
// worker (a stall of half a second) would be shed either way, and the frames that must be
// deformed are sent again then.
TEST_P(GpuService, FramesThatWaitTooLongForTheDeviceAreShedUnlessTheirSessionHasHistory) {
  server_->Terminate();
  server_ = std::make_unique<ServerProcess>(std::vector<std::string>{
      "--gpu", GetParam(), "--gpu-batch-window-us", "1500000", "--max-queue-ms", "500"});
  ASSERT_TRUE(server_->started());
  client_ = std::make_unique<client::Client>(server_->target());
  ASSERT_TRUE(client_->WaitReady(std::chrono::seconds(60)).ok());
  const LimbOptions limb = LimbOf(4000);
  const auto [rig_id, cage_floats] = UploadCagedLimb(limb);
  ASSERT_FALSE(rig_id.empty());
  const Skeleton sk = LimbSkeleton(limb);
  const Pose pose = LimbPose(sk, 0.4);
  auto lbs = Open(rig_id, v1::METHOD_LBS, v1::BACKEND_GPU);
  ASSERT_TRUE(lbs.ok()) << lbs.status();
  auto shed_answer = [](int code, const std::string& message) {
    EXPECT_EQ(code, int(absl::StatusCode::kUnavailable)) << message;
    EXPECT_THAT(message, HasSubstr("overloaded"));
    EXPECT_THAT(message, HasSubstr("--max-queue-ms 500"));
  };
  auto unary = client_->Deform(Frame(lbs->session_id(), 0, pose));
  ASSERT_FALSE(unary.ok()) << "a GPU frame that waited 1.5 s for the device was deformed";
  shed_answer(int(unary.status().code()), std::string(unary.status().message()));
  // On a stream, after a CPU frame with extras (the stream reuses its responses once written):
  // the shed frame's response carries its number and error and nothing of the earlier frame.
  auto extras = Open(rig_id, v1::METHOD_SUPERCAGES, v1::BACKEND_CPU);
  ASSERT_TRUE(extras.ok()) << extras.status();
  v1::DeformRequest cpu_frame = CageClipFrame(sk, cage_floats, 0, /*posed=*/true);
  cpu_frame.set_session_id(extras->session_id());
  cpu_frame.mutable_outputs()->set_posed_cage(true);
  auto stream = client_->OpenStream();
  ASSERT_TRUE(stream->Write(cpu_frame));
  v1::DeformResponse r;
  ASSERT_TRUE(stream->Read(&r));
  const int cpu_shed = r.has_error();  // shed while waiting for a worker (a stall of half a second)
  if (!cpu_shed) {
    EXPECT_FALSE(r.posed_cage().empty());
  }
  ASSERT_TRUE(stream->Write(Frame(lbs->session_id(), 1, pose)));
  stream->WritesDone();
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.frame(), 1u);
  ASSERT_TRUE(r.has_error()) << "a streamed GPU frame that waited 1.5 s for the device was deformed";
  shed_answer(r.error().code(), r.error().message());
  EXPECT_TRUE(r.positions().empty() && r.posed_cage().empty() && r.method() == v1::METHOD_UNSPECIFIED &&
              r.compute_ns() == 0)
      << "a shed frame's response carries more than its number and error: " << r.ShortDebugString().substr(0, 300);
  EXPECT_FALSE(stream->Read(&r));
  EXPECT_TRUE(stream->Close().ok());
  EXPECT_EQ(MetricValue(HttpGet(server_->metrics_port(), "/metrics"), "sinew_frames_shed_total"), 2 + cpu_shed);

  // SuperCages keeps a history: its frames run however long they wait for the device.
  auto deform = [&](const v1::DeformRequest& req) {
    absl::StatusOr<v1::DeformResponse> got = client_->Deform(req);
    for (int again = 0; again < 3 && !got.ok() && got.status().message().find("for a worker (") != std::string::npos;
         ++again) {
      got = client_->Deform(req);  // shed while waiting for a worker (not applied): sent again
    }
    return got;
  };
  auto gpu = Open(rig_id, v1::METHOD_SUPERCAGES, v1::BACKEND_GPU);
  auto cpu = Open(rig_id, v1::METHOD_SUPERCAGES, v1::BACKEND_CPU);
  ASSERT_TRUE(gpu.ok() && cpu.ok()) << gpu.status() << cpu.status();
  for (int f = 0; f < 2; ++f) {
    v1::DeformRequest req = CageClipFrame(sk, cage_floats, f, /*posed=*/true);
    std::vector<float> a, b;
    req.set_session_id(gpu->session_id());
    absl::StatusOr<v1::DeformResponse> rg = deform(req);
    req.set_session_id(cpu->session_id());
    absl::StatusOr<v1::DeformResponse> rc = deform(req);
    ASSERT_TRUE(rg.ok()) << "SuperCages frame " << f << ": " << rg.status();
    ASSERT_TRUE(rc.ok()) << rc.status();
    ASSERT_TRUE(client::DecodePositions(*rg, a).ok() && client::DecodePositions(*rc, b).ok());
    EXPECT_LE(MaxAbsDiff(a, b), 1e-5 * 3.7) << "SuperCages frame " << f;
  }
  // A clip's frames are never shed.
  v1::DeformClipRequest clip;
  clip.set_session_id(lbs->session_id());
  for (int k = 0; k < 2; ++k) client::PoseToProto(LimbPose(sk, 0.2 * k), *clip.mutable_poses()->add_poses());
  const std::map<uint64_t, std::vector<float>> frames = PlayClip(*client_, clip);
  ASSERT_EQ(frames.size(), 2u) << "a clip's frames were shed";
  for (int k = 0; k < 2; ++k) {
    EXPECT_LE(MaxAbsDiff(frames.at(k), CoreDeform(limb, "lbs", LimbPose(sk, 0.2 * k))), 1e-5 * 3.7) << "clip frame " << k;
  }
}

// Cage methods run their per-vertex stage (coefficients times cage vectors, then skinning for
// SuperCages) on the GPU, with the cage solves on the CPU, and equal the CPU sessions.
TEST_P(GpuService, CageMethodsOnTheGpuEqualTheCpu) {
  const LimbOptions limb = LimbOf(4000);
  const auto [rig_id, cage_floats] = UploadCagedLimb(limb);
  ASSERT_FALSE(rig_id.empty());
  const Skeleton sk = LimbSkeleton(limb);
  for (v1::Method method : {v1::METHOD_CAGE_MVC, v1::METHOD_CAGE_GREEN, v1::METHOD_SUPERCAGES}) {
    auto gpu = Open(rig_id, method, v1::BACKEND_AUTO);
    auto cpu = Open(rig_id, method, v1::BACKEND_CPU);
    ASSERT_TRUE(gpu.ok() && cpu.ok()) << gpu.status() << cpu.status();
    EXPECT_EQ(gpu->backend(), v1::BACKEND_GPU) << v1::Method_Name(method);
    for (int f = 0; f < 4; ++f) {
      v1::DeformRequest r = CageClipFrame(sk, cage_floats, f, method == v1::METHOD_SUPERCAGES);
      if (method == v1::METHOD_SUPERCAGES) r.mutable_outputs()->set_posed_cage(true);
      std::vector<float> a, b;
      r.set_session_id(gpu->session_id());
      auto rg = client_->Deform(r);
      r.set_session_id(cpu->session_id());
      auto rc = client_->Deform(r);
      ASSERT_TRUE(rg.ok() && rc.ok()) << rg.status() << rc.status();
      ASSERT_TRUE(client::DecodePositions(*rg, a).ok() && client::DecodePositions(*rc, b).ok());
      EXPECT_LE(MaxAbsDiff(a, b), 1e-5 * 3.7) << v1::Method_Name(method) << " frame " << f;
      EXPECT_EQ(rg->posed_cage(), rc->posed_cage());  // cage solves run on the CPU either way
    }
    if (method != v1::METHOD_SUPERCAGES) continue;
    // SuperCages keeps its history (the last pose, the rest cage) on the host for a device
    // session too: its snapshot, restored into another device session, goes on with the first's
    // bits through a frame that carries the pose alone (where a session from rest, on the rest
    // cage, gives others) and one with the cage alone (until 2026-12-04 GetSessionState answered
    // UNIMPLEMENTED).
    auto saved = client_->GetSessionState(gpu->session_id());
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_EQ(saved->backend(), v1::BACKEND_GPU);
    auto twin = Open(rig_id, method, v1::BACKEND_AUTO), unrestored = Open(rig_id, method, v1::BACKEND_AUTO);
    ASSERT_TRUE(twin.ok() && unrestored.ok()) << twin.status() << unrestored.status();
    ASSERT_TRUE(client_->SetSessionState(twin->session_id(), *saved).ok());
    for (int f = 4; f < 6; ++f) {
      v1::DeformRequest r = CageClipFrame(sk, cage_floats, f, true);
      if (f == 4) r.clear_cages();  // the pose alone: the cage is the session's
      if (f == 5) r.clear_pose();   // the cage alone: the pose is the session's
      std::vector<std::vector<float>> got;
      for (const auto* id : {&gpu->session_id(), &twin->session_id(), &unrestored->session_id()}) {
        r.set_session_id(*id);
        auto rr = client_->Deform(r);
        ASSERT_TRUE(rr.ok()) << rr.status();
        ASSERT_TRUE(client::DecodePositions(*rr, got.emplace_back()).ok());
      }
      ASSERT_EQ(got[1], got[0]) << "frame " << f;
      // (At frame 5 the unrestored session has frame 4's pose too, and the cage is the frame's.)
      if (f == 4) {
        EXPECT_GT(MaxAbsDiff(got[2], got[0]), 1e-3) << "a session from rest gave the same";
      }
    }
  }
}

// Pipelines through the server: cage → LBS runs on the device as the fused kernel and equals the
// CPU session and SuperCages without updaters; a chain without one device kernel (DQS →
// implicit) runs on the CPU under AUTO, is refused on BACKEND_GPU, and equals METHOD_IMPLICIT;
// frames are counted under method="pipeline"; a bad chain is refused naming the stage.
TEST_P(GpuService, PipelinesRunWhereTheirStagesCan) {
  const LimbOptions limb = LimbOf(4000);
  const auto [rig_id, cage_floats] = UploadCagedLimb(limb);
  ASSERT_FALSE(rig_id.empty());
  const Skeleton sk = LimbSkeleton(limb);
  auto open = [&](std::initializer_list<v1::Method> stages, v1::Backend backend) {
    v1::CreateSessionRequest req;
    req.set_rig_id(rig_id);
    for (v1::Method m : stages) req.mutable_deformer()->add_stages()->set_method(m);
    req.set_backend(backend);
    return client_->CreateSession(req);
  };
  auto gpu = open({v1::METHOD_CAGE_MVC, v1::METHOD_LBS}, v1::BACKEND_AUTO);
  auto cpu = open({v1::METHOD_CAGE_MVC, v1::METHOD_LBS}, v1::BACKEND_CPU);
  v1::CreateSessionRequest hybrid_req;
  hybrid_req.set_rig_id(rig_id);
  hybrid_req.mutable_deformer()->set_method(v1::METHOD_SUPERCAGES);
  hybrid_req.mutable_deformer()->mutable_supercages()->set_no_skeleton_updater(true);
  hybrid_req.set_backend(v1::BACKEND_CPU);
  auto hybrid = client_->CreateSession(hybrid_req);
  ASSERT_TRUE(gpu.ok() && cpu.ok() && hybrid.ok()) << gpu.status() << cpu.status() << hybrid.status();
  EXPECT_EQ(gpu->backend(), v1::BACKEND_GPU);
  for (int f = 0; f < 4; ++f) {
    v1::DeformRequest r = CageClipFrame(sk, cage_floats, f, /*posed=*/true);
    std::vector<float> a, b, c;
    for (auto [id, out] : {std::pair{gpu->session_id(), &a}, std::pair{cpu->session_id(), &b},
                           std::pair{hybrid->session_id(), &c}}) {
      r.set_session_id(id);
      auto resp = client_->Deform(r);
      ASSERT_TRUE(resp.ok()) << resp.status();
      ASSERT_TRUE(client::DecodePositions(*resp, *out).ok());
    }
    EXPECT_LE(MaxAbsDiff(a, b), 1e-5 * 3.7) << "frame " << f;
    EXPECT_LE(MaxAbsDiff(b, c), 1e-5 * 3.7) << "frame " << f;
  }

  auto refused = open({v1::METHOD_DQS, v1::METHOD_IMPLICIT}, v1::BACKEND_GPU);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("this pipeline has no GPU implementation"));
  auto chain = open({v1::METHOD_DQS, v1::METHOD_IMPLICIT}, v1::BACKEND_AUTO);
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ(chain->backend(), v1::BACKEND_CPU);
  auto implicit = Open(rig_id, v1::METHOD_IMPLICIT, v1::BACKEND_CPU);
  ASSERT_TRUE(implicit.ok()) << implicit.status();
  const Pose pose = LimbPose(sk, 0.5);
  std::vector<float> a, b;
  auto ra = client_->Deform(Frame(chain->session_id(), 1, pose));
  auto rb = client_->Deform(Frame(implicit->session_id(), 1, pose));
  ASSERT_TRUE(ra.ok() && rb.ok()) << ra.status() << rb.status();
  ASSERT_TRUE(client::DecodePositions(*ra, a).ok() && client::DecodePositions(*rb, b).ok());
  EXPECT_EQ(a, b);
  const std::string metrics = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("sinew_frames_total{backend=\"cpu\",method=\"pipeline\"} 5"));

  auto bad = open({v1::METHOD_LBS, v1::METHOD_CAGE_MVC}, v1::BACKEND_AUTO);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("deformer.stages[1]: method cage-mvc"));
  v1::CreateSessionRequest mixed;
  mixed.set_rig_id(rig_id);
  mixed.mutable_deformer()->set_method(v1::METHOD_LBS);
  mixed.mutable_deformer()->add_stages()->set_method(v1::METHOD_DQS);
  EXPECT_THAT(std::string(client_->CreateSession(mixed).status().message()),
              HasSubstr("deformer.method: leave it and the parameters unset in a pipeline"));
  v1::CreateSessionRequest inner;
  inner.set_rig_id(rig_id);
  v1::DeformerConfig* stage = inner.mutable_deformer()->add_stages();
  stage->set_method(v1::METHOD_IMPLICIT);
  stage->mutable_implicit()->set_sigma(2);
  EXPECT_THAT(std::string(client_->CreateSession(inner).status().message()),
              HasSubstr("deformer.stages[0].implicit.sigma: 2 is outside (0, 1]"));
  // Counted and refused before the stages are read: a message may hold a million of them.
  v1::CreateSessionRequest many;
  many.set_rig_id(rig_id);
  for (int k = 0; k < 100000; ++k) many.mutable_deformer()->add_stages()->set_method(v1::METHOD_LBS);
  EXPECT_THAT(std::string(client_->CreateSession(many).status().message()),
              HasSubstr("deformer.stages: a pipeline has 1 to 8 stages, not 100000"));
  v1::CreateSessionRequest nested;
  nested.set_rig_id(rig_id);
  v1::DeformerConfig* level = nested.mutable_deformer();
  for (int d = 0; d < 50; ++d) level = level->add_stages();
  level->set_method(v1::METHOD_LBS);
  EXPECT_THAT(std::string(client_->CreateSession(nested).status().message()),
              HasSubstr("deformer.stages[0].stages: stages do not nest"));
}

// Normals out: on both backends the normals a frame returns are the area-weighted normals of the
// positions it computed (float32 exactly as core computes them; float16 and octahedral within
// their precision) — with float16 positions too, where they come from the float32 result before
// rounding, not from the rounded positions; an unknown encoding is refused.
TEST_P(GpuService, NormalsAreThoseOfTheReturnedMesh) {
  const LimbOptions limb = LimbOf(6000);
  const RigInput in = MakeLimb(limb);
  auto up = client_->UploadRig(client::RigToProto(in));
  ASSERT_TRUE(up.ok()) << up.status();
  const Rig rig = *BuildRig(in);
  const VertexNormals adjacency(rig);
  const Pose pose = LimbPose(LimbSkeleton(limb), 0.45);
  for (v1::Backend backend : {v1::BACKEND_GPU, v1::BACKEND_CPU}) {
    std::vector<float> float32_positions;  // the float32 session's result on this backend
    for (v1::OutputEncoding positions : {v1::OUTPUT_ENCODING_FLOAT32, v1::OUTPUT_ENCODING_FLOAT16}) {
      v1::CreateSessionRequest req;
      req.set_rig_id(up->rig_id());
      req.mutable_deformer()->set_method(v1::METHOD_DQS);
      req.set_backend(backend);
      req.set_encoding(positions);
      auto session = client_->CreateSession(req);
      ASSERT_TRUE(session.ok()) << session.status();
      EXPECT_EQ(session->backend(), backend);
      auto stream = client_->OpenStream();
      for (v1::NormalEncoding enc : {v1::NORMAL_ENCODING_FLOAT32, v1::NORMAL_ENCODING_FLOAT16, v1::NORMAL_ENCODING_OCTAHEDRAL}) {
        v1::DeformRequest r = Frame(session->session_id(), enc, pose);
        r.mutable_outputs()->set_normals(true);
        r.mutable_outputs()->set_normal_encoding(enc);
        ASSERT_TRUE(stream->Write(r));
        v1::DeformResponse resp;
        ASSERT_TRUE(stream->Read(&resp));
        ASSERT_FALSE(resp.has_error()) << resp.error().message();
        std::vector<float> p;
        ASSERT_TRUE(client::DecodePositions(resp, p).ok());
        if (positions == v1::OUTPUT_ENCODING_FLOAT32) {
          float32_positions = p;
        } else {
          EXPECT_LE(MaxAbsDiff(p, float32_positions), 2e-3);  // half precision at |x| < 4
        }
        std::vector<float> want(p.size()), got(p.size());
        adjacency.Compute(float32_positions, want, nullptr);
        const size_t n = rig.vertex_count();
        if (enc == v1::NORMAL_ENCODING_FLOAT32) {
          ASSERT_EQ(resp.normals().size(), 12 * n);
          std::memcpy(got.data(), resp.normals().data(), resp.normals().size());
        } else if (enc == v1::NORMAL_ENCODING_FLOAT16) {
          ASSERT_EQ(resp.normals().size(), 6 * n);
          const auto* h = reinterpret_cast<const uint16_t*>(resp.normals().data());
          for (size_t i = 0; i < 3 * n; ++i) got[i] = HalfToFloat(h[i]);
        } else {
          ASSERT_EQ(resp.normals().size(), 4 * n);
          DecodeOctahedral(std::span(reinterpret_cast<const int16_t*>(resp.normals().data()), 2 * n), got);
        }
        const double bound = enc == v1::NORMAL_ENCODING_FLOAT32 ? 1e-6 : enc == v1::NORMAL_ENCODING_FLOAT16 ? 1e-3 : 3e-4;
        EXPECT_LE(MaxAbsDiff(got, want), bound) << v1::Backend_Name(backend) << " " << v1::NormalEncoding_Name(enc);
      }
      v1::DeformRequest bad = Frame(session->session_id(), 9, pose);
      bad.mutable_outputs()->set_normals(true);
      bad.mutable_outputs()->set_normal_encoding(static_cast<v1::NormalEncoding>(5));
      ASSERT_TRUE(stream->Write(bad));
      v1::DeformResponse resp;
      ASSERT_TRUE(stream->Read(&resp));
      EXPECT_THAT(resp.error().message(), HasSubstr("outputs.normal_encoding: unknown value 5"));
      EXPECT_TRUE(stream->Close().ok());
    }
  }
}

// The quality report: on both backends and both position encodings it is core's measure of the
// mesh the frame computed (LBS at a 150° bend of the limb and its 180° twist: the crease folds,
// the candy wrapper loses volume and squeezes edges); a point set is refused naming the field.
TEST_P(GpuService, QualityReportMeasuresTheReturnedMesh) {
  const LimbOptions limb = LimbOf(6000);
  const RigInput in = MakeLimb(limb);
  auto up = client_->UploadRig(client::RigToProto(in));
  ASSERT_TRUE(up.ok()) << up.status();
  const Rig rig = *BuildRig(in);
  LimbMotion motion;
  motion.bend_degrees = 150;
  const Pose pose = LimbPose(LimbSkeleton(limb), 0.5, motion);
  for (v1::Backend backend : {v1::BACKEND_GPU, v1::BACKEND_CPU}) {
    std::vector<float> float32_positions;
    for (v1::OutputEncoding positions : {v1::OUTPUT_ENCODING_FLOAT32, v1::OUTPUT_ENCODING_FLOAT16}) {
      v1::CreateSessionRequest req;
      req.set_rig_id(up->rig_id());
      req.mutable_deformer()->set_method(v1::METHOD_LBS);
      req.set_backend(backend);
      req.set_encoding(positions);
      auto session = client_->CreateSession(req);
      ASSERT_TRUE(session.ok()) << session.status();
      v1::DeformRequest r = Frame(session->session_id(), 1, pose);
      r.mutable_outputs()->set_quality(true);
      auto resp = client_->Deform(r);
      ASSERT_TRUE(resp.ok()) << resp.status();
      ASSERT_TRUE(resp->has_quality());
      std::vector<float> p;
      ASSERT_TRUE(client::DecodePositions(*resp, p).ok());
      if (positions == v1::OUTPUT_ENCODING_FLOAT32) float32_positions = p;
      // The GPU measures what it sends (float16 rounded); the CPU its float32 result.
      const bool rounded = backend == v1::BACKEND_GPU && positions == v1::OUTPUT_ENCODING_FLOAT16;
      const MeshQuality want = MeasureMeshQuality(rig.positions, rounded ? p : float32_positions, rig.triangles, nullptr);
      const v1::QualityReport& q = resp->quality();
      const std::string where = v1::Backend_Name(backend) + " " + v1::OutputEncoding_Name(positions);
      EXPECT_EQ(q.inside_vertices(), want.inside_vertices) << where;
      EXPECT_EQ(q.touching_vertices(), want.touching_vertices) << where;
      EXPECT_DOUBLE_EQ(q.max_depth(), want.max_depth) << where;
      EXPECT_DOUBLE_EQ(q.volume_ratio(), want.volume_ratio) << where;
      EXPECT_DOUBLE_EQ(q.edge_stretch_min(), want.edge_stretch_min) << where;
      EXPECT_DOUBLE_EQ(q.edge_stretch_max(), want.edge_stretch_max) << where;
      EXPECT_EQ(q.rest_inside_vertices(), want.rest_inside_vertices) << where;
      EXPECT_EQ(q.new_inside_vertices(), want.new_inside_vertices) << where;
      EXPECT_DOUBLE_EQ(q.new_max_depth(), want.new_max_depth) << where;
      EXPECT_EQ(q.exposed_vertices(), want.exposed_vertices) << where;
      EXPECT_EQ(q.rest_inside_vertices(), 0u) << where << ": the limb's rest mesh is not inside itself";
      EXPECT_EQ(q.new_inside_vertices(), q.inside_vertices()) << where;
      // Where the bend folded the skin deepest: the vertex core names and its heaviest joint.
      ASSERT_GT(want.new_inside_vertices, 0u) << where << ": LBS folds the limb's crease at 150°";
      ASSERT_TRUE(q.has_new_deepest_vertex()) << where;
      EXPECT_EQ(int64_t(q.new_deepest_vertex()), want.new_deepest_vertex) << where;
      EXPECT_EQ(q.new_deepest_joint(), rig.skeleton.names[size_t(HeaviestJoint(rig.weights, size_t(want.new_deepest_vertex)))])
          << where;
      std::printf("%s: deepest new inside vertex %u at %s\n", where.c_str(), q.new_deepest_vertex(),
                  q.new_deepest_joint().c_str());
      EXPECT_LT(q.volume_ratio(), 0.97) << where << ": LBS's candy wrapper loses volume";
      EXPECT_LT(q.edge_stretch_min(), 0.5) << where;
      // A frame without it has none (streams reuse responses).
      r.set_frame(2);
      r.mutable_outputs()->set_quality(false);
      auto plain = client_->Deform(r);
      ASSERT_TRUE(plain.ok()) << plain.status();
      EXPECT_FALSE(plain->has_quality());
    }
  }
  // A point set has no triangles to measure.
  const RigInput points = MakePointBar({.rings = 10, .around = 12});
  auto pup = client_->UploadRig(client::RigToProto(points));
  ASSERT_TRUE(pup.ok()) << pup.status();
  auto ps = Open(pup->rig_id(), v1::METHOD_BASELINE, v1::BACKEND_CPU);
  ASSERT_TRUE(ps.ok()) << ps.status();
  v1::DeformRequest r = Frame(ps->session_id(), 1, RestPose(BuildRig(points)->skeleton));
  r.mutable_outputs()->set_quality(true);
  auto refused = client_->Deform(r);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("outputs.quality: this rig has no triangles"));
}

// Implicit skinning runs on the device: ServerInfo lists it, AUTO picks it, the history-
// independent method equals a CPU session (positions and vertex states, float32 and float16),
// the elastic method keeps its state on the device (reset returns to rest; a resumed batch
// equals an uninterrupted one), and frames are counted under backend="gpu".
TEST_P(GpuService, ImplicitMethodsRunOnTheGpu) {
  auto info = client_->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  for (const v1::MethodInfo& m : info->methods()) {
    if (m.method() == v1::METHOD_IMPLICIT || m.method() == v1::METHOD_ELASTIC_IMPLICIT) {
      EXPECT_EQ(m.backends_size(), 2) << m.name();
    }
  }
  const LimbOptions limb = LimbOf(4000, 2, 2);
  auto up = client_->UploadRig(client::RigToProto(MakeLimb(limb)));
  ASSERT_TRUE(up.ok()) << up.status();
  const Skeleton sk = LimbSkeleton(limb);
  auto rig = BuildRig(MakeLimb(limb));
  const double diag = rig->bbox_diagonal();
  auto bent = [&](double degrees) { return LimbPose(sk, 0.5, LimbMotion{.bend_degrees = degrees, .twist_degrees = 0}); };

  auto gpu = Open(up->rig_id(), v1::METHOD_IMPLICIT, v1::BACKEND_GPU);
  auto automatic = Open(up->rig_id(), v1::METHOD_IMPLICIT, v1::BACKEND_AUTO);
  auto cpu = Open(up->rig_id(), v1::METHOD_IMPLICIT, v1::BACKEND_CPU);
  ASSERT_TRUE(gpu.ok() && automatic.ok() && cpu.ok()) << gpu.status() << automatic.status() << cpu.status();
  EXPECT_EQ(gpu->backend(), v1::BACKEND_GPU);
  EXPECT_EQ(automatic->backend(), v1::BACKEND_GPU);
  // The tracking state is on the device: the host keeps far less per session.
  EXPECT_LT(gpu->state_bytes(), cpu->state_bytes() / 2);
  auto stream = client_->OpenStream();
  for (int f = 0; f < 4; ++f) {
    v1::DeformRequest r = Frame(gpu->session_id(), f, bent(40.0 * f));
    r.mutable_outputs()->set_vertex_states(true);
    // With normals too: the device's states follow the normals' rows (until 2026-12-02 the
    // normals were written over them and the states came back stale).
    r.mutable_outputs()->set_normals(f % 2 == 1);
    ASSERT_TRUE(stream->Write(r));
    v1::DeformResponse g;
    ASSERT_TRUE(stream->Read(&g));
    ASSERT_FALSE(g.has_error()) << g.error().message();
    r.set_session_id(cpu->session_id());
    auto c = client_->Deform(r);
    ASSERT_TRUE(c.ok()) << c.status();
    std::vector<float> a, b;
    ASSERT_TRUE(client::DecodePositions(g, a).ok() && client::DecodePositions(*c, b).ok());
    EXPECT_LE(MaxAbsDiff(a, b), 1e-4 * diag) << "frame " << f;
    ASSERT_EQ(g.vertex_states().size(), rig->vertex_count());
    size_t differ = 0;
    for (size_t v = 0; v < rig->vertex_count(); ++v) differ += g.vertex_states()[v] != c->vertex_states()[v];
    EXPECT_LE(differ, rig->vertex_count() / 200) << "frame " << f;
  }
  EXPECT_TRUE(stream->Close().ok());

  // float16 output from the device.
  v1::CreateSessionRequest half;
  half.set_rig_id(up->rig_id());
  half.mutable_deformer()->set_method(v1::METHOD_IMPLICIT);
  half.set_backend(v1::BACKEND_GPU);
  half.set_encoding(v1::OUTPUT_ENCODING_FLOAT16);
  auto h = client_->CreateSession(half);
  ASSERT_TRUE(h.ok()) << h.status();
  auto hr = client_->Deform(Frame(h->session_id(), 1, bent(90)));
  auto cr = client_->Deform(Frame(cpu->session_id(), 1, bent(90)));
  ASSERT_TRUE(hr.ok() && cr.ok());
  std::vector<float> a, b;
  ASSERT_TRUE(client::DecodePositions(*hr, a).ok() && client::DecodePositions(*cr, b).ok());
  EXPECT_LE(MaxAbsDiff(a, b), 3.0 / 1024 + 1e-4 * diag);  // half precision at |x| ≤ 3

  // Elastic on the device: reset returns to rest; a resumed batch equals an uninterrupted one.
  auto eis = Open(up->rig_id(), v1::METHOD_ELASTIC_IMPLICIT, v1::BACKEND_GPU);
  ASSERT_TRUE(eis.ok()) << eis.status();
  EXPECT_EQ(eis->backend(), v1::BACKEND_GPU);
  ASSERT_TRUE(client_->Deform(Frame(eis->session_id(), 1, bent(90))).ok());
  v1::DeformRequest reset = Frame(eis->session_id(), 2, BindPose(sk));
  reset.set_reset(true);
  auto rr = client_->Deform(reset);
  ASSERT_TRUE(rr.ok()) << rr.status();
  std::vector<float> rest;
  ASSERT_TRUE(client::DecodePositions(*rr, rest).ok());
  EXPECT_LT(MaxAbsDiff(rest, rig->positions), 1e-5 * diag);
  v1::DeformClipRequest batch;
  batch.set_session_id(eis->session_id());
  for (int k = 0; k < 10; ++k) client::PoseToProto(bent(12.0 * k), *batch.mutable_poses()->add_poses());
  ExpectResumedBatchEqualsWhole(*client_, batch, 6);
  // A snapshot of the device's nodes, restored into another device session, continues with the
  // bits of the first (until 2026-12-04 GetSessionState answered UNIMPLEMENTED here); a CPU
  // session's state is refused by it (states continue bit for bit on the same kind only).
  auto twisted = [&](double degrees) {
    return LimbPose(sk, 0.5, LimbMotion{.bend_degrees = degrees, .twist_degrees = degrees / 3});
  };
  auto moved = Open(up->rig_id(), v1::METHOD_ELASTIC_IMPLICIT, v1::BACKEND_GPU);
  auto twin = Open(up->rig_id(), v1::METHOD_ELASTIC_IMPLICIT, v1::BACKEND_GPU);
  auto cpu_eis = Open(up->rig_id(), v1::METHOD_ELASTIC_IMPLICIT, v1::BACKEND_CPU);
  ASSERT_TRUE(moved.ok() && twin.ok() && cpu_eis.ok()) << moved.status() << twin.status() << cpu_eis.status();
  for (int k = 0; k < 4; ++k) {
    ASSERT_TRUE(client_->Deform(Frame(moved->session_id(), k, twisted(25.0 * k))).ok());
    ASSERT_TRUE(client_->Deform(Frame(cpu_eis->session_id(), k, twisted(25.0 * k))).ok());
  }
  auto saved = client_->GetSessionState(moved->session_id());
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->backend(), v1::BACKEND_GPU);
  EXPECT_GT(saved->method_state().size(), 1000u) << "a history, not a state from rest";
  auto cpu_saved = client_->GetSessionState(cpu_eis->session_id());
  ASSERT_TRUE(cpu_saved.ok()) << cpu_saved.status();
  EXPECT_EQ(client_->SetSessionState(twin->session_id(), *cpu_saved).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(client_->SetSessionState(twin->session_id(), *saved).ok());
  for (int k = 4; k < 7; ++k) {
    const Pose pose = twisted(110.0 - 20.0 * (k - 4));
    auto a = client_->Deform(Frame(moved->session_id(), k, pose));
    auto b = client_->Deform(Frame(twin->session_id(), k, pose));
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    std::vector<float> pa, pb;
    ASSERT_TRUE(client::DecodePositions(*a, pa).ok() && client::DecodePositions(*b, pb).ok());
    ASSERT_EQ(pa, pb) << "frame " << k;
  }
  const std::string metrics = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("sinew_frames_total{backend=\"gpu\",method=\"implicit\"} 5"));
}

// The CLI plays on the backend it is asked for and says which one each session ran on.
TEST_P(GpuService, PlayRunsOnTheRequestedBackend) {
  std::string out, err;
  ASSERT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server_->target(), "play", "--method", "implicit,elastic-implicit",
                        "--vertices", "2000", "--frames", "8", "--backend", "gpu"},
                       &out, &err),
            0)
      << err;
  EXPECT_THAT(out, HasSubstr("implicit (gpu): 8 frames x 2000 vertices"));
  EXPECT_THAT(out, HasSubstr("elastic-implicit (gpu): 8 frames x 2000 vertices"));
  EXPECT_THAT(out, HasSubstr(" 0 errors"));
  ASSERT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server_->target(), "play", "--method", "dqs", "--vertices", "2000",
                        "--frames", "4", "--backend", "cpu", "--json"},
                       &out, &err),
            0)
      << err;
  EXPECT_THAT(out, HasSubstr("\"method\":\"dqs\",\"backend\":\"cpu\""));
  EXPECT_NE(RunProcess({SINEW_CLI_PATH, "--target", server_->target(), "play", "--backend", "tpu"}, &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("--backend"));
}

// A rig whose composition tree is deeper than the device program evaluates (a chain of 50
// bones): BACKEND_GPU is refused with the reason, AUTO runs it on the CPU.
TEST_P(GpuService, ImplicitRigsTooDeepForTheDeviceRunOnTheCpu) {
  LimbOptions chain = LimbOf(16000, 50, 2);
  auto up = client_->UploadRig(client::RigToProto(MakeLimb(chain)));
  ASSERT_TRUE(up.ok()) << up.status();
  auto gpu = Open(up->rig_id(), v1::METHOD_IMPLICIT, v1::BACKEND_GPU);
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(gpu.status().message()), HasSubstr("levels deep"));
  auto automatic = Open(up->rig_id(), v1::METHOD_IMPLICIT, v1::BACKEND_AUTO);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->backend(), v1::BACKEND_CPU);
  EXPECT_TRUE(client_->Deform(Frame(automatic->session_id(), 1, LimbPose(LimbSkeleton(chain), 0.3))).ok());
}

TEST_P(GpuService, DeviceMemoryLimitIsEnforced) {
  // 3 MB: room for a 20k-vertex rig (~0.7 MB) and a few sessions (~0.24 MB each), not 20.
  ASSERT_NO_FATAL_FAILURE(RestartWithDeviceLimit(3000000));
  auto up = client_->UploadRig(client::RigToProto(MakeLimb(LimbOf(20000))));
  ASSERT_TRUE(up.ok());
  absl::Status last;
  int opened = 0;
  for (int i = 0; i < 20 && last.ok(); ++i) {
    auto s = Open(up->rig_id(), v1::METHOD_LBS, v1::BACKEND_GPU);
    last = s.status();
    opened += s.ok();
  }
  EXPECT_GT(opened, 0);
  EXPECT_LT(opened, 20);
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(last.message()), HasSubstr("--gpu-memory-limit"));
  // The client can still choose the CPU.
  EXPECT_TRUE(Open(up->rig_id(), v1::METHOD_LBS, v1::BACKEND_CPU).ok());
}

// The device copies of rigs and their methods' data are a cache: once their sessions have
// closed, they give way to a new session that needs the room (until 2026-12-02 they stayed
// until DeleteRig, and a server that had served a few rigs refused every GPU session). When the
// room is held by open sessions, BACKEND_AUTO runs on the CPU and BACKEND_GPU is refused.
TEST_P(GpuService, DeviceCopiesNoSessionHoldsGiveWayToNewSessions) {
  std::vector<LimbOptions> limbs;
  for (float radius : {0.25f, 0.27f, 0.29f}) {
    LimbOptions l = LimbOf(4000);
    l.radius = radius;
    limbs.push_back(l);
  }
  // What one rig, its cage coefficients and one session hold on the device.
  const uint64_t idle = DeviceUse().first;
  const std::string first = UploadCagedLimb(limbs[0]).first;
  ASSERT_FALSE(first.empty());
  auto probe = Open(first, v1::METHOD_CAGE_MVC, v1::BACKEND_GPU);
  ASSERT_TRUE(probe.ok()) << probe.status();
  const uint64_t one = DeviceUse().first - idle;
  CloseOnDevice(probe->session_id());
  EXPECT_GT(DeviceUse().first, idle) << "the rig and its coefficients stay cached after the session";

  // Room for one such rig with its session, not for two.
  ASSERT_NO_FATAL_FAILURE(RestartWithDeviceLimit(idle + one + one / 2));
  std::vector<std::pair<std::string, size_t>> rigs;
  for (const LimbOptions& l : limbs) rigs.push_back(UploadCagedLimb(l));
  // One after the other, each on the device: the previous rig's copies give way.
  for (int round = 0; round < 2; ++round) {
    for (size_t k = 0; k < rigs.size(); ++k) {
      auto s = Open(rigs[k].first, v1::METHOD_CAGE_MVC, v1::BACKEND_GPU);
      ASSERT_TRUE(s.ok()) << "rig " << k << " round " << round << ": " << s.status();
      v1::DeformRequest r = CageClipFrame(LimbSkeleton(limbs[k]), rigs[k].second, 1, false);
      r.set_session_id(s->session_id());
      auto d = client_->Deform(r);
      ASSERT_TRUE(d.ok()) << d.status();
      CloseOnDevice(s->session_id());
    }
  }
  // An open session holds its copies: the next rig's AUTO session runs on the CPU, a GPU one is
  // refused naming the flag, and the held session still deforms on the device.
  auto held = Open(rigs[0].first, v1::METHOD_CAGE_MVC, v1::BACKEND_GPU);
  ASSERT_TRUE(held.ok()) << held.status();
  auto automatic = Open(rigs[1].first, v1::METHOD_CAGE_MVC, v1::BACKEND_AUTO);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->backend(), v1::BACKEND_CPU);
  v1::DeformRequest r = CageClipFrame(LimbSkeleton(limbs[1]), rigs[1].second, 2, false);
  r.set_session_id(automatic->session_id());
  EXPECT_TRUE(client_->Deform(r).ok());
  auto refused = Open(rigs[1].first, v1::METHOD_CAGE_MVC, v1::BACKEND_GPU);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--gpu-memory-limit"));
  r = CageClipFrame(LimbSkeleton(limbs[0]), rigs[0].second, 3, false);
  r.set_session_id(held->session_id());
  auto d = client_->Deform(r);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(DeviceUse().second, 1u);
}

// The same for a frame's own device data: the normals' adjacency, uploaded with the first frame
// that asks for normals, frees the copies no session holds when it does not fit (until
// 2026-12-02 such frames failed RESOURCE_EXHAUSTED every time). Sizes are measured on a first
// server; the second has room for rig A's cached copies and an LBS session on rig B, not also
// for B's adjacency.
TEST_P(GpuService, ANormalsFrameMakesRoomFromDeviceCopiesNoSessionHolds) {
  auto used = [&] { return DeviceUse().first; };
  LimbOptions a_limb = LimbOf(4000), b_limb = LimbOf(4000);
  b_limb.radius = 0.3f;
  auto normals_frame = [&](const std::string& session, const LimbOptions& limb, size_t cage_floats, bool cage) {
    v1::DeformRequest r;
    if (cage) {
      r = CageClipFrame(LimbSkeleton(limb), cage_floats, 1, false);
    } else {
      client::PoseToProto(LimbPose(LimbSkeleton(limb), 0.3), *r.mutable_pose());
    }
    r.set_session_id(session);
    r.mutable_outputs()->set_normals(true);
    return client_->Deform(r);
  };
  // Rig A's cached copies after a cage session with normals; rig B's LBS session; B's adjacency.
  const uint64_t idle = used();
  const auto [a_id, a_floats] = UploadCagedLimb(a_limb);
  auto a = Open(a_id, v1::METHOD_CAGE_MVC, v1::BACKEND_GPU);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(normals_frame(a->session_id(), a_limb, a_floats, true).ok());
  CloseOnDevice(a->session_id());
  const uint64_t cached_a = used() - idle;
  auto b_up = client_->UploadRig(client::RigToProto(MakeLimb(b_limb)));
  ASSERT_TRUE(b_up.ok());
  auto b = Open(b_up->rig_id(), v1::METHOD_LBS, v1::BACKEND_GPU);
  ASSERT_TRUE(b.ok()) << b.status();
  const uint64_t b_session = used() - idle - cached_a;
  ASSERT_TRUE(normals_frame(b->session_id(), b_limb, 0, false).ok());
  const uint64_t b_mesh = used() - idle - cached_a - b_session;
  ASSERT_GT(b_mesh, 0u);

  ASSERT_NO_FATAL_FAILURE(RestartWithDeviceLimit(idle + cached_a + b_session + b_mesh / 2));
  const auto [a2_id, a2_floats] = UploadCagedLimb(a_limb);
  a = Open(a2_id, v1::METHOD_CAGE_MVC, v1::BACKEND_GPU);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(normals_frame(a->session_id(), a_limb, a2_floats, true).ok());
  CloseOnDevice(a->session_id());
  b_up = client_->UploadRig(client::RigToProto(MakeLimb(b_limb)));
  ASSERT_TRUE(b_up.ok());
  b = Open(b_up->rig_id(), v1::METHOD_LBS, v1::BACKEND_GPU);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->backend(), v1::BACKEND_GPU);
  auto with_normals = normals_frame(b->session_id(), b_limb, 0, false);
  ASSERT_TRUE(with_normals.ok()) << with_normals.status();
  EXPECT_FALSE(with_normals->normals().empty());
}

// A stateful GPU session's frame refused because its normals' device data does not fit is not
// applied: the same frame sent again without normals is deformed (until 2026-12-02 the mesh and
// the normals' rows were had after the frame was applied, and it got "frame 0 was already
// applied").
TEST_P(GpuService, AFrameRefusedForItsNormalsRoomIsNotApplied) {
  const LimbOptions limb = LimbOf(4000);
  const Skeleton sk = LimbSkeleton(limb);
  // What the rig, its coefficients and a SuperCages session hold; a limit with no room beyond.
  const uint64_t idle = DeviceUse().first;
  const auto [probe_rig, probe_floats] = UploadCagedLimb(limb);
  ASSERT_FALSE(probe_rig.empty());
  auto probe = Open(probe_rig, v1::METHOD_SUPERCAGES, v1::BACKEND_GPU);
  ASSERT_TRUE(probe.ok()) << probe.status();
  const uint64_t held = DeviceUse().first - idle;
  ASSERT_NO_FATAL_FAILURE(RestartWithDeviceLimit(idle + held + 1024));
  const auto [rig_id, cage_floats] = UploadCagedLimb(limb);
  auto session = Open(rig_id, v1::METHOD_SUPERCAGES, v1::BACKEND_GPU);
  ASSERT_TRUE(session.ok()) << session.status();
  v1::DeformRequest req = CageClipFrame(sk, cage_floats, 0, /*posed=*/true);
  req.set_session_id(session->session_id());
  req.mutable_outputs()->set_normals(true);
  auto refused = client_->Deform(req);
  ASSERT_FALSE(refused.ok()) << "normals fitted within " << held + 1024 << " bytes";
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--gpu-memory-limit"));
  req.mutable_outputs()->set_normals(false);
  auto again = client_->Deform(req);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->positions().empty());
}

}  // namespace
}  // namespace sinew::testing
