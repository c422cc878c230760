#include "clients/import/asset_import.h"

#include <assimp/postprocess.h>
#include <assimp/scene.h>

#include <assimp/Importer.hpp>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "clients/import/gltf_check.h"

namespace sinew {
namespace {

Affine34d ToAffine(const aiMatrix4x4& m) {
  Affine34d a;
  a << m.a1, m.a2, m.a3, m.a4, m.b1, m.b2, m.b3, m.b4, m.c1, m.c2, m.c3, m.c4;
  return a;
}

// `s` with every byte that does not start or continue a valid UTF-8 sequence (overlong forms,
// surrogates and code points past U+10FFFF included) replaced by U+FFFD. Names from a file go into
// the rig's protobuf strings, which must be UTF-8: an asset named or with bones named in Latin-1
// failed to upload ("the bytes are not a serialized sinew.v1.Rig") until 2026-12-07.
std::string ValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07, min = 0x10000;
    }
    bool ok = n > 0;
    for (size_t k = 1; ok && k <= n; ++k) {
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) {
        ok = false;
      } else {
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      }
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      out.append(s.substr(i, n + 1));
      i += n + 1;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

// The node's name as the file has it (bones and channels name nodes so; ValidUtf8 for the rig).
std::string NodeName(const aiNode* n) { return n->mName.length ? std::string(n->mName.C_Str()) : ""; }

// Keys of one channel as strictly increasing times; repeated times keep the last value.
template <class Key, class Value, class Convert>
size_t AddKeys(const Key* keys, unsigned count, double ticks_per_second, std::vector<double>& times,
               std::vector<Value>& values, Convert convert) {
  size_t dropped = 0;
  for (unsigned k = 0; k < count; ++k) {
    const double t = keys[k].mTime / ticks_per_second;
    if (!times.empty() && !(t > times.back())) {
      ++dropped;
      if (t == times.back()) values.back() = convert(keys[k].mValue);
      continue;
    }
    times.push_back(t);
    values.push_back(convert(keys[k].mValue));
  }
  return dropped;
}

}  // namespace

