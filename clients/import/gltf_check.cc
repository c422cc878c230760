#include "clients/import/gltf_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>

#define TINYGLTF_IMPLEMENTATION
#define TINYGLTF_NO_STB_IMAGE
#define TINYGLTF_NO_STB_IMAGE_WRITE
#define TINYGLTF_NO_EXTERNAL_IMAGE
#include <tiny_gltf.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/util/utf8.h"

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

// What one pass over an accessor's values found. Each accessor is read once, however many
// primitives and nodes use it (until 2026-12-07 once per node showing its mesh: 400 nodes on one
// mesh took 44 s), and its values are looked at, not kept.
struct AccessorScan {
  std::string error;  // why it cannot be read; "" when it can
  size_t count = 0;   // elements
  std::optional<std::pair<size_t, int>> non_finite;  // the first non-finite value: element, component
  std::optional<std::pair<size_t, double>> negative;  // the first negative value: element, value
  double max = -std::numeric_limits<double>::infinity();  // the largest finite value, and the first
  size_t max_element = 0;                                 // element that holds it
};

// An accessor without a buffer view is zeros but for its sparse substitutions, held to as many
// elements as a rig may have vertices.
constexpr size_t kMaxZeroElements = size_t(1) << 24;

// Reads accessor `index` (normalized integers as glTF 2.0 3.11 says), its sparse substitutions
// applied (until 2026-12-07 they were not: a NaN weight given sparsely passed the check). The
// zeros of an accessor without a buffer view are looked at once, as its first element not
// substituted (until 2026-12-07 they were built as doubles: a 355-byte file of 2^24 MAT4s
// allocated 2 GiB); one that is not sparse either is refused, as assimp 5.2 cannot read it.
AccessorScan ScanAccessor(const tinygltf::Model& m, int index) {
  AccessorScan s;
  if (index < 0 || index >= static_cast<int>(m.accessors.size())) {
    s.error = absl::StrCat("accessor ", index, " does not exist");
    return s;
  }
  const tinygltf::Accessor& a = m.accessors[index];
  const int n = tinygltf::GetNumComponentsInType(a.type);
  const int size = tinygltf::GetComponentSizeInBytes(a.componentType);
  s.count = a.count;
  if (n <= 0 || size <= 0) {
    s.error = absl::StrCat("accessor ", index, ": component type ", a.componentType, " or type ", a.type, " is not glTF's");
    return s;
  }
  const std::string bounds = absl::StrCat("accessor ", index, " out of bounds");
  const size_t element = size_t(n) * size;
  size_t stride = 0;
  const unsigned char* start = nullptr;
  if (a.bufferView < 0) {
    if (!a.sparse.isSparse) {
      s.error = absl::StrCat("accessor ", index, " has no bufferView (all zeros), which the importer (assimp 5.2) "
                             "cannot read: export the data");
      return s;
    }
    if (a.count > kMaxZeroElements) {
      s.error = bounds;
      return s;
    }
  } else if (!Span(m, a.bufferView, a.byteOffset, a.count, element, &stride, &start)) {
    s.error = bounds;
    return s;
  }
  // Sparse: `count` indices (unsigned, increasing) into the elements, and as many elements
  // replacing them, both tightly packed; taken as (element, k) by element, the last of repeats.
  std::vector<std::pair<size_t, int>> subs;
  const unsigned char* values = nullptr;
  if (a.sparse.isSparse) {
    const auto& sp = a.sparse;
    const int index_size = tinygltf::GetComponentSizeInBytes(sp.indices.componentType);
    const unsigned char* indices = nullptr;
    size_t index_stride = size_t(index_size), value_stride = element;
    if (sp.count < 0 || index_size <= 0 || sp.indices.byteOffset < 0 || sp.values.byteOffset < 0 ||
        !Span(m, sp.indices.bufferView, size_t(sp.indices.byteOffset), size_t(sp.count), size_t(index_size), &index_stride, &indices) ||
        !Span(m, sp.values.bufferView, size_t(sp.values.byteOffset), size_t(sp.count), element, &value_stride, &values)) {
      s.error = absl::StrCat("accessor ", index, ": sparse indices or values out of bounds");
      return s;
    }
    subs.reserve(size_t(sp.count));
    for (int k = 0; k < sp.count; ++k) {
      double at = 0;
      if (sp.indices.componentType == TINYGLTF_COMPONENT_TYPE_FLOAT ||
          !ReadComponent(indices + size_t(k) * index_size, sp.indices.componentType, false, &at) || at < 0 ||
          at >= double(a.count)) {
        s.error = absl::StrCat("accessor ", index, ": sparse index ", k, " (", at, ") is not an element of its ", a.count);
        return s;
      }
      subs.emplace_back(size_t(at), k);
    }
    std::stable_sort(subs.begin(), subs.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    size_t kept = 0;
    for (size_t i = 0; i < subs.size(); ++i) {
      if (i + 1 < subs.size() && subs[i + 1].first == subs[i].first) continue;
      subs[kept++] = subs[i];
    }
    subs.resize(kept);
  }
  auto look = [&](size_t e, int c, double x) {
    if (!std::isfinite(x)) {
      if (!s.non_finite) s.non_finite.emplace(e, c);
      return;
    }
    if (x < 0 && !s.negative) s.negative.emplace(e, x);
    if (x > s.max) {
      s.max = x;
      s.max_element = e;
    }
  };
  auto read = [&](size_t e, const unsigned char* p) {
    double x = 0;
    for (int c = 0; c < n; ++c) {
      if (!ReadComponent(p + size_t(c) * size, a.componentType, a.normalized, &x)) {
        s.error = absl::StrCat("accessor ", index, ": component type ", a.componentType, " is not glTF's");
        return false;
      }
      look(e, c, x);
    }
    return true;
  };
  if (a.bufferView >= 0) {
    size_t next = 0;
    for (size_t e = 0; e < a.count; ++e) {
      const unsigned char* p = start + e * stride;
      if (next < subs.size() && subs[next].first == e) p = values + size_t(subs[next++].second) * element;
      if (!read(e, p)) return s;
    }
  } else {
    size_t zero = 0;  // the first element not substituted
    for (const auto& [e, k] : subs) {
      if (e == zero) ++zero;
    }
    if (zero < a.count) {
      for (int c = 0; c < n; ++c) look(zero, c, 0.0);
    }
    for (const auto& [e, k] : subs) {
      if (!read(e, values + size_t(k) * element)) return s;
    }
  }
  return s;
}

std::string ComponentName(int type) {
  switch (type) {
    case TINYGLTF_COMPONENT_TYPE_FLOAT: return "floats";
    case TINYGLTF_COMPONENT_TYPE_UNSIGNED_BYTE: return "unsigned bytes";
    case TINYGLTF_COMPONENT_TYPE_BYTE: return "bytes";
    case TINYGLTF_COMPONENT_TYPE_UNSIGNED_SHORT: return "unsigned shorts";
    case TINYGLTF_COMPONENT_TYPE_SHORT: return "shorts";
    case TINYGLTF_COMPONENT_TYPE_UNSIGNED_INT: return "unsigned ints";
    default: return absl::StrCat("component type ", type);
  }
}

// "VEC4 of unsigned bytes (normalized)", as a message names an accessor's layout.
std::string Layout(const tinygltf::Accessor& a) {
  std::string type;
  switch (a.type) {
    case TINYGLTF_TYPE_SCALAR: type = "SCALAR"; break;
    case TINYGLTF_TYPE_VEC2: case TINYGLTF_TYPE_VEC3: case TINYGLTF_TYPE_VEC4: type = absl::StrCat("VEC", a.type); break;
    case TINYGLTF_TYPE_MAT2: type = "MAT2"; break;
    case TINYGLTF_TYPE_MAT3: type = "MAT3"; break;
    case TINYGLTF_TYPE_MAT4: type = "MAT4"; break;
    default: type = absl::StrCat("type ", a.type);
  }
  return absl::StrCat(type, " of ", ComponentName(a.componentType), a.normalized ? " (normalized)" : "");
}

std::string NodeLabel(const tinygltf::Model& m, int n) {
  return absl::StrCat("node ", n, m.nodes[n].name.empty() ? "" : absl::StrCat(" \"", ValidUtf8(m.nodes[n].name), "\""));
}

// The node tree: glTF's is a forest (a node has one parent at most), which assimp 5.2 walks
// recursively. Until 2026-12-07 a chain of 20,000 nodes overflowed the CLI's stack inside
// assimp, and a node that is the child of two parents was imported once per parent (2^24 copies
// down a chain of 24 such: minutes, gigabytes). A cycle, which assimp refuses itself, is refused
// here too, naming a node of it. "" or why the tree is refused.
std::string CheckNodeTree(const tinygltf::Model& m) {
  const int count = static_cast<int>(m.nodes.size());
  std::vector<int> parent(size_t(count), -1);
  for (int p = 0; p < count; ++p) {
    for (int c : m.nodes[p].children) {
      if (c < 0 || c >= count) return absl::StrCat(NodeLabel(m, p), ": child ", c, " does not exist");
      if (c == p) return absl::StrCat(NodeLabel(m, c), " is its own child");
      if (parent[c] == p) return absl::StrCat(NodeLabel(m, p), " lists child ", c, " twice");
      if (parent[c] >= 0) {
        return absl::StrCat(NodeLabel(m, c), " is a child of ", NodeLabel(m, parent[c]), " and of ", NodeLabel(m, p),
                            ": a glTF node has one parent at most");
      }
      parent[c] = p;
    }
  }
  // A scene's nodes are roots, each listed once (glTF 2.0 5.27): assimp imports every one listed
  // with its whole tree, so a root listed twice, or a child listed as a root too, was imported
  // twice (until 2026-12-07; a million listings of a deep tree: gigabytes).
  for (size_t sc = 0; sc < m.scenes.size(); ++sc) {
    std::vector<bool> listed(size_t(count), false);
    for (int n : m.scenes[sc].nodes) {
      if (n < 0 || n >= count) return absl::StrCat("scene ", sc, ": node ", n, " does not exist");
      if (listed[n]) return absl::StrCat("scene ", sc, " lists ", NodeLabel(m, n), " twice");
      if (parent[n] >= 0) {
        return absl::StrCat("scene ", sc, " lists ", NodeLabel(m, n), " as a root, but it is a child of ",
                            NodeLabel(m, parent[n]));
      }
      listed[n] = true;
    }
  }
  // Depths from the roots, without recursion; a node no root reaches is on or under a cycle.
  std::vector<int> depth(size_t(count), 0);
  std::vector<int> stack;
  for (int n = 0; n < count; ++n) {
    if (parent[n] < 0) {
      depth[n] = 1;
      stack.push_back(n);
    }
  }
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    for (int c : m.nodes[n].children) {
      depth[c] = depth[n] + 1;
      if (depth[c] > kMaxGltfNodeDepth) {
        return absl::StrCat(NodeLabel(m, c), " is ", depth[c], " nodes deep; the importer takes trees of at most ",
                            kMaxGltfNodeDepth, " levels (a skeleton is under 100)");
      }
      stack.push_back(c);
    }
  }
  for (int n = 0; n < count; ++n) {
    if (depth[n] == 0) return absl::StrCat(NodeLabel(m, n), " is its own ancestor: its children form a cycle");
  }
  return "";
}

