// Baseline skinning of point sets through a real server: a point-set rig (no triangles) with a
// sphere-mesh is uploaded, sessions are prepared (the encoding, with its counts in GetRig) and
// posed by a skeleton pose and by explicit spheres, every frame equal to core's; malformed
// sphere-meshes and frames are refused naming the field and index.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "clients/lib/client.h"
#include "core/baseline/baseline.h"
#include "core/procedural/point_bar.h"
#include "tests/service/server_process.h"
#include "tests/service/test_util.h"

namespace sinew::testing {
namespace {

using ::testing::HasSubstr;

class BaselineService : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>();
    ASSERT_TRUE(server_->started());
    client_ = std::make_unique<client::Client>(server_->target());
    ASSERT_TRUE(client_->WaitReady(std::chrono::seconds(60)).ok());
    bar_.radii = {0.7, 0.55, 0.4};
    in_ = MakePointBar(bar_);
    auto up = client_->UploadRig(client::RigToProto(in_));
    ASSERT_TRUE(up.ok()) << up.status();
    rig_id_ = up->rig_id();
    EXPECT_EQ(up->info().triangle_count(), 0u);
  }
  void TearDown() override {
    if (server_) {
      EXPECT_EQ(server_->Terminate(), 0);
    }
  }
  absl::StatusOr<v1::Session> Open() {
    v1::CreateSessionRequest req;
    req.set_rig_id(rig_id_);
    req.mutable_deformer()->set_method(v1::METHOD_BASELINE);
    return client_->CreateSession(req);
  }
  PointBarOptions bar_;
  RigInput in_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<client::Client> client_;
  std::string rig_id_;
};

std::string Floats(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size()); }

// Frames posed through the skeleton and through explicit spheres give core's points, bit for bit,
// and the base points asked for core's; the preparation says where the points' base points lie.
TEST_F(BaselineService, FramesEqualCoreByPoseAndBySpheres) {
  auto session = Open();
  ASSERT_TRUE(session.ok()) << session.status();
  auto rig = std::make_shared<const Rig>(*BuildRig(in_));
  auto prepared = PrepareBaseline(*rig, DeformerConfig("baseline"), nullptr, {});
  ASSERT_TRUE(prepared.ok());
  auto core = CreateBaselineDeformer(rig, *prepared, DeformerConfig("baseline"));
  ASSERT_TRUE(core.ok());
  Pose pose = RestPose(rig->skeleton);
  pose.set_rotation(1, Eigen::Quaterniond(Eigen::AngleAxisd(1.2, Eigen::Vector3d(0, 0.6, 0.8))));
  std::vector<float> got, want(rig->positions.size());
  v1::DeformRequest with_bases = Frame(session->session_id(), 0, pose);
  with_bases.mutable_outputs()->set_base_points(true);
  auto r = client_->Deform(with_bases);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->method(), v1::METHOD_BASELINE);
  ASSERT_TRUE(client::DecodePositions(*r, got).ok());
  ASSERT_TRUE((*core)->Deform({&pose, {}}, want, nullptr).ok());
  EXPECT_EQ(got, want);
  // The base points the client asked for: core's.
  std::vector<float> bases;
  FrameExtras extras;
  extras.base_points = &bases;
  ASSERT_TRUE((*core)->Extras(extras).ok());
  EXPECT_EQ(r->base_points(), Floats(bases));

  v1::DeformRequest req;
  req.set_session_id(session->session_id());
  req.set_frame(1);
  const std::vector<float> centres = {0, 0, 0, 2, 0, 0, 3, 1.7f, 0}, twists = {0, 0.8f};
  req.mutable_spheres()->set_centers(Floats(centres));
  req.mutable_spheres()->set_twists(Floats(twists));
  r = client_->Deform(req);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(client::DecodePositions(*r, got).ok());
  SphereFrame spheres{centres, {}, twists};
  FrameInput frame;
  frame.spheres = &spheres;
  ASSERT_TRUE((*core)->Deform(frame, want, nullptr).ok());
  EXPECT_EQ(got, want);

  const auto info = client_->GetRig(rig_id_);
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->preparations_size(), 1);
  std::printf("baseline preparation: %s\n", info->preparations(0).summary().c_str());
  EXPECT_THAT(info->preparations(0).summary(), HasSubstr(std::to_string(rig->vertex_count()) + " points over 2 bones"));
}

// Malformed input gets a precise error and leaves the session usable: a sphere-mesh whose bone has
// no cone (at upload), frames with the wrong number of centres, a non-positive radius, twists
// without centres, spheres that swallow one another, neither pose nor spheres; a rig without a
// sphere-mesh cannot open a session.
TEST_F(BaselineService, MalformedSphereMeshesAndFramesAreRefusedNamingTheField) {
  RigInput bad = in_;
  bad.rig.sphere_mesh.radii[2] = 9;
  auto refused = client_->UploadRig(client::RigToProto(bad));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("rig.sphere_mesh.bones[1]"));
  v1::Rig ragged = client::RigToProto(in_);
  ragged.mutable_sphere_mesh()->set_bones(ragged.sphere_mesh().bones().substr(0, 6));
  refused = client_->UploadRig(ragged);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("rig.sphere_mesh.bones"));

  auto session = Open();
  ASSERT_TRUE(session.ok()) << session.status();
  auto expect = [&](const std::function<void(v1::DeformRequest&)>& edit, const std::string& needle) {
    v1::DeformRequest req;
    req.set_session_id(session->session_id());
    edit(req);
    const auto st = client_->Deform(req).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(needle));
  };
  expect([](v1::DeformRequest& r) { r.mutable_spheres()->set_centers(Floats({0, 0, 0, 1, 0, 0})); }, "spheres.centers");
  expect([](v1::DeformRequest& r) {
           r.mutable_spheres()->set_centers(Floats({0, 0, 0, 2, 0, 0, 4, 0, 0}));
           r.mutable_spheres()->set_radii(Floats({0.7f, -1, 0.4f}));
         },
         "spheres.radii[1]");
  expect([](v1::DeformRequest& r) { r.mutable_spheres()->set_twists(Floats({0, 1})); }, "spheres.twists");
  expect([](v1::DeformRequest& r) {
           r.mutable_spheres()->set_centers(Floats({0, 0, 0, 2, 0, 0, 2.05f, 0, 0}));
         },
         "bone 1");
  expect([](v1::DeformRequest& r) { r.mutable_spheres()->set_centers(Floats({0, 0, 0, 2, 0, 0, NAN, 0, 0})); },
         "spheres.centers[2]");
  expect([](v1::DeformRequest&) {}, "pose");
  // Still serving.
  auto ok = client_->Deform(Frame(session->session_id(), 0, RestPose(BuildRig(in_)->skeleton)));
  EXPECT_TRUE(ok.ok()) << ok.status();

  RigInput plain = in_;
  plain.rig.sphere_mesh = {};
  auto up = client_->UploadRig(client::RigToProto(plain));
  ASSERT_TRUE(up.ok()) << up.status();
  v1::CreateSessionRequest req;
  req.set_rig_id(up->rig_id());
  req.mutable_deformer()->set_method(v1::METHOD_BASELINE);
  const auto none = client_->CreateSession(req);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition) << none.status();
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("sphere_mesh"));
}

}  // namespace
}  // namespace sinew::testing
