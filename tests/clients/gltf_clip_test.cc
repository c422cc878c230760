// The glTF clip writer (clients/export/gltf_clip.h) on small meshes: what tinygltf reads back
// (rest mesh, morph targets that give each frame's positions, accessor bounds, the STEP weights
// animation, extras), and clear errors for bad input.
#include "clients/export/gltf_clip.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

// tinygltf's implementation is compiled once, in clients/import/gltf_check.cc, with these.
#define TINYGLTF_NO_STB_IMAGE
#define TINYGLTF_NO_STB_IMAGE_WRITE
#define TINYGLTF_NO_EXTERNAL_IMAGE
#include <tiny_gltf.h>

#include <nlohmann/json.hpp>

namespace sinew::client {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A unit quad (two triangles) and `frames` frames moving its vertices.
struct Quad {
  std::vector<float> rest = {0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 1, 0};
  std::vector<uint32_t> triangles = {0, 1, 2, 0, 2, 3};
  std::vector<std::vector<float>> frames;
  explicit Quad(int n) {
    for (int k = 0; k < n; ++k) {
      std::vector<float> f = rest;
      for (size_t i = 0; i < f.size(); ++i) f[i] += 0.1f * float(k) * float(i % 3 == 2 ? -1 : 1) + 0.01f * float(i);
      frames.push_back(f);
    }
  }
  GltfClip Clip() const {
    GltfClip c;
    c.name = "quad";
    c.method = "lbs";
    c.clip_name = "wave";
    c.source = "quad.obj";
    c.frames_per_second = 24;
    c.rest = rest;
    c.triangles = triangles;
    for (const auto& f : frames) c.frames.emplace_back(f);
    return c;
  }
};

class GltfClipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("sinew-gltf-" + std::to_string(getpid()) + ".glb")).string();
  }
  void TearDown() override { fs::remove(path_); }
  std::string path_;
};

TEST_F(GltfClipTest, FramesReadBackAsRestPlusTheirMorphTarget) {
  Quad q(5);
  GltfClip c = q.Clip();
  c.quality.resize(5);
  c.quality[3].inside_vertices = 7;
  c.quality[3].volume_ratio = 0.875;
  c.quality[3].rest_inside_vertices = 5;
  c.quality[3].new_inside_vertices = 2;
  c.quality[3].new_max_depth = 0.25;
  c.quality[3].new_deepest_vertex = 2;
  c.quality[3].new_deepest_joint = "elbow";
  c.quality[3].exposed_vertices = 3;
  ASSERT_TRUE(WriteGltfClip(path_, c).ok());
  for (const auto& e : fs::directory_iterator(fs::path(path_).parent_path())) {
    ASSERT_FALSE(e.path().filename().string().starts_with(fs::path(path_).filename().string() + ".tmp")) << e.path();
  }

  auto d = ReadGltfClip(path_);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rest, q.rest);
  EXPECT_EQ(d->triangles, q.triangles);
  ASSERT_EQ(d->frames.size(), 5u);
  for (size_t k = 0; k < 5; ++k) {
    for (size_t i = 0; i < q.rest.size(); ++i) EXPECT_NEAR(d->frames[k][i], q.frames[k][i], 1e-6) << k << " " << i;
  }
  ASSERT_EQ(d->normals.size(), 12u);
  for (size_t v = 0; v < 4; ++v) EXPECT_FLOAT_EQ(d->normals[3 * v + 2], 1.f);  // the quad faces +z
  EXPECT_EQ(d->interpolation, "STEP");
  ASSERT_EQ(d->key_times.size(), 6u);  // and the last frame held until 5 / fps
  for (size_t k = 0; k < 6; ++k) EXPECT_NEAR(d->key_times[k], k / 24.0, 1e-7);

  const auto extras = nlohmann::json::parse(d->extras_json);
  const auto& s = extras.at("sinew");
  EXPECT_EQ(s.at("method"), "lbs");
  EXPECT_EQ(s.at("clip"), "wave");
  EXPECT_EQ(s.at("frames"), 5);
  EXPECT_EQ(s.at("vertices"), 4);
  EXPECT_DOUBLE_EQ(s.at("frames_per_second").get<double>(), 24.0);
  ASSERT_EQ(s.at("quality").size(), 5u);
  EXPECT_EQ(s.at("quality")[3].at("inside_vertices"), 7);
  EXPECT_DOUBLE_EQ(s.at("quality")[3].at("volume_ratio").get<double>(), 0.875);
  EXPECT_EQ(s.at("quality")[3].at("rest_inside_vertices"), 5);
  EXPECT_EQ(s.at("quality")[3].at("new_inside_vertices"), 2);
  EXPECT_DOUBLE_EQ(s.at("quality")[3].at("new_max_depth").get<double>(), 0.25);
  EXPECT_EQ(s.at("quality")[3].at("new_deepest_vertex"), 2);
  EXPECT_EQ(s.at("quality")[3].at("new_deepest_joint"), "elbow");
  EXPECT_EQ(s.at("quality")[3].at("exposed_vertices"), 3);
  EXPECT_EQ(s.at("quality")[2].at("exposed_vertices"), 0);
  // A frame with no vertex newly inside names none (no vertex −1, no empty joint).
  EXPECT_FALSE(s.at("quality")[2].contains("new_deepest_vertex"));
  EXPECT_FALSE(s.at("quality")[2].contains("new_deepest_joint"));
}

