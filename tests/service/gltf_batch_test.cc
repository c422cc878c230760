// `sinew batch --gltf` end to end: a real server bakes BCN_Epileptic's clip and the CLI writes a
// glTF binary. Read back with tinygltf, frame k's morphed positions are the .pc2's frame k; the
// weights animation steps through the frames at the bake's rate; --quality stores the
// per-frame reports; a batch split by --max-frames writes the .glb only when the last frame is in,
// byte-identical to an uninterrupted run's; and the Khronos glTF validator finds no issue.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "clients/export/gltf_clip.h"
#include "clients/import/asset_import.h"
#include "clients/lib/point_cache.h"
#include "core/geometry/mesh_quality.h"
#include "core/rig/rig.h"
#include "tests/service/server_process.h"

namespace sinew::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kCharacter = "/usr/share/assimp/models/X/BCN_Epileptic.X";

class GltfBatch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kCharacter)) GTEST_SKIP() << "assimp-testmodels not installed";
    dir_ = fs::temp_directory_path() / ("sinew-gltf-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> Batch(const ServerProcess& server, std::vector<std::string> extra) {
    std::vector<std::string> a = {SINEW_CLI_PATH, "--target", server.target(), "batch", kCharacter, "--clip-fps", "30"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  static std::string Bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path dir_;
};

TEST_F(GltfBatch, MorphedFramesAreThePointCacheFramesAndQualityTravelsInExtras) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const std::string pc2 = (dir_ / "c.pc2").string(), glb = (dir_ / "c.glb").string();
  std::string out, err;
  ASSERT_EQ(RunProcess(Batch(server, {"--method", "dqs", "--pc2", pc2, "--gltf", glb, "--quality"}), &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("c.glb: 100 frames x 15378 vertices as morph targets"));
  EXPECT_FALSE(fs::exists(glb + ".part.pc2"));  // --pc2 given: no part file

  auto cache = client::ReadPc2(pc2);
  ASSERT_TRUE(cache.ok()) << cache.status();
  auto clip = client::ReadGltfClip(glb);
  ASSERT_TRUE(clip.ok()) << clip.status();
  auto asset = ImportAsset(kCharacter);
  ASSERT_TRUE(asset.ok());
  EXPECT_EQ(clip->rest, asset->rig.rig.positions);
  EXPECT_EQ(clip->triangles, asset->rig.rig.triangles);
  ASSERT_EQ(clip->normals.size(), clip->rest.size());
  for (size_t v = 0; v < clip->normals.size() / 3; ++v) {
    const float* n = &clip->normals[3 * v];
    ASSERT_NEAR(std::sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]), 1.0, 1e-5) << "vertex " << v;
  }
  ASSERT_EQ(clip->frames.size(), 100u);
  ASSERT_EQ(cache->frames.size(), 100u);
  // rest + (frame − rest) in float32: within a rounding step of the frame itself.
  float worst = 0;
  for (size_t k = 0; k < 100; ++k) {
    for (size_t i = 0; i < clip->rest.size(); ++i) worst = std::max(worst, std::abs(clip->frames[k][i] - cache->frames[k][i]));
  }
  EXPECT_LT(worst, 1e-6f);
  EXPECT_EQ(clip->interpolation, "STEP");
  ASSERT_EQ(clip->key_times.size(), 101u);  // the last holds frame 99 until 100 / 30 s
  for (size_t k = 0; k < 101; ++k) EXPECT_NEAR(clip->key_times[k], k / 30.0, 1e-6);

  const auto extras = nlohmann::json::parse(clip->extras_json);
  const auto& s = extras.at("sinew");
  EXPECT_EQ(s.at("method"), "dqs");
  EXPECT_EQ(s.at("source"), "BCN_Epileptic.X");
  EXPECT_EQ(s.at("frames"), 100);
  EXPECT_EQ(s.at("vertices"), 15378);
  ASSERT_EQ(s.at("quality").size(), 100u);
  size_t folded = 0, most = 0;  // the frame with the most new inside vertices
  for (size_t k = 0; k < 100; ++k) {
    const auto& q = s.at("quality")[k];
    EXPECT_GT(q.at("volume_ratio").get<double>(), 0.5);
    EXPECT_LT(q.at("volume_ratio").get<double>(), 1.5);
    EXPECT_GT(q.at("edge_stretch_max").get<double>(), q.at("edge_stretch_min").get<double>());
    // Where the deepest new inside vertex is, named exactly when there is one.
    const int fresh = q.at("new_inside_vertices").get<int>();
    EXPECT_EQ(q.contains("new_deepest_vertex"), fresh > 0) << "frame " << k;
    EXPECT_EQ(q.contains("new_deepest_joint"), fresh > 0) << "frame " << k;
    if (fresh > 0 && fresh > s.at("quality")[most].at("new_inside_vertices").get<int>()) most = k;
    folded += fresh > 0;
  }
  // DQS folds BCN's skin in some frames (its hips and knees): the vertex and joint written for the
  // worst of them are core's measure of that frame and the rig's heaviest joint there.
  ASSERT_GT(folded, 0u);
  {
    const Rig rig = *BuildRig(asset->rig);
    const MeshQuality want = MeasureMeshQuality(rig.positions, cache->frames[most], rig.triangles, nullptr);
    ASSERT_GE(want.new_deepest_vertex, 0);
    const auto& q = s.at("quality")[most];
    EXPECT_EQ(q.at("new_deepest_vertex").get<int64_t>(), want.new_deepest_vertex) << "frame " << most;
    EXPECT_EQ(q.at("new_deepest_joint").get<std::string>(),
              rig.skeleton.names[size_t(HeaviestJoint(rig.weights, size_t(want.new_deepest_vertex)))])
        << "frame " << most;
    // And the skin inside the rest skin that the pose brought out (BCN's rest mesh lies partly
    // inside itself: its left thumb in its hand, its meshes overlapping).
    EXPECT_EQ(q.at("exposed_vertices").get<uint32_t>(), want.exposed_vertices) << "frame " << most;
  }
  // `sinew play --quality` streams the same frames and reports the server's measure of them: its
  // summary names the frame with the deepest new fold, the vertex and the joint these records do.
  {
    size_t deepest = 0;
    for (size_t k = 1; k < 100; ++k) {
      if (s.at("quality")[k].at("new_max_depth").get<double>() > s.at("quality")[deepest].at("new_max_depth").get<double>()) {
        deepest = k;
      }
    }
    const auto& q = s.at("quality")[deepest];
    ASSERT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server.target(), "play", kCharacter, "--clip-fps", "30", "--method",
                          "dqs", "--quality"},
                         &out, &err),
              0)
        << err;
    EXPECT_THAT(out, HasSubstr(absl::StrFormat("in frame %d at vertex %d, joint %s)", deepest,
                                               q.at("new_deepest_vertex").get<int>(),
                                               q.at("new_deepest_joint").get<std::string>())))
        << out;
    // With --json, the same summary as numbers.
    ASSERT_EQ(RunProcess({SINEW_CLI_PATH, "--target", server.target(), "play", kCharacter, "--clip-fps", "30", "--method",
                          "dqs", "--quality", "--json"},
                         &out, &err),
              0)
        << err;
    const auto j = nlohmann::json::parse(out.substr(out.find('{')));
    ASSERT_TRUE(j.contains("quality")) << out;
    const auto& jq = j.at("quality");
    size_t frames_new = 0, worst_new = 0, worst_exposed = 0, worst_exposed_frame = 0;
    double new_depth = 0;
    for (size_t k = 0; k < s.at("quality").size(); ++k) {
      const auto& r = s.at("quality")[k];
      if (r.at("exposed_vertices").get<size_t>() > worst_exposed) {
        worst_exposed = r.at("exposed_vertices").get<size_t>();
        worst_exposed_frame = k;
      }
      frames_new += r.at("new_inside_vertices").get<int>() > 0;
      worst_new = std::max<size_t>(worst_new, r.at("new_inside_vertices").get<int>());
      new_depth = std::max(new_depth, r.at("new_max_depth").get<double>());
    }
    EXPECT_EQ(jq.at("frames_new").get<size_t>(), frames_new);
    EXPECT_EQ(jq.at("worst_new").get<size_t>(), worst_new);
    EXPECT_GT(worst_exposed, 0u) << "DQS brings none of BCN's hidden skin out";
    EXPECT_EQ(jq.at("worst_exposed").get<size_t>(), worst_exposed);
    EXPECT_EQ(jq.at("worst_exposed_frame").get<size_t>(), worst_exposed_frame);
    // play samples the clip's poses on the client, batch on the server: positions a float rounding
    // apart (the deepest vertex and frame the same).
    EXPECT_NEAR(jq.at("new_max_depth").get<double>(), new_depth, 1e-6 * new_depth);
    EXPECT_EQ(jq.at("rest_inside").get<int>(), q.at("rest_inside_vertices").get<int>());
    EXPECT_EQ(jq.at("new_deepest_frame").get<size_t>(), deepest);
    EXPECT_EQ(jq.at("new_deepest_vertex"), q.at("new_deepest_vertex"));
    EXPECT_EQ(jq.at("new_deepest_joint"), q.at("new_deepest_joint"));
  }
  // The Khronos validator, installed by scripts/install-deps.sh (npm).
  const std::string validator = std::string(SINEW_SOURCE_DIR) + "/clients/web/tools/validate-gltf.mjs";
  if (!fs::exists(std::string(SINEW_SOURCE_DIR) + "/clients/web/node_modules/gltf-validator")) {
    GTEST_SKIP() << "clients/web/node_modules/gltf-validator missing: run scripts/install-deps.sh";
  }
  ASSERT_EQ(RunProcess({"/usr/bin/env", "node", validator, glb}, &out, &err), 0) << out << err;
  EXPECT_THAT(out, HasSubstr(": 0 errors, 0 warnings, 0 infos, 0 hints; 1 draw calls, 15378 vertices, 1 animations, morph targets: true"));
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(GltfBatch, SplitBatchWritesTheGlbOnlyWhenCompleteAndIdenticalToOneRun) {
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const std::string whole = (dir_ / "whole.glb").string(), split = (dir_ / "split.glb").string();
  std::string out, err;
  ASSERT_EQ(RunProcess(Batch(server, {"--gltf", whole}), &out, &err), 0) << err;
  EXPECT_FALSE(fs::exists(whole + ".part.pc2"));

  // 40 frames, then 40 more: no .glb yet, the frames wait in split.glb.part.pc2.
  for (uint64_t done : {40u, 80u}) {
    ASSERT_EQ(RunProcess(Batch(server, {"--gltf", split, "--max-frames", "40"}), &out, &err), 0) << err;
    EXPECT_THAT(err, HasSubstr("the .glb is written once the last frame is in"));
    EXPECT_FALSE(fs::exists(split));
    auto part = client::ReadPc2(split + ".part.pc2");
    ASSERT_TRUE(part.ok()) << part.status();
    EXPECT_EQ(part->frames.size(), done);
  }
  ASSERT_EQ(RunProcess(Batch(server, {"--gltf", split, "--max-frames", "40"}), &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("split.glb: 100 frames"));
  EXPECT_FALSE(fs::exists(split + ".part.pc2"));
  EXPECT_EQ(Bytes(split), Bytes(whole));

  // --quality without --gltf is refused with the flag named; a --gltf folder that cannot be made
  // (a file is in its way) is refused naming it, and one that does not exist yet is made.
  EXPECT_EQ(RunProcess(Batch(server, {"--pc2", (dir_ / "q.pc2").string(), "--quality"}), &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("--quality: goes with --gltf"));
  { std::ofstream(dir_ / "file") << "x"; }
  EXPECT_NE(RunProcess(Batch(server, {"--gltf", (dir_ / "file" / "such" / "x.glb").string()}), &out, &err), 0);
  EXPECT_THAT(err, HasSubstr((dir_ / "file" / "such").string()));
  EXPECT_EQ(RunProcess(Batch(server, {"--gltf", (dir_ / "new" / "x.glb").string(), "--max-frames", "1"}), &out, &err),
            0)
      << err;
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace sinew::testing