absl::StatusOr<ImportedAsset> ImportAsset(const std::string& path) {
  if (absl::EndsWithIgnoreCase(path, ".gltf") || absl::EndsWithIgnoreCase(path, ".glb")) {
    if (auto st = CheckGltfSkins(path); !st.ok()) return st;
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
  auto note = [&](std::string s) { out.notes.push_back(std::move(s)); };

  // Node globals at rest, parents, and where each mesh is instanced.
  absl::flat_hash_map<const aiNode*, Affine34d> global;
  absl::flat_hash_map<std::string, const aiNode*> by_name;  // first node of each name
  std::vector<std::pair<const aiNode*, unsigned>> instances;  // (node, mesh index)
  std::function<void(const aiNode*, const Affine34d&)> walk = [&](const aiNode* n, const Affine34d& parent) {
    const Affine34d g = Compose(parent, ToAffine(n->mTransformation));
    global[n] = g;
    by_name.emplace(NodeName(n), n);
    for (unsigned i = 0; i < n->mNumMeshes; ++i) instances.emplace_back(n, n->mMeshes[i]);
    for (unsigned c = 0; c < n->mNumChildren; ++c) walk(n->mChildren[c], g);
  };
  walk(scene->mRootNode, IdentityAffine());

  // Which meshes to take: triangle meshes.
  std::vector<std::pair<const aiNode*, const aiMesh*>> meshes;
  for (auto [node, index] : instances) {
    const aiMesh* m = scene->mMeshes[index];
    if (!(m->mPrimitiveTypes & aiPrimitiveType_TRIANGLE) || m->mNumFaces == 0) {
      note(absl::StrCat("mesh \"", m->mName.C_Str(), "\": no triangles (points or lines), skipped"));
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
  for (auto [node, m] : meshes) {
    want(node);
    for (unsigned b = 0; b < m->mNumBones; ++b) {
      auto it = by_name.find(m->mBones[b]->mName.C_Str());
      if (it == by_name.end()) {
        note(absl::StrCat("mesh \"", m->mName.C_Str(), "\": bone \"", m->mBones[b]->mName.C_Str(),
                          "\" has no node; its weights go to the mesh's node (they stay at the bind pose)"));
        continue;
      }
      bone_nodes.insert(it->second);
      want(it->second);
    }
  }
  out.bones = bone_nodes.size();

  // Parents-first joint order (pre-order over the scene tree).
  Skeleton& sk = out.rig.rig.skeleton;
  absl::flat_hash_map<const aiNode*, int32_t> joint;
  std::map<std::string, int> name_uses;
  size_t approximated = 0;
  std::function<void(const aiNode*, int32_t)> order = [&](const aiNode* n, int32_t parent) {
    int32_t self = parent;
    if (wanted.contains(n)) {
      self = static_cast<int32_t>(sk.parents.size());
      joint[n] = self;
      std::string name = ValidUtf8(NodeName(n));
      if (name.empty()) name = absl::StrCat("node", self);
      if (const int uses = name_uses[name]++; uses > 0) name = absl::StrCat(name, "#", uses);
      sk.names.push_back(name);
      sk.parents.push_back(parent);
      bool exact;
      sk.rest_local.push_back(NearestSimilarity(ToAffine(n->mTransformation), &exact));
      if (!exact) ++approximated;
    }
    for (unsigned c = 0; c < n->mNumChildren; ++c) order(n->mChildren[c], self);
  };
  order(scene->mRootNode, -1);
  if (approximated) {
    note(absl::StrCat(approximated, " node transforms have non-uniform scale, shear or mirroring; "
                      "their rest transforms are approximated by similarities"));
  }
  // Rest world from the (possibly approximated) local transforms; inverse binds default to it.
  std::vector<Similarity> rest_world(sk.size());
  for (size_t j = 0; j < sk.size(); ++j) {
    rest_world[j] = sk.parents[j] < 0 ? sk.rest_local[j] : rest_world[sk.parents[j]] * sk.rest_local[j];
  }
  sk.inverse_bind.resize(sk.size());
  std::vector<bool> bind_set(sk.size(), false);
  for (size_t j = 0; j < sk.size(); ++j) sk.inverse_bind[j] = Inverse(rest_world[j].Matrix());

  // Meshes.
  Rig& rig = out.rig.rig;
  WeightsInput& w = out.rig.weights;
  w.offsets.push_back(0);
  bool all_normals = true, any_uv = false;
  for (auto [node, m] : meshes) {
    all_normals = all_normals && m->HasNormals();
    any_uv = any_uv || m->HasTextureCoords(0);
  }
  std::vector<float> uv;
  size_t unweighted = 0, bad_sums = 0;
  for (auto [node, m] : meshes) {
    const std::string mname = m->mName.length ? ValidUtf8(m->mName.C_Str()) : absl::StrCat("mesh", out.meshes.size());
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
      auto it = by_name.find(bone->mName.C_Str());
      const bool orphan = it == by_name.end();
      const int32_t j = orphan ? own : joint.at(it->second);
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
  if (!all_normals) note("some meshes have no normals: normals dropped");
  rig.name = ValidUtf8(std::filesystem::path(path).stem().string());

  // Clips.
  for (unsigned a = 0; a < scene->mNumAnimations; ++a) {
    const aiAnimation* anim = scene->mAnimations[a];
    Clip clip;
    clip.name = anim->mName.length ? ValidUtf8(anim->mName.C_Str()) : absl::StrCat("clip", a);
    const double tps = anim->mTicksPerSecond > 0 ? anim->mTicksPerSecond : 25.0;
    clip.duration = std::max(0.0, anim->mDuration / tps);
    clip.tracks.resize(sk.size());
    size_t ignored = 0, repeated = 0, nonuniform = 0;
    for (unsigned c = 0; c < anim->mNumChannels; ++c) {
      const aiNodeAnim* ch = anim->mChannels[c];
      auto it = by_name.find(ch->mNodeName.C_Str());
      if (it == by_name.end() || !joint.contains(it->second)) {
        ++ignored;
        continue;
      }
      JointTrack& tr = clip.tracks[joint.at(it->second)];
      repeated += AddKeys(ch->mPositionKeys, ch->mNumPositionKeys, tps, tr.translation_times,
                          tr.translations, [](const aiVector3D& v) { return Eigen::Vector3d(v.x, v.y, v.z); });
      repeated += AddKeys(ch->mRotationKeys, ch->mNumRotationKeys, tps, tr.rotation_times, tr.rotations,
                          [](const aiQuaternion& q) { return Eigen::Quaterniond(q.w, q.x, q.y, q.z).normalized(); });
      repeated += AddKeys(ch->mScalingKeys, ch->mNumScalingKeys, tps, tr.scale_times, tr.scales,
                          [&](const aiVector3D& s) {
                            const double u = std::cbrt(std::abs(double(s.x) * s.y * s.z));
                            if (std::abs(s.x - u) > 1e-3 * u || std::abs(s.y - u) > 1e-3 * u ||
                                std::abs(s.z - u) > 1e-3 * u) {
                              ++nonuniform;
                            }
                            return u > 0 ? u : 1.0;
                          });
    }
    if (ignored) note(absl::StrCat("clip \"", clip.name, "\": ", ignored, " channels animate nodes that move no vertex; ignored"));
    if (repeated) note(absl::StrCat("clip \"", clip.name, "\": ", repeated, " keys at repeated times dropped"));
    if (nonuniform) note(absl::StrCat("clip \"", clip.name, "\": ", nonuniform, " non-uniform scale keys approximated by uniform scale"));
    if (anim->mNumMeshChannels || anim->mNumMorphMeshChannels) {
      note(absl::StrCat("clip \"", clip.name, "\": vertex/morph animation channels dropped"));
    }
    // The keys are the file's: a non-finite time or value (which sampling read past its keys
    // for, until 2026-12-03), a zero quaternion, a scale of 0 are refused here, naming them.
    if (auto st = ValidateClip(clip, sk.size()); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": clip \"", clip.name, "\": ", st.message()));
    }
    out.clips.push_back(std::move(clip));
  }
  return out;
}

}  // namespace sinew