// Names are any bytes a file had (a Latin-1 file stem, a joint name): written as valid UTF-8, as
// glTF's JSON must be (until 2026-12-07 the JSON writer threw and `sinew batch --gltf` aborted
// after the whole bake, with nothing written).
TEST_F(GltfClipTest, NamesThatAreNotUtf8AreWrittenAsUtf8) {
  Quad q(2);
  GltfClip c = q.Clip();
  c.name = "caf\xe9";
  c.method = "lbs\xff";
  c.clip_name = "walk\xc3";
  c.source = "caf\xe9.X";
  c.quality.resize(2);
  c.quality[1].new_inside_vertices = 1;
  c.quality[1].new_deepest_vertex = 0;
  c.quality[1].new_deepest_joint = "\xc9paule";
  ASSERT_TRUE(WriteGltfClip(path_, c).ok());
  auto d = ReadGltfClip(path_);
  ASSERT_TRUE(d.ok()) << d.status();
  const auto extras = nlohmann::json::parse(d->extras_json);
  const auto& s = extras.at("sinew");
  EXPECT_EQ(s.at("method"), "lbs\xEF\xBF\xBD");
  EXPECT_EQ(s.at("clip"), "walk\xEF\xBF\xBD");
  EXPECT_EQ(s.at("source"), "caf\xEF\xBF\xBD.X");
  EXPECT_EQ(s.at("quality")[1].at("new_deepest_joint"), "\xEF\xBF\xBDpaule");
  tinygltf::Model m;
  tinygltf::TinyGLTF loader;
  std::string err, warn;
  ASSERT_TRUE(loader.LoadBinaryFromFile(&m, &err, &warn, path_)) << err;
  EXPECT_EQ(m.meshes.at(0).name, "caf\xEF\xBF\xBD");
  EXPECT_EQ(m.nodes.at(0).name, "caf\xEF\xBF\xBD");
  EXPECT_EQ(m.animations.at(0).name, "walk\xEF\xBF\xBD");
}

