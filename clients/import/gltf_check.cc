#include "clients/import/gltf_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

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

// One component at p as a double (normalized integers to [0, 1] or [-1, 1], as glTF 2.0 3.11
// says); false for a component type glTF does not have.
bool ReadComponent(const unsigned char* p, int type, bool normalized, double* x) {
  switch (type) {
    case TINYGLTF_COMPONENT_TYPE_FLOAT: { float f; std::memcpy(&f, p, 4); *x = f; return true; }
    case TINYGLTF_COMPONENT_TYPE_UNSIGNED_BYTE: *x = *p / (normalized ? 255.0 : 1.0); return true;
    case TINYGLTF_COMPONENT_TYPE_BYTE: {
      const auto c = static_cast<int8_t>(*p);
      *x = normalized ? std::max(c / 127.0, -1.0) : c;
      return true;
    }
    case TINYGLTF_COMPONENT_TYPE_UNSIGNED_SHORT: { uint16_t u; std::memcpy(&u, p, 2); *x = u / (normalized ? 65535.0 : 1.0); return true; }
    case TINYGLTF_COMPONENT_TYPE_SHORT: {
      int16_t c;
      std::memcpy(&c, p, 2);
      *x = normalized ? std::max(c / 32767.0, -1.0) : c;
      return true;
    }
    case TINYGLTF_COMPONENT_TYPE_UNSIGNED_INT: { uint32_t u; std::memcpy(&u, p, 4); *x = u; return true; }
    default: return false;
  }
}

// Where `count` elements of `element` bytes, `*stride` apart (0: the view's byteStride, or
// tightly packed without one; set to what it is), start in buffer view `view` at `offset`: false when the view or the span is out of its buffer's bounds (checked without
// overflow: a count of 2^62 wrapped past the check and the read ran off the buffer until
// 2026-12-03).
bool Span(const tinygltf::Model& m, int view, size_t offset, size_t count, size_t element, size_t* stride,
          const unsigned char** start) {
  if (view < 0 || view >= static_cast<int>(m.bufferViews.size())) return false;
  const tinygltf::BufferView& v = m.bufferViews[view];
  if (*stride == 0) *stride = v.byteStride ? v.byteStride : element;
  if (v.buffer < 0 || v.buffer >= static_cast<int>(m.buffers.size())) return false;
  const auto& data = m.buffers[v.buffer].data;
  if (v.byteOffset > data.size() || offset > data.size() - v.byteOffset) return false;
  const size_t first = v.byteOffset + offset;
  if (count > 0) {
    if (element > data.size() - first) return false;
    if (count - 1 > (data.size() - first - element) / *stride) return false;
  }
  *start = data.data() + first;
  return true;
}

