#include "clients/import/asset_import.h"

#include <assimp/postprocess.h>
#include <assimp/scene.h>

#include <algorithm>
#include <assimp/Importer.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "clients/import/gltf_check.h"
#include "core/util/utf8.h"

namespace sinew {
namespace {

Affine34d ToAffine(const aiMatrix4x4& m) {
  Affine34d a;
  a << m.a1, m.a2, m.a3, m.a4, m.b1, m.b2, m.b3, m.b4, m.c1, m.c2, m.c3, m.c4;
  return a;
}

// The node's name as the file has it (bones and channels name nodes so; ValidUtf8 for the rig).
std::string NodeName(const aiNode* n) { return n->mName.length ? std::string(n->mName.C_Str()) : ""; }

// The uniform scale a clip's key of scale 0 (a hidden node) is kept as: poses need scales > 0.
constexpr double kHiddenScale = 1e-6;

// What AddKeys dropped: keys at a time already keyed (the last value kept), keys before the
// one they follow (a file's keys must increase), and the first key at a non-finite time.
struct DroppedKeys {
  size_t repeated = 0, out_of_order = 0;
  std::optional<unsigned> non_finite;  // its index in the channel: the import is refused
  const char* non_finite_kind = "";    // "position", "rotation" or "scale"
};

// Keys of one channel as strictly increasing times; repeated times keep the last value. Until
// 2026-12-07 a key at a NaN time after the first, or before the key it follows, was dropped and
// counted as "at a repeated time".
template <class Key, class Value, class Convert>
void AddKeys(const char* kind, const Key* keys, unsigned count, double ticks_per_second, std::vector<double>& times,
             std::vector<Value>& values, Convert convert, DroppedKeys& dropped) {
  for (unsigned k = 0; k < count; ++k) {
    const double t = keys[k].mTime / ticks_per_second;
    if (!std::isfinite(t)) {
      if (!dropped.non_finite) {
        dropped.non_finite = k;
        dropped.non_finite_kind = kind;
      }
      continue;
    }
    if (!times.empty() && t == times.back()) {
      ++dropped.repeated;
      values.back() = convert(keys[k].mValue);
      continue;
    }
    if (!times.empty() && t < times.back()) {
      ++dropped.out_of_order;
      continue;
    }
    times.push_back(t);
    values.push_back(convert(keys[k].mValue));
  }
}

// Whether assimp would read `path` as glTF: by its name, or, under another name, by its bytes
// (assimp 5.2 tries its importers on the content: simple_skin.gltf renamed .json or .dat
// imported as glTF, and until 2026-12-07 without the checks). Binary glTF 2 starts "glTF" and
// version 2; a JSON glTF is an object with an "asset" member whose "version" starts with 2 (looked
// for in its first 64 KiB). glTF 1.0 under another name is left to assimp, as before (the checks
// read glTF 2 only).
bool ReadAsGltf(const std::string& path) {
  if (absl::EndsWithIgnoreCase(path, ".gltf") || absl::EndsWithIgnoreCase(path, ".glb")) return true;
  std::ifstream in(path, std::ios::binary);
  std::string head(64 * 1024, '\0');
  in.read(head.data(), std::streamsize(head.size()));
  head.resize(size_t(std::max<std::streamsize>(in.gcount(), 0)));
  if (absl::StartsWith(head, "glTF")) return head.size() >= 5 && head[4] == 2;
  const size_t first = head.find_first_not_of(" \t\r\n\xEF\xBB\xBF");
  const size_t asset = head.find("\"asset\"");
  if (first == std::string::npos || head[first] != '{' || asset == std::string::npos) return false;
  const size_t version = head.find("\"version\"", asset);
  const size_t value = version == std::string::npos ? version : head.find('"', head.find(':', version + 9));
  return value != std::string::npos && value + 1 < head.size() && head[value + 1] == '2';
}

}  // namespace

absl::StatusOr<ImportedAsset> ImportAsset(const std::string& path) {
  std::vector<std::string> gltf_notes;
  if (ReadAsGltf(path)) {
    if (auto st = CheckGltfSkins(path, &gltf_notes); !st.ok()) return st;
  }
  Assimp::Importer importer;
  importer.SetPropertyInteger(AI_CONFIG_PP_SBP_REMOVE, aiPrimitiveType_POINT | aiPrimitiveType_LINE);
  const aiScene* scene = importer.ReadFile(
      path, aiProcess_Triangulate | aiProcess_SortByPType | aiProcess_ValidateDataStructure);
  if (scene == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot import: ", importer.GetErrorString()));
  }
  if ((scene->mFlags & AI_SCENE_FLAGS_INCOMPLETE) || scene->mRootNode == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the scene is incomplete"));
  }

  ImportedAsset out;
  out.path = path;
  out.notes = std::move(gltf_notes);
  auto note = [&](std::string s) { out.notes.push_back(std::move(s)); };

  // Node globals at rest, parents, and where each mesh is instanced.
  absl::flat_hash_map<const aiNode*, Affine34d> global;
  // Nodes by name, in pre-order. Bones and animation channels name their nodes, and names need
  // not be unique (an armature and its root bone both "Root"): until 2026-12-07 the first node of
  // a name took every bone and channel of that name, skinning vertices to the wrong joint.
  absl::flat_hash_map<std::string, std::vector<const aiNode*>> by_name;
  std::vector<std::pair<const aiNode*, unsigned>> instances;  // (node, mesh index)
  // Pre-order without recursion (as the joint order below): until 2026-12-07 both walks recursed
  // once per level of the node tree, which a deep chain of nodes overflowed.
  std::vector<std::pair<const aiNode*, Affine34d>> walk = {{scene->mRootNode, IdentityAffine()}};
  while (!walk.empty()) {
    const auto [n, parent] = walk.back();
    walk.pop_back();
    const Affine34d g = Compose(parent, ToAffine(n->mTransformation));
    global[n] = g;
    by_name[NodeName(n)].push_back(n);
    for (unsigned i = 0; i < n->mNumMeshes; ++i) instances.emplace_back(n, n->mMeshes[i]);
    for (unsigned c = n->mNumChildren; c-- > 0;) walk.emplace_back(n->mChildren[c], g);
  }

  // Which meshes to take: triangle meshes.
  std::vector<std::pair<const aiNode*, const aiMesh*>> meshes;
  for (auto [node, index] : instances) {
    const aiMesh* m = scene->mMeshes[index];
    if (!(m->mPrimitiveTypes & aiPrimitiveType_TRIANGLE) || m->mNumFaces == 0) {
      note(absl::StrCat("mesh \"", ValidUtf8(m->mName.C_Str()), "\": no triangles (points or lines), skipped"));
      continue;
    }
    // A mesh under a node scaled to 0 is hidden (a prop put away): skipped, as its normals and
    // bind matrices cannot be had (until 2026-12-07 the import failed later on a non-finite
    // normal or inverse bind matrix, named by an index into the merged mesh).
    if (const double det = global.at(node).leftCols<3>().determinant(); !(std::abs(det) > 1e-30)) {
      note(absl::StrCat("mesh \"", ValidUtf8(m->mName.C_Str()), "\": its node \"", ValidUtf8(NodeName(node)),
                        "\" is scaled to 0 (hidden), skipped"));
      continue;
    }
    meshes.emplace_back(node, m);
  }
  if (meshes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no triangle mesh in the scene"));
  }

  // Joint nodes: bones, mesh nodes, and their ancestors.
  std::set<const aiNode*> wanted;
  std::set<const aiNode*> bone_nodes;
  auto want = [&](const aiNode* n) {
    for (; n != nullptr && wanted.insert(n).second; n = n->mParent) {
    }
  };
  // A bone's node: null when no node has its name; refused when several have.
  absl::flat_hash_map<const aiBone*, const aiNode*> bone_node;
  for (auto [node, m] : meshes) {
    want(node);
    for (unsigned b = 0; b < m->mNumBones; ++b) {
      const aiBone* bone = m->mBones[b];
      auto it = by_name.find(bone->mName.C_Str());
      if (it == by_name.end()) {
        note(absl::StrCat("mesh \"", ValidUtf8(m->mName.C_Str()), "\": bone \"", ValidUtf8(bone->mName.C_Str()),
                          "\" has no node; its weights go to the mesh's node (they stay at the bind pose)"));
        bone_node[bone] = nullptr;
        continue;
      }
      // Of several namesakes, the one that holds no mesh: a DCC names objects and bones apart (a
      // mesh object "Sword" on a bone "Sword" is common); several of those are ambiguous.
      const aiNode* node = it->second.front();
      if (it->second.size() > 1) {
        std::vector<const aiNode*> bare;
        for (const aiNode* n : it->second) {
          if (n->mNumMeshes == 0) bare.push_back(n);
        }
        if (bare.size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              path, ": mesh \"", ValidUtf8(m->mName.C_Str()), "\" bone \"", ValidUtf8(bone->mName.C_Str()), "\": ",
              it->second.size(), " nodes have this name (", bare.size(), " without a mesh), and bones name their node: "
              "which one moves the bone is ambiguous (rename the others in the file)"));
        }
        node = bare.front();
      }
      bone_node[bone] = node;
      bone_nodes.insert(node);
      want(node);
    }
  }
  out.bones = bone_nodes.size();

  // Parents-first joint order (pre-order over the scene tree).
  Skeleton& sk = out.rig.rig.skeleton;
  absl::flat_hash_map<const aiNode*, int32_t> joint;
  size_t approximated = 0;
  std::vector<const aiNode*> joint_nodes;
  std::vector<std::pair<const aiNode*, int32_t>> order = {{scene->mRootNode, -1}};  // (node, parent joint)
  while (!order.empty()) {
    const auto [n, parent] = order.back();
    order.pop_back();
    int32_t self = parent;
    if (wanted.contains(n)) {
      self = static_cast<int32_t>(sk.parents.size());
      joint[n] = self;
      joint_nodes.push_back(n);
      sk.parents.push_back(parent);
      bool exact;
      sk.rest_local.push_back(NearestSimilarity(ToAffine(n->mTransformation), &exact));
      if (!exact) ++approximated;
    }
    for (unsigned c = n->mNumChildren; c-- > 0;) order.emplace_back(n->mChildren[c], self);
  }
  // Joint names are unique: the first joint of a name keeps it, a later one (or one without a
  // name, "node<j>") takes "#1", "#2", ... the first that no joint is named. Until 2026-12-07 the
  // suffix counted uses alone: joints "A", "A", "A#1" became "A", "A#1", "A#1", refused as not
  // unique.
  std::set<std::string> taken;
  std::vector<bool> keeps(joint_nodes.size());
  for (size_t j = 0; j < joint_nodes.size(); ++j) {
    const std::string name = ValidUtf8(NodeName(joint_nodes[j]));
    keeps[j] = !name.empty() && taken.insert(name).second;
  }
  for (size_t j = 0; j < joint_nodes.size(); ++j) {
    std::string name = ValidUtf8(NodeName(joint_nodes[j]));
    if (!keeps[j]) {
      const bool unnamed = name.empty();
      const std::string base = unnamed ? absl::StrCat("node", j) : name;
      name = base;
      if (!unnamed || taken.contains(name)) {
        for (int k = 1; k == 1 || taken.contains(name); ++k) name = absl::StrCat(base, "#", k);
      }
      taken.insert(name);
    }
    sk.names.push_back(std::move(name));
  }
  if (approximated) {
    note(absl::StrCat(approximated, " node transforms have non-uniform scale, shear or mirroring; "
                      "their rest transforms are approximated by similarities"));
  }
  // Rest world from the (possibly approximated) local transforms; inverse binds default to it.
  std::vector<Similarity> rest_world(sk.size());
  for (size_t j = 0; j < sk.size(); ++j) {
    rest_world[j] = sk.parents[j] < 0 ? sk.rest_local[j] : rest_world[sk.parents[j]] * sk.rest_local[j];
  }
  // (A node's own scale of 0 is taken as 1 by NearestSimilarity, and noted as approximated;
  // this is the product of the chain's scales, which can still underflow.)
  std::vector<const aiNode*> node_of(sk.size());
  for (const auto& [n, j] : joint) node_of[size_t(j)] = n;
  for (size_t j = 0; j < sk.size(); ++j) {
    if (!(rest_world[j].scale > 1e-10) || !std::isfinite(rest_world[j].scale)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": node \"", ValidUtf8(NodeName(node_of[j])), "\" (joint ", j, "): its rest transform has scale ",
          rest_world[j].scale, " in the scene; a joint's must be invertible"));
    }
  }
  sk.inverse_bind.resize(sk.size());
  std::vector<bool> bind_set(sk.size(), false);
  for (size_t j = 0; j < sk.size(); ++j) sk.inverse_bind[j] = Inverse(rest_world[j].Matrix());

  // Meshes.
  Rig& rig = out.rig.rig;
  WeightsInput& w = out.rig.weights;
  w.offsets.push_back(0);
  bool all_normals = true, any_uv = false;
  std::string bad_normal;  // the first non-finite normal, named by its mesh and vertex there
  // A mesh's name, as its MeshRange gives it (meshN when it has none).
  auto mesh_name = [&](const aiMesh* m, size_t index) {
    return m->mName.length ? ValidUtf8(m->mName.C_Str()) : absl::StrCat("mesh", index);
  };
  for (size_t i = 0; i < meshes.size(); ++i) {
    const aiMesh* m = meshes[i].second;
    all_normals = all_normals && m->HasNormals();
    any_uv = any_uv || m->HasTextureCoords(0);
    for (unsigned v = 0; bad_normal.empty() && m->HasNormals() && v < m->mNumVertices; ++v) {
      const aiVector3D& n = m->mNormals[v];
      if (!std::isfinite(n.x) || !std::isfinite(n.y) || !std::isfinite(n.z)) {
        bad_normal = absl::StrCat("mesh \"", mesh_name(m, i), "\" vertex ", v);
      }
    }
  }
  // A file's normals are a hint (methods that need them compute them from the triangles): a
  // non-finite one drops them all, with a note, where until 2026-12-07 it failed the import,
  // naming only its index among all the meshes' vertices.
  if (!bad_normal.empty()) {
    all_normals = false;
    note(absl::StrCat(bad_normal, ": its normal is not finite: normals dropped"));
  }
  std::vector<float> uv;
  size_t unweighted = 0, bad_sums = 0;
  for (auto [node, m] : meshes) {
    const std::string mname = mesh_name(m, out.meshes.size());
    MeshRange range{mname, static_cast<uint32_t>(rig.vertex_count()), m->mNumVertices,
                    static_cast<uint32_t>(rig.triangle_count()), 0, m->mNumBones > 0};
    const Affine34d& t = global.at(node);
    const Eigen::Matrix3d normal_matrix = t.leftCols<3>().inverse().transpose();
    for (unsigned v = 0; v < m->mNumVertices; ++v) {
      const Eigen::Vector3d p = t.leftCols<3>() * Eigen::Vector3d(m->mVertices[v].x, m->mVertices[v].y, m->mVertices[v].z) + t.col(3);
      rig.positions.insert(rig.positions.end(), {float(p.x()), float(p.y()), float(p.z())});
      if (all_normals) {
        const Eigen::Vector3d nrm = (normal_matrix * Eigen::Vector3d(m->mNormals[v].x, m->mNormals[v].y, m->mNormals[v].z)).normalized();
        rig.normals.insert(rig.normals.end(), {float(nrm.x()), float(nrm.y()), float(nrm.z())});
      }
      if (any_uv) {
        if (m->HasTextureCoords(0)) uv.insert(uv.end(), {m->mTextureCoords[0][v].x, m->mTextureCoords[0][v].y});
        else uv.insert(uv.end(), {0.f, 0.f});
      }
    }
    for (unsigned f = 0; f < m->mNumFaces; ++f) {
      const aiFace& face = m->mFaces[f];
      if (face.mNumIndices != 3) continue;
      for (int k = 0; k < 3; ++k) {
        if (face.mIndices[k] >= m->mNumVertices) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: mesh \"%s\" face %d: vertex index %d is out of range (%d vertices)", path,
              mname, f, face.mIndices[k], m->mNumVertices));
        }
        rig.triangles.push_back(range.first_vertex + face.mIndices[k]);
      }
      ++range.triangle_count;
    }
    // Bone weights -> per-vertex rows.
    std::vector<std::vector<std::pair<uint32_t, float>>> rows(m->mNumVertices);
    const int32_t own = joint.at(node);
    for (unsigned b = 0; b < m->mNumBones; ++b) {
      const aiBone* bone = m->mBones[b];
      const aiNode* bn = bone_node.at(bone);
      const bool orphan = bn == nullptr;
      const int32_t j = orphan ? own : joint.at(bn);
      const Affine34d ib = Compose(ToAffine(bone->mOffsetMatrix), Inverse(t));
      if (orphan) {
        // No node animates this bone: its share of each vertex stays where the mesh is.
      } else if (!bind_set[j]) {
        sk.inverse_bind[j] = ib;
        bind_set[j] = true;
      } else if (!sk.inverse_bind[j].isApprox(ib, 1e-4)) {
        note(absl::StrCat("bone \"", sk.names[j], "\": meshes disagree on its bind matrix; using the first"));
      }
      for (unsigned k = 0; k < bone->mNumWeights; ++k) {
        const aiVertexWeight& vw = bone->mWeights[k];
        if (vw.mVertexId >= m->mNumVertices) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: mesh \"%s\" bone \"%s\" weight %d: vertex %d is out of range (%d vertices)", path,
              mname, bone->mName.C_Str(), k, vw.mVertexId, m->mNumVertices));
        }
        if (!std::isfinite(vw.mWeight) || vw.mWeight < 0) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: mesh \"%s\" bone \"%s\": weight %g of vertex %d is %s", path, mname,
              bone->mName.C_Str(), vw.mWeight, vw.mVertexId,
              std::isfinite(vw.mWeight) ? "negative" : "not finite"));
        }
        if (vw.mWeight > 0) rows[vw.mVertexId].emplace_back(j, vw.mWeight);
      }
    }
    for (auto& row : rows) {
      double sum = 0;
      for (auto& [j, wt] : row) sum += wt;
      if (row.empty() || !(sum > 0)) {
        row = {{static_cast<uint32_t>(own), 1.0f}};
        if (m->mNumBones > 0) ++unweighted;
      } else if (std::abs(sum - 1) > 1e-3) {
        ++bad_sums;
      }
      for (auto& [j, wt] : row) {
        w.joints.push_back(j);
        w.weights.push_back(wt);
      }
      w.offsets.push_back(static_cast<uint32_t>(w.joints.size()));
    }
    if (m->mNumAnimMeshes > 0) {
      note(absl::StrCat("mesh \"", mname, "\": ", m->mNumAnimMeshes, " morph targets dropped"));
    }
    out.meshes.push_back(range);
  }
  w.normalize = true;
  if (unweighted) note(absl::StrCat(unweighted, " vertices of skinned meshes had no weight; bound rigidly to their mesh's node"));
  if (bad_sums) note(absl::StrCat(bad_sums, " vertices' weights did not sum to 1 (within 1e-3); normalised"));
  if (any_uv) rig.attributes.push_back({"uv0", 2, std::move(uv)});
  if (!all_normals && bad_normal.empty()) note("some meshes have no normals: normals dropped");
  rig.name = ValidUtf8(std::filesystem::path(path).stem().string());

  // Clips.
  for (unsigned a = 0; a < scene->mNumAnimations; ++a) {
    const aiAnimation* anim = scene->mAnimations[a];
    Clip clip;
    clip.name = anim->mName.length ? ValidUtf8(anim->mName.C_Str()) : absl::StrCat("clip", a);
    const double tps = anim->mTicksPerSecond > 0 ? anim->mTicksPerSecond : 25.0;
    clip.duration = std::max(0.0, anim->mDuration / tps);
    clip.tracks.resize(sk.size());
    size_t ignored = 0, nonuniform = 0, hidden = 0;
    DroppedKeys dropped;
    for (unsigned c = 0; c < anim->mNumChannels; ++c) {
      const aiNodeAnim* ch = anim->mChannels[c];
      const std::string target = ValidUtf8(ch->mNodeName.C_Str());
      // The channel's node, as a bone's: the one node of its name, else of its namesakes the one
      // without a mesh (a mesh object and a bone of one name), else ambiguous. Until 2026-12-07
      // only joints were counted: a channel of an empty named like the mesh node (a joint) moved
      // the whole character. A name no joint has moves nothing (ignored, whatever its nodes).
      const aiNode* node = nullptr;
      if (auto it = by_name.find(ch->mNodeName.C_Str()); it != by_name.end()) {
        const auto& namesakes = it->second;
        std::vector<const aiNode*> bare;
        for (const aiNode* n : namesakes) {
          if (n->mNumMeshes == 0) bare.push_back(n);
        }
        const auto joints = std::count_if(namesakes.begin(), namesakes.end(), [&](const aiNode* n) { return joint.contains(n); });
        if (namesakes.size() == 1) {
          node = namesakes.front();
        } else if (joints > 0) {
          if (bare.size() != 1 || !joint.contains(bare.front())) {
            return absl::InvalidArgumentError(absl::StrCat(
                path, ": clip \"", clip.name, "\" channel ", c, " (node \"", target, "\"): ", namesakes.size(),
                " nodes have this name (", joints == 1 ? "1 a joint" : absl::StrCat(joints, " joints"), ", ", bare.size(),
                " without a mesh), and channels name their node: which one it animates is ambiguous (rename the others "
                "in the file)"));
          }
          node = bare.front();
        }
        if (node != nullptr && !joint.contains(node)) node = nullptr;
      }
      if (node == nullptr) {
        ++ignored;
        continue;
      }
      JointTrack& tr = clip.tracks[joint.at(node)];
      AddKeys("position", ch->mPositionKeys, ch->mNumPositionKeys, tps, tr.translation_times, tr.translations,
              [](const aiVector3D& v) { return Eigen::Vector3d(v.x, v.y, v.z); }, dropped);
      AddKeys("rotation", ch->mRotationKeys, ch->mNumRotationKeys, tps, tr.rotation_times, tr.rotations,
              [](const aiQuaternion& q) { return Eigen::Quaterniond(q.w, q.x, q.y, q.z).normalized(); }, dropped);
      // Uniform scale. A scale of 0 hides a node (a prop put away): kept as kHiddenScale, a
      // point (until 2026-12-07 it became 1: the prop showed at full size); a non-finite one is
      // kept to be refused below (it became 1 as well).
      AddKeys("scale", ch->mScalingKeys, ch->mNumScalingKeys, tps, tr.scale_times, tr.scales,
              [&](const aiVector3D& s) {
                const double u = std::cbrt(std::abs(double(s.x) * s.y * s.z));
                if (!std::isfinite(u)) return u;
                if (std::abs(s.x - u) > 1e-3 * u || std::abs(s.y - u) > 1e-3 * u || std::abs(s.z - u) > 1e-3 * u) {
                  ++nonuniform;
                }
                if (u > 0) return u;
                ++hidden;
                return kHiddenScale;
              }, dropped);
      if (dropped.non_finite) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": clip \"", clip.name, "\" node \"", target,
                                                       "\": ", dropped.non_finite_kind, " key ", *dropped.non_finite,
                                                       " is at a non-finite time"));
      }
      // The keys' values are the file's: a non-finite value, a zero quaternion are refused
      // naming the node (until 2026-12-07 by its track's index alone).
      if (auto st = ValidateJointTrack(tr, absl::StrCat("node \"", target, "\"")); !st.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": clip \"", clip.name, "\": ", st.message()));
      }
    }
    if (ignored) note(absl::StrCat("clip \"", clip.name, "\": ", ignored, " channels animate nodes that move no vertex; ignored"));
    if (dropped.repeated) note(absl::StrCat("clip \"", clip.name, "\": ", dropped.repeated, " keys at repeated times dropped"));
    if (dropped.out_of_order) {
      note(absl::StrCat("clip \"", clip.name, "\": ", dropped.out_of_order, " keys before the key they follow dropped"));
    }
    if (nonuniform) note(absl::StrCat("clip \"", clip.name, "\": ", nonuniform, " non-uniform scale keys approximated by uniform scale"));
    if (hidden) note(absl::StrCat("clip \"", clip.name, "\": ", hidden, " scale keys of 0 (a hidden node) kept as ", kHiddenScale));
    if (anim->mNumMeshChannels || anim->mNumMorphMeshChannels) {
      note(absl::StrCat("clip \"", clip.name, "\": vertex/morph animation channels dropped"));
    }
    if (auto st = ValidateClip(clip, sk.size()); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": clip \"", clip.name, "\": ", st.message()));
    }
    out.clips.push_back(std::move(clip));
  }
  return out;
}

}  // namespace sinew