TEST_F(GltfClipTest, PositionAccessorsCarryTheirBoundsAndTheAnimationIsOneHot) {
  Quad q(3);
  ASSERT_TRUE(WriteGltfClip(path_, q.Clip()).ok());
  tinygltf::Model m;
  tinygltf::TinyGLTF loader;
  std::string err, warn;
  ASSERT_TRUE(loader.LoadBinaryFromFile(&m, &err, &warn, path_)) << err;
  ASSERT_EQ(m.meshes.size(), 1u);
  const auto& prim = m.meshes[0].primitives.at(0);
  ASSERT_EQ(prim.targets.size(), 3u);
  EXPECT_EQ(m.meshes[0].weights, (std::vector<double>{1, 0, 0}));  // shows frame 0 when not played
  // Every POSITION accessor (the rest mesh's and each target's) has min/max equal to its data's.
  std::vector<std::pair<int, std::vector<float>>> positions = {{prim.attributes.at("POSITION"), q.rest}};
  for (size_t k = 0; k < 3; ++k) {
    std::vector<float> delta(12);
    for (size_t i = 0; i < 12; ++i) delta[i] = q.frames[k][i] - q.rest[i];
    positions.push_back({prim.targets[k].at("POSITION"), delta});
  }
  for (const auto& [index, data] : positions) {
    const auto& a = m.accessors.at(index);
    ASSERT_EQ(a.minValues.size(), 3u) << index;
    ASSERT_EQ(a.maxValues.size(), 3u) << index;
    for (int c = 0; c < 3; ++c) {
      float lo = INFINITY, hi = -INFINITY;
      for (size_t v = 0; v < 4; ++v) lo = std::min(lo, data[3 * v + c]), hi = std::max(hi, data[3 * v + c]);
      EXPECT_EQ(a.minValues[c], lo) << index << " " << c;
      EXPECT_EQ(a.maxValues[c], hi) << index << " " << c;
    }
  }
  ASSERT_EQ(m.animations.size(), 1u);
  const auto& ch = m.animations[0].channels.at(0);
  EXPECT_EQ(ch.target_path, "weights");
  EXPECT_EQ(ch.target_node, 0);
  const auto& out = m.accessors.at(m.animations[0].samplers.at(0).output);
  // Key k shows frame k alone; a 4th key, at 3 / fps, holds the last frame: the clip lasts three
  // frames' time (until 2026-12-03 it ended at the last frame's key, which a loop never showed).
  ASSERT_EQ(out.count, 12u);
  const auto& view = m.bufferViews.at(out.bufferView);
  const float* w = reinterpret_cast<const float*>(&m.buffers[0].data[view.byteOffset + out.byteOffset]);
  for (size_t k = 0; k < 4; ++k) {
    for (size_t j = 0; j < 3; ++j) EXPECT_EQ(w[3 * k + j], std::min<size_t>(k, 2) == j ? 1.f : 0.f) << k << " " << j;
  }
  const auto& in = m.accessors.at(m.animations[0].samplers.at(0).input);
  ASSERT_EQ(in.count, 4u);
  ASSERT_EQ(in.maxValues.size(), 1u);
  EXPECT_NEAR(in.maxValues[0], 3.0 / 24, 1e-7);
}

