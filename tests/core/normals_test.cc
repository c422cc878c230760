// Normals out (core/normals/normals.h and the skinning deformers' moved normals): the mesh
// normal at a vertex is the direction of steepest growth of the enclosed volume (divergence
// theorem) when that vertex moves, checked by central finite differences of the volume; normals
// of a cylinder point radially; a rigid pose rotates them; octahedral encoding keeps their
// direction; point sets' uploaded normals follow the skinning.
#include <cmath>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/blend/blend.h"
#include "core/deformer/deformer.h"
#include "core/normals/normals.h"
#include "core/procedural/limb.h"
#include "tests/core/test_util.h"

namespace sinew {
namespace {

LimbOptions Tube() {
  LimbOptions o;
  o.rings = 40;
  o.segments = 32;
  o.bones = 3;
  o.max_influences = 3;
  return o;
}

std::vector<float> Deformed(std::shared_ptr<const Rig> rig, const std::string& method, const Pose& pose) {
  std::shared_ptr<const MethodParams> params;
  if (method == "blend") {
    auto p = std::make_shared<BlendParams>();
    p->weight = 0.5;
    params = p;
  }
  auto d = CreateDeformer(rig, {method, params});
  EXPECT_TRUE(d.ok()) << d.status();
  std::vector<float> out(rig->positions.size());
  EXPECT_TRUE((*d)->Deform({&pose, {}}, out, nullptr).ok());
  return out;
}

// (1/6) Σ p_a · (p_b × p_c): the divergence-theorem volume of the (open) tube.
double Volume(const std::vector<uint32_t>& tri, const std::vector<double>& p) {
  double v = 0;
  for (size_t f = 0; f < tri.size(); f += 3) {
    const Eigen::Vector3d a(&p[3 * tri[f]]), b(&p[3 * tri[f + 1]]), c(&p[3 * tri[f + 2]]);
    v += a.dot(b.cross(c));
  }
  return v / 6;
}

TEST(Normals, AreTheVolumeGradientByFiniteDifferences) {
  const LimbOptions o = Tube();
  auto rig = std::make_shared<const Rig>(testing::BuildOrDie(MakeLimb(o)));
  const Pose pose = LimbPose(rig->skeleton, 0.4);
  const auto posed = Deformed(rig, "dqs", pose);
  VertexNormals vn(*rig);
  std::vector<float> normals(posed.size());
  vn.Compute(posed, normals, nullptr);
  std::vector<double> p(posed.begin(), posed.end());
  const double h = 1e-5;
  double worst = 0;
  size_t checked = 0;
  // Interior rings only: their triangle fans are closed, where the identity holds.
  for (size_t v = o.segments; v < rig->vertex_count() - o.segments; v += 7) {
    Eigen::Vector3d grad;
    for (int k = 0; k < 3; ++k) {
      const double x = p[3 * v + k];
      p[3 * v + k] = x + h;
      const double up = Volume(rig->triangles, p);
      p[3 * v + k] = x - h;
      const double down = Volume(rig->triangles, p);
      p[3 * v + k] = x;
      grad[k] = (up - down) / (2 * h);
    }
    const Eigen::Vector3d n(normals[3 * v], normals[3 * v + 1], normals[3 * v + 2]);
    worst = std::max(worst, (grad.normalized() - n).norm());
    ++checked;
  }
  EXPECT_GT(checked, 100u);
  EXPECT_LE(worst, 1e-4);
}

TEST(Normals, CylinderNormalsPointRadially) {
  const LimbOptions o = Tube();
  const Rig rig = testing::BuildOrDie(MakeLimb(o));
  VertexNormals vn(rig);
  std::vector<float> normals(rig.positions.size());
  vn.Compute(rig.positions, normals, nullptr);
  double worst = 0;
  for (size_t v = o.segments; v < rig.vertex_count() - o.segments; ++v) {
    const Eigen::Vector3d radial = Eigen::Vector3d(0, rig.positions[3 * v + 1], rig.positions[3 * v + 2]).normalized();
    const Eigen::Vector3d n(normals[3 * v], normals[3 * v + 1], normals[3 * v + 2]);
    worst = std::max(worst, std::abs(std::abs(n.dot(radial)) - 1));
    EXPECT_GT(n.dot(radial), 0) << v;  // outward
  }
  EXPECT_LE(worst, 1e-5);
}

TEST(Normals, RigidPoseRotatesThem) {
  auto rig = std::make_shared<const Rig>(testing::BuildOrDie(MakeLimb(Tube())));
  const Eigen::Quaterniond g = Eigen::Quaterniond(0.2, 0.7, -0.3, 0.6).normalized();
  Pose moved = RestPose(rig->skeleton);
  Similarity root = rig->skeleton.rest_local[0];
  root = Similarity{g, Eigen::Vector3d(0.3, -2, 1), 1.0} * root;
  moved.set_joint(0, root);
  VertexNormals vn(*rig);
  std::vector<float> rest(rig->positions.size()), after(rig->positions.size());
  vn.Compute(rig->positions, rest, nullptr);
  vn.Compute(Deformed(rig, "lbs", moved), after, nullptr);
  double worst = 0;
  for (size_t v = 0; v < rig->vertex_count(); ++v) {
    const Eigen::Vector3d want = g * Eigen::Vector3d(rest[3 * v], rest[3 * v + 1], rest[3 * v + 2]);
    worst = std::max(worst, (want - Eigen::Vector3d(after[3 * v], after[3 * v + 1], after[3 * v + 2])).norm());
  }
  EXPECT_LE(worst, 2e-5);
}

TEST(Normals, OctahedralKeepsTheDirection) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g;
  std::vector<float> n;
  for (int i = 0; i < 20000; ++i) {
    Eigen::Vector3f v(g(rng), g(rng), g(rng));
    v.normalize();
    n.insert(n.end(), {v.x(), v.y(), v.z()});
  }
  for (float axis : {1.f, -1.f}) n.insert(n.end(), {0, 0, axis});  // the poles
  std::vector<int16_t> enc(n.size() / 3 * 2);
  std::vector<float> dec(n.size());
  EncodeOctahedral(n, enc);
  DecodeOctahedral(enc, dec);
  double worst = 0;
  for (size_t v = 0; v < n.size() / 3; ++v) {
    const Eigen::Vector3d a(n[3 * v], n[3 * v + 1], n[3 * v + 2]), b(dec[3 * v], dec[3 * v + 1], dec[3 * v + 2]);
    worst = std::max(worst, std::atan2(a.cross(b).norm(), a.dot(b)) * 180 / M_PI);  // well conditioned near 0
  }
  EXPECT_LE(worst, 0.01);
}

// A point set (no triangles) with normals: with one influence per point each skinning moves a
// normal by its joint's rotation exactly, and a rigid pose of the whole set rotates them all.
TEST(Normals, PointSetNormalsFollowTheSkinning) {
  RigInput in = MakeLimb(Tube());
  in.rig.triangles.clear();
  const Rig mesh = testing::BuildOrDie(MakeLimb(Tube()));
  VertexNormals vn(mesh);
  in.rig.normals.resize(mesh.positions.size());
  vn.Compute(mesh.positions, in.rig.normals, nullptr);
  // One influence: the largest weight of each point.
  RigInput one = in;
  one.weights.joints.clear();
  one.weights.weights.clear();
  one.weights.offsets = {0};
  for (size_t v = 0; v + 1 < in.weights.offsets.size(); ++v) {
    uint32_t best = in.weights.offsets[v];
    for (uint32_t e = best; e < in.weights.offsets[v + 1]; ++e) {
      if (in.weights.weights[e] > in.weights.weights[best]) best = e;
    }
    one.weights.joints.push_back(in.weights.joints[best]);
    one.weights.weights.push_back(1);
    one.weights.offsets.push_back(uint32_t(one.weights.joints.size()));
  }
  for (const RigInput* input : {&in, &one}) {
    auto rig = std::make_shared<const Rig>(testing::BuildOrDie(*input));
    const Pose pose = LimbPose(rig->skeleton, 0.5);
    std::vector<Similarity> world(rig->joint_count());
    std::vector<Affine34d> transforms(rig->joint_count());
    SkinningTransforms(rig->skeleton, pose, world, transforms);
    for (const char* method : {"lbs", "dqs", "blend"}) {
      std::shared_ptr<const MethodParams> params;
      if (std::string(method) == "blend") {
        auto p = std::make_shared<BlendParams>();
        p->weight = 0.3;
        params = p;
      }
      auto d = CreateDeformer(rig, {method, params});
      ASSERT_TRUE(d.ok()) << d.status();
      std::vector<float> out(rig->positions.size()), normals;
      ASSERT_TRUE((*d)->Deform({&pose, {}}, out, nullptr).ok());
      ASSERT_TRUE((*d)->Extras({.normals = &normals}).ok());
      ASSERT_EQ(normals.size(), out.size());
      double worst = 0;
      for (size_t v = 0; v < rig->vertex_count(); ++v) {
        const Eigen::Vector3d got(normals[3 * v], normals[3 * v + 1], normals[3 * v + 2]);
        EXPECT_NEAR(got.norm(), 1, 1e-5);
        if (input != &one) continue;
        const Eigen::Matrix3d r = transforms[rig->weights.joints[rig->weights.offsets[v]]].leftCols<3>();
        const Eigen::Vector3d want = (r * Eigen::Vector3d(rig->normals[3 * v], rig->normals[3 * v + 1], rig->normals[3 * v + 2])).normalized();
        worst = std::max(worst, (got - want).norm());
      }
      EXPECT_LE(worst, 1e-5) << method;
    }
  }
  // Several influences per point, one rigid motion G of the whole skeleton: every method moves
  // every normal by G's rotation (LBS's inverse transpose and DQS's blended rotation agree).
  {
    auto rig = std::make_shared<const Rig>(testing::BuildOrDie(in));
    const Eigen::Quaterniond g = Eigen::Quaterniond(0.4, -0.2, 0.8, 0.3).normalized();
    Pose moved = RestPose(rig->skeleton);
    moved.set_joint(0, Similarity{g, Eigen::Vector3d(1, 2, -0.5), 1.0} * rig->skeleton.rest_local[0]);
    for (const char* method : {"lbs", "dqs", "blend"}) {
      std::shared_ptr<const MethodParams> params;
      if (std::string(method) == "blend") {
        auto p = std::make_shared<BlendParams>();
        p->weight = 0.3;
        params = p;
      }
      auto d = CreateDeformer(rig, {method, params});
      ASSERT_TRUE(d.ok()) << d.status();
      std::vector<float> out(rig->positions.size()), normals;
      ASSERT_TRUE((*d)->Deform({&moved, {}}, out, nullptr).ok());
      ASSERT_TRUE((*d)->Extras({.normals = &normals}).ok());
      double worst = 0;
      for (size_t v = 0; v < rig->vertex_count(); ++v) {
        const Eigen::Vector3d want = g * Eigen::Vector3d(rig->normals[3 * v], rig->normals[3 * v + 1], rig->normals[3 * v + 2]);
        worst = std::max(worst, (want - Eigen::Vector3d(normals[3 * v], normals[3 * v + 1], normals[3 * v + 2])).norm());
      }
      EXPECT_LE(worst, 1e-5) << method;
    }
  }
  // A mesh with triangles takes its normals from its positions, not from the skinning.
  auto with_triangles = std::make_shared<const Rig>(mesh);
  auto d = CreateDeformer(with_triangles, {"lbs", nullptr});
  std::vector<float> normals;
  const Pose rest = RestPose(with_triangles->skeleton);
  std::vector<float> out(with_triangles->positions.size());
  ASSERT_TRUE((*d)->Deform({&rest, {}}, out, nullptr).ok());
  EXPECT_EQ((*d)->Extras({.normals = &normals}).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace sinew
