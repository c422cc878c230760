// Baseline skinning (seed 003) on real animated characters from assimp-testmodels, each made
// into a point set with a sphere-mesh (clients/import/point_set.h) and posed through its clip by
// baseline skinning and, for the paper's comparison, by LBS and DQS with Gaussian weights on the
// same points: Testwuson (a four-legged creature with a tail, one mesh, 40 joints) and
// BCN_Epileptic (a humanoid, three overlapping meshes, 58 joints, a wild clip; its head sits
// 0.5 in front of its neck in the bind pose, so one bone spans empty space).
//
// Checked geometrically, independently of the method:
// - the bind pose returns every point (a pose a rounding error off the rest pose: sections that
//   needed a fallback at rest are moved rigidly, clamped points keep their residual);
// - the detail over the skeleton: each point's signed distance to its own bone's solid (the
//   convex hull of its two spheres, posed as SphereMesh::bone_joints says) changes much less than
//   under LBS and DQS — the paper's claim (no collapse, no bulge) — overall and on the limbs;
// - the stretch between neighbouring surface points (sampled on triangles sharing a corner),
//   bounded: baseline skinning tears more than LBS where bones meet in the torso (the automatic
//   sphere-mesh's junctions; measured and printed per bone, docs/baseline.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "clients/import/asset_import.h"
#include "clients/import/point_set.h"
#include "core/baseline/baseline.h"
#include "core/clip/clip.h"
#include "core/deformer/deformer.h"
#include "core/rig/pose.h"
#include "tests/core/test_util.h"

