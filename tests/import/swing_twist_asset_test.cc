// Swing/twist deformers on rigs nobody here made: assimp-testmodels' BCN_Epileptic.X (15k
// vertices, 58 joints, separate mesh parts, animated joint translations) and the SuperCages Arm
// (2,089 vertices, 25 joints with coincident and branching joints). The precompute completes,
// the bind pose returns the mesh, and through the character's clip the result stays on average
// close to DQS, without NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "clients/import/asset_import.h"
#include "clients/import/supercages.h"
#include "core/clip/clip.h"
#include "core/swingtwist/method.h"

namespace sinew {
namespace {

const std::string kModels = SINEW_ASSIMP_MODELS;

std::shared_ptr<const SwingTwistModel> Prepare(const Rig& rig, ThreadPool* pool) {
  DeformerConfig config("swing-twist");
  config.params = std::make_shared<SwingTwistParams>();
  auto p = PrepareSwingTwist(rig, config, pool, {});
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return nullptr;
  auto m = std::dynamic_pointer_cast<const SwingTwistModel>(*p);
  std::printf("%zu vertices, %zu joints: voxel %.4f, %zu voxels, %zu grid vertices, %zu handles, %zu EMW joints "
              "(at most %d iterations)\n",
              rig.vertex_count(), rig.joint_count(), m->stats.voxel_size, m->stats.voxels, m->stats.grid_vertices,
              m->stats.handles, m->stats.solved_joints, m->stats.max_iterations);
  return m;
}

TEST(SwingTwistAsset, CharacterClipStaysNearDqs) {
  const std::string path = kModels + "/X/BCN_Epileptic.X";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "assimp-testmodels not installed (scripts/install-deps.sh installs it)";
  auto asset = ImportAsset(path);
  ASSERT_TRUE(asset.ok()) << asset.status();
  auto built = BuildRig(asset->rig);
  ASSERT_TRUE(built.ok()) << built.status();
  auto rig = std::make_shared<const Rig>(std::move(*built));
  ThreadPool pool(2);
  auto model = Prepare(*rig, &pool);
  ASSERT_TRUE(model);
  DeformerConfig config("swing-twist");
  config.params = std::make_shared<SwingTwistParams>();
  auto st = CreateSwingTwistDeformer(rig, model, config);
  auto dqs = CreateDeformer(rig, DeformerConfig("dqs"));
  ASSERT_TRUE(st.ok() && dqs.ok());
  // The bind pose (every joint where its inverse bind matrix puts it: all skinning matrices are
  // the identity) returns the mesh. (This asset's node rest pose is not its bind pose.)
  std::vector<float> out(rig->positions.size()), ref(rig->positions.size());
  Pose bind;
  bind.space = PoseSpace::kWorld;
  bind.rotations.resize(4 * rig->joint_count());
  bind.translations.resize(3 * rig->joint_count());
  for (size_t j = 0; j < rig->joint_count(); ++j) {
    const Affine34d g = Inverse(rig->skeleton.inverse_bind[j]);
    Similarity sj;
    sj.rotation = Eigen::Quaterniond(Eigen::Matrix3d(g.leftCols<3>())).normalized();
    sj.translation = g.col(3);
    bind.set_joint(j, sj);
  }
  ASSERT_TRUE((*st)->Deform({&bind, {}}, out, &pool).ok());
  double rest_error = 0;
  for (size_t i = 0; i < out.size(); ++i) rest_error = std::max(rest_error, double(std::abs(out[i] - rig->positions[i])));
  EXPECT_LE(rest_error, 1e-4 * rig->bbox_diagonal());

  const Clip& clip = asset->clips[0];
  double worst = 0, mean = 0;
  size_t count = 0;
  constexpr int kFrames = 12;
  for (int k = 0; k <= kFrames; ++k) {
    Pose pose;
    SampleClip(clip, rig->skeleton, clip.duration * k / kFrames, pose);
    ASSERT_TRUE((*st)->Deform({&pose, {}}, out, &pool).ok()) << "frame " << k;
    ASSERT_TRUE((*dqs)->Deform({&pose, {}}, ref, &pool).ok());
    for (size_t v = 0; v < rig->vertex_count(); ++v) {
      const double d = std::sqrt(std::pow(out[3 * v] - ref[3 * v], 2) + std::pow(out[3 * v + 1] - ref[3 * v + 1], 2) +
                                 std::pow(out[3 * v + 2] - ref[3 * v + 2], 2));
      ASSERT_TRUE(std::isfinite(d)) << "frame " << k << " vertex " << v;
      worst = std::max(worst, d);
      mean += d;
      ++count;
    }
  }
  mean /= double(count);
  std::printf("through the clip, distance to DQS: mean %.4f, max %.4f of the bounding-box diagonal\n",
              mean / rig->bbox_diagonal(), worst / rig->bbox_diagonal());
  // On average the deformers stay with DQS; single vertices differ by design where the artist's
  // weights and the geometry disagree (a vertex weighted wholly to a helper joint it lies below
  // follows the joint's parent here: the weights are geometric), so the maximum is only reported.
  EXPECT_LE(mean, 0.005 * rig->bbox_diagonal());
}

TEST(SwingTwistAsset, ArmWithCoincidentAndBranchingJointsPrepares) {
  const std::string dir = std::string(SINEW_SHARED_DATA) + "/supercages-arm";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "../shared/data/supercages-arm not present";
  auto arm = ReadSuperCages(SuperCagesFilesIn(dir, "arm"));
  ASSERT_TRUE(arm.ok()) << arm.status();
  auto built = BuildRig(arm->rig);
  ASSERT_TRUE(built.ok()) << built.status();
  ThreadPool pool(2);
  auto model = Prepare(*built, &pool);
  ASSERT_TRUE(model);
  EXPECT_LT(model->stats.handles, built->joint_count());  // coincident joints share handles
  EXPECT_TRUE(CheckSwingTwistWeights(model->weights, built->vertex_count(), built->joint_count()).ok());
}

}  // namespace
}  // namespace sinew
