// Position-based skinning on real characters: the SuperCages Arm (../shared/data/supercages-arm,
// 2,089 vertices, 25 joints with a hand) playing its own skeleton clip, and BCN_Epileptic. Geometric checks only:
// tets inverted (signed volume of the particles), the tet mesh's volume, and the closed render
// mesh's volume by the divergence theorem, against LBS on the same frames.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <array>
#include <map>
#include <string>

#include "clients/import/asset_import.h"
#include "clients/import/supercages.h"
#include "core/clip/clip.h"
#include "core/deformer/deformer.h"
#include "core/pbs/mesher.h"
#include "core/pbs/pbs.h"
#include "core/rig/pose.h"
#include "core/rig/transform.h"
#include "tests/import/assimp_character.h"
#include "tests/import/supercages_arm.h"

namespace sinew {
namespace {

// The volume enclosed by the mesh (divergence theorem) with its holes capped: each boundary loop
// (the Arm is open where it was cut at the shoulder; BCN_Epileptic has seven holes) closed by a
// fan around its deformed centroid, so that the measure is that of a closed surface in every pose.
struct ClosedVolume {
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> loops;  // boundary edges (a → b as in their triangle)
  explicit ClosedVolume(const Rig& rig) {
    // Imported meshes repeat a vertex per face corner: edges are matched by position.
    std::map<std::array<float, 3>, uint32_t> welded;
    std::vector<uint32_t> id(rig.vertex_count());
    for (uint32_t v = 0; v < id.size(); ++v) {
      id[v] = welded.try_emplace({rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]}, v)
                  .first->second;
    }
    std::map<std::pair<uint32_t, uint32_t>, int> uses;
    for (size_t t = 0; t < rig.triangle_count(); ++t) {
      for (int k = 0; k < 3; ++k) {
        const uint32_t a = id[rig.triangles[3 * t + k]], b = id[rig.triangles[3 * t + (k + 1) % 3]];
        ++uses[{a, b}];
      }
    }
    std::vector<std::pair<uint32_t, uint32_t>> open;
    for (const auto& [e, n] : uses) {
      if (!uses.contains({e.second, e.first})) open.push_back(e);
    }
    // Loops: boundary edges grouped by shared vertices.
    std::map<uint32_t, uint32_t> parent;
    auto find = [&](uint32_t v) {
      while (parent[v] != v) v = parent[v] = parent[parent[v]];
      return v;
    };
    for (auto [a, b] : open) {
      parent.try_emplace(a, a);
      parent.try_emplace(b, b);
      parent[find(a)] = find(b);
    }
    std::map<uint32_t, size_t> loop_of;
    for (auto e : open) {
      auto [it, added] = loop_of.try_emplace(find(e.first), loops.size());
      if (added) loops.emplace_back();
      loops[it->second].push_back(e);
    }
  }
  size_t open_edges() const {
    size_t n = 0;
    for (const auto& l : loops) n += l.size();
    return n;
  }
  double operator()(const Rig& rig, const std::vector<float>& x) const {
    auto at = [&](uint32_t i) { return Eigen::Vector3d(x[3 * i], x[3 * i + 1], x[3 * i + 2]); };
    double v = 0;
    for (size_t t = 0; t < rig.triangle_count(); ++t) {
      v += at(rig.triangles[3 * t]).dot(at(rig.triangles[3 * t + 1]).cross(at(rig.triangles[3 * t + 2]))) / 6;
    }
    for (const auto& loop : loops) {
      Eigen::Vector3d c = Eigen::Vector3d::Zero();
      for (auto [a, b] : loop) c += at(a);
      c /= double(loop.size());
      for (auto [a, b] : loop) v += at(b).dot(at(a).cross(c)) / 6;  // the cap runs the other way
    }
    return v;
  }
};

struct ArmRun {
  size_t particles = 0, tets = 0, cut = 0, worst_inverted = 0, lbs_inverted = 0;
  double worst_mesh = 0, worst_tets = 0, worst_lbs = 0;
  // Each tet's volume change counted whatever its sign (Σ |V − V0| over the tets, of their rest
  // volume): where LBS's net volume is kept by tets crushed in one place and swollen in another,
  // this is not. The worst frame's ratio of the particles' figure under pbs to LBS's.
  double worst_local_ratio = 0;
};

void Report(const char* what, bool paper, const ArmRun& r) {
  std::printf("%s, %s weights: %zu particles, %zu tets (%zu cut as bridging parts); over the clip the render mesh's "
              "volume is off by at most %.2f %% (LBS %.2f %%), the tet mesh's %.2f %%; at most %zu tets inside out "
              "(LBS alone %zu)\n",
              what, paper ? "Eq. 2" : "the rig's", r.particles, r.tets, r.cut, 100 * r.worst_mesh, 100 * r.worst_lbs,
              100 * r.worst_tets, r.worst_inverted, r.lbs_inverted);
  std::printf("  each tet's volume change counted whatever its sign: at most %.2f of LBS's at a frame\n", r.worst_local_ratio);
}

// `clip` sampled at frames + 1 even steps under pbs with `params` (one session): the worst frame's figures.
ArmRun PlayArm(const Clip& clip, const std::shared_ptr<const Rig>& rig, const PbsParams& params, int frames = 60) {
  ArmRun run;
  auto p = std::make_shared<PbsParams>(params);
  DeformerConfig config("pbs", p);
  ThreadPool pool(2);
  auto prepared = PreparePbs(*rig, config, &pool, {});
  EXPECT_TRUE(prepared.ok()) << prepared.status();
  if (!prepared.ok()) return run;
  const auto& model = static_cast<const PbsModel&>(**prepared);
  run.particles = model.mesh.rest.size();
  run.tets = model.mesh.tets.size();
  run.cut = model.mesh.cut;
  auto lbs = CreateDeformer(rig, DeformerConfig("lbs"));
  EXPECT_TRUE(lbs.ok());
  const ClosedVolume volume(*rig);
  const double rest_mesh = volume(*rig, rig->positions);
  double rest_tets = 0;
  for (double v : model.mesh.rest_volume) rest_tets += v;
  std::vector<Similarity> world(rig->joint_count());
  std::vector<Affine34d> skinning(rig->joint_count());
  std::vector<Affine34f> matrices(rig->joint_count());
  PbsState state, skinned;
  PbsParams lbs_only = params;
  lbs_only.iterations = 0;  // the particles by LBS alone: the control
  std::vector<float> out(rig->positions.size()), by_lbs(out.size());
  auto inverted = [&](const std::vector<float>& x, double* total, double* local) {
    size_t n = 0;
    for (size_t i = 0; i < model.mesh.tets.size(); ++i) {
      const auto& t = model.mesh.tets[i];
      Eigen::Vector3d q[4];
      for (int k = 0; k < 4; ++k) q[k] = Eigen::Vector3d(x[3 * t[k]], x[3 * t[k] + 1], x[3 * t[k] + 2]);
      const double v = SignedVolume(q[0], q[1], q[2], q[3]);
      if (total) *total += v;
      *local += std::abs(v - model.mesh.rest_volume[i]);
      n += v <= 0;
    }
    return n;
  };
  Pose pose;
  for (int f = 0; f <= frames; ++f) {
    SampleClip(clip, rig->skeleton, clip.duration * f / frames, pose);
    SkinningTransforms(rig->skeleton, pose, world, skinning);
    for (size_t j = 0; j < skinning.size(); ++j) matrices[j] = skinning[j].cast<float>();
    SolvePbsFrame(model, params, matrices, params.time_step, state, &pool);
    SolvePbsFrame(model, lbs_only, matrices, params.time_step, skinned, &pool);
    double tets = 0, local = 0, lbs_local = 0;
    run.worst_inverted = std::max(run.worst_inverted, inverted(state.x, &tets, &local));
    run.lbs_inverted = std::max(run.lbs_inverted, inverted(skinned.x, nullptr, &lbs_local));
    if (lbs_local > 1e-2 * rest_tets) run.worst_local_ratio = std::max(run.worst_local_ratio, local / lbs_local);
    for (size_t v = 0; v < rig->vertex_count(); ++v) {  // the render mesh follows its tets
      const auto& t = model.mesh.tets[model.embedding.tet[v]];
      for (int c = 0; c < 3; ++c) {
        double q = 0;
        for (int k = 0; k < 4; ++k) q += model.embedding.beta[v][k] * state.x[3 * t[k] + c];
        out[3 * v + c] = float(q);
      }
    }
    EXPECT_TRUE((*lbs)->Deform({&pose, {}}, by_lbs, nullptr).ok());
    run.worst_mesh = std::max(run.worst_mesh, std::abs(volume(*rig, out) / rest_mesh - 1));
    run.worst_lbs = std::max(run.worst_lbs, std::abs(volume(*rig, by_lbs) / rest_mesh - 1));
    run.worst_tets = std::max(run.worst_tets, std::abs(tets / rest_tets - 1));
  }
  return run;
}

// The Arm plays its whole clip (61 frames, the hand closing into a fist) with no tet inside out
// and the render mesh's volume within 1 % of rest at every frame, with the rig's weights and with
// the paper's Eq. 2, where LBS on the same frames changes it by 2.4 % and turns 60–75 of the
// particles' tets inside out (the controls). Voxel tets (the default), k_s 0.6: the paper's
// stretch stiffness for its softer models (its human has 0.9, our default, which leaves the
// Arm's render volume 0.86 % off with Eq. 2 and 1.00–1.03 % with the rig's weights: at the
// bar). The tet mesh's own volume is asserted for Eq. 2; with the rig's weights it is printed.
TEST(PbsArm, PlaysItsClipWithoutInvertedTetsKeepingItsVolume) {
  if (!testing::ArmAvailable()) GTEST_SKIP() << "Arm data not found in " << testing::kArmDir;
  auto arm = testing::LoadArm();
  ASSERT_TRUE(arm.ok()) << arm.status();
  const std::shared_ptr<const Rig>& rig = arm->rig;
  const SuperCagesRig* sc = &arm->files;
  const ClosedVolume volume(*rig);
  std::printf("Arm: %zu open edges in %zu loop(s), capped for the volume\n", volume.open_edges(), volume.loops.size());
  for (const auto weights : {PbsParams::Weights::kPaper, PbsParams::Weights::kTransfer}) {
    PbsParams params;
    params.weights = weights;
    params.stretch_stiffness = 0.6;
    const ArmRun r = PlayArm(sc->skeleton_clip, rig, params);
    const bool paper = weights == PbsParams::Weights::kPaper;
    Report("Arm, voxel tets", paper, r);
    EXPECT_GT(r.worst_lbs, 0.015);  // the control: LBS does lose volume on this clip
    EXPECT_GT(r.lbs_inverted, 20u);
    EXPECT_EQ(r.worst_inverted, 0u);
    EXPECT_LT(r.worst_mesh, 0.01);
    if (paper) {
      EXPECT_LT(r.worst_tets, 0.01);
    }
  }
}

// The same clip on Mesh_3's tets (tets: mesher, the default cell of the longest side / 24): they
// follow the surface, so no tet joins two fingers and few are cut; no tet inside out, the volume
// within 1.5 % (measured 1.1–1.2 %: a third of the voxels' particles, and the voxel tets' layer
// outside the surface is missing — they keep it within 1 % above).
TEST(PbsArm, PlaysItsClipOnTheMeshersTets) {
  if (!MesherAvailable()) GTEST_SKIP() << "built without CGAL (SINEW_WITH_CGAL=OFF)";
  if (!testing::ArmAvailable()) GTEST_SKIP() << "Arm data not found in " << testing::kArmDir;
  auto arm = testing::LoadArm();
  ASSERT_TRUE(arm.ok()) << arm.status();
  const std::shared_ptr<const Rig>& rig = arm->rig;
  const SuperCagesRig* sc = &arm->files;
  for (const auto weights : {PbsParams::Weights::kPaper, PbsParams::Weights::kTransfer}) {
    PbsParams params;
    params.tets = PbsParams::Tets::kMesher;
    params.weights = weights;
    params.stretch_stiffness = 0.6;
    const ArmRun r = PlayArm(sc->skeleton_clip, rig, params);
    Report("Arm, Mesh_3 tets", weights == PbsParams::Weights::kPaper, r);
    EXPECT_LT(r.cut, r.tets / 100);
    EXPECT_EQ(r.worst_inverted, 0u);
    EXPECT_LT(r.worst_mesh, 0.015);
    EXPECT_LT(r.worst_mesh, r.worst_lbs);
  }
}

// BCN_Epileptic (assimp-testmodels, 15k vertices in three overlapping parts, 58 joints) rests its
// hands on its hips in the bind pose: tets join them whatever makes the tets, and then the wild
// clip drags the hips with the hands. Such tets join particles skinned to joints far apart in the
// skeleton (thumb to hip: more than 4 steps) and are cut: the tet mesh's volume over the first
// 40 frames stays within 8 % (measured 4.7 %, Mesh_3 tets, the rig's weights) where with them
// kept it is off by 20 %. (Not yet the 1 % of the Arm: the constraints conflict on this clip —
// more sweeps make it worse — and the render mesh ends 5.4 % off where LBS alone is 2.4 %; docs/pbs.md.)
// LBS's net figure is kept by tets crushed (and inverted) in one place and swollen to twice
// their volume in another; counted whatever its sign, each tet's volume change under pbs stays
// below 0.9 of LBS's at every frame (measured 0.79; without the volume constraints 1.01).
TEST(PbsCharacter, BcnHandsOnTheHipsAreCutApart) {
  if (!MesherAvailable()) GTEST_SKIP() << "built without CGAL (SINEW_WITH_CGAL=OFF)";
  if (!testing::CharacterAvailable(testing::kBcn)) GTEST_SKIP() << testing::kAssimpMissing;
  auto bcn = testing::LoadCharacter(testing::kBcn);
  ASSERT_TRUE(bcn.ok()) << bcn.status();
  const auto rig = bcn->rig;
  ArmRun cut, kept;
  for (const bool cutting : {true, false}) {
    PbsParams params;
    params.tets = PbsParams::Tets::kMesher;
    params.cut_bridges = cutting;
    const ArmRun r = PlayArm(bcn->asset.clips[0], rig, params, 40);
    Report(cutting ? "BCN_Epileptic, Mesh_3 tets, bridges cut" : "BCN_Epileptic, Mesh_3 tets, bridges kept", false, r);
    (cutting ? cut : kept) = r;
  }
  EXPECT_GT(cut.cut, 0u);
  EXPECT_GT(kept.worst_tets, 0.1);
  EXPECT_LT(cut.worst_tets, 0.08);
  EXPECT_GT(cut.worst_local_ratio, 0.1) << "no frame where LBS changes the tets' volume: the ratio measured nothing";
  EXPECT_LT(cut.worst_local_ratio, 0.9);
}

}  // namespace
}  // namespace sinew