// "0, 1, 2, 3, 4 and 7 more": the first few of a list, for a note.
std::string FirstFew(const std::vector<size_t>& list) {
  constexpr size_t kShown = 5;
  if (list.size() <= kShown) return absl::StrJoin(list, ", ");
  return absl::StrCat(absl::StrJoin(list.begin(), list.begin() + kShown, ", "), " and ", list.size() - kShown, " more");
}

}  // namespace

absl::Status CheckGltfSkins(const std::string& path, std::vector<std::string>* notes) {
  tinygltf::Model model;
  tinygltf::TinyGLTF loader;
  // Images are not decoded (nothing here reads them): without a loader tinygltf refused every
  // file with an image inside it, a buffer view or a data: URI (most character .glb files),
  // "No LoadImageData callback specified" (until 2026-12-07). Their bytes are left as they are.
  loader.SetImageLoader([](tinygltf::Image*, const int, std::string*, std::string*, int, int, const unsigned char*,
                           int, void*) { return true; },
                        nullptr);
  std::string err, warn;
  // Binary by its magic, whatever its name.
  char magic[4] = {};
  std::ifstream(path, std::ios::binary).read(magic, 4);
  const bool binary = std::memcmp(magic, "glTF", 4) == 0;
  const bool ok = binary ? loader.LoadBinaryFromFile(&model, &err, &warn, path)
                         : loader.LoadASCIIFromFile(&model, &err, &warn, path);
  if (!ok) return absl::InvalidArgumentError(absl::StrCat(path, ": not a valid glTF file: ", err));
  auto bad = [&](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(path, ": ", parts...)); };
  if (auto why = CheckNodeTree(model); !why.empty()) return bad(why);

  std::map<int, AccessorScan> scans;
  auto scan = [&](int index) -> const AccessorScan& {
    auto it = scans.find(index);
    if (it == scans.end()) it = scans.emplace(index, ScanAccessor(model, index)).first;
    return it->second;
  };
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
    const size_t joints = model.skins[s].joints.size();
    if (a.type != TINYGLTF_TYPE_MAT4 || a.componentType != TINYGLTF_COMPONENT_TYPE_FLOAT) {
      return bad("skin ", s, ": inverseBindMatrices accessor ", ibm, " is not MAT4 of floats");
    }
    if (a.count < joints) {
      return bad("skin ", s, ": inverseBindMatrices accessor ", ibm, " has ", a.count, " matrices for ", joints, " joints");
    }
    // Zeros (but for sparse substitutions) beyond the joints are matrices assimp would allocate for nothing.
    if (a.bufferView < 0 && a.count > joints) {
      return bad("skin ", s, ": inverseBindMatrices accessor ", ibm, " has no bufferView and ", a.count,
                 " matrices for ", joints, " joints");
    }
    const AccessorScan& sc = scan(ibm);
    if (!sc.error.empty()) return bad("skin ", s, ": inverseBindMatrices: ", sc.error);
    if (sc.non_finite) return bad("skin ", s, ": inverse bind matrix ", sc.non_finite->first, " is not finite");
  }

  // Meshes, each once, with the skins of the nodes that show it (-1: a node without a skin).
  std::map<int, std::set<int>> mesh_skins;
  for (const tinygltf::Node& node : model.nodes) {
    if (node.mesh < 0 || node.mesh >= static_cast<int>(model.meshes.size())) continue;
    mesh_skins[node.mesh].insert(node.skin >= 0 && node.skin < static_cast<int>(model.skins.size()) ? node.skin : -1);
  }
  for (const auto& [mesh_index, skins] : mesh_skins) {
    const tinygltf::Mesh& mesh = model.meshes[mesh_index];
    for (size_t p = 0; p < mesh.primitives.size(); ++p) {
      const tinygltf::Primitive& prim = mesh.primitives[p];
      const std::string where = absl::StrCat(
          "mesh ", mesh_index, mesh.name.empty() ? "" : absl::StrCat(" \"", ValidUtf8(mesh.name), "\""), " primitive ", p);
      // POSITION first: its count is the primitive's vertex count, which every other attribute
      // has (glTF 2.0 3.7.2.1). assimp 5.2 silently dropped all the weights of a WEIGHTS_0 with
      // one more element (until 2026-12-07).
      std::optional<size_t> vertices;
      if (auto it = prim.attributes.find("POSITION"); it != prim.attributes.end()) {
        if (it->second >= 0 && it->second < static_cast<int>(model.accessors.size()) &&
            model.accessors[it->second].bufferView < 0) {
          return bad(where, " POSITION: accessor ", it->second, " has no bufferView, which the importer (assimp 5.2) "
                     "cannot read: export the positions");
        }
        const AccessorScan& sc = scan(it->second);
        if (!sc.error.empty()) return bad(where, " POSITION: ", sc.error);
        vertices = sc.count;
      }
      std::map<std::string, int> joint_types;  // JOINTS_n: component type
      for (const auto& [name, index] : prim.attributes) {
        const bool weights = absl::StartsWith(name, "WEIGHTS_"), joints = absl::StartsWith(name, "JOINTS_");
        if (index < 0 || index >= static_cast<int>(model.accessors.size())) {
          return bad(where, " ", name, ": accessor ", index, " does not exist");
        }
        const tinygltf::Accessor& a = model.accessors[index];
        // assimp 5.2 reads every WEIGHTS_n element as four floats, and JOINTS_n as four bytes or
        // four shorts (by JOINTS_0's size): normalized unsigned bytes or shorts, which glTF allows
        // for weights, became weights like 3.6e-43 and, normalised, bound vertices to the wrong
        // joint with a note that they "did not sum to 1" (until 2026-12-07).
        if (weights && (a.type != TINYGLTF_TYPE_VEC4 || a.componentType != TINYGLTF_COMPONENT_TYPE_FLOAT)) {
          return bad(where, " ", name, ": accessor ", index, " is ", Layout(a), "; the importer (assimp 5.2) reads "
                     "weights as VEC4 of floats only: re-export the mesh with float weights");
        }
        // And POSITION and NORMAL as VEC3 of floats (KHR_mesh_quantization's shorts and bytes
        // were read as float bits: a finite but wrong mesh, until 2026-12-07).
        if ((name == "POSITION" || name == "NORMAL") &&
            (a.type != TINYGLTF_TYPE_VEC3 || a.componentType != TINYGLTF_COMPONENT_TYPE_FLOAT)) {
          return bad(where, " ", name, ": accessor ", index, " is ", Layout(a), "; the importer (assimp 5.2) reads ",
                     name, " as VEC3 of floats only (a quantized file: export it unquantized)");
        }
        if (joints && (a.type != TINYGLTF_TYPE_VEC4 || (a.componentType != TINYGLTF_COMPONENT_TYPE_UNSIGNED_BYTE &&
                                                         a.componentType != TINYGLTF_COMPONENT_TYPE_UNSIGNED_SHORT))) {
          return bad(where, " ", name, ": accessor ", index, " is ", Layout(a), "; joints are VEC4 of unsigned bytes "
                     "or unsigned shorts (glTF 2.0 3.7.3.3)");
        }
        if (joints) joint_types[name] = a.componentType;
        if (name == "POSITION" || weights || joints) {
          const AccessorScan& sc = scan(index);
          if (!sc.error.empty()) return bad(where, " ", name, ": ", sc.error);
          if (sc.non_finite) {
            return bad(absl::StrFormat("%s %s: vertex %d component %d is not finite", where, name, sc.non_finite->first,
                                       sc.non_finite->second));
          }
          if (weights && sc.negative) {
            return bad(absl::StrFormat("%s %s: vertex %d weight %g is negative", where, name, sc.negative->first,
                                       sc.negative->second));
          }
          for (int s : skins) {
            const size_t skin_joints = s >= 0 ? model.skins[s].joints.size() : 0;
            if (joints && skin_joints > 0 && sc.count > 0 && sc.max >= double(skin_joints)) {
              return bad(absl::StrFormat("%s %s: vertex %d joint %g is out of range (skin %d has %d joints)", where, name,
                                         sc.max_element, sc.max, s, skin_joints));
            }
          }
        }
        if (vertices && a.count != *vertices) {
          return bad(where, " ", name, ": accessor ", index, " has ", a.count, " elements for the primitive's ", *vertices,
                     " vertices (POSITION's count): every attribute has one per vertex");
        }
      }
      // Sets in pairs, joints of one type: assimp 5.2 reads JOINTS_n for each WEIGHTS_n (it
      // crashed on a WEIGHTS_1 without JOINTS_1), every set as JOINTS_0's type (unsigned bytes
      // read as shorts made joints past the skin, dropped silently).
      for (const auto& [name, index] : prim.attributes) {
        if (absl::StartsWith(name, "WEIGHTS_")) {
          const std::string pair = absl::StrCat("JOINTS_", name.substr(8));
          if (!prim.attributes.contains(pair)) return bad(where, " ", name, ": no ", pair, " says whose weights these are");
        } else if (absl::StartsWith(name, "JOINTS_")) {
          const std::string pair = absl::StrCat("WEIGHTS_", name.substr(7));
          if (!prim.attributes.contains(pair)) return bad(where, " ", name, ": no ", pair, " gives these joints weights");
          if (joint_types.at(name) != joint_types.begin()->second) {
            return bad(where, " ", name, ": ", ComponentName(joint_types.at(name)), " where ", joint_types.begin()->first,
                       " has ", ComponentName(joint_types.begin()->second), "; the importer (assimp 5.2) reads every "
                       "set as the first one's type: export the joints of one type");
          }
        }
      }
      // Indices are vertices: assimp 5.2 silently dropped a triangle with an index past the
      // vertices (until 2026-12-07 IndexOutOfRange.gltf imported 11 of its 12 triangles).
      std::optional<size_t> corners = vertices;  // the vertices' count as the triangles list them
      if (prim.indices >= 0) {
        if (prim.indices >= static_cast<int>(model.accessors.size())) {
          return bad(where, " indices: accessor ", prim.indices, " does not exist");
        }
        const tinygltf::Accessor& a = model.accessors[prim.indices];
        if (a.type != TINYGLTF_TYPE_SCALAR || (a.componentType != TINYGLTF_COMPONENT_TYPE_UNSIGNED_BYTE &&
                                               a.componentType != TINYGLTF_COMPONENT_TYPE_UNSIGNED_SHORT &&
                                               a.componentType != TINYGLTF_COMPONENT_TYPE_UNSIGNED_INT)) {
          return bad(where, " indices: accessor ", prim.indices, " is ", Layout(a), ", not SCALAR of unsigned integers");
        }
        const AccessorScan& sc = scan(prim.indices);
        if (!sc.error.empty()) return bad(where, " indices: ", sc.error);
        if (vertices && sc.count > 0 && sc.max >= double(*vertices)) {
          return bad(where, " indices: index ", sc.max_element, " is vertex ", size_t(sc.max), ", out of range (",
                     *vertices, " vertices)");
        }
        corners = sc.count;
      }
      // Whole triangles: assimp 5.2 silently dropped the last, incomplete one (until 2026-12-07
      // IncorrectVertexArrays/Cube.gltf imported a truncated cube).
      if (prim.mode == TINYGLTF_MODE_TRIANGLES && corners && *corners % 3 != 0) {
        return bad(where, ": ", *corners, prim.indices >= 0 ? " indices" : " vertices", " are not whole triangles (",
                   *corners % 3, " left over)");
      }
    }
  }

  // The samplers of node motion, as assimp 5.2 reads them: it copies the output's bytes as floats
  // (normalized integer rotations, which core glTF allows, became NaN or a wrong turn) and reads
  // a CUBICSPLINE's 3 values per key without checking the count (past the end of a short
  // accessor); until 2026-12-07 neither was checked. Morph weights are dropped anyway.
  for (size_t a = 0; a < model.animations.size(); ++a) {
    const tinygltf::Animation& anim = model.animations[a];
    for (size_t c = 0; c < anim.channels.size(); ++c) {
      const tinygltf::AnimationChannel& ch = anim.channels[c];
      const std::string where = absl::StrCat("animation ", a, " channel ", c);
      if (ch.sampler < 0 || ch.sampler >= static_cast<int>(anim.samplers.size())) {
        return bad(where, ": sampler ", ch.sampler, " does not exist");
      }
      const int size = ch.target_path == "rotation" ? 4 : ch.target_path == "translation" || ch.target_path == "scale" ? 3 : 0;
      if (size == 0) continue;
      const tinygltf::AnimationSampler& sampler = anim.samplers[size_t(ch.sampler)];
      for (int index : {sampler.input, sampler.output}) {
        if (index < 0 || index >= static_cast<int>(model.accessors.size())) {
          return bad(where, " (", ch.target_path, "): sampler ", ch.sampler, "'s accessor ", index, " does not exist");
        }
      }
      const tinygltf::Accessor& in = model.accessors[size_t(sampler.input)];
      const tinygltf::Accessor& out = model.accessors[size_t(sampler.output)];
      if (in.componentType != TINYGLTF_COMPONENT_TYPE_FLOAT || in.type != TINYGLTF_TYPE_SCALAR) {
        return bad(where, " (", ch.target_path, "): input accessor ", sampler.input, " is ", Layout(in),
                   "; key times are SCALAR floats (glTF 2.0 5.7)");
      }
      if (out.componentType != TINYGLTF_COMPONENT_TYPE_FLOAT || out.type != (size == 4 ? TINYGLTF_TYPE_VEC4 : TINYGLTF_TYPE_VEC3)) {
        return bad(where, " (", ch.target_path, "): output accessor ", sampler.output, " is ", Layout(out),
                   "; the importer reads ", size == 4 ? "VEC4" : "VEC3", " of floats only (a quantized file: "
                   "export it unquantized)");
      }
      const size_t per_key = sampler.interpolation == "CUBICSPLINE" ? 3 : 1;
      if (out.count < per_key * in.count) {  // fewer: read past; more: the rest unread (assimp)
        return bad(where, " (", ch.target_path, "): ", in.count, " keys but ", out.count, " output values (",
                   sampler.interpolation.empty() ? "LINEAR" : sampler.interpolation, " takes ", per_key, " per key)");
      }
    }
  }

  // Samplers the importer plays otherwise than the file says: assimp 5.2 keeps the keys of STEP
  // and CUBICSPLINE samplers (a cubic spline's values between its tangents) and the clip
  // interpolates them linearly (until 2026-12-07 without a word).
  if (notes != nullptr) {
    for (size_t a = 0; a < model.animations.size(); ++a) {
      const tinygltf::Animation& anim = model.animations[a];
      std::vector<size_t> step, cubic;
      for (size_t s = 0; s < anim.samplers.size(); ++s) {
        if (anim.samplers[s].interpolation == "STEP") step.push_back(s);
        if (anim.samplers[s].interpolation == "CUBICSPLINE") cubic.push_back(s);
      }
      const std::string label =
          absl::StrCat("animation ", a, anim.name.empty() ? "" : absl::StrCat(" \"", ValidUtf8(anim.name), "\""));
      if (!step.empty()) {
        notes->push_back(absl::StrCat(label, " sampler", step.size() > 1 ? "s " : " ", FirstFew(step),
                                      ": STEP interpolation played as linear between the keys"));
      }
      if (!cubic.empty()) {
        notes->push_back(absl::StrCat(label, " sampler", cubic.size() > 1 ? "s " : " ", FirstFew(cubic),
                                      ": CUBICSPLINE interpolation played as linear between the keys (tangents dropped)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace sinew
