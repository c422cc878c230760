#include "clients/export/gltf_clip.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

// tinygltf's implementation is compiled once, in clients/import/gltf_check.cc, with these.
#define TINYGLTF_NO_STB_IMAGE
#define TINYGLTF_NO_STB_IMAGE_WRITE
#define TINYGLTF_NO_EXTERNAL_IMAGE
#include <tiny_gltf.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/normals/normals.h"
#include "core/rig/rig.h"
#include "core/util/atomic_file.h"
#include "core/util/utf8.h"

namespace sinew::client {
namespace {

using tinygltf::Value;

// Appends `bytes` to the buffer, 4-byte aligned, as a new buffer view; returns its index.
int AddView(tinygltf::Model& m, const void* bytes, size_t n, int target) {
  auto& data = m.buffers[0].data;
  data.resize((data.size() + 3) & ~size_t{3}, 0);
  tinygltf::BufferView v;
  v.buffer = 0;
  v.byteOffset = data.size();
  v.byteLength = n;
  v.target = target;
  const auto* p = static_cast<const unsigned char*>(bytes);
  data.insert(data.end(), p, p + n);
  m.bufferViews.push_back(v);
  return int(m.bufferViews.size()) - 1;
}

int AddAccessor(tinygltf::Model& m, int view, size_t byte_offset, int component, int type, size_t count,
                std::vector<double> min = {}, std::vector<double> max = {}) {
  tinygltf::Accessor a;
  a.bufferView = view;
  a.byteOffset = byte_offset;
  a.componentType = component;
  a.type = type;
  a.count = count;
  a.minValues = std::move(min);
  a.maxValues = std::move(max);
  m.accessors.push_back(a);
  return int(m.accessors.size()) - 1;
}

// Component-wise bounds of x,y,z triples. glTF wants the float32 values themselves.
void Bounds(std::span<const float> xyz, std::vector<double>* lo, std::vector<double>* hi) {
  float l[3] = {INFINITY, INFINITY, INFINITY}, h[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (size_t i = 0; i < xyz.size(); ++i) {
    l[i % 3] = std::min(l[i % 3], xyz[i]);
    h[i % 3] = std::max(h[i % 3], xyz[i]);
  }
  *lo = {l[0], l[1], l[2]};
  *hi = {h[0], h[1], h[2]};
}

Value Number(double v) { return Value(v); }

absl::Status CheckFinite(std::span<const float> xyz, const std::string& what) {
  for (size_t i = 0; i < xyz.size(); ++i) {
    if (!std::isfinite(xyz[i])) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": vertex ", i / 3, " coordinate ", i % 3, " is not finite"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteGltfClip(const std::string& path, const GltfClip& clip) {
  if (clip.rest.empty() || clip.rest.size() % 3 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("glTF: rest positions: ", clip.rest.size(),
                                                   " floats, not a positive multiple of 3"));
  }
  const size_t vertices = clip.rest.size() / 3, frames = clip.frames.size();
  if (frames == 0) return absl::InvalidArgumentError("glTF: no frames");
  if (frames > kMaxGltfFrames) {
    return absl::InvalidArgumentError(absl::StrCat("glTF: ", frames, " frames, more than the ", kMaxGltfFrames,
                                                   " a .glb of morph targets holds here (bake a lower --clip-fps)"));
  }
  if (!(clip.frames_per_second > 0) || !std::isfinite(clip.frames_per_second)) {
    return absl::InvalidArgumentError("glTF: frames per second must be positive and finite");
  }
  // Past 4 GiB the .glb's lengths wrap (tinygltf writes them as 32 bits): a file no reader opens,
  // written and reported as done until 2026-12-03.
  if (const uint64_t bytes = GltfClipBinaryBytes(vertices, clip.triangles.size(), frames); bytes > kMaxGlbBinaryBytes) {
    return absl::InvalidArgumentError(absl::StrCat("glTF: ", frames, " frames of ", vertices, " vertices need ", bytes,
                                                   " bytes, more than a .glb holds (4 GiB); bake a lower --clip-fps, "
                                                   "fewer frames, or keep the .pc2"));
  }
  if (clip.triangles.size() % 3 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("glTF: triangles: ", clip.triangles.size(), " indices, not a multiple of 3"));
  }
  for (size_t i = 0; i < clip.triangles.size(); ++i) {
    if (clip.triangles[i] >= vertices) {
      return absl::InvalidArgumentError(absl::StrCat("glTF: triangle ", i / 3, " index ", clip.triangles[i],
                                                     " >= vertex count ", vertices));
    }
  }
  if (!clip.quality.empty() && clip.quality.size() != frames) {
    return absl::InvalidArgumentError(absl::StrCat("glTF: ", clip.quality.size(), " quality reports for ", frames, " frames"));
  }
  if (auto st = CheckFinite(clip.rest, "glTF: rest positions"); !st.ok()) return st;
  for (size_t k = 0; k < frames; ++k) {
    if (clip.frames[k].size() != clip.rest.size()) {
      return absl::InvalidArgumentError(absl::StrCat("glTF: frame ", k, ": ", clip.frames[k].size(), " floats, the rest mesh has ",
                                                     clip.rest.size()));
    }
    if (auto st = CheckFinite(clip.frames[k], absl::StrCat("glTF: frame ", k)); !st.ok()) return st;
  }

  tinygltf::Model m;
  m.asset.version = "2.0";
  m.asset.generator = "sinew batch";
  m.buffers.resize(1);
  m.buffers[0].data.reserve(vertices * 12 * (frames + 2) + clip.triangles.size() * 4 + frames * (frames + 1) * 4 + 64);

  // The rest mesh.
  Rig rig;
  rig.positions.assign(clip.rest.begin(), clip.rest.end());
  rig.triangles.assign(clip.triangles.begin(), clip.triangles.end());
  std::vector<float> normals(clip.rest.size(), 0.f);
  if (!rig.triangles.empty()) VertexNormals(rig).Compute(clip.rest, normals, nullptr);
  std::vector<double> lo, hi;
  Bounds(clip.rest, &lo, &hi);
  tinygltf::Primitive prim;
  prim.mode = rig.triangles.empty() ? TINYGLTF_MODE_POINTS : TINYGLTF_MODE_TRIANGLES;
  prim.attributes["POSITION"] =
      AddAccessor(m, AddView(m, clip.rest.data(), clip.rest.size() * 4, TINYGLTF_TARGET_ARRAY_BUFFER), 0,
                  TINYGLTF_COMPONENT_TYPE_FLOAT, TINYGLTF_TYPE_VEC3, vertices, lo, hi);
  if (!rig.triangles.empty()) {
    // A vertex of no triangle has no normal; glTF wants unit normals, so it gets +z.
    for (size_t v = 0; v < vertices; ++v) {
      if (normals[3 * v] == 0 && normals[3 * v + 1] == 0 && normals[3 * v + 2] == 0) normals[3 * v + 2] = 1;
    }
    prim.attributes["NORMAL"] =
        AddAccessor(m, AddView(m, normals.data(), normals.size() * 4, TINYGLTF_TARGET_ARRAY_BUFFER), 0,
                    TINYGLTF_COMPONENT_TYPE_FLOAT, TINYGLTF_TYPE_VEC3, vertices);
    prim.indices = AddAccessor(
        m, AddView(m, clip.triangles.data(), clip.triangles.size() * 4, TINYGLTF_TARGET_ELEMENT_ARRAY_BUFFER), 0,
        TINYGLTF_COMPONENT_TYPE_UNSIGNED_INT, TINYGLTF_TYPE_SCALAR, clip.triangles.size());
  }

  // The frames as displacement targets, one buffer view holding them all.
  std::vector<float> delta(clip.rest.size());
  const size_t frame_bytes = clip.rest.size() * 4;
  int targets_view = -1;
  Value::Array target_names;
  for (size_t k = 0; k < frames; ++k) {
    for (size_t i = 0; i < delta.size(); ++i) delta[i] = clip.frames[k][i] - clip.rest[i];
    if (k == 0) {
      targets_view = AddView(m, delta.data(), frame_bytes, TINYGLTF_TARGET_ARRAY_BUFFER);
      m.bufferViews[targets_view].byteLength = frame_bytes * frames;
      m.bufferViews[targets_view].byteStride = 12;  // the spec's rule for a view shared by vertex accessors
    } else {
      const auto* p = reinterpret_cast<const unsigned char*>(delta.data());
      m.buffers[0].data.insert(m.buffers[0].data.end(), p, p + frame_bytes);
    }
    Bounds(delta, &lo, &hi);
    prim.targets.push_back({{"POSITION", AddAccessor(m, targets_view, k * frame_bytes, TINYGLTF_COMPONENT_TYPE_FLOAT,
                                                     TINYGLTF_TYPE_VEC3, vertices, lo, hi)}});
    target_names.push_back(Value("frame " + std::to_string(k)));
  }

  tinygltf::Material material;
  material.name = "skin";
  material.doubleSided = true;  // imported characters do not all wind their triangles alike
  material.pbrMetallicRoughness.baseColorFactor = {0.8, 0.8, 0.8, 1.0};
  material.pbrMetallicRoughness.metallicFactor = 0.0;
  material.pbrMetallicRoughness.roughnessFactor = 0.8;
  m.materials.push_back(material);
  prim.material = 0;

  tinygltf::Mesh mesh;
  mesh.name = ValidUtf8(clip.name);
  mesh.primitives.push_back(prim);
  mesh.weights.assign(frames, 0.0);
  mesh.weights[0] = 1.0;
  mesh.extras = Value(Value::Object{{"targetNames", Value(target_names)}});
  m.meshes.push_back(mesh);
  tinygltf::Node node;
  node.name = ValidUtf8(clip.name);
  node.mesh = 0;
  m.nodes.push_back(node);

  // The weights animation: key k at k / fps shows target k alone (STEP), and a last key at
  // frames / fps holds the last frame, so that the clip lasts frames / fps and a looping player
  // shows the last frame for 1 / fps like the others (until 2026-12-03 the clip ended on the
  // last frame's key, and three.js's loop never showed it).
  std::vector<float> times(frames + 1), weights((frames + 1) * frames, 0.f);
  for (size_t k = 0; k <= frames; ++k) {
    times[k] = static_cast<float>(double(k) / clip.frames_per_second);
    weights[k * frames + std::min(k, frames - 1)] = 1.f;
  }
  const int input = AddAccessor(m, AddView(m, times.data(), times.size() * 4, 0), 0, TINYGLTF_COMPONENT_TYPE_FLOAT,
                                TINYGLTF_TYPE_SCALAR, times.size(), {times.front()}, {times.back()});
  const int output = AddAccessor(m, AddView(m, weights.data(), weights.size() * 4, 0), 0,
                                 TINYGLTF_COMPONENT_TYPE_FLOAT, TINYGLTF_TYPE_SCALAR, weights.size());
  tinygltf::Animation anim;
  anim.name = clip.clip_name.empty() ? "clip" : ValidUtf8(clip.clip_name);
  tinygltf::AnimationSampler sampler;
  sampler.input = input;
  sampler.output = output;
  sampler.interpolation = "STEP";
  anim.samplers.push_back(sampler);
  tinygltf::AnimationChannel channel;
  channel.sampler = 0;
  channel.target_node = 0;
  channel.target_path = "weights";
  anim.channels.push_back(channel);
  m.animations.push_back(anim);

  Value::Object sinew{{"version", Value(1)},
                      {"method", Value(ValidUtf8(clip.method))},
                      {"clip", Value(ValidUtf8(clip.clip_name))},
                      {"source", Value(ValidUtf8(clip.source))},
                      {"frames_per_second", Number(clip.frames_per_second)},
                      {"frames", Value(int(frames))},
                      {"vertices", Value(int(vertices))},
                      {"triangles", Value(int(clip.triangles.size() / 3))}};
  if (!clip.quality.empty()) {
    Value::Array q;
    for (const GltfFrameQuality& f : clip.quality) {
      Value::Object o{{"inside_vertices", Value(int(f.inside_vertices))},
                      {"touching_vertices", Value(int(f.touching_vertices))},
                      {"max_depth", Number(f.max_depth)},
                      {"volume_ratio", Number(f.volume_ratio)},
                      {"edge_stretch_min", Number(f.edge_stretch_min)},
                      {"edge_stretch_max", Number(f.edge_stretch_max)},
                      {"rest_inside_vertices", Value(int(f.rest_inside_vertices))},
                      {"new_inside_vertices", Value(int(f.new_inside_vertices))},
                      {"new_max_depth", Number(f.new_max_depth)},
                      {"exposed_vertices", Value(int(f.exposed_vertices))}};
      if (f.new_deepest_vertex >= 0) {  // where the deepest new inside vertex is
        o["new_deepest_vertex"] = Value(int(f.new_deepest_vertex));
        o["new_deepest_joint"] = Value(ValidUtf8(f.new_deepest_joint));
      }
      q.push_back(Value(std::move(o)));
    }
    sinew["quality"] = Value(q);
  }
  tinygltf::Scene scene;
  scene.name = ValidUtf8(clip.name);
  scene.nodes = {0};
  scene.extras = Value(Value::Object{{"sinew", Value(sinew)}});
  m.scenes.push_back(scene);
  m.defaultScene = 0;

  std::ostringstream glb;
  tinygltf::TinyGLTF gltf;
  if (!gltf.WriteGltfSceneToStream(&m, glb, /*prettyPrint=*/false, /*writeBinary=*/true)) {
    return absl::InternalError(absl::StrCat(path, ": tinygltf could not serialize the clip"));
  }
  return WriteFileAtomically(path, glb.view());
}

namespace {

// Accessor `index` as floats (tightly packed or strided), checked against its buffer.
absl::StatusOr<std::vector<float>> Floats(const tinygltf::Model& m, int index, int type, const std::string& what) {
  if (index < 0 || index >= int(m.accessors.size())) return absl::FailedPreconditionError(what + ": no accessor");
  const tinygltf::Accessor& a = m.accessors[index];
  if (a.componentType != TINYGLTF_COMPONENT_TYPE_FLOAT || a.type != type || a.bufferView < 0 ||
      a.bufferView >= int(m.bufferViews.size())) {
    return absl::FailedPreconditionError(what + ": not a float accessor of the expected type with a buffer view");
  }
  const tinygltf::BufferView& v = m.bufferViews[a.bufferView];
  const int n = tinygltf::GetNumComponentsInType(type);
  const size_t stride = v.byteStride ? v.byteStride : 4 * size_t(n);
  if (v.buffer < 0 || v.buffer >= int(m.buffers.size())) return absl::FailedPreconditionError(what + ": no buffer");
  const auto& data = m.buffers[v.buffer].data;
  const size_t start = v.byteOffset + a.byteOffset;
  // More elements than the buffer's bytes hold, or a stride outside glTF's [element, 252], is
  // refused before the products below (until 2026-12-07 a count near 2^64 / 12 wrapped them,
  // passed, and the copy wrote past a small vector).
  if (stride < 4 * size_t(n) || stride > 252 || a.count > data.size() / (4 * size_t(n)) ||
      v.byteOffset > data.size() || a.byteOffset > data.size()) {
    return absl::FailedPreconditionError(what + ": more elements than its buffer holds, or a bad stride");
  }
  if (a.count > 0 && (start + (a.count - 1) * stride + 4 * n > data.size() ||
                      a.byteOffset + (a.count - 1) * stride + 4 * n > v.byteLength)) {
    return absl::FailedPreconditionError(what + ": out of its buffer view");
  }
  std::vector<float> out(a.count * n);
  for (size_t i = 0; i < a.count; ++i) std::memcpy(&out[i * n], &data[start + i * stride], 4 * size_t(n));
  return out;
}

}  // namespace

absl::StatusOr<GltfClipData> ReadGltfClip(const std::string& path) {
  tinygltf::Model m;
  tinygltf::TinyGLTF gltf;
  std::string err, warn;
  if (!gltf.LoadBinaryFromFile(&m, &err, &warn, path)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", err));
  }
  if (m.meshes.size() != 1 || m.meshes[0].primitives.size() != 1) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not one mesh of one primitive"));
  }
  const tinygltf::Primitive& p = m.meshes[0].primitives[0];
  GltfClipData d;
  auto rest = Floats(m, p.attributes.count("POSITION") ? p.attributes.at("POSITION") : -1, TINYGLTF_TYPE_VEC3, "POSITION");
  if (!rest.ok()) return rest.status();
  d.rest = std::move(*rest);
  if (p.attributes.count("NORMAL")) {
    auto n = Floats(m, p.attributes.at("NORMAL"), TINYGLTF_TYPE_VEC3, "NORMAL");
    if (!n.ok()) return n.status();
    d.normals = std::move(*n);
  }
  if (p.indices >= 0) {
    // Checked before use: a missing view, a strided one, or a count past the buffer (until
    // 2026-12-07 .at() threw on bufferView -1, and 4 * count could wrap).
    const tinygltf::Accessor* a = p.indices < int(m.accessors.size()) ? &m.accessors[p.indices] : nullptr;
    const tinygltf::BufferView* v =
        a != nullptr && a->bufferView >= 0 && a->bufferView < int(m.bufferViews.size()) ? &m.bufferViews[a->bufferView] : nullptr;
    const std::vector<unsigned char>* data =
        v != nullptr && v->buffer >= 0 && v->buffer < int(m.buffers.size()) ? &m.buffers[v->buffer].data : nullptr;
    if (data == nullptr || a->componentType != TINYGLTF_COMPONENT_TYPE_UNSIGNED_INT ||
        (v->byteStride != 0 && v->byteStride != 4) || a->count > data->size() / 4 || v->byteOffset > data->size() ||
        a->byteOffset > data->size() || v->byteOffset + a->byteOffset + 4 * a->count > data->size()) {
      return absl::FailedPreconditionError("indices: not uint32 within the buffer");
    }
    d.triangles.resize(a->count);
    std::memcpy(d.triangles.data(), data->data() + v->byteOffset + a->byteOffset, 4 * a->count);
  }
  for (size_t k = 0; k < p.targets.size(); ++k) {
    const auto it = p.targets[k].find("POSITION");
    auto delta = Floats(m, it == p.targets[k].end() ? -1 : it->second, TINYGLTF_TYPE_VEC3, absl::StrCat("target ", k));
    if (!delta.ok()) return delta.status();
    if (delta->size() != d.rest.size()) return absl::FailedPreconditionError(absl::StrCat("target ", k, ": wrong count"));
    for (size_t i = 0; i < delta->size(); ++i) (*delta)[i] += d.rest[i];
    d.frames.push_back(std::move(*delta));
  }
  if (m.animations.size() == 1 && m.animations[0].samplers.size() == 1) {
    const tinygltf::AnimationSampler& s = m.animations[0].samplers[0];
    auto t = Floats(m, s.input, TINYGLTF_TYPE_SCALAR, "animation input");
    if (!t.ok()) return t.status();
    d.key_times.assign(t->begin(), t->end());
    d.interpolation = s.interpolation;
  }
  // The extras, from the GLB's JSON chunk itself (tinygltf keeps them as its own values).
  std::ifstream in(path, std::ios::binary);
  unsigned char head[20];
  if (in.read(reinterpret_cast<char*>(head), 20)) {
    uint32_t json_len;
    std::memcpy(&json_len, head + 12, 4);
    std::string json(json_len, '\0');
    if (in.read(json.data(), json_len)) {
      const auto doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
      if (!doc.is_discarded() && doc.contains("scenes") && doc["scenes"].size() > 0 && doc["scenes"][0].contains("extras")) {
        d.extras_json = doc["scenes"][0]["extras"].dump();
      }
    }
  }
  return d;
}

}  // namespace sinew::client