TEST_F(GltfClipTest, BadInputNamesTheFieldAndIndexAndWritesNothing) {
  Quad q(2);
  {
    GltfClip c = q.Clip();
    std::vector<uint32_t> bad = {0, 1, 2, 0, 2, 9};
    c.triangles = bad;
    auto st = WriteGltfClip(path_, c);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr("triangle 1 index 9 >= vertex count 4"));
  }
  {
    GltfClip c = q.Clip();
    std::vector<float> short_frame(9, 0.f);
    c.frames[1] = short_frame;
    EXPECT_THAT(WriteGltfClip(path_, c).message(), HasSubstr("frame 1: 9 floats"));
  }
  {
    GltfClip c = q.Clip();
    std::vector<float> nan_frame = q.frames[1];
    nan_frame[7] = NAN;
    c.frames[1] = nan_frame;
    EXPECT_THAT(WriteGltfClip(path_, c).message(), HasSubstr("frame 1: vertex 2 coordinate 1 is not finite"));
  }
  {
    GltfClip c = q.Clip();
    c.frames.clear();
    EXPECT_THAT(WriteGltfClip(path_, c).message(), HasSubstr("no frames"));
    c = q.Clip();
    c.frames.assign(kMaxGltfFrames + 1, q.frames[0]);
    EXPECT_THAT(WriteGltfClip(path_, c).message(), HasSubstr("more than the 2048"));
    c = q.Clip();
    c.quality.resize(1);
    EXPECT_THAT(WriteGltfClip(path_, c).message(), HasSubstr("1 quality reports for 2 frames"));
  }
  {
    // Past 4 GiB a .glb's chunk lengths wrap: 175 000 vertices × 2048 frames (4.3 GB) is refused
    // by size (one frame's floats seen 2048 times: nothing that large is held).
    GltfClip c = q.Clip();
    std::vector<float> big(3 * 175000, 0.f);
    c.rest = big;
    c.triangles = {};
    c.frames.assign(kMaxGltfFrames, big);
    EXPECT_THAT(WriteGltfClip(path_, c).message(), HasSubstr("more than a .glb holds (4 GiB)"));
  }
  EXPECT_FALSE(fs::exists(path_));
  EXPECT_EQ(WriteGltfClip("/nonexistent-dir/x.glb", q.Clip()).code(), absl::StatusCode::kNotFound);
}

// A damaged file is refused, not read past: a POSITION count whose byte size wraps 64 bits
// passed the bounds check and the copy wrote past a two-float vector (until 2026-12-07); strided
// indices, which the reader would read as packed, are refused.
TEST_F(GltfClipTest, ReadingADamagedFileIsRefusedNotReadPast) {
  ASSERT_TRUE(WriteGltfClip(path_, Quad(2).Clip()).ok());
  auto edited = [&](const std::function<void(tinygltf::Model&)>& edit) {
    tinygltf::Model m;
    tinygltf::TinyGLTF io;
    std::string err, warn;
    EXPECT_TRUE(io.LoadBinaryFromFile(&m, &err, &warn, path_)) << err;
    edit(m);
    const std::string out = path_ + ".damaged.glb";
    EXPECT_TRUE(io.WriteGltfSceneToFile(&m, out, true, true, false, true));
    auto d = ReadGltfClip(out);
    fs::remove(out);
    return d.status();
  };
  const absl::Status wrapped = edited([](tinygltf::Model& m) {
    m.accessors[m.meshes[0].primitives[0].attributes.at("POSITION")].count = 0x5555555555555556ull;
  });
  EXPECT_EQ(wrapped.code(), absl::StatusCode::kFailedPrecondition) << wrapped;
  EXPECT_THAT(std::string(wrapped.message()), HasSubstr("POSITION: more elements than its buffer holds"));
  const absl::Status strided = edited([](tinygltf::Model& m) {
    m.bufferViews[m.accessors[m.meshes[0].primitives[0].indices].bufferView].byteStride = 8;
  });
  EXPECT_EQ(strided.code(), absl::StatusCode::kFailedPrecondition) << strided;
}

// The size the 4 GiB check uses is the binary chunk's size of a written file.
TEST_F(GltfClipTest, TheBinaryChunkHasTheSizeTheLimitCounts) {
  Quad q(3);
  ASSERT_TRUE(WriteGltfClip(path_, q.Clip()).ok());
  std::ifstream in(path_, std::ios::binary);
  const std::string glb((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GE(glb.size(), 28u);
  uint32_t json_bytes = 0, bin_bytes = 0;
  std::memcpy(&json_bytes, glb.data() + 12, 4);
  ASSERT_LE(20 + json_bytes + 8, glb.size());
  std::memcpy(&bin_bytes, glb.data() + 20 + json_bytes, 4);
  EXPECT_EQ(bin_bytes, (GltfClipBinaryBytes(4, 6, 3) + 3) / 4 * 4);
}

}  // namespace
}  // namespace sinew::client
