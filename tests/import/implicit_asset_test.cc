// Implicit skinning on a character nobody here made (assimp-testmodels' BCN_Epileptic.X: 15k
// vertices in 3 meshes, 58 joints, an animated clip): both methods play the clip with finite
// positions, and no vertex leaves the support of its own bone's field (it would then be
// "projected" onto some other surface); most vertices converge to their iso values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "clients/import/asset_import.h"
#include "core/clip/clip.h"
#include "core/geometry/mesh_quality.h"
#include "core/geometry/weld.h"
#include "core/implicit/bone_fields.h"
#include "core/implicit/device_layout.h"
#include "core/implicit/field_eval.h"
#include "core/implicit/implicit_skinning.h"
#include "core/procedural/bend.h"
#include "tests/core/test_util.h"
#include "tests/import/assimp_character.h"
#include "tests/import/supercages_arm.h"

namespace sinew {
namespace {

TEST(ImplicitAsset, CharacterClipPlaysWithoutNaNOrVerticesLeavingTheirField) {
  if (!testing::CharacterAvailable(testing::kBcn)) GTEST_SKIP() << testing::kAssimpMissing;
  auto bcn = testing::LoadCharacter(testing::kBcn);
  ASSERT_TRUE(bcn.ok()) << bcn.status();
  ASSERT_FALSE(bcn->asset.clips.empty());
  const auto rig = bcn->rig;
  ThreadPool pool(2);
  DeformerConfig config;
  config.method = "implicit";
  auto prepared = PrepareImplicit(*rig, config, &pool, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  auto model = std::dynamic_pointer_cast<const ImplicitModel>(*prepared);
  std::printf("%zu vertices, %zu nodes, %zu joints, %zu bone fields, %.1f MiB\n", rig->vertex_count(),
              model->node_count(), rig->joint_count(), model->fields.size(), model->Bytes() / 1048576.0);
  EXPECT_GT(model->fields.size(), 10u);

  const Clip& clip = bcn->asset.clips[0];
  for (const std::string& method : {std::string("dqs"), std::string("implicit"), std::string("elastic-implicit")}) {
    config.method = method;
    auto d = method == "dqs" ? CreateDeformer(rig, config) : CreateImplicitDeformer(rig, model, config);
    ASSERT_TRUE(d.ok()) << d.status();
    // The elastic method relaxes the mesh's six components side by side on the pool (since
    // 2026-12-01): a twin session on one thread must give the same bits, frame after frame.
    std::unique_ptr<Deformer> alone;
    if (method == "elastic-implicit") alone = std::move(*CreateImplicitDeformer(rig, model, config));
    std::vector<float> out(rig->positions.size()), out_alone(rig->positions.size());
    std::vector<Similarity> world(rig->joint_count());
    std::vector<Affine34d> t(rig->joint_count());
    size_t counts[6] = {}, outside = 0, checked = 0;
    constexpr int kFrames = 12;
    for (int k = 0; k <= kFrames; ++k) {
      Pose pose;
      SampleClip(clip, rig->skeleton, clip.duration * k / kFrames, pose);
      ASSERT_TRUE((*d)->Deform({&pose, {}}, out, &pool).ok());
      if (alone) {
        ASSERT_TRUE(alone->Deform({&pose, {}}, out_alone, nullptr).ok());
        EXPECT_EQ(std::memcmp(out.data(), out_alone.data(), out.size() * sizeof(float)), 0)
            << "frame " << k << ": the pool's result differs from one thread's";
      }
      std::vector<uint8_t> states(rig->vertex_count(), 1);
      if (method != "dqs") {
        ASSERT_TRUE((*d)->Extras({.vertex_states = &states}).ok());
      }
      for (float x : out) ASSERT_TRUE(std::isfinite(x)) << "frame " << k;
      SkinningTransforms(rig->skeleton, pose, world, t);
      for (size_t v = 0; v < rig->vertex_count(); ++v) {
        ++counts[states[v]];
        const uint32_t node = model->node_of_vertex[v];
        if (!model->in_field[node]) continue;
        // The vertex's own bone field (if it has one) must still contain it.
        const int own = model->bone[node];
        for (const BoneField& f : model->fields) {
          if (f.joint != own) continue;
          const Affine34d inv = Inverse(t[own]);
          const Eigen::Vector3d x = inv.leftCols<3>() * Eigen::Vector3d(out[3 * v], out[3 * v + 1], out[3 * v + 2]) + inv.col(3);
          const Eigen::Vector3d r(rig->positions[3 * v], rig->positions[3 * v + 1], rig->positions[3 * v + 2]);
          ++checked;
          if (f.Value(r) > 0 && f.Value(x) == 0) ++outside;
        }
      }
    }
    const size_t total = rig->vertex_count() * (kFrames + 1);
    const char* name = method.c_str();
    std::printf("%s: converged %.1f%%, contact %.2f%%, null gradient %.2f%%, iteration limit %.2f%%, re-seeded "
                "%.2f%%, untracked %.1f%%; vertices that left their own field: %zu of %zu\n",
                name, 100.0 * counts[1] / total, 100.0 * counts[2] / total, 100.0 * counts[3] / total,
                100.0 * counts[4] / total, 100.0 * counts[5] / total, 100.0 * counts[0] / total, outside, checked);
    EXPECT_EQ(outside, 0u) << name;
    if (method != "dqs") {
      // Most tracked vertices converge (untracked ones, counts[0], keep the initial skinning:
      // bones without a field, pieces buried in others and, since 2026-11-28, pieces thinner
      // than ImplicitConfig::min_field_radius, 18.5 % of the vertex-frames with the ponytail).
      EXPECT_GT(counts[1], (total - counts[0]) * 3 / 4) << name;
      EXPECT_LT(counts[5], total / 100) << name << ": re-seeded";
    }
  }
}

// Issue 15: the elastic method's result is a continuous function of the pose on a character.
// BCN_Epileptic's clip sampled at 10 poses, played once as given and once per 1e-6 rad turn of
// every joint about four axes (as bench/implicit_stability.cc does, one thread): every frame
// moves by at most 5e-4 of the diagonal. Measured 2.15e-4 (the right hip at 1.47 s) since skin
// inside the rest skin is untracked, third pieces' gates are read at DQS too and a relaxation
// still running after 48 rounds caps each node by its own trust (2026-12-06; over samplings 6–12
// of the clip 1.8e-4 to 1.8e-3: 1.79e-4, 2.08e-4, 2.68e-4, 2.15e-4, 5.00e-4, 1.98e-4, 1.79e-3). Before
// that the bound was 1e-3. Measured 3.7e-4 (the right hip at 1.47 s; the first
// pose's right armpit 2.1e-4) on 2026-11-28, 1e-4 being the issue's bound, and 2.2e-4 to
// 9.8e-4 over four other samplings of the clip; 3.87e-4 (the jaw at 2.57 s) since low-poly
// pieces' fields are composed by default (ImplicitConfig::sample_triangles, 2026-12-05). Before
// thin pieces were left on the initial skinning (ImplicitConfig::min_field_radius) and the
// relaxation had 256 rounds (64), 1.45e-2
// here (the ponytail, which the clip drives through the back) and up to 1.8e-2 over the others;
// before the DQS spring, up to 7e-2 (the right leg).
TEST(ImplicitAsset, ElasticCharacterClipMovesHalfAThousandthOfItsDiagonalAtMostUnderRoundingTurns) {
  if (!testing::CharacterAvailable(testing::kBcn)) GTEST_SKIP() << testing::kAssimpMissing;
  auto bcn = testing::LoadCharacter(testing::kBcn);
  ASSERT_TRUE(bcn.ok()) << bcn.status();
  const auto rig = bcn->rig;
  DeformerConfig config;
  config.method = "elastic-implicit";
  auto prepared = PrepareImplicit(*rig, config, nullptr, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const auto model = std::dynamic_pointer_cast<const ImplicitModel>(*prepared);
  // The figures above hold for fields that start at their joints: its upper arms reach 4.2 % of
  // their bone back over clavicles without a field, within the culling band (free starts,
  // core/implicit/bone_fields.h); extended, this clip moved by 3.1e-3 here.
  for (const BoneField& f : model->fields) {
    EXPECT_EQ(f.free_start, 0.0) << rig->skeleton.names[size_t(f.joint)] << " starts behind its joint";
  }
  const Clip& clip = bcn->asset.clips[0];
  const double diag = rig->bbox_diagonal();
  constexpr int kSamples = 9;
  std::vector<Pose> poses(kSamples + 1);
  for (int k = 0; k <= kSamples; ++k) SampleClip(clip, rig->skeleton, clip.duration * k / kSamples, poses[k]);
  const auto runs = testing::PlayTurned(poses, 1e-6, [&](const std::vector<Pose>& run) {
    std::vector<std::vector<float>> frames;
    auto session = CreateImplicitDeformer(rig, model, config);
    EXPECT_TRUE(session.ok()) << session.status();
    if (!session.ok()) return frames;
    for (const Pose& pose : run) {
      frames.emplace_back(rig->positions.size());
      EXPECT_TRUE((*session)->Deform({&pose, {}}, frames.back(), nullptr).ok());
    }
    return frames;
  });
  for (const auto& run : runs) ASSERT_EQ(run.size(), poses.size());
  double worst = 0;
  for (int k = 0; k <= kSamples; ++k) {
    const std::vector<float>& base = runs[0][k];
    for (int t = 0; t < 4; ++t) {
      const std::vector<float>& turned = runs[t + 1][k];
      double frame = 0;
      for (size_t v = 0; v < rig->vertex_count(); ++v) {
        const Eigen::Vector3d a(base[3 * v], base[3 * v + 1], base[3 * v + 2]);
        const Eigen::Vector3d b(turned[3 * v], turned[3 * v + 1], turned[3 * v + 2]);
        frame = std::max(frame, (a - b).norm() / diag);
      }
      EXPECT_LE(frame, 5e-4) << "pose " << k << " at " << clip.duration * k / kSamples << " s, turn " << t;
      worst = std::max(worst, frame);
    }
  }
  std::printf("BCN_Epileptic, elastic, %d poses under 1e-6 rad turns: largest move %.2e of the diagonal\n",
              kSamples + 1, worst);
}

// Where more bounding spheres than kMaxCandidates contain a node (a hand's fingers, metacarpals
// and forearm overlap up to 13 deep), the candidates must still hold every field that is not 0
// there: then the composed field equals the composition of every field whose sphere contains the
// node, bit for bit (g(0, f) = f). Ranked by depth in the sphere (until 2026-11-28), a big sphere
// whose field is 0 there pushed out a node's own field (108 of the Arm's 2 089 nodes and 130 of
// BCN_Epileptic's 2 633 at rest) or another that reaches it: this test then finds 183 and 466
// nodes composing a wrong value at rest, and the composed value jumped where the ranking
// changed. At the DQS skin of the rest pose, the Arm's middle MCP bent 90° and BCN's clip (5
// samples).
// Returns the nodes where more fields than kMaxCandidates are not 0 (not checked).
size_t ExpectCandidatesHoldEveryFieldThatReaches(const Rig& rig, const ImplicitModel& model, const Pose& pose,
                                                 const std::string& label) {
  using namespace implicit_internal;
  std::vector<Similarity> world(rig.joint_count());
  std::vector<Affine34d> t(rig.joint_count());
  SkinningTransforms(rig.skeleton, pose, world, t);
  std::vector<LeafFrame> leaves;
  MakeLeafFrames(model, t, leaves);
  DeformerConfig dqs_config;
  dqs_config.method = "dqs";
  auto dqs = CreateDeformer(std::make_shared<const Rig>(rig), dqs_config);
  EXPECT_TRUE(dqs.ok()) << dqs.status();
  if (!dqs.ok()) return 0;
  std::vector<float> out(rig.positions.size());
  EXPECT_TRUE((*dqs)->Deform({&pose, {}}, out, nullptr).ok());
  const Evaluator eval(model, leaves.data());
  size_t crowded = 0, overflowing = 0, wrong = 0;
  for (size_t i = 0; i < model.node_count(); ++i) {
    const Eigen::Vector3f x = P3(out, model.vertex_of_node[i]);
    std::vector<uint16_t> all;  // every field whose sphere contains x
    int nonzero = 0;
    for (size_t l = 0; l < leaves.size(); ++l) {
      if ((x - leaves[l].center).squaredNorm() > leaves[l].radius2) continue;
      all.push_back(uint16_t(l));
      nonzero += LeafFieldValue(model, leaves[l], l, x).f > 0;
    }
    overflowing += all.size() > size_t(kMaxCandidates);
    if (nonzero > kMaxCandidates) {
      ++crowded;
      continue;
    }
    uint16_t cand[kMaxCandidates];
    const int count = Candidates(model, leaves, x, cand);
    const FieldValue a = eval.Eval(x, cand, count), b = eval.Eval(x, all.data(), int(all.size()));
    if (a.f != b.f || a.g != b.g) {
      if (++wrong <= 3) {
        ADD_FAILURE() << label << ": node " << i << " composes " << a.f << " from its candidates, " << b.f
                      << " from every field";
      }
    }
  }
  std::printf("%s: %zu nodes, %zu in more than %d spheres, %zu with more than %d fields not 0, %zu wrong\n",
              label.c_str(), model.node_count(), overflowing, kMaxCandidates, crowded, kMaxCandidates, wrong);
  EXPECT_EQ(wrong, 0u) << label;
  return crowded;
}

TEST(ImplicitAsset, CandidateFieldsHoldEveryFieldThatReachesANodeWhereSpheresCrowd) {
  ThreadPool pool(2);
  DeformerConfig config;
  config.method = "implicit";
  if (testing::ArmAvailable()) {
    auto arm = testing::LoadArm();
    ASSERT_TRUE(arm.ok()) << arm.status();
    const Rig& rig = *arm->rig;
    auto prepared = PrepareImplicit(rig, config, &pool, {});
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    const auto& model = dynamic_cast<const ImplicitModel&>(**prepared);
    EXPECT_EQ(ExpectCandidatesHoldEveryFieldThatReaches(rig, model, BindPose(rig.skeleton), "Arm at rest"), 0u);
    uint32_t mcp = 0, pip = 0;
    for (uint32_t j = 0; j < rig.joint_count(); ++j) {
      if (rig.skeleton.names[j] == "finger3-1.R") mcp = j;
      if (rig.skeleton.names[j] == "finger3-2.R") pip = j;
    }
    ASSERT_GT(mcp, 0u);
    auto bent = BendJoint(rig.skeleton, mcp, pip, 90);
    ASSERT_TRUE(bent.ok()) << bent.status();
    EXPECT_EQ(ExpectCandidatesHoldEveryFieldThatReaches(rig, model, bent->pose, "Arm, middle MCP 90°"), 0u);
  } else {
    std::printf("Arm data not found in %s: the Arm's part skipped\n", testing::kArmDir.c_str());
  }
  if (!testing::CharacterAvailable(testing::kBcn)) GTEST_SKIP() << testing::kAssimpMissing;
  auto bcn = testing::LoadCharacter(testing::kBcn);
  ASSERT_TRUE(bcn.ok()) << bcn.status();
  const Rig& rig = *bcn->rig;
  auto prepared = PrepareImplicit(rig, config, &pool, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const auto& model = dynamic_cast<const ImplicitModel&>(**prepared);
  const Clip& clip = bcn->asset.clips[0];
  for (int k = 0; k <= 4; ++k) {
    Pose pose;
    SampleClip(clip, rig.skeleton, clip.duration * k / 4, pose);
    const std::string label = "BCN_Epileptic, clip " + std::to_string(k) + "/4";
    EXPECT_EQ(ExpectCandidatesHoldEveryFieldThatReaches(rig, model, pose, label), 0u);
  }
}

// A second character nobody here made, a quadruped (assimp-testmodels' Testwuson.X: 11k vertices,
// 40 joints, a run clip) whose chest and mouth are mirror seams: copies of one point 1e-7 to 1e-5
// of the diagonal apart (core/geometry/weld.h's WeldSeams), some with opposite normals. Until
// 2026-12-05 neither method could be prepared on it (bone 21's HRBF system was singular on two
// such copies) and, with that fit forced, the implicit skin tore open at the seam by 3 % of the
// diagonal where DQS parts the copies (weighted apart by the artist) by 0.5 %. Now both methods play the clip, copies of a
// point part no more than DQS parts them, and no frame has more vertices newly inside the skin
// than DQS's worst.
TEST(ImplicitAsset, QuadrupedWithMirrorSeamsPlaysItsClipWithoutTearing) {
  if (!testing::CharacterAvailable(testing::kTestwuson)) GTEST_SKIP() << testing::kAssimpMissing;
  auto wuson = testing::LoadCharacter(testing::kTestwuson);
  ASSERT_TRUE(wuson.ok()) << wuson.status();
  ASSERT_FALSE(wuson->asset.clips.empty());
  const auto rig = wuson->rig;
  const double diag = rig->bbox_diagonal();
  ThreadPool pool(2);
  DeformerConfig config;
  config.method = "implicit";
  auto prepared = PrepareImplicit(*rig, config, &pool, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const auto model = std::dynamic_pointer_cast<const ImplicitModel>(*prepared);
  // Its low-poly torso: 12 pieces too sparse for a field fitted on their vertices; 7 of them get
  // one fitted on points of their triangles (sample_triangles, the default), as contact surfaces
  // (their skin untracked), and the preparation says so. Without sample_triangles the 12 have none
  // and it says what fits them.
  EXPECT_EQ(model->pieces_without_field, 5u);
  EXPECT_NE(model->Summary().find("7 fitted on points of their triangles, their skin untracked"), std::string::npos)
      << model->Summary();
  // Its thighs reach back over hips without a field (core/implicit/bone_fields.h, free starts).
  EXPECT_NE(model->Summary().find("2 of them starting behind their joint"), std::string::npos) << model->Summary();
  auto tracked_nodes = [](const ImplicitModel& m, bool on_drawn) {
    size_t n = 0;
    for (size_t i = 0; i < m.node_count(); ++i) {
      n += m.in_field[i] && m.own_leaf[i] >= 0 && m.fields[size_t(m.own_leaf[i])].drawn == on_drawn;
    }
    return n;
  };
  EXPECT_EQ(tracked_nodes(*model, true), 0u) << "a drawn piece's skin keeps DQS by default";
  EXPECT_GT(tracked_nodes(*model, false), 1000u);
  // The same rig prepared with other settings.
  auto prepared_with = [&](void (*set)(ImplicitConfig&)) -> std::shared_ptr<const ImplicitModel> {
    auto params = std::make_shared<ImplicitConfig>();
    set(*params);
    DeformerConfig other = config;
    other.params = params;
    auto p = PrepareImplicit(*rig, other, &pool, {});
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::dynamic_pointer_cast<const ImplicitModel>(*p) : nullptr;
  };
  // Tracked on request: the drawn pieces' skin joins the tracked nodes.
  const auto all = prepared_with([](ImplicitConfig& c) { c.track_sampled_pieces = true; });
  ASSERT_NE(all, nullptr);
  EXPECT_GT(tracked_nodes(*all, true), 50u);
  EXPECT_EQ(all->Summary().find("their skin untracked"), std::string::npos) << all->Summary();
  const auto bare = prepared_with([](ImplicitConfig& c) { c.sample_triangles = false; });
  ASSERT_NE(bare, nullptr);
  EXPECT_EQ(bare->pieces_without_field, 12u);
  EXPECT_NE(bare->Summary().find("12 pieces of 8 vertices or more without one (too few points between their joints; "
                                 "sample_triangles fits low-poly ones)"),
            std::string::npos)
      << bare->Summary();
  const std::vector<uint32_t> rep = WeldSeams(rig->positions, rig->triangles, RestWeldTolerance(rig->positions, rig->triangles));
  size_t near_copies = 0;
  for (size_t v = 0; v < rep.size(); ++v) {
    near_copies += rep[v] != v && std::memcmp(&rig->positions[3 * v], &rig->positions[3 * rep[v]], 12) != 0;
  }
  EXPECT_GT(near_copies, 100u) << "the rig's seams (copies not at equal positions)";
  const MeshQualityMeasure quality(rig->positions, rig->triangles, {}, &pool);
  const Clip& clip = wuson->asset.clips[0];
  constexpr int kFrames = 15;
  double dqs_apart = 0;
  uint32_t dqs_inside = 0;
  for (const std::string method : {"dqs", "implicit", "elastic-implicit"}) {
    config.method = method;
    auto d = method == "dqs" ? CreateDeformer(rig, config) : CreateImplicitDeformer(rig, model, config);
    ASSERT_TRUE(d.ok()) << d.status();
    std::vector<float> out(rig->positions.size());
    double apart = 0;
    uint32_t inside = 0;
    for (int k = 0; k <= kFrames; ++k) {
      Pose pose;
      SampleClip(clip, rig->skeleton, clip.duration * k / kFrames, pose);
      ASSERT_TRUE((*d)->Deform({&pose, {}}, out, &pool).ok());
      for (float x : out) ASSERT_TRUE(std::isfinite(x)) << method << ", frame " << k;
      for (size_t v = 0; v < rep.size(); ++v) {
        const Eigen::Vector3d a(out[3 * v], out[3 * v + 1], out[3 * v + 2]);
        const Eigen::Vector3d b(out[3 * rep[v]], out[3 * rep[v] + 1], out[3 * rep[v] + 2]);
        apart = std::max(apart, (a - b).norm() / diag);
      }
      inside = std::max(inside, quality.Measure(out, &pool).new_inside_vertices);
    }
    std::printf("Testwuson, %s: copies of a point up to %.2e of the diagonal apart; up to %u vertices newly inside "
                "the skin in a frame\n", method.c_str(), apart, inside);
    if (method == "dqs") {
      dqs_apart = apart;
      dqs_inside = inside;
      continue;
    }
    EXPECT_LE(apart, dqs_apart + 1e-6) << method << " tears the seams";
    EXPECT_LE(inside, dqs_inside) << method;
  }
}

}  // namespace
}  // namespace sinew
