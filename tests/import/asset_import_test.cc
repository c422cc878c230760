// Importing real rigged, animated assets nobody here wrote (Debian's assimp-testmodels): every
// model with bones and an animation imports; its bind pose reproduces the file's mesh; its clip
// plays without tearing; a glTF frame equals the glTF skinning equation evaluated from the
// file's raw accessors by an independent reader (tinygltf); malformed files give clear errors.
#include <assimp/postprocess.h>
#include <assimp/scene.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <assimp/Importer.hpp>
#include <cmath>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <optional>
#include <fstream>
#include <functional>
#include <map>
#include <cstring>

// tinygltf's implementation is compiled once, in clients/import/gltf_check.cc.
#define TINYGLTF_NO_STB_IMAGE
#define TINYGLTF_NO_STB_IMAGE_WRITE
#define TINYGLTF_NO_EXTERNAL_IMAGE
#include <tiny_gltf.h>

#include "absl/strings/str_cat.h"
#include "clients/import/asset_import.h"
#include "core/deformer/deformer.h"

namespace sinew {
namespace {

const std::string kModels = SINEW_ASSIMP_MODELS;

// Every model in assimp-testmodels that has bones and an animation (found by importing all
// 439 files of the package and keeping those with both).
const char* const kRiggedAnimated[] = {
    "BVH/01_01.bvh",
    "BVH/01_03.bvh",
    "BVH/Boxing_Toes.bvh",
    "Collada/box_nested_animation.dae",
    "FBX/animation_with_skeleton.fbx",
    "FBX/huesitos.fbx",
    "MDL/MDL (HL1)/alpha_test.mdl",
    "MDL/MDL (HL1)/blend_additive.mdl",
    "MDL/MDL (HL1)/chrome_sphere.mdl",
    "MDL/MDL (HL1)/duplicate_bodyparts.mdl",
    "MDL/MDL (HL1)/duplicate_sequence_groups/duplicate_sequence_groups.mdl",
    "MDL/MDL (HL1)/duplicate_sequences.mdl",
    "MDL/MDL (HL1)/duplicate_submodels.mdl",
    "MDL/MDL (HL1)/man.mdl",
    "MDL/MDL (HL1)/sequence_transitions.mdl",
    "MDL/MDL (HL1)/unnamed_bodyparts.mdl",
    "MDL/MDL (HL1)/unnamed_bones.mdl",
    "MDL/MDL (HL1)/unnamed_sequence_groups/unnamed_sequence_groups.mdl",
    "MDL/MDL (HL1)/unnamed_sequences.mdl",
    "SMD/WusonSMD.smd",
    "SMD/holy_grailref.smd",
    "SMD/triangle.smd",
    "X/BCN_Epileptic.X",
    "X/Testwuson.X",
    "X/anim_test.x",
    "glTF2/simple_skin/simple_skin.gltf",
};

// Rigged or animated files that assimp 5.2 itself cannot read as such; each is tried, and
// skipped with the reason while assimp fails (if a later assimp reads it, the test runs).
struct Unreadable {
  const char* path;
  const char* reason;
};
const Unreadable kUnreadable[] = {
    {"Collada/library_animation_clips.dae", "assimp's Collada parser rejects its number lists"},
    {"OpenGEX/animation_example.ogex", "assimp's OpenGEX parser rejects a 3-element colour"},
    {"IRR/animMesh.irr", "assimp's IRR reader fails on its XML"},
};

std::vector<float> Deform(const Rig& rig, const std::string& method, const Pose& pose) {
  auto shared = std::make_shared<const Rig>(rig);
  auto d = CreateDeformer(shared, {method, nullptr});
  EXPECT_TRUE(d.ok()) << d.status();
  std::vector<float> out(rig.positions.size());
  const auto st = (*d)->Deform({&pose, {}}, out, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// The file's mesh as assimp presents it: every triangle mesh of every node, in pre-order,
// vertices times the node's global transform. Written here independently of the importer.
std::vector<float> FileMesh(const std::string& path) {
  Assimp::Importer importer;
  importer.SetPropertyInteger(AI_CONFIG_PP_SBP_REMOVE, aiPrimitiveType_POINT | aiPrimitiveType_LINE);
  const aiScene* scene = importer.ReadFile(path, aiProcess_Triangulate | aiProcess_SortByPType);
  std::vector<float> out;
  std::function<void(const aiNode*, aiMatrix4x4)> walk = [&](const aiNode* n, aiMatrix4x4 parent) {
    const aiMatrix4x4 g = parent * n->mTransformation;
    for (unsigned i = 0; i < n->mNumMeshes; ++i) {
      const aiMesh* m = scene->mMeshes[n->mMeshes[i]];
      if (!(m->mPrimitiveTypes & aiPrimitiveType_TRIANGLE) || m->mNumFaces == 0) continue;
      for (unsigned v = 0; v < m->mNumVertices; ++v) {
        const aiVector3D p = g * m->mVertices[v];
        out.insert(out.end(), {p.x, p.y, p.z});
      }
    }
    for (unsigned c = 0; c < n->mNumChildren; ++c) walk(n->mChildren[c], g);
  };
  if (scene) walk(scene->mRootNode, aiMatrix4x4());
  return out;
}

// 99th percentile of |e'| / |e| over the mesh's edges: a clip that tears the mesh (a joint
// mapped to the wrong node, a wrong bind matrix) stretches edges far beyond any pose.
double EdgeStretchP99(const Rig& rig, std::span<const float> posed) {
  std::vector<double> ratios;
  auto len = [](std::span<const float> p, uint32_t a, uint32_t b) {
    const double dx = p[3 * a] - p[3 * b], dy = p[3 * a + 1] - p[3 * b + 1], dz = p[3 * a + 2] - p[3 * b + 2];
    return std::sqrt(dx * dx + dy * dy + dz * dz);
  };
  for (size_t t = 0; t < rig.triangle_count(); ++t) {
    for (int k = 0; k < 3; ++k) {
      const uint32_t a = rig.triangles[3 * t + k], b = rig.triangles[3 * t + (k + 1) % 3];
      const double rest = len(rig.positions, a, b);
      if (rest > 1e-6 * rig.bbox_diagonal()) ratios.push_back(len(posed, a, b) / rest);
    }
  }
  if (ratios.empty()) return 1;
  std::sort(ratios.begin(), ratios.end());
  return ratios[ratios.size() * 99 / 100];
}

void CheckModel(const std::string& rel) {
  const std::string path = kModels + "/" + rel;
  auto asset = ImportAsset(path);
  ASSERT_TRUE(asset.ok()) << asset.status();
  EXPECT_GT(asset->bones, 0u);
  ASSERT_FALSE(asset->clips.empty());
  auto rig = BuildRig(asset->rig);
  ASSERT_TRUE(rig.ok()) << rig.status();
  const double diag = std::max<double>(rig->bbox_diagonal(), 1e-12);

  // The importer's rest mesh is the file's mesh.
  const std::vector<float> file = FileMesh(path);
  ASSERT_EQ(file.size(), rig->positions.size());
  double d = 0;
  for (size_t i = 0; i < file.size(); ++i) d = std::max(d, double(std::abs(file[i] - rig->positions[i])));
  EXPECT_LE(d, 1e-5 * diag) << "rest mesh differs from the file's mesh";

  // The bind pose reproduces it.
  const std::vector<float> bind = Deform(*rig, "lbs", BindPose(rig->skeleton));
  d = 0;
  for (size_t i = 0; i < file.size(); ++i) d = std::max(d, double(std::abs(file[i] - bind[i])));
  EXPECT_LE(d, 1e-5 * diag) << "bind pose does not reproduce the mesh";

  // Every clip plays: finite, and no edge stretched more than 4x at the 99th percentile.
  for (const Clip& clip : asset->clips) {
    ASSERT_TRUE(ValidateClip(clip, rig->joint_count()).ok()) << clip.name;
    Pose pose;
    for (int f = 0; f <= 8; ++f) {
      SampleClip(clip, rig->skeleton, clip.duration * f / 8, pose);
      const std::vector<float> out = Deform(*rig, "lbs", pose);
      ASSERT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }))
          << clip.name << " frame " << f;
      EXPECT_LE(EdgeStretchP99(*rig, out), 4.0) << clip.name << " frame " << f;
    }
  }
}

class RiggedAnimated : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(AssimpTestModels, RiggedAnimated, ::testing::ValuesIn(kRiggedAnimated),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST_P(RiggedAnimated, ImportsAndBindPoseReproducesMesh) {
  if (!std::filesystem::exists(kModels + "/" + GetParam())) {
    GTEST_SKIP() << "assimp-testmodels not installed (scripts/install-deps.sh installs it)";
  }
  CheckModel(GetParam());
}

TEST(AssetImport, UnreadableRiggedModelsAreSkippedWithReason) {
  for (const Unreadable& u : kUnreadable) {
    const std::string path = kModels + "/" + u.path;
    if (!std::filesystem::exists(path)) continue;
    auto asset = ImportAsset(path);
    if (!asset.ok()) {
      std::printf("skipped %s: %s (%s)\n", u.path, u.reason, std::string(asset.status().message()).c_str());
      EXPECT_THAT(std::string(asset.status().message()), ::testing::HasSubstr(path));
      continue;
    }
    if (asset->bones > 0 && !asset->clips.empty()) CheckModel(u.path);
  }
}

// --- glTF: Sinew's LBS against the glTF skinning equation from the raw accessors -----------

template <class T>
std::vector<T> Accessor(const tinygltf::Model& m, int index, int components) {
  const tinygltf::Accessor& a = m.accessors[index];
  const tinygltf::BufferView& v = m.bufferViews[a.bufferView];
  const unsigned char* base = m.buffers[v.buffer].data.data() + v.byteOffset + a.byteOffset;
  const size_t elem = tinygltf::GetComponentSizeInBytes(a.componentType) * components;
  const size_t stride = v.byteStride ? v.byteStride : elem;
  std::vector<T> out;
  for (size_t i = 0; i < a.count; ++i) {
    for (int c = 0; c < components; ++c) {
      const unsigned char* p = base + i * stride + c * tinygltf::GetComponentSizeInBytes(a.componentType);
      switch (a.componentType) {
        case TINYGLTF_COMPONENT_TYPE_FLOAT: out.push_back(T(*reinterpret_cast<const float*>(p))); break;
        case TINYGLTF_COMPONENT_TYPE_UNSIGNED_SHORT: out.push_back(T(*reinterpret_cast<const uint16_t*>(p))); break;
        case TINYGLTF_COMPONENT_TYPE_UNSIGNED_BYTE: out.push_back(T(*p)); break;
        default: ADD_FAILURE() << "component type " << a.componentType;
      }
    }
  }
  return out;
}

// Node n's local matrix at time t: its TRS with animated channels sampled (LINEAR).
Eigen::Matrix4d LocalAt(const tinygltf::Model& m, int n, double t) {
  const tinygltf::Node& node = m.nodes[n];
  Eigen::Vector3d tr = Eigen::Vector3d::Zero(), sc = Eigen::Vector3d::Ones();
  Eigen::Quaterniond q = Eigen::Quaterniond::Identity();
  if (node.translation.size() == 3) tr = {node.translation[0], node.translation[1], node.translation[2]};
  if (node.scale.size() == 3) sc = {node.scale[0], node.scale[1], node.scale[2]};
  if (node.rotation.size() == 4) q = Eigen::Quaterniond(node.rotation[3], node.rotation[0], node.rotation[1], node.rotation[2]);
  for (const auto& anim : m.animations) {
    for (const auto& ch : anim.channels) {
      if (ch.target_node != n) continue;
      const auto& s = anim.samplers[ch.sampler];
      const auto times = Accessor<double>(m, s.input, 1);
      const int comps = ch.target_path == "rotation" ? 4 : 3;
      const auto vals = Accessor<double>(m, s.output, comps);
      size_t k = 0;
      while (k + 1 < times.size() && times[k + 1] <= t) ++k;
      const size_t k1 = std::min(k + 1, times.size() - 1);
      const double a = k1 == k ? 0 : std::clamp((t - times[k]) / (times[k1] - times[k]), 0.0, 1.0);
      if (ch.target_path == "rotation") {
        // Rotation outputs are unit quaternions by the spec; this file stores them to three
        // decimals, so normalise before interpolating.
        const Eigen::Quaterniond q0 = Eigen::Quaterniond(vals[4 * k + 3], vals[4 * k], vals[4 * k + 1], vals[4 * k + 2]).normalized();
        const Eigen::Quaterniond q1 = Eigen::Quaterniond(vals[4 * k1 + 3], vals[4 * k1], vals[4 * k1 + 1], vals[4 * k1 + 2]).normalized();
        q = q0.slerp(a, q1);
      } else {
        const Eigen::Vector3d v0(vals[3 * k], vals[3 * k + 1], vals[3 * k + 2]);
        const Eigen::Vector3d v1(vals[3 * k1], vals[3 * k1 + 1], vals[3 * k1 + 2]);
        (ch.target_path == "translation" ? tr : sc) = (1 - a) * v0 + a * v1;
      }
    }
  }
  Eigen::Matrix4d mat = Eigen::Matrix4d::Identity();
  mat.topLeftCorner<3, 3>() = q.normalized().toRotationMatrix() * sc.asDiagonal();
  mat.topRightCorner<3, 1>() = tr;
  return mat;
}

Eigen::Matrix4d GlobalAt(const tinygltf::Model& m, int n, double t) {
  for (size_t p = 0; p < m.nodes.size(); ++p) {
    const auto& ch = m.nodes[p].children;
    if (std::find(ch.begin(), ch.end(), n) != ch.end()) return GlobalAt(m, int(p), t) * LocalAt(m, n, t);
  }
  return LocalAt(m, n, t);
}

TEST(AssetImport, GltfFrameEqualsSkinningEquationFromRawAccessors) {
  const std::string path = kModels + "/glTF2/simple_skin/simple_skin.gltf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "assimp-testmodels not installed";
  tinygltf::Model model;
  tinygltf::TinyGLTF loader;
  std::string err, warn;
  ASSERT_TRUE(loader.LoadASCIIFromFile(&model, &err, &warn, path)) << err;

  auto asset = ImportAsset(path);
  ASSERT_TRUE(asset.ok()) << asset.status();
  auto rig = BuildRig(asset->rig);
  ASSERT_TRUE(rig.ok()) << rig.status();
  ASSERT_EQ(asset->clips.size(), 1u);
  const Clip& clip = asset->clips[0];

  const auto& prim = model.meshes[0].primitives[0];
  const auto pos = Accessor<double>(model, prim.attributes.at("POSITION"), 3);
  const auto joints = Accessor<int>(model, prim.attributes.at("JOINTS_0"), 4);
  const auto weights = Accessor<double>(model, prim.attributes.at("WEIGHTS_0"), 4);
  const auto& skin = model.skins[0];
  const auto ibm = Accessor<double>(model, skin.inverseBindMatrices, 16);
  ASSERT_EQ(rig->vertex_count(), pos.size() / 3);

  for (double t : {0.0, 0.5, 1.25, 2.0, 3.7, clip.duration}) {
    // glTF: v' = Σ_i w_i · global(joint_i) · inverseBind_i · v (the mesh node's transform is
    // ignored for skinned meshes).
    std::vector<Eigen::Matrix4d> jm;
    for (size_t j = 0; j < skin.joints.size(); ++j) {
      jm.push_back(GlobalAt(model, skin.joints[j], t) * Eigen::Map<const Eigen::Matrix4d>(&ibm[16 * j]));
    }
    Pose pose;
    SampleClip(clip, rig->skeleton, t, pose);
    const std::vector<float> got = Deform(*rig, "lbs", pose);
    for (size_t v = 0; v < pos.size() / 3; ++v) {
      Eigen::Vector4d acc = Eigen::Vector4d::Zero();
      for (int k = 0; k < 4; ++k) {
        acc += weights[4 * v + k] * jm[joints[4 * v + k]] * Eigen::Vector4d(pos[3 * v], pos[3 * v + 1], pos[3 * v + 2], 1);
      }
      for (int c = 0; c < 3; ++c) {
        EXPECT_NEAR(got[3 * v + c], acc[c], 1e-5 * rig->bbox_diagonal()) << "t " << t << " vertex " << v;
      }
    }
  }
}

// --- malformed files ------------------------------------------------------------------------

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// In a folder of this process's (fixed names in /tmp were shared with any other run on the
// machine: a second build's tests, another user's files).
// Removed when the test program exits.
std::string WriteTemp(const std::string& name, const std::string& data) {
  static const struct Folder {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("sinew-import-test-" + std::to_string(getpid()));
    Folder() { std::filesystem::create_directories(path); }
    ~Folder() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } dir;
  const std::string path = (dir.path / name).string();
  std::ofstream(path, std::ios::binary) << data;
  return path;
}

// A glTF with its texture inside it (a .glb's buffer view, or a data: URI) imports: its images
// are not decoded. Until 2026-12-07 every such file (most character .glb files) was refused with
// tinygltf's "No LoadImageData callback specified".
TEST(AssetImport, GltfWithEmbeddedTexturesImports) {
  for (const char* rel : {"glTF2/BoxTextured-glTF-Binary/BoxTextured.glb", "glTF2/BoxTextured-glTF-Embedded/BoxTextured.gltf",
                          "glTF2/BoxTextured-glTF/BoxTextured.gltf"}) {
    SCOPED_TRACE(rel);
    const std::string path = kModels + "/" + rel;
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "assimp-testmodels not installed";
    auto asset = ImportAsset(path);
    ASSERT_TRUE(asset.ok()) << asset.status();
    EXPECT_EQ(asset->rig.rig.positions.size(), 24u * 3);  // the box: 4 vertices a face
    EXPECT_EQ(asset->rig.rig.triangles.size(), 12u * 3);
  }
}

// A non-finite normal in a file drops the file's normals with a note naming its mesh and vertex
// (they are a hint; what needs normals computes them from the triangles). Until 2026-12-07 it
// failed the import, naming the vertex by its index among all meshes' vertices.
TEST(AssetImport, ANonFiniteNormalDropsTheNormalsWithANote) {
  // One triangle "tri", its second vertex's normal x a NaN.
  const std::string path = WriteTemp("sinew_nan_normal.gltf", R"({"asset": {"version": "2.0"}, "scene": 0, "scenes": [{"nodes": [0]}], "nodes": [{"mesh": 0, "name": "tri"}], "meshes": [{"primitives": [{"attributes": {"POSITION": 0, "NORMAL": 1}}]}], "buffers": [{"byteLength": 72, "uri": "data:application/octet-stream;base64,AAAAAAAAAAAAAAAAAACAPwAAAAAAAAAAAAAAAAAAgD8AAAAAAAAAAAAAAAAAAIA/AADAfwAAAAAAAIA/AAAAAAAAAAAAAIA/"}], "bufferViews": [{"buffer": 0, "byteOffset": 0, "byteLength": 36}, {"buffer": 0, "byteOffset": 36, "byteLength": 36}], "accessors": [{"bufferView": 0, "componentType": 5126, "count": 3, "type": "VEC3", "min": [0, 0, 0], "max": [1, 1, 0]}, {"bufferView": 1, "componentType": 5126, "count": 3, "type": "VEC3"}]})");
  auto asset = ImportAsset(path);
  ASSERT_TRUE(asset.ok()) << asset.status();
  EXPECT_EQ(asset->rig.rig.positions.size(), 9u);
  EXPECT_TRUE(asset->rig.rig.normals.empty());
  EXPECT_THAT(asset->notes, ::testing::Contains(::testing::HasSubstr("vertex 1: its normal is not finite: normals dropped")));
}

TEST(AssetImport, MalformedFilesGiveErrorsNamingTheFile) {
  const std::string gltf = kModels + "/glTF2/simple_skin/simple_skin.gltf";
  const std::string x = kModels + "/X/BCN_Epileptic.X";
  if (!std::filesystem::exists(gltf)) GTEST_SKIP() << "assimp-testmodels not installed";
  const std::string text = Slurp(gltf);
  std::vector<std::string> bad;
  // Truncated files.
  bad.push_back(WriteTemp("sinew_truncated.gltf", text.substr(0, text.size() / 2)));
  bad.push_back(WriteTemp("sinew_truncated.x", Slurp(x).substr(0, 20000)));
  bad.push_back(WriteTemp("sinew_empty.fbx", ""));
  // Wrong indices: the index accessor points past the buffer views.
  {
    std::string s = text;
    s.replace(s.find("\"indices\" : 0"), 13, "\"indices\" : 9");
    bad.push_back(WriteTemp("sinew_bad_indices.gltf", s));
  }
  for (const std::string& path : bad) {
    auto asset = ImportAsset(path);
    ASSERT_FALSE(asset.ok()) << path;
    EXPECT_EQ(asset.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(asset.status().message()), ::testing::HasSubstr(path));
    std::filesystem::remove(path);
  }
}

// Names in another encoding than UTF-8 (Latin-1 here: a file, a bone and a clip named "café")
// reach the rig as valid UTF-8, U+FFFD in place of each bad byte, so that it serializes and
// uploads: until 2026-12-07 the upload failed "the bytes are not a serialized sinew.v1.Rig".
TEST(AssetImport, NamesThatAreNotUtf8BecomeValidUtf8) {
  const std::string x = kModels + "/X/Testwuson.X";
  if (!std::filesystem::exists(x)) GTEST_SKIP() << "assimp-testmodels not installed";
  std::string text = Slurp(x);
  auto rename = [&](const std::string& from, const std::string& to) {
    size_t n = 0;
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()), ++n) {
      text.replace(at, from.size(), to);
    }
    return n;
  };
  ASSERT_GT(rename("Spine_Front01", "caf\xe9_Front01"), 1u);  // the frame and what names it
  ASSERT_GT(rename("Wuson_Run", "Wuson_caf\xe9"), 0u);
  const std::string path = WriteTemp("sinew_caf\xe9.X", text);
  auto asset = ImportAsset(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(asset.ok()) << asset.status();
  const std::string bad = "caf\xEF\xBF\xBD";
  EXPECT_EQ(asset->rig.rig.name, "sinew_" + bad);
  const auto& names = asset->rig.rig.skeleton.names;
  EXPECT_NE(std::find(names.begin(), names.end(), bad + "_Front01"), names.end());
  ASSERT_FALSE(asset->clips.empty());
  bool renamed_clip = false;
  for (const auto& c : asset->clips) renamed_clip = renamed_clip || c.name == "Wuson_" + bad;
  EXPECT_TRUE(renamed_clip);
}

// simple_skin.gltf as tinygltf reads it, edited by `edit`, written to a temporary file and
// imported; the file is removed. Empty when assimp-testmodels is missing.
std::optional<absl::StatusOr<ImportedAsset>> ImportEditedSimpleSkin(const std::string& name,
                                                                    const std::function<void(tinygltf::Model&)>& edit,
                                                                    bool binary = false) {
  const std::string gltf = kModels + "/glTF2/simple_skin/simple_skin.gltf";
  if (!std::filesystem::exists(gltf)) return std::nullopt;
  tinygltf::Model model;
  tinygltf::TinyGLTF loader;
  std::string err, warn;
  EXPECT_TRUE(loader.LoadASCIIFromFile(&model, &err, &warn, gltf)) << err;
  edit(model);
  const std::string path = WriteTemp(name, "");  // this process's folder, the file written over
  EXPECT_TRUE(loader.WriteGltfSceneToFile(&model, path, true, true, !binary, binary));
  auto asset = ImportAsset(path);
  std::filesystem::remove(path);
  return asset;
}

// Edits of simple_skin.gltf, each with what its refusal must say.
using RefusedEdits = std::vector<std::pair<std::function<void(tinygltf::Model&)>, std::string>>;

// Each edit imported as `name` is refused saying its text. False when assimp-testmodels is
// missing (the caller skips).
bool ExpectRefused(const std::string& name, const RefusedEdits& edits) {
  for (const auto& [edit, want] : edits) {
    const auto asset = ImportEditedSimpleSkin(name, edit);
    if (!asset) return false;
    EXPECT_FALSE(asset->ok()) << want;
    if (!asset->ok()) {
      EXPECT_THAT(std::string(asset->status().message()), ::testing::HasSubstr(want));
    }
  }
  return true;
}

// Where an accessor's bytes start in its buffer.
unsigned char* AccessorBytes(tinygltf::Model& m, int accessor) {
  const auto& acc = m.accessors[accessor];
  const auto& view = m.bufferViews[acc.bufferView];
  return m.buffers[view.buffer].data.data() + view.byteOffset + acc.byteOffset;
}

// Appends `bytes` to buffer 0 under a new buffer view; its index.
int AppendView(tinygltf::Model& m, const void* bytes, size_t size) {
  auto& data = m.buffers[0].data;
  while (data.size() % 4) data.push_back(0);
  tinygltf::BufferView v;
  v.buffer = 0;
  v.byteOffset = data.size();
  v.byteLength = size;
  data.insert(data.end(), static_cast<const unsigned char*>(bytes), static_cast<const unsigned char*>(bytes) + size);
  m.bufferViews.push_back(v);
  return int(m.bufferViews.size()) - 1;
}

// Makes accessor `accessor` (VEC4 floats) sparse with one substitution: element `index` is
// `values`.
void SubstituteOne(tinygltf::Model& m, int accessor, uint16_t index, const std::array<float, 4>& values) {
  auto& a = m.accessors[accessor];
  a.sparse.isSparse = true;
  a.sparse.count = 1;
  a.sparse.indices.componentType = TINYGLTF_COMPONENT_TYPE_UNSIGNED_SHORT;
  a.sparse.indices.byteOffset = 0;
  a.sparse.indices.bufferView = AppendView(m, &index, sizeof index);
  a.sparse.values.byteOffset = 0;
  a.sparse.values.bufferView = AppendView(m, values.data(), sizeof values);
}

// Adds a scale channel on node 2 (simple_skin's animated joint) over the rotation channel's key
// times, with these VEC3 values (one per key).
void AddScaleChannel(tinygltf::Model& m, const std::vector<float>& values) {
  tinygltf::Accessor a;
  a.bufferView = AppendView(m, values.data(), values.size() * 4);
  a.componentType = TINYGLTF_COMPONENT_TYPE_FLOAT;
  a.type = TINYGLTF_TYPE_VEC3;
  a.count = values.size() / 3;
  m.accessors.push_back(a);
  tinygltf::AnimationSampler sampler;
  sampler.input = m.animations[0].samplers[0].input;
  sampler.output = int(m.accessors.size()) - 1;
  sampler.interpolation = "LINEAR";
  m.animations[0].samplers.push_back(sampler);
  tinygltf::AnimationChannel ch;
  ch.sampler = int(m.animations[0].samplers.size()) - 1;
  ch.target_node = 2;
  ch.target_path = "scale";
  m.animations[0].channels.push_back(ch);
}

// A skin's inverse bind matrices are checked before assimp reads them: left out (identity by
// glTF's default, which assimp 5.2 dereferences), fewer than the joints (it read past them), or
// not MAT4 floats; each refused naming the skin (until 2026-12-07 a crash or garbage).
TEST(AssetImport, SkinsWhoseInverseBindMatricesAssimpCannotReadAreRefused) {
  const RefusedEdits cases = {
      {[](tinygltf::Model& m) { m.skins[0].inverseBindMatrices = -1; }, "skin 0: no inverseBindMatrices"},
      {[](tinygltf::Model& m) { m.accessors[m.skins[0].inverseBindMatrices].count = 1; },
       "skin 0: inverseBindMatrices accessor 4 has 1 matrices for 2 joints"},
      {[](tinygltf::Model& m) {
         auto& a = m.accessors[m.skins[0].inverseBindMatrices];
         a.type = TINYGLTF_TYPE_VEC4;
         a.minValues.clear();
         a.maxValues.clear();
       }, "skin 0: inverseBindMatrices accessor 4 is not MAT4 of floats"},
  };
  if (!ExpectRefused("sinew_ibm.gltf", cases)) GTEST_SKIP() << "assimp-testmodels not installed";
}

// Sparse accessors are read with their substitutions: a NaN weight given sparsely is refused
// (until 2026-12-07 the check read the base values alone and passed it).
TEST(AssetImport, SparseAccessorsAreCheckedWithTheirSubstitutions) {
  const auto asset = ImportEditedSimpleSkin("sinew_sparse.gltf", [](tinygltf::Model& m) {
    SubstituteOne(m, m.meshes[0].primitives[0].attributes.at("WEIGHTS_0"), 5, {0.5f, std::nanf(""), 0.f, 0.f});
  });
  if (!asset) GTEST_SKIP() << "assimp-testmodels not installed";
  ASSERT_FALSE(asset->ok());
  EXPECT_THAT(std::string(asset->status().message()), ::testing::HasSubstr("WEIGHTS_0: vertex 5 component 1 is not finite"));
}

// Bones and channels name their nodes, and names need not be unique. A mesh node and a bone of
// one name (a DCC names objects and bones apart): the bone is the node without a mesh (until
// 2026-12-07 the first node in the file took it: the vertices followed the mesh node). A bone
// and an empty of one name: refused naming it (the first in the file took the bone, silently).
TEST(AssetImport, ABoneNamedLikeAnotherNodeIsBoundToTheRightOneOrRefused) {
  auto asset = ImportEditedSimpleSkin("sinew_twins.gltf", [](tinygltf::Model& m) {
    m.nodes[0].name = "Root";  // the mesh node
    m.nodes[1].name = "Root";  // the skin's first joint
    m.animations[0].channels[0].target_node = 1;  // and the clip animates the joint
  });
  if (!asset) GTEST_SKIP() << "assimp-testmodels not installed";
  ASSERT_TRUE(asset->ok()) << asset->status();
  const Skeleton& sk = (*asset)->rig.rig.skeleton;
  ASSERT_EQ(sk.names.size(), 3u);
  EXPECT_EQ(sk.names[0], "Root");    // the mesh node, the root
  EXPECT_EQ(sk.names[1], "Root#1");  // the joint below it
  bool on_mesh_node = false, on_bone = false;
  for (size_t e = 0; e < (*asset)->rig.weights.joints.size(); ++e) {
    if ((*asset)->rig.weights.weights[e] <= 0) continue;
    on_mesh_node |= (*asset)->rig.weights.joints[e] == 0;
    on_bone |= (*asset)->rig.weights.joints[e] == 1;
  }
  EXPECT_TRUE(on_bone) << "no weight on the bone";
  EXPECT_FALSE(on_mesh_node) << "weights went to the mesh node of the bone's name";
  // The clip's channel "Root" animates the joint, not the mesh node.
  ASSERT_EQ((*asset)->clips.size(), 1u);
  EXPECT_TRUE((*asset)->clips[0].tracks[0].rotations.empty());
  EXPECT_FALSE((*asset)->clips[0].tracks[1].rotations.empty());
  asset = ImportEditedSimpleSkin("sinew_twin_bones.gltf", [](tinygltf::Model& m) {
    m.nodes[2].name = "Bone";
    tinygltf::Node empty;  // an empty of the bone's name elsewhere (another character's bone)
    empty.name = "Bone";
    m.nodes.push_back(empty);
    m.scenes[0].nodes.push_back(int(m.nodes.size()) - 1);
  });
  ASSERT_FALSE(asset->ok());
  EXPECT_THAT(std::string(asset->status().message()), ::testing::HasSubstr("bone \"Bone\": 2 nodes have this name"));
}

// A scale key of 0 hides its node (a prop put away): kept as a point, noted (until 2026-12-07 it
// became scale 1, the prop shown at full size); a NaN scale key is refused naming the node (it
// became 1 too).
TEST(AssetImport, AZeroScaleKeyHidesItsNodeAndANanOneIsRefused) {
  std::vector<float> scales(3 * 12, 1.f);
  for (int c = 0; c < 3; ++c) scales[3 * 5 + c] = 0.f;  // key 5
  auto asset = ImportEditedSimpleSkin("sinew_hidden.gltf", [&](tinygltf::Model& m) { AddScaleChannel(m, scales); });
  if (!asset) GTEST_SKIP() << "assimp-testmodels not installed";
  ASSERT_TRUE(asset->ok()) << asset->status();
  ASSERT_EQ((*asset)->clips.size(), 1u);
  bool found = false;
  for (const JointTrack& tr : (*asset)->clips[0].tracks) {
    if (tr.scales.size() != 12) continue;
    found = true;
    EXPECT_LT(tr.scales[5], 1e-5);
    EXPECT_EQ(tr.scales[4], 1.0);
  }
  EXPECT_TRUE(found) << "no track has the 12 scale keys";
  EXPECT_THAT((*asset)->notes, ::testing::Contains(::testing::HasSubstr("1 scale keys of 0 (a hidden node)")));

  scales[3 * 5] = std::nanf("");
  asset = ImportEditedSimpleSkin("sinew_nan_scale.gltf", [&](tinygltf::Model& m) { AddScaleChannel(m, scales); });
  ASSERT_FALSE(asset->ok());
  EXPECT_THAT(std::string(asset->status().message()), ::testing::HasSubstr(".scales[5]: nan is not a positive scale"));
}

// Keys out of time order are dropped and counted as such (until 2026-12-07 as "keys at
// repeated times"); a NaN time after the first key is refused naming the key (it was dropped).
TEST(AssetImport, KeysOutOfOrderAreCountedAndANanTimeIsRefused) {
  auto edit_time = [](float t) {
    return [t](tinygltf::Model& m) {
      const int input = m.animations[0].samplers[0].input;
      m.accessors[input].minValues.clear();
      m.accessors[input].maxValues.clear();
      std::memcpy(AccessorBytes(m, input) + 4 * 6, &t, 4);  // key 6's time
    };
  };
  auto asset = ImportEditedSimpleSkin("sinew_back.gltf", edit_time(-1.f));
  if (!asset) GTEST_SKIP() << "assimp-testmodels not installed";
  ASSERT_TRUE(asset->ok()) << asset->status();
  EXPECT_THAT((*asset)->notes, ::testing::Contains(::testing::HasSubstr("1 keys before the key they follow dropped")));
  asset = ImportEditedSimpleSkin("sinew_nan_later.gltf", edit_time(std::nanf("")));
  ASSERT_FALSE(asset->ok());
  EXPECT_THAT(std::string(asset->status().message()), ::testing::HasSubstr("rotation key 6 is at a non-finite time"));
}

// A mesh under a node scaled to 0 is skipped with a note (until 2026-12-07 the import failed on
// a non-finite normal, named by an index into the merged mesh).
TEST(AssetImport, AMeshUnderANodeScaledToZeroIsSkipped) {
  const auto asset = ImportEditedSimpleSkin("sinew_put_away.gltf", [](tinygltf::Model& m) {
    tinygltf::Node prop;
    prop.name = "prop";
    prop.mesh = 0;
    prop.scale = {0, 0, 0};
    m.nodes.push_back(prop);
    m.scenes[0].nodes.push_back(int(m.nodes.size()) - 1);
  });
  if (!asset) GTEST_SKIP() << "assimp-testmodels not installed";
  ASSERT_TRUE(asset->ok()) << asset->status();
  EXPECT_EQ((*asset)->rig.rig.vertex_count(), 10u);
  EXPECT_THAT((*asset)->notes, ::testing::Contains(::testing::HasSubstr("\"prop\" is scaled to 0 (hidden), skipped")));
}

// NaN weights in the file are rejected with the mesh, bone and vertex named.
TEST(AssetImport, NanWeightsAreRejected) {
  const auto asset = ImportEditedSimpleSkin("sinew_nan_weights.gltf", [](tinygltf::Model& m) {
    const float nan = std::nanf("");
    std::memcpy(AccessorBytes(m, m.meshes[0].primitives[0].attributes.at("WEIGHTS_0")) + 4 * 4 * 3, &nan, 4);  // vertex 3
  });
  if (!asset) GTEST_SKIP() << "assimp-testmodels not installed";
  ASSERT_FALSE(asset->ok());
  EXPECT_THAT(std::string(asset->status().message()), ::testing::HasSubstr("sinew_nan_weights.gltf"));
  EXPECT_THAT(std::string(asset->status().message()), ::testing::HasSubstr("not finite"));
}

// An animation key at a non-finite time is refused naming the file and clip: it was kept as the
// track's first key, every later key dropped as "not after it", and sampling read past the
// one-key track (until 2026-12-03).
TEST(AssetImport, NonFiniteKeyTimesAreRefused) {
  const auto asset = ImportEditedSimpleSkin("sinew_nan_time.gltf", [](tinygltf::Model& m) {
    ASSERT_FALSE(m.animations.empty());
    const int input = m.animations[0].samplers[0].input;
    m.accessors[input].minValues.clear();
    m.accessors[input].maxValues.clear();
    const float nan = std::nanf("");
    std::memcpy(AccessorBytes(m, input), &nan, 4);  // the first key's time
  });
  if (!asset) GTEST_SKIP() << "assimp-testmodels not installed";
  ASSERT_FALSE(asset->ok());
  EXPECT_EQ(asset->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(asset->status().message()), ::testing::HasSubstr("sinew_nan_time.gltf"));
}

// Accessor counts are the file's: a count whose byte span wraps 64 bits (2^62 VEC4 floats) was
// taken as in bounds and the read ran off the buffer, and a huge count without a buffer
// allocated it; both are refused naming the accessor (until 2026-12-03 a crash).
TEST(AssetImport, AccessorCountsBeyondTheBufferAreRefused) {
  for (bool with_buffer : {true, false}) {
    const auto asset = ImportEditedSimpleSkin(with_buffer ? "sinew_wrap.gltf" : "sinew_zeros.gltf",
                                              [&](tinygltf::Model& m) {
      auto& acc = m.accessors[m.meshes[0].primitives[0].attributes.at("WEIGHTS_0")];
      acc.count = with_buffer ? size_t(1) << 62 : size_t(1) << 40;
      if (!with_buffer) acc.bufferView = -1;
    });
    if (!asset) GTEST_SKIP() << "assimp-testmodels not installed";
    ASSERT_FALSE(asset->ok()) << with_buffer;
    EXPECT_EQ(asset->status().code(), absl::StatusCode::kInvalidArgument);
    // Without a buffer (and not sparse) it is refused as such, whatever its count (see
    // AccessorsWithoutABufferViewAreRefusedOrReadSparsely).
    EXPECT_THAT(std::string(asset->status().message()),
                ::testing::HasSubstr(with_buffer ? "WEIGHTS_0: accessor 3 out of bounds" : "WEIGHTS_0: accessor 3 has no bufferView"));
  }
}

// Appends an accessor of `count` elements over `bytes` (under a new buffer view); its index.
int AppendAccessor(tinygltf::Model& m, const void* bytes, size_t size, int component, int type, size_t count,
                   bool normalized = false) {
  tinygltf::Accessor a;
  a.bufferView = AppendView(m, bytes, size);
  a.componentType = component;
  a.type = type;
  a.count = count;
  a.normalized = normalized;
  m.accessors.push_back(a);
  return int(m.accessors.size()) - 1;
}

// simple_skin's 10 vertices' weights (VEC4 floats, packed) and joints (VEC4 unsigned shorts, 16
// bytes apart).
std::vector<float> SimpleSkinWeights(tinygltf::Model& m) {
  const unsigned char* p = AccessorBytes(m, m.meshes[0].primitives[0].attributes.at("WEIGHTS_0"));
  std::vector<float> w(40);
  std::memcpy(w.data(), p, 160);
  return w;
}
std::vector<uint16_t> SimpleSkinJoints(tinygltf::Model& m) {
  const unsigned char* p = AccessorBytes(m, m.meshes[0].primitives[0].attributes.at("JOINTS_0"));
  std::vector<uint16_t> j(40);
  for (int v = 0; v < 10; ++v) std::memcpy(&j[4 * v], p + 16 * v, 8);
  return j;
}

// assimp 5.2 reads every WEIGHTS_n element as four floats, whatever its type, and every JOINTS_n
// as JOINTS_0's type. Until 2026-12-07 weights of normalized unsigned bytes or shorts (which glTF
// allows) passed the check and became weights like 3.6e-43 that, normalised, bound vertices to
// the wrong joint with a note that they "did not sum to 1"; a JOINTS_1 of bytes beside a JOINTS_0
// of shorts lost its weights; a WEIGHTS_1 without JOINTS_1 crashed assimp. Each is refused naming
// the mesh, primitive, attribute and accessor. Joints of unsigned bytes assimp reads: they import.
TEST(AssetImport, WeightsAndJointsAssimpWouldMisreadAreRefused) {
  using Edit = std::function<void(tinygltf::Model&)>;
  auto attributes = [](tinygltf::Model& m) -> std::map<std::string, int>& { return m.meshes[0].primitives[0].attributes; };
  const std::vector<std::pair<Edit, std::string>> cases = {
      {[&](tinygltf::Model& m) {
         std::vector<uint8_t> w;
         for (float x : SimpleSkinWeights(m)) w.push_back(uint8_t(std::lround(x * 255)));
         attributes(m)["WEIGHTS_0"] =
             AppendAccessor(m, w.data(), w.size(), TINYGLTF_COMPONENT_TYPE_UNSIGNED_BYTE, TINYGLTF_TYPE_VEC4, 10, true);
       }, "mesh 0 primitive 0 WEIGHTS_0: accessor 7 is VEC4 of unsigned bytes (normalized); the importer (assimp 5.2) "
          "reads weights as VEC4 of floats only: re-export the mesh with float weights"},
      {[&](tinygltf::Model& m) {
         std::vector<uint16_t> w;
         for (float x : SimpleSkinWeights(m)) w.push_back(uint16_t(std::lround(x * 65535)));
         attributes(m)["WEIGHTS_0"] =
             AppendAccessor(m, w.data(), 2 * w.size(), TINYGLTF_COMPONENT_TYPE_UNSIGNED_SHORT, TINYGLTF_TYPE_VEC4, 10, true);
       }, "mesh 0 primitive 0 WEIGHTS_0: accessor 7 is VEC4 of unsigned shorts (normalized)"},
      {[&](tinygltf::Model& m) {
         std::vector<float> j;
         for (uint16_t x : SimpleSkinJoints(m)) j.push_back(x);
         attributes(m)["JOINTS_0"] =
             AppendAccessor(m, j.data(), 4 * j.size(), TINYGLTF_COMPONENT_TYPE_FLOAT, TINYGLTF_TYPE_VEC4, 10);
       }, "mesh 0 primitive 0 JOINTS_0: accessor 7 is VEC4 of floats; joints are VEC4 of unsigned bytes or unsigned shorts"},
      {[&](tinygltf::Model& m) {  // a second set on joint 1, its joints bytes where JOINTS_0's are shorts
         const std::vector<uint8_t> j(40, 1);
         std::vector<float> w(40, 0.f);
         attributes(m)["JOINTS_1"] = AppendAccessor(m, j.data(), j.size(), TINYGLTF_COMPONENT_TYPE_UNSIGNED_BYTE, TINYGLTF_TYPE_VEC4, 10);
         for (int v = 0; v < 10; ++v) w[4 * v] = 0.5f;
         attributes(m)["WEIGHTS_1"] = AppendAccessor(m, w.data(), 4 * w.size(), TINYGLTF_COMPONENT_TYPE_FLOAT, TINYGLTF_TYPE_VEC4, 10);
       }, "mesh 0 primitive 0 JOINTS_1: unsigned bytes where JOINTS_0 has unsigned shorts"},
      {[&](tinygltf::Model& m) {
         std::vector<float> w(40, 0.f);
         attributes(m)["WEIGHTS_1"] = AppendAccessor(m, w.data(), 4 * w.size(), TINYGLTF_COMPONENT_TYPE_FLOAT, TINYGLTF_TYPE_VEC4, 10);
       }, "mesh 0 primitive 0 WEIGHTS_1: no JOINTS_1"},
  };
  if (!ExpectRefused("sinew_weight_types.gltf", cases)) GTEST_SKIP() << "assimp-testmodels not installed";
  const auto plain = ImportEditedSimpleSkin("sinew_plain.gltf", [](tinygltf::Model&) {});
  const auto bytes = ImportEditedSimpleSkin("sinew_byte_joints.gltf", [&](tinygltf::Model& m) {
    std::vector<uint8_t> j;
    for (uint16_t x : SimpleSkinJoints(m)) j.push_back(uint8_t(x));
    attributes(m)["JOINTS_0"] = AppendAccessor(m, j.data(), j.size(), TINYGLTF_COMPONENT_TYPE_UNSIGNED_BYTE, TINYGLTF_TYPE_VEC4, 10);
  });
  ASSERT_TRUE(plain->ok()) << plain->status();
  ASSERT_TRUE(bytes->ok()) << bytes->status();
  EXPECT_EQ((*bytes)->rig.weights.joints, (*plain)->rig.weights.joints);
  EXPECT_EQ((*bytes)->rig.weights.weights, (*plain)->rig.weights.weights);
}

// assimp 5.2 silently drops a triangle with an index past the vertices, the last triangle when
// the indices (or vertices) are not whole triangles, and every weight of a primitive whose
// WEIGHTS_0 has more elements than its vertices. Until 2026-12-07 IndexOutOfRange.gltf imported
// 11 of its 12 triangles, IncorrectVertexArrays/Cube.gltf a truncated cube, and such weights were
// lost (the vertices bound rigidly to the mesh's node): each is refused naming the mesh,
// primitive and attribute or index.
TEST(AssetImport, PrimitivesAssimpWouldTruncateAreRefused) {
  const std::vector<std::pair<std::string, std::string>> files = {
      {"glTF2/IndexOutOfRange/IndexOutOfRange.gltf", "mesh 0 \"Mesh\" primitive 0 indices: index "},
      {"glTF2/IndexOutOfRange/IndexOutOfRange.gltf", ", out of range (24 vertices)"},
      {"glTF2/IncorrectVertexArrays/Cube.gltf", "mesh 1 \"TruncatedCube\" primitive 0: 35 vertices are not whole triangles"},
  };
  for (const auto& [file, want] : files) {
    const std::string path = kModels + "/" + file;
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "assimp-testmodels not installed";
    const auto asset = ImportAsset(path);
    ASSERT_FALSE(asset.ok()) << file;
    EXPECT_THAT(std::string(asset.status().message()), ::testing::HasSubstr(want));
  }
  const std::vector<std::pair<std::function<void(tinygltf::Model&)>, std::string>> edits = {
      {[](tinygltf::Model& m) {  // one element more than the vertices
         std::vector<float> w = SimpleSkinWeights(m);
         w.insert(w.end(), {1.f, 0.f, 0.f, 0.f});
         m.meshes[0].primitives[0].attributes["WEIGHTS_0"] =
             AppendAccessor(m, w.data(), 4 * w.size(), TINYGLTF_COMPONENT_TYPE_FLOAT, TINYGLTF_TYPE_VEC4, 11);
       }, "mesh 0 primitive 0 WEIGHTS_0: accessor 7 has 11 elements for the primitive's 10 vertices"},
      {[](tinygltf::Model& m) {
         const uint16_t last = 10;  // vertices 0..9
         std::memcpy(AccessorBytes(m, m.meshes[0].primitives[0].indices) + 2 * 23, &last, 2);
         m.accessors[m.meshes[0].primitives[0].indices].maxValues.clear();
       }, "mesh 0 primitive 0 indices: index 23 is vertex 10, out of range (10 vertices)"},
      {[](tinygltf::Model& m) { m.accessors[m.meshes[0].primitives[0].indices].count = 23; },
       "mesh 0 primitive 0: 23 indices are not whole triangles (2 left over)"},
  };
  for (const auto& [edit, want] : edits) {
    const auto asset = ImportEditedSimpleSkin("sinew_truncated_primitive.gltf", edit);
    ASSERT_FALSE(asset->ok()) << want;
    EXPECT_THAT(std::string(asset->status().message()), ::testing::HasSubstr(want));
  }
}

// A channel names its node, and names need not be unique. Until 2026-12-07 only namesakes that
// are joints were counted: a translation channel of an empty named like the mesh node (a joint;
// the empty is none) moved the whole character. A channel is resolved as a bone is: the node
// without a mesh of its namesakes, here the empty, which moves no vertex while the namesake that
// does is a joint: refused naming the clip and channel.
TEST(AssetImport, AChannelNamedLikeAJointAndAnotherNodeIsRefused) {
  const auto asset = ImportEditedSimpleSkin("sinew_namesake_channel.gltf", [](tinygltf::Model& m) {
    m.nodes[0].name = "Root";  // the mesh node
    tinygltf::Node empty;
    empty.name = "Root";
    m.nodes.push_back(empty);
    m.scenes[0].nodes.push_back(int(m.nodes.size()) - 1);
    const float times[2] = {0.f, 1.f}, moves[6] = {0.f, 0.f, 0.f, 0.f, 50.f, 0.f};
    tinygltf::AnimationSampler sampler;
    sampler.input = AppendAccessor(m, times, sizeof times, TINYGLTF_COMPONENT_TYPE_FLOAT, TINYGLTF_TYPE_SCALAR, 2);
    m.accessors.back().minValues = {0};
    m.accessors.back().maxValues = {1};
    sampler.output = AppendAccessor(m, moves, sizeof moves, TINYGLTF_COMPONENT_TYPE_FLOAT, TINYGLTF_TYPE_VEC3, 2);
    m.animations[0].samplers.push_back(sampler);
    tinygltf::AnimationChannel ch;
    ch.sampler = int(m.animations[0].samplers.size()) - 1;
    ch.target_node = int(m.nodes.size()) - 1;
    ch.target_path = "translation";
    m.animations[0].channels.push_back(ch);
  });
  if (!asset) GTEST_SKIP() << "assimp-testmodels not installed";
  ASSERT_FALSE(asset->ok());
  EXPECT_THAT(std::string(asset->status().message()),
              ::testing::HasSubstr("clip \"clip0\" channel 0 (node \"Root\"): 2 nodes have this name (1 a joint, 1 without a mesh)"));
}

// Joints of one name are told apart by "#k", k the first that makes a name no joint has. Until
// 2026-12-07 k counted the name's uses: joints "A", "A", "A#1" became "A", "A#1", "A#1", and the
// import was refused as "A#1" was not unique.
TEST(AssetImport, RenamedJointsTakeANameNoJointHas) {
  const auto asset = ImportEditedSimpleSkin("sinew_renamed.gltf", [](tinygltf::Model& m) {
    m.nodes[0].name = "A";
    m.nodes[1].name = "A";
    m.nodes[2].name = "A#1";
  });
  if (!asset) GTEST_SKIP() << "assimp-testmodels not installed";
  ASSERT_TRUE(asset->ok()) << asset->status();
  EXPECT_THAT((*asset)->rig.rig.skeleton.names, ::testing::ElementsAre("A", "A#2", "A#1"));
  EXPECT_TRUE(BuildRig((*asset)->rig).ok());
}

// An accessor without a buffer view is zeros but for its sparse substitutions. Until 2026-12-07
// the check built them as doubles, 2^24 elements allowed (a 355-byte file of 2^24 inverse bind
// matrices allocated 2 GiB), and again for every node showing the mesh (400 nodes: 44 s), for
// assimp 5.2 to refuse the file then. One that is not sparse is refused naming the accessor
// (assimp cannot read it), a POSITION without one too (assimp cannot read it even sparse), and
// inverse bind matrices without one beyond the joints; a sparse one imports (assimp reads it),
// its zeros looked at once.
TEST(AssetImport, AccessorsWithoutABufferViewAreRefusedOrReadSparsely) {
  auto zeros = [](int accessor, size_t count) {
    return [=](tinygltf::Model& m) {
      m.accessors[accessor].bufferView = -1;
      m.accessors[accessor].count = count;
      m.accessors[accessor].minValues.clear();
      m.accessors[accessor].maxValues.clear();
    };
  };
  const RefusedEdits cases = {
      {zeros(4, size_t(1) << 20), "skin 0: inverseBindMatrices accessor 4 has no bufferView and 1048576 matrices for 2 joints"},
      {zeros(4, 2), "skin 0: inverseBindMatrices: accessor 4 has no bufferView (all zeros), which the importer (assimp 5.2) cannot read"},
      {zeros(1, 10), "mesh 0 primitive 0 POSITION: accessor 1 has no bufferView"},
      {zeros(3, 10), "mesh 0 primitive 0 WEIGHTS_0: accessor 3 has no bufferView (all zeros)"},
  };
  if (!ExpectRefused("sinew_no_view.gltf", cases)) GTEST_SKIP() << "assimp-testmodels not installed";
  // Sparse weights without a view: zeros (9 vertices bound rigidly) but vertex 9, on joint 0.
  const auto asset = ImportEditedSimpleSkin("sinew_sparse_zeros.gltf", [&](tinygltf::Model& m) {
    zeros(3, 10)(m);
    SubstituteOne(m, 3, 9, {1.f, 0.f, 0.f, 0.f});
  });
  ASSERT_TRUE(asset->ok()) << asset->status();
  EXPECT_THAT((*asset)->notes, ::testing::Contains(::testing::HasSubstr("9 vertices of skinned meshes had no weight")));
}

// The node tree is checked before assimp 5.2 walks it, recursively: until 2026-12-07 a chain of
// 20,000 nodes overflowed the CLI's stack (a crash), and a node that is the child of two parents
// was imported once per parent (a chain of 24 such nodes listing their child twice: 2^24 copies,
// minutes). A tree 1,000 nodes deep (gltf_check.h's kMaxGltfNodeDepth) imports; a deeper one, a
// second parent, a child listed twice and a cycle (which assimp refuses itself) are refused
// naming the node.
TEST(AssetImport, NodeTreesTooDeepOrNotTreesAreRefused) {
  constexpr int kMaxGltfNodeDepth = 1000;
  auto chain = [](int length) {  // `length` empties from a new root, simple_skin's nodes under the last
    return [=](tinygltf::Model& m) {
      const int first = int(m.nodes.size());
      for (int i = 0; i < length; ++i) {
        tinygltf::Node n;
        n.children = {i + 1 < length ? first + i + 1 : 0};
        m.nodes.push_back(n);
      }
      m.scenes[0].nodes = {first};
    };
  };
  // simple_skin is 3 nodes deep.
  auto asset = ImportEditedSimpleSkin("sinew_deep.gltf", chain(kMaxGltfNodeDepth - 3));
  if (!asset) GTEST_SKIP() << "assimp-testmodels not installed";
  ASSERT_TRUE(asset->ok()) << asset->status();
  EXPECT_EQ((*asset)->rig.rig.joint_count(), size_t(kMaxGltfNodeDepth));
  const RefusedEdits cases = {
      {chain(kMaxGltfNodeDepth - 2), absl::StrCat("node 2 is ", kMaxGltfNodeDepth + 1, " nodes deep")},
      {[](tinygltf::Model& m) { m.nodes[0].children.push_back(2); }, "node 2 is a child of node 0 and of node 1"},
      {[](tinygltf::Model& m) { m.nodes[1].children.push_back(2); }, "node 1 lists child 2 twice"},
      {[](tinygltf::Model& m) {
         tinygltf::Node a, b;  // 3 -> 4 -> 3, in no scene
         a.name = "loop";
         a.children = {4};
         b.children = {3};
         m.nodes.push_back(a);
         m.nodes.push_back(b);
       }, "node 3 \"loop\" is its own ancestor"},
      // A scene's nodes are roots, listed once: assimp imports each listing with its whole tree.
      {[](tinygltf::Model& m) { m.scenes[0].nodes.push_back(m.scenes[0].nodes[0]); }, "scene 0 lists node 0 twice"},
      {[](tinygltf::Model& m) { m.scenes[0].nodes.push_back(2); }, "scene 0 lists node 2 as a root, but it is a child of node 1"},
  };
  EXPECT_TRUE(ExpectRefused("sinew_not_tree.gltf", cases));
}

// What assimp 5.2 reads as raw floats, or by a count it does not check, is refused naming the
// accessor: KHR_mesh_quantization's positions and rotations (shorts read as float bits: a wrong
// mesh, a NaN or a wrong turn), and a CUBICSPLINE sampler without 3 values per key (read past the
// accessor's end). Until 2026-12-07 none was checked.
TEST(AssetImport, PositionsAndSamplersAssimpWouldMisreadAreRefused) {
  auto attributes = [](tinygltf::Model& m) -> std::map<std::string, int>& { return m.meshes[0].primitives[0].attributes; };
  const RefusedEdits cases = {
      {[&](tinygltf::Model& m) {
         const std::vector<int16_t> p(30, 100);
         attributes(m)["POSITION"] = AppendAccessor(m, p.data(), 2 * p.size(), TINYGLTF_COMPONENT_TYPE_SHORT, TINYGLTF_TYPE_VEC3, 10);
       }, "mesh 0 primitive 0 POSITION: accessor 7 is VEC3 of shorts; the importer (assimp 5.2) reads POSITION as VEC3 of floats only"},
      {[&](tinygltf::Model& m) {
         auto& sampler = m.animations[0].samplers[0];
         const size_t keys = m.accessors[sampler.output].count;
         std::vector<int16_t> q;
         for (size_t k = 0; k < keys; ++k) q.insert(q.end(), {0, 0, 0, 32767});
         sampler.output = AppendAccessor(m, q.data(), 2 * q.size(), TINYGLTF_COMPONENT_TYPE_SHORT, TINYGLTF_TYPE_VEC4, keys, true);
       }, "animation 0 channel 0 (rotation): output accessor 7 is VEC4 of shorts (normalized); the importer reads VEC4 of floats only"},
      {[&](tinygltf::Model& m) { m.animations[0].samplers[0].interpolation = "CUBICSPLINE"; },
       "output values (CUBICSPLINE takes 3 per key)"},
  };
  if (!ExpectRefused("sinew_quantized.gltf", cases)) GTEST_SKIP() << "assimp-testmodels not installed";
}

// assimp reads glTF under any name, by its bytes: the checks run whatever the file is called
// (until 2026-12-07 only for .gltf and .glb, and simple_skin.gltf renamed .json imported
// unchecked). JSON and binary, a name assimp knows for nothing else and one it does not know.
TEST(AssetImport, GltfUnderAnotherNameIsCheckedAsGltf) {
  auto twice = [](tinygltf::Model& m) { m.scenes[0].nodes.push_back(m.scenes[0].nodes[0]); };
  for (const char* name : {"sinew_renamed.json", "sinew_renamed.dat"}) {
    for (bool binary : {false, true}) {
      const auto asset = ImportEditedSimpleSkin(name, twice, binary);
      if (!asset) GTEST_SKIP() << "assimp-testmodels not installed";
      ASSERT_FALSE(asset->ok()) << name << (binary ? " binary" : " JSON");
      EXPECT_THAT(std::string(asset->status().message()), ::testing::HasSubstr("scene 0 lists node 0 twice"));
    }
  }
  const auto plain = ImportEditedSimpleSkin("sinew_renamed_plain.json", [](tinygltf::Model&) {});
  ASSERT_TRUE(plain->ok()) << plain->status();
}

// assimp 5.2 keeps the keys of STEP and CUBICSPLINE samplers (a spline's values, between its
// tangents), which the clip interpolates linearly: until 2026-12-07 without a word. A note names
// the animation and the samplers; the spline's keys are its values.
TEST(AssetImport, StepAndCubicSplineSamplersAreNoted) {
  auto asset = ImportEditedSimpleSkin("sinew_step.gltf", [](tinygltf::Model& m) {
    m.animations[0].name = "Wave";
    m.animations[0].samplers[0].interpolation = "STEP";
  });
  if (!asset) GTEST_SKIP() << "assimp-testmodels not installed";
  ASSERT_TRUE(asset->ok()) << asset->status();
  EXPECT_THAT((*asset)->notes, ::testing::Contains(::testing::HasSubstr(
                                   "animation 0 \"Wave\" sampler 0: STEP interpolation played as linear")));
  const auto linear = ImportEditedSimpleSkin("sinew_linear.gltf", [](tinygltf::Model&) {});
  asset = ImportEditedSimpleSkin("sinew_cubic.gltf", [](tinygltf::Model& m) {
    auto& sampler = m.animations[0].samplers[0];
    const float* values = reinterpret_cast<const float*>(AccessorBytes(m, sampler.output));
    const size_t keys = m.accessors[sampler.output].count;
    std::vector<float> spline;  // per key: in-tangent, value, out-tangent
    for (size_t k = 0; k < keys; ++k) {
      spline.insert(spline.end(), 4, 0.f);
      spline.insert(spline.end(), values + 4 * k, values + 4 * k + 4);
      spline.insert(spline.end(), 4, 0.f);
    }
    sampler.output = AppendAccessor(m, spline.data(), 4 * spline.size(), TINYGLTF_COMPONENT_TYPE_FLOAT, TINYGLTF_TYPE_VEC4, 3 * keys);
    sampler.interpolation = "CUBICSPLINE";
  });
  ASSERT_TRUE(asset->ok()) << asset->status();
  ASSERT_TRUE(linear->ok()) << linear->status();
  EXPECT_THAT((*asset)->notes, ::testing::Contains(::testing::HasSubstr(
                                   "animation 0 sampler 0: CUBICSPLINE interpolation played as linear between the keys (tangents dropped)")));
  ASSERT_EQ((*asset)->clips.size(), 1u);
  const auto& got = (*asset)->clips[0].tracks, &want = (*linear)->clips[0].tracks;
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < got.size(); ++j) {
    ASSERT_EQ(got[j].rotations.size(), want[j].rotations.size()) << "joint " << j;
    for (size_t k = 0; k < got[j].rotations.size(); ++k) {
      EXPECT_TRUE(got[j].rotations[k].isApprox(want[j].rotations[k], 1e-6)) << "joint " << j << " key " << k;
    }
  }
}

}  // namespace
}  // namespace sinew