// Reads accessor `index` as doubles (components per element in *components), its sparse
// substitutions applied (until 2026-12-07 they were not: a NaN weight given sparsely passed the
// check); "" or why it cannot be read.
std::string ReadAccessor(const tinygltf::Model& m, int index, std::vector<double>& out, int* components) {
  if (index < 0 || index >= static_cast<int>(m.accessors.size())) return absl::StrCat("accessor ", index, " does not exist");
  const tinygltf::Accessor& a = m.accessors[index];
  const int n = tinygltf::GetNumComponentsInType(a.type);
  const int size = tinygltf::GetComponentSizeInBytes(a.componentType);
  *components = n;
  out.clear();
  if (n <= 0 || size <= 0) return absl::StrCat("accessor ", index, ": component type ", a.componentType, " or type ", a.type, " is not glTF's");
  const std::string bounds = absl::StrCat("accessor ", index, " out of bounds");
  // An accessor with no buffer view is all zeros: held to as many elements as a rig may have vertices.
  constexpr size_t kMaxZeroElements = size_t(1) << 24;
  const size_t element = size_t(n) * size;
  double x = 0;
  if (a.bufferView < 0) {
    if (a.count > kMaxZeroElements) return bounds;
    out.assign(a.count * n, 0.0);
  } else {
    size_t stride = 0;
    const unsigned char* start = nullptr;
    if (!Span(m, a.bufferView, a.byteOffset, a.count, element, &stride, &start)) return bounds;
    out.reserve(a.count * n);
    for (size_t i = 0; i < a.count; ++i) {
      for (int c = 0; c < n; ++c) {
        if (!ReadComponent(start + i * stride + size_t(c) * size, a.componentType, a.normalized, &x)) {
          return absl::StrCat("accessor ", index, ": component type ", a.componentType, " is not glTF's");
        }
        out.push_back(x);
      }
    }
  }
  if (!a.sparse.isSparse) return "";
  // Sparse: `count` indices (unsigned, increasing) into the elements, and as many elements
  // replacing them, both tightly packed.
  const auto& sp = a.sparse;
  const int index_size = tinygltf::GetComponentSizeInBytes(sp.indices.componentType);
  const unsigned char *indices = nullptr, *values = nullptr;
  size_t index_stride = size_t(index_size), value_stride = element;
  if (sp.count < 0 || index_size <= 0 || sp.indices.byteOffset < 0 || sp.values.byteOffset < 0 ||
      !Span(m, sp.indices.bufferView, size_t(sp.indices.byteOffset), size_t(sp.count), size_t(index_size), &index_stride, &indices) ||
      !Span(m, sp.values.bufferView, size_t(sp.values.byteOffset), size_t(sp.count), element, &value_stride, &values)) {
    return absl::StrCat("accessor ", index, ": sparse indices or values out of bounds");
  }
  for (int k = 0; k < sp.count; ++k) {
    double at = 0;
    if (sp.indices.componentType == TINYGLTF_COMPONENT_TYPE_FLOAT ||
        !ReadComponent(indices + size_t(k) * index_size, sp.indices.componentType, false, &at) || at < 0 ||
        at >= double(a.count)) {
      return absl::StrCat("accessor ", index, ": sparse index ", k, " (", at, ") is not an element of its ", a.count);
    }
    for (int c = 0; c < n; ++c) {
      if (!ReadComponent(values + size_t(k) * element + size_t(c) * size, a.componentType, a.normalized, &x)) return bounds;
      out[size_t(at) * n + c] = x;
    }
  }
  return "";
}

}  // namespace

absl::Status CheckGltfSkins(const std::string& path) {
  tinygltf::Model model;
  tinygltf::TinyGLTF loader;
  std::string err, warn;
  // Binary by its magic, whatever its name.
  char magic[4] = {};
  std::ifstream(path, std::ios::binary).read(magic, 4);
  const bool binary = std::memcmp(magic, "glTF", 4) == 0;
  const bool ok = binary ? loader.LoadBinaryFromFile(&model, &err, &warn, path)
                         : loader.LoadASCIIFromFile(&model, &err, &warn, path);
  if (!ok) return absl::InvalidArgumentError(absl::StrCat(path, ": not a valid glTF file: ", err));
  auto bad = [&](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(path, ": ", parts...)); };
  std::vector<double> values;
  int comps = 0;
  for (size_t s = 0; s < model.skins.size(); ++s) {
    // A matrix per joint, MAT4 floats (glTF 2.0 5.28). The matrices may be left out (identity by
    // the spec), which assimp 5.2 does not read: it crashed, as it read past a short accessor
    // (until 2026-12-07).
    const int ibm = model.skins[s].inverseBindMatrices;
    // Only a skin a mesh uses is read (a skin no mesh node names is left alone).
    const bool used = std::any_of(model.nodes.begin(), model.nodes.end(),
                                  [&](const tinygltf::Node& n) { return n.skin == int(s) && n.mesh >= 0; });
    if (!used) continue;
    if (ibm < 0) {
      return bad("skin ", s, ": no inverseBindMatrices (identity by glTF's default, which the importer, assimp, "
                 "cannot read): export the skin with its inverse bind matrices");
    }
    if (ibm >= static_cast<int>(model.accessors.size())) return bad("skin ", s, ": inverseBindMatrices accessor ", ibm, " does not exist");
    const tinygltf::Accessor& a = model.accessors[ibm];
    if (a.type != TINYGLTF_TYPE_MAT4 || a.componentType != TINYGLTF_COMPONENT_TYPE_FLOAT) {
      return bad("skin ", s, ": inverseBindMatrices accessor ", ibm, " is not MAT4 of floats");
    }
    if (a.count < model.skins[s].joints.size()) {
      return bad("skin ", s, ": inverseBindMatrices accessor ", ibm, " has ", a.count, " matrices for ",
                 model.skins[s].joints.size(), " joints");
    }
    if (auto why = ReadAccessor(model, ibm, values, &comps); !why.empty()) return bad("skin ", s, ": inverseBindMatrices: ", why);
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
        if (auto why = ReadAccessor(model, index, values, &comps); !why.empty()) return bad(where, " ", name, ": ", why);
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