namespace sinew {
namespace {

using V = Eigen::Vector3d;

// Signed distance from x to bone k of a sphere-mesh (the convex hull of its two spheres), given
// the spheres' centres and radii.
double BoneDistance(const std::vector<V>& c, const std::vector<double>& r, const std::vector<uint32_t>& bones, size_t k,
                    const V& x) {
  const V a = c[bones[2 * k]], b = c[bones[2 * k + 1]];
  const double ra = r[bones[2 * k]], rb = r[bones[2 * k + 1]];
  const double l = (b - a).norm();
  const V axis = (b - a) / l;
  const double s = (ra - rb) / l, k_ = std::sqrt(1 - s * s);
  const V w = x - a;
  const double along = w.dot(axis), radial = (w - along * axis).norm();
  const double t = (along - ra * s) * k_ - (radial - ra * k_) * s;  // along the generatrix
  if (t < 0) return w.norm() - ra;
  if (t > l * k_) return (x - b).norm() - rb;
  return (along - ra * s) * s + (radial - ra * k_) * k_;
}

V At(std::span<const float> xyz, size_t i) { return V(xyz[3 * i], xyz[3 * i + 1], xyz[3 * i + 2]); }

struct Character {
  ImportedAsset asset;
  PointSetReport report;
  std::shared_ptr<const Rig> mesh, rig;  // the character, its point set
};

Character Load(const std::string& path, size_t points) {
  Character c;
  auto asset = ImportAsset(path);
  EXPECT_TRUE(asset.ok()) << asset.status();
  if (!asset.ok()) return c;
  c.asset = std::move(*asset);
  c.mesh = std::make_shared<const Rig>(testing::BuildOrDie(c.asset.rig));
  PointSetOptions o;
  o.points = points;
  auto in = PointSetFromCharacter(c.asset.rig, o, &c.report);
  EXPECT_TRUE(in.ok()) << in.status();
  if (!in.ok()) return c;
  auto rig = BuildRig(std::move(*in));
  EXPECT_TRUE(rig.ok()) << rig.status();
  if (rig.ok()) c.rig = std::make_shared<const Rig>(std::move(*rig));
  return c;
}

// The posed sphere-mesh of a frame: each sphere moved by its carrier joint's skinning transform
// (as SphereMesh::bone_joints defines), its radius scaled by the transform's scale.
std::vector<V> PosedCentres(const Rig& rig, const Pose& pose, std::vector<double>& radii) {
  const SphereMesh& sm = rig.sphere_mesh;
  std::vector<Similarity> world(rig.joint_count());
  std::vector<Affine34d> skinning(rig.joint_count());
  SkinningTransforms(rig.skeleton, pose, world, skinning);
  // A sphere moves with the joint of the bone ending at it; a root sphere with its first bone's.
  std::vector<int32_t> carrier(sm.sphere_count(), -1);
  for (size_t k = 0; k < sm.bone_count(); ++k) carrier[sm.bones[2 * k + 1]] = int32_t(sm.bone_joints[k]);
  for (size_t k = 0; k < sm.bone_count(); ++k) {
    if (carrier[sm.bones[2 * k]] < 0) carrier[sm.bones[2 * k]] = int32_t(sm.bone_joints[k]);
  }
  std::vector<V> out;
  radii.clear();
  for (size_t i = 0; i < sm.sphere_count(); ++i) {
    const Affine34d& m = skinning[carrier[i]];
    out.push_back(m.leftCols<3>() * V(sm.centers[3 * i], sm.centers[3 * i + 1], sm.centers[3 * i + 2]) + m.col(3));
    radii.push_back(sm.radii[i] * std::cbrt(std::abs(m.leftCols<3>().determinant())));
  }
  return out;
}

struct Measure {
  double detail99 = 0, detail_max = 0;  // |posed − rest| signed distance to the own bone, over all frames
  double limbs90 = 0;                   // ... its 90th percentile over points on limb bones
  double stretch999 = 0;                // 99.9th percentile of |log(posed / rest)| of neighbour distances
  size_t torn = 0, collapsed = 0;       // neighbour pairs stretched beyond 3x, shrunk below 1/3
};

class BaselineCharacter : public ::testing::TestWithParam<const char*> {};

TEST_P(BaselineCharacter, PlaysItsClipKeepingDetailsOverTheSkeletonWhereLbsAndDqsLoseThem) {
  const std::string path = std::string(SINEW_ASSIMP_MODELS) + "/X/" + GetParam();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "assimp-testmodels not installed (scripts/install-deps.sh)";
  const size_t points = 60000;
  const Character c = Load(path, points);
  ASSERT_TRUE(c.rig);
  std::printf("point set: %zu points, %zu spheres, %zu bones (%zu tips), %zu junctions, %zu joints merged\n",
              c.rig->vertex_count(), c.report.spheres, c.report.bones, c.report.tips, c.report.junctions,
              c.report.merged);
  for (const std::string& note : c.report.notes) std::printf("  %s\n", note.c_str());
  ASSERT_GE(c.report.bones, 15u);
  ThreadPool pool(2);
  auto prepared = PrepareBaseline(*c.rig, DeformerConfig("baseline"), &pool, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  std::printf("%s\n", (*prepared)->Summary().c_str());
  auto base = CreateBaselineDeformer(c.rig, *prepared, DeformerConfig("baseline"));
  auto lbs = CreateDeformer(c.rig, DeformerConfig("lbs"));
  auto dqs = CreateDeformer(c.rig, DeformerConfig("dqs"));
  ASSERT_TRUE(base.ok() && lbs.ok() && dqs.ok());

  const SphereMesh& sm = c.rig->sphere_mesh;
  const std::vector<double> radii(sm.radii.begin(), sm.radii.end());
  std::vector<V> rest_centres;
  for (size_t i = 0; i < sm.sphere_count(); ++i) rest_centres.emplace_back(sm.centers[3 * i], sm.centers[3 * i + 1], sm.centers[3 * i + 2]);
  const size_t n = c.rig->vertex_count();
  std::vector<double> rest_distance(n);
  for (size_t i = 0; i < n; ++i) {
    rest_distance[i] = BoneDistance(rest_centres, radii, sm.bones, sm.point_bones[i], At(c.rig->positions, i));
  }
  // Neighbours on the surface: 4000 random points, each with its nearest point (at least 0.2 %
  // of the diagonal away) sampled on the same triangle or one sharing a corner with it.
  const Rig& mesh = *c.mesh;
  std::vector<std::vector<uint32_t>> by_triangle(mesh.triangle_count()), at_vertex(mesh.vertex_count());
  for (size_t i = 0; i < n; ++i) by_triangle[c.report.triangle[i]].push_back(uint32_t(i));
  for (size_t t = 0; t < mesh.triangle_count(); ++t) {
    for (int k = 0; k < 3; ++k) at_vertex[mesh.triangles[3 * t + k]].push_back(uint32_t(t));
  }
  std::mt19937 rng(5);
  std::vector<std::pair<size_t, size_t>> pairs;
  const double closest = 0.002 * c.rig->bbox_diagonal();
  while (pairs.size() < 4000) {
    const size_t a = rng() % n;
    const uint32_t t = c.report.triangle[a];
    double best = 1e300;
    size_t b = a;
    for (int k = 0; k < 3; ++k) {
      for (uint32_t u : at_vertex[mesh.triangles[3 * t + k]]) {
        for (uint32_t i : by_triangle[u]) {
          const double d = (At(c.rig->positions, i) - At(c.rig->positions, a)).norm();
          if (d >= closest && d < best) {
            best = d;
            b = i;
          }
        }
      }
    }
    if (b != a) pairs.push_back({a, b});
  }

  // The bind pose (the file's rest pose differs from it): every method returns the points.
  const Pose rest = BindPose(c.rig->skeleton);
  std::vector<float> out(3 * n);
  ASSERT_TRUE((*base)->Deform({&rest, {}}, out, &pool).ok());
  EXPECT_LE(testing::MaxAbsDiff(out, c.rig->positions), 1e-4 * c.rig->bbox_diagonal());

  const Clip& clip = c.asset.clips.at(0);
  Measure m[3];
  std::vector<double> detail[3], stretch[3];
  std::vector<std::vector<double>> per_bone[3];
  for (auto& v : per_bone) v.resize(sm.bone_count());
  std::vector<int> torn_bone[3];
  for (auto& v : torn_bone) v.resize(sm.bone_count());
  const int frames = 24;
  Pose pose;
  for (int f = 0; f < frames; ++f) {
    SampleClip(clip, c.rig->skeleton, clip.duration * f / (frames - 1), pose);
    std::vector<double> posed_radii;
    const std::vector<V> centres = PosedCentres(*c.rig, pose, posed_radii);
    Deformer* methods[3] = {base->get(), lbs->get(), dqs->get()};
    for (int k = 0; k < 3; ++k) {
      ASSERT_TRUE(methods[k]->Deform({&pose, {}}, out, &pool).ok());
      for (size_t i = 0; i < n; ++i) {
        const V x = At(out, i);
        ASSERT_TRUE(x.allFinite()) << "method " << k << " point " << i;
        detail[k].push_back(std::abs(BoneDistance(centres, posed_radii, sm.bones, sm.point_bones[i], x) - rest_distance[i]));
        per_bone[k][c.rig->sphere_mesh.point_bones[i]].push_back(detail[k].back());
      }
      for (const auto& [a, b] : pairs) {
        const double r = (At(out, a) - At(out, b)).norm() /
                         (At(c.rig->positions, a) - At(c.rig->positions, b)).norm();
        stretch[k].push_back(std::abs(std::log(std::max(r, 1e-12))));
        m[k].torn += r > 3;
        if (r > 3) torn_bone[k][c.rig->sphere_mesh.point_bones[a]]++;
        m[k].collapsed += r < 1.0 / 3;
      }
    }
  }
  // Limb bones: neither sphere at a junction (3 bones or more).
  std::vector<int> at_sphere(sm.sphere_count(), 0);
  for (uint32_t s : sm.bones) ++at_sphere[s];
  const char* names[3] = {"baseline", "LBS", "DQS"};
  for (int k = 0; k < 3; ++k) {
    std::vector<double> limbs;
    for (size_t b = 0; b < sm.bone_count(); ++b) {
      if (at_sphere[sm.bones[2 * b]] <= 2 && at_sphere[sm.bones[2 * b + 1]] <= 2) {
        limbs.insert(limbs.end(), per_bone[k][b].begin(), per_bone[k][b].end());
      }
    }
    std::sort(limbs.begin(), limbs.end());
    std::sort(detail[k].begin(), detail[k].end());
    std::sort(stretch[k].begin(), stretch[k].end());
    m[k].detail99 = detail[k][size_t(0.99 * double(detail[k].size()))];
    m[k].detail_max = detail[k].back();
    m[k].limbs90 = limbs.empty() ? 0.0 : limbs[size_t(0.9 * double(limbs.size()))];
    m[k].stretch999 = stretch[k][size_t(0.999 * double(stretch[k].size()))];
    std::printf("%-8s over %d frames: detail over the own bone changed by %.4f (99th percentile), %.4f (max), "
                "%.4f on limbs (90th percentile); neighbour stretch |log| %.3f (99.9th percentile), %zu torn (>3x), "
                "%zu collapsed (<1/3) of %zu pairs\n",
                names[k], frames, m[k].detail99, m[k].detail_max, m[k].limbs90, m[k].stretch999, m[k].torn,
                m[k].collapsed, stretch[k].size());
  }
  std::printf("bounding diagonal %.3f; per bone: detail change 90th percentile / max / torn pairs\n", c.rig->bbox_diagonal());
  for (size_t b = 0; b < sm.bone_count(); ++b) {
    std::printf("  bone %2zu %-18s", b, c.rig->skeleton.names[sm.bone_joints[b]].c_str());
    for (int k = 0; k < 3; ++k) {
      auto& v = per_bone[k][b];
      std::sort(v.begin(), v.end());
      std::printf("  %s %.4f/%.4f/%d", names[k], v.empty() ? 0.0 : v[size_t(0.9 * double(v.size()))],
                  v.empty() ? 0.0 : v.back(), torn_bone[k][b]);
    }
    std::printf("\n");
  }
  // Measured (Testwuson / BCN_Epileptic): 99th percentile 0.105 / 0.062 against LBS 0.293 / 0.192
  // and DQS 0.363 / 0.206; limbs 0.0032 / 0.0004 against LBS 0.045 / 0.024 and DQS 0.092 / 0.028;
  // the largest change 0.45 / 0.59 (diagonals 3.7 / 2.1); torn pairs 5.2 % / 2.2 % against LBS
  // 0.8 % / 1.6 %.
  for (int k = 1; k < 3; ++k) {
    EXPECT_LT(m[0].detail99, 0.5 * m[k].detail99) << names[k];
    EXPECT_LT(m[0].limbs90, 0.25 * m[k].limbs90) << names[k];
  }
  EXPECT_LT(m[0].detail_max, 0.35 * c.rig->bbox_diagonal());
  EXPECT_LT(m[0].torn, stretch[0].size() / 10);
}

INSTANTIATE_TEST_SUITE_P(Assimp, BaselineCharacter, ::testing::Values("Testwuson.X", "BCN_Epileptic.X"),
                         [](const auto& info) { return std::string(info.param).substr(0, std::string(info.param).find('.')); });

}  // namespace
}  // namespace sinew