namespace sinew {
namespace {

// What cannot be represented is reported, not silently lost.
TEST(AssetImport, DroppedMorphTargetsAreReported) {
  const std::string path = kModels + "/glTF2/glTF-Sample-Models/AnimatedMorphCube-glTF/AnimatedMorphCube.gltf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "assimp-testmodels not installed";
  auto asset = ImportAsset(path);
  ASSERT_TRUE(asset.ok()) << asset.status();
  EXPECT_THAT(asset->notes, ::testing::Contains(::testing::HasSubstr("2 morph targets dropped")));
  EXPECT_THAT(asset->notes, ::testing::Contains(::testing::HasSubstr("morph animation channels dropped")));
}

// Several meshes skinned to one skeleton share its joints (BCN_Epileptic: torso, head, legs).
TEST(AssetImport, SeveralMeshesShareOneSkeleton) {
  const std::string path = kModels + "/X/BCN_Epileptic.X";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "assimp-testmodels not installed";
  auto asset = ImportAsset(path);
  ASSERT_TRUE(asset.ok()) << asset.status();
  ASSERT_EQ(asset->meshes.size(), 3u);
  size_t vertices = 0;
  for (const MeshRange& m : asset->meshes) {
    EXPECT_TRUE(m.skinned) << m.name;
    EXPECT_EQ(m.first_vertex, vertices);
    vertices += m.vertex_count;
  }
  EXPECT_EQ(vertices, asset->rig.rig.vertex_count());
  EXPECT_EQ(asset->rig.rig.joint_count(), 58u);
  // A non-bone ancestor (the scene's dummy root) is a joint too.
  EXPECT_GT(asset->rig.rig.joint_count(), asset->bones);
}

}  // namespace
}  // namespace sinew
