// Implicit skinning on a character nobody here made (assimp-testmodels' BCN_Epileptic.X: 15k
// vertices in 3 meshes, 58 joints, an animated clip): both methods play the clip with finite
// positions, and no vertex leaves the support of its own bone's field (it would then be
// "projected" onto some other surface); most vertices converge to their iso values.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "clients/import/asset_import.h"
#include "core/clip/clip.h"
#include "core/implicit/implicit_skinning.h"

namespace sinew {
namespace {

const std::string kModels = SINEW_ASSIMP_MODELS;

TEST(ImplicitAsset, CharacterClipPlaysWithoutNaNOrVerticesLeavingTheirField) {
  const std::string path = kModels + "/X/BCN_Epileptic.X";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "assimp-testmodels not installed (scripts/install-deps.sh installs it)";
  auto asset = ImportAsset(path);
  ASSERT_TRUE(asset.ok()) << asset.status();
  ASSERT_FALSE(asset->clips.empty());
  auto built = BuildRig(asset->rig);
  ASSERT_TRUE(built.ok()) << built.status();
  auto rig = std::make_shared<const Rig>(std::move(*built));
  ThreadPool pool(2);
  DeformerConfig config;
  config.method = "implicit";
  auto prepared = PrepareImplicit(*rig, config, &pool, {});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  auto model = std::dynamic_pointer_cast<const ImplicitModel>(*prepared);
  std::printf("%zu vertices, %zu nodes, %zu joints, %zu bone fields, %.1f MiB\n", rig->vertex_count(),
              model->node_count(), rig->joint_count(), model->fields.size(), model->Bytes() / 1048576.0);
  EXPECT_GT(model->fields.size(), 10u);

  const Clip& clip = asset->clips[0];
  for (const std::string& method : {std::string("dqs"), std::string("implicit"), std::string("elastic-implicit")}) {
    config.method = method;
    auto d = method == "dqs" ? CreateDeformer(rig, config) : CreateImplicitDeformer(rig, model, config);
    ASSERT_TRUE(d.ok()) << d.status();
    std::vector<float> out(rig->positions.size());
    std::vector<Similarity> world(rig->joint_count());
    std::vector<Affine34d> t(rig->joint_count());
    size_t counts[6] = {}, outside = 0, checked = 0;
    constexpr int kFrames = 12;
    for (int k = 0; k <= kFrames; ++k) {
      Pose pose;
      SampleClip(clip, rig->skeleton, clip.duration * k / kFrames, pose);
      ASSERT_TRUE((*d)->Deform({&pose, {}}, out, &pool).ok());
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
      EXPECT_GT(counts[1], total * 3 / 4) << name;
      EXPECT_LT(counts[5], total / 100) << name << ": re-seeded";
    }
  }
}

}  // namespace
}  // namespace sinew
