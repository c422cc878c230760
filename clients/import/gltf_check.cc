#include "clients/import/gltf_check.h"

#include <cmath>
#include <cstring>

#define TINYGLTF_IMPLEMENTATION
#define TINYGLTF_NO_STB_IMAGE
#define TINYGLTF_NO_STB_IMAGE_WRITE
#define TINYGLTF_NO_EXTERNAL_IMAGE
#include <tiny_gltf.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sinew {
namespace {

// Reads accessor `index` as doubles (components per element in *components); false if its
// layout is out of the buffer's bounds.
bool ReadAccessor(const tinygltf::Model& m, int index, std::vector<double>& out, int* components) {
  if (index < 0 || index >= static_cast<int>(m.accessors.size())) return false;
  const tinygltf::Accessor& a = m.accessors[index];
  const int n = tinygltf::GetNumComponentsInType(a.type);
  const int size = tinygltf::GetComponentSizeInBytes(a.componentType);
  *components = n;
  out.clear();
  // The counts and offsets are the file's: checked without overflow (a count of 2^62 wrapped
  // past the bounds check and the read ran off the buffer until 2026-12-03), and an accessor
  // with no buffer (all zeros) is held to as many elements as a rig may have vertices.
  constexpr size_t kMaxZeroElements = size_t(1) << 24;
  if (n <= 0 || size <= 0) return false;
  if (a.bufferView < 0) {  // all zeros by definition
    if (a.count > kMaxZeroElements) return false;
    out.assign(a.count * n, 0.0);
    return true;
  }
  if (a.bufferView >= static_cast<int>(m.bufferViews.size())) return false;
  const tinygltf::BufferView& v = m.bufferViews[a.bufferView];
  if (v.buffer < 0 || v.buffer >= static_cast<int>(m.buffers.size())) return false;
  const auto& data = m.buffers[v.buffer].data;
  const size_t element = size_t(n) * size;
  const size_t stride = v.byteStride ? v.byteStride : element;
  if (v.byteOffset > data.size() || a.byteOffset > data.size() - v.byteOffset) return false;
  const size_t start = v.byteOffset + a.byteOffset;
  if (a.count > 0) {
    if (element > data.size() - start) return false;
    if (a.count - 1 > (data.size() - start - element) / stride) return false;
  }
  out.reserve(a.count * n);
  for (size_t i = 0; i < a.count; ++i) {
    for (int c = 0; c < n; ++c) {
      const unsigned char* p = data.data() + start + i * stride + size_t(c) * size;
      double x = 0;
      switch (a.componentType) {
        case TINYGLTF_COMPONENT_TYPE_FLOAT: { float f; std::memcpy(&f, p, 4); x = f; break; }
        case TINYGLTF_COMPONENT_TYPE_UNSIGNED_BYTE: x = *p / (a.normalized ? 255.0 : 1.0); break;
        case TINYGLTF_COMPONENT_TYPE_UNSIGNED_SHORT: { uint16_t u; std::memcpy(&u, p, 2); x = u / (a.normalized ? 65535.0 : 1.0); break; }
        case TINYGLTF_COMPONENT_TYPE_UNSIGNED_INT: { uint32_t u; std::memcpy(&u, p, 4); x = u; break; }
        default: return false;
      }
      out.push_back(x);
    }
  }
  return true;
}

}  // namespace

absl::Status CheckGltfSkins(const std::string& path) {
  tinygltf::Model model;
  tinygltf::TinyGLTF loader;
  std::string err, warn;
  const bool binary = absl::EndsWithIgnoreCase(path, ".glb");
  const bool ok = binary ? loader.LoadBinaryFromFile(&model, &err, &warn, path)
                         : loader.LoadASCIIFromFile(&model, &err, &warn, path);
  if (!ok) return absl::InvalidArgumentError(absl::StrCat(path, ": not a valid glTF file: ", err));
  auto bad = [&](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(path, ": ", parts...)); };
  std::vector<double> values;
  int comps = 0;
  for (size_t s = 0; s < model.skins.size(); ++s) {
    const int ibm = model.skins[s].inverseBindMatrices;
    if (ibm < 0) continue;
    if (!ReadAccessor(model, ibm, values, &comps)) return bad("skin ", s, ": inverseBindMatrices accessor out of bounds");
    for (size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i])) return bad("skin ", s, ": inverse bind matrix ", i / 16, " is not finite");
    }
  }
  for (const tinygltf::Node& node : model.nodes) {
    if (node.mesh < 0 || node.mesh >= static_cast<int>(model.meshes.size())) continue;
    const tinygltf::Mesh& mesh = model.meshes[node.mesh];
    const size_t skin_joints = (node.skin >= 0 && node.skin < static_cast<int>(model.skins.size()))
                                   ? model.skins[node.skin].joints.size() : 0;
    for (size_t p = 0; p < mesh.primitives.size(); ++p) {
      const std::string where = absl::StrCat("mesh \"", mesh.name, "\" primitive ", p);
      for (const auto& [name, index] : mesh.primitives[p].attributes) {
        const bool weights = absl::StartsWith(name, "WEIGHTS_"), joints = absl::StartsWith(name, "JOINTS_");
        if (name != "POSITION" && !weights && !joints) continue;
        if (!ReadAccessor(model, index, values, &comps)) return bad(where, " ", name, ": accessor out of bounds");
        for (size_t i = 0; i < values.size(); ++i) {
          const double x = values[i];
          if (!std::isfinite(x)) {
            return bad(absl::StrFormat("%s %s: vertex %d component %d is not finite", where, name, i / comps, i % comps));
          }
          if (weights && x < 0) {
            return bad(absl::StrFormat("%s %s: vertex %d weight %g is negative", where, name, i / comps, x));
          }
          if (joints && skin_joints > 0 && x >= double(skin_joints)) {
            return bad(absl::StrFormat("%s %s: vertex %d joint %g is out of range (skin has %d joints)",
                                       where, name, i / comps, x, skin_joints));
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace sinew
