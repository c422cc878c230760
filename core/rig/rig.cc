#include "core/rig/rig.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cage/cage_check.h"

namespace sinew {
namespace {

constexpr double kUnitTolerance = 1e-3;

bool Finite(float x) { return std::isfinite(x); }

template <class T>
size_t Bytes(const std::vector<T>& v) {
  return v.size() * sizeof(T);
}

absl::Status Invalid(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }

// Checks a packed xyz array: length multiple of 3 and every coordinate finite.
absl::Status CheckPoints(const std::vector<float>& xyz, absl::string_view field) {
  if (xyz.size() % 3 != 0) {
    return Invalid(absl::StrCat(field, ": ", xyz.size(), " floats is not a multiple of 3"));
  }
  for (size_t i = 0; i < xyz.size(); ++i) {
    if (!Finite(xyz[i])) {
      return Invalid(absl::StrFormat("%s[%d]: coordinate %c is not finite (%g)", field, i / 3,
                                     "xyz"[i % 3], xyz[i]));
    }
  }
  return absl::OkStatus();
}

// Checks a packed index array of `arity` indices per element, each < `bound`.
absl::Status CheckIndices(const std::vector<uint32_t>& idx, size_t arity, size_t bound,
                          absl::string_view field, absl::string_view what) {
  if (idx.size() % arity != 0) {
    return Invalid(absl::StrCat(field, ": ", idx.size(), " indices is not a multiple of ", arity));
  }
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] >= bound) {
      return Invalid(absl::StrFormat("%s[%d]: index %d is out of range (%d %s)", field,
                                     i / arity, idx[i], bound, what));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSimilarity(const Similarity& s, absl::string_view field) {
  const Eigen::Quaterniond& q = s.rotation;
  const double n = q.norm();
  if (!std::isfinite(n) || std::abs(n - 1.0) > kUnitTolerance) {
    return Invalid(absl::StrFormat("%s.rotation: quaternion (%g, %g, %g, %g) has norm %g, not 1",
                                   field, q.x(), q.y(), q.z(), q.w(), n));
  }
  if (!s.translation.allFinite()) {
    return Invalid(absl::StrCat(field, ".translation: not finite"));
  }
  if (!std::isfinite(s.scale) || s.scale <= 0) {
    return Invalid(absl::StrFormat("%s.scale: %g is not a positive finite number", field, s.scale));
  }
  return absl::OkStatus();
}

absl::Status BuildSkeleton(Skeleton& sk, const RigLimits& limits) {
  const size_t n = sk.parents.size();
  if (n > limits.max_joints) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rig.skeleton.joints: ", n, " joints exceed the limit of ", limits.max_joints));
  }
  if (sk.names.size() != n || sk.rest_local.size() != n) {
    return absl::InternalError("skeleton arrays of different lengths");
  }
  absl::flat_hash_set<std::string_view> seen;
  for (size_t j = 0; j < n; ++j) {
    const std::string field = absl::StrCat("rig.skeleton.joints[", j, "]");
    if (sk.names[j].empty()) return Invalid(absl::StrCat(field, ".name: empty"));
    if (!seen.insert(sk.names[j]).second) {
      return Invalid(absl::StrCat(field, ".name: \"", sk.names[j], "\" is not unique"));
    }
    const int32_t p = sk.parents[j];
    if (p < -1 || p >= static_cast<int32_t>(n) || p == static_cast<int32_t>(j)) {
      return Invalid(absl::StrCat(field, ".parent: ", p, " is not -1 or another joint's index (",
                                  n, " joints)"));
    }
    if (auto st = CheckSimilarity(sk.rest_local[j], absl::StrCat(field, ".rest")); !st.ok()) return st;
    sk.rest_local[j].rotation.normalize();
  }

  // Parents-first order by depth-first walk from the roots; joints never reached lie on a cycle.
  std::vector<std::vector<int32_t>> children(n);
  std::vector<int32_t> stack;
  for (size_t j = 0; j < n; ++j) {
    if (sk.parents[j] < 0) stack.push_back(static_cast<int32_t>(j));
    else children[sk.parents[j]].push_back(static_cast<int32_t>(j));
  }
  sk.order.clear();
  sk.order.reserve(n);
  while (!stack.empty()) {
    const int32_t j = stack.back();
    stack.pop_back();
    sk.order.push_back(j);
    for (auto it = children[j].rbegin(); it != children[j].rend(); ++it) stack.push_back(*it);
  }
  if (sk.order.size() != n) {
    std::vector<bool> reached(n, false);
    for (int32_t j : sk.order) reached[j] = true;
    for (size_t j = 0; j < n; ++j) {
      if (!reached[j]) {
        // The first unreached joint may hang below a cycle rather than be on it: its parents are
        // followed until one repeats, which is on the cycle (until 2026-12-07 the first was named).
        std::vector<bool> seen(n, false);
        size_t k = j;
        while (!seen[k]) {
          seen[k] = true;
          k = static_cast<size_t>(sk.parents[k]);  // unreached: never a root
        }
        return Invalid(absl::StrCat("rig.skeleton.joints[", k, "].parent: joint is on a cycle of parent links (",
                                    k, " -> ", sk.parents[k], " -> ... -> ", k, ")"));
      }
    }
  }

  // Rest world transforms, then inverse bind matrices when not supplied.
  std::vector<Similarity> world(n);
  for (int32_t j : sk.order) {
    const int32_t p = sk.parents[j];
    world[j] = p < 0 ? sk.rest_local[j] : world[p] * sk.rest_local[j];
  }
  if (sk.inverse_bind.empty()) {
    // Made from the rest transforms: a chain's product of scales past double's range is the rest
    // scales' fault, named so (until 2026-12-07 blamed on inverse_bind_matrices, which the client
    // had not sent).
    sk.inverse_bind.resize(n);
    for (size_t j = 0; j < n; ++j) {
      const Affine34d m = world[j].Matrix();
      const double scale = std::abs(world[j].scale);
      if (!m.allFinite() || !(scale > 1e-100 && scale < 1e100)) {
        sk.inverse_bind.clear();
        return Invalid(absl::StrFormat(
            "rig.skeleton.joints[%d].rest: its rest transform in model space (the product of its chain's rest "
            "scales, here %g) is out of range; give smaller scale changes along the chain",
            j, scale));
      }
      sk.inverse_bind[j] = Inverse(m);
    }
  } else if (sk.inverse_bind.size() != n) {
    return Invalid(absl::StrCat("rig.skeleton.inverse_bind_matrices: ", sk.inverse_bind.size(),
                                " matrices for ", n, " joints"));
  }
  sk.inverse_bind_is_similarity = true;
  for (size_t j = 0; j < n; ++j) {
    const Affine34d& m = sk.inverse_bind[j];
    const std::string field = absl::StrCat("rig.skeleton.inverse_bind_matrices[", j, "]");
    if (!m.allFinite()) return Invalid(absl::StrCat(field, ": not finite"));
    const Eigen::Matrix3d a = m.leftCols<3>();
    // Singular relative to its own scale (an absolute 1e-12 refused a well-conditioned bind scaled
    // by 1e-4, an armature in other units, and took a singular one scaled by 1e5, until 2026-12-03).
    const double det = a.determinant();
    const double size = a.norm() / std::sqrt(3.0);  // 1 for a rotation
    if (!(std::abs(det) > 1e-9 * size * size * size)) {
      return Invalid(absl::StrFormat("%s: singular (determinant %g for a matrix of size %g)", field, det, size));
    }
    bool similarity;
    NearestSimilarity(m, &similarity);
    sk.inverse_bind_is_similarity = sk.inverse_bind_is_similarity && similarity;
  }
  return absl::OkStatus();
}

absl::Status BuildWeights(const WeightsInput& in, size_t vertex_count, size_t joint_count,
                          const RigLimits& limits, SkinWeights& out, uint32_t& max_influences) {
  const bool fixed = in.offsets.empty();
  if (fixed && in.joints.empty() && in.weights.empty()) {
    out = {};
    max_influences = 0;
    return absl::OkStatus();  // a rig without weights (cage-only or point-set rigs)
  }
  if (joint_count == 0) {
    return Invalid("rig.weights: skinning weights given but the skeleton has no joints");
  }
  if (in.joints.size() != in.weights.size()) {
    return Invalid(absl::StrCat("rig.weights: ", in.joints.size(), " joint indices but ",
                                in.weights.size(), " weights"));
  }
  if (fixed) {
    const size_t k = in.influences_per_vertex;
    if (k == 0) {
      return Invalid("rig.weights.influences_per_vertex: must be > 0 when offsets is empty");
    }
    if (in.joints.size() != vertex_count * k) {
      return Invalid(absl::StrCat("rig.weights.joints: ", in.joints.size(), " entries, expected ",
                                  vertex_count, " vertices x ", k, " influences"));
    }
  } else {
    if (in.offsets.size() != vertex_count + 1) {
      return Invalid(absl::StrCat("rig.weights.offsets: ", in.offsets.size(),
                                  " entries, expected vertex_count + 1 = ", vertex_count + 1));
    }
    if (in.offsets[0] != 0) return Invalid("rig.weights.offsets[0]: must be 0");
    for (size_t v = 0; v < vertex_count; ++v) {
      if (in.offsets[v + 1] < in.offsets[v]) {
        return Invalid(absl::StrCat("rig.weights.offsets[", v + 1, "]: ", in.offsets[v + 1],
                                    " is less than offsets[", v, "] = ", in.offsets[v]));
      }
    }
    if (in.offsets[vertex_count] != in.joints.size()) {
      return Invalid(absl::StrCat("rig.weights.offsets[", vertex_count, "]: ",
                                  in.offsets[vertex_count], " but there are ", in.joints.size(),
                                  " entries"));
    }
  }
  auto begin = [&](size_t v) -> size_t {
    return fixed ? v * in.influences_per_vertex : in.offsets[v];
  };

  out.offsets.assign(vertex_count + 1, 0);
  out.joints.clear();
  out.weights.clear();
  out.joints.reserve(in.joints.size());
  out.weights.reserve(in.weights.size());
  max_influences = 0;
  // (weight, joint) of one vertex, in double: a joint repeated with weights near float32's range
  // merges past it (until 2026-12-01 in float: an infinite weight, accepted).
  std::vector<std::pair<double, uint16_t>> row;
  // A long row (more than kLinearMerge entries) is merged by sorting (joint, first entry, weight)
  // instead of a search per entry: until 2026-12-01 a row of 65 535 distinct joints cost 2e9
  // comparisons, on the worker pool that also deforms frames. The sums and the order of first
  // appearance are those of the search.
  constexpr size_t kLinearMerge = 32;
  struct Entry {
    uint16_t joint;
    uint32_t first;
    double weight;
  };
  std::vector<Entry> entries;
  for (size_t v = 0; v < vertex_count; ++v) {
    row.clear();
    entries.clear();
    const bool linear = begin(v + 1) - begin(v) <= kLinearMerge;
    double sum = 0;
    for (size_t e = begin(v); e < begin(v + 1); ++e) {
      const uint32_t j = in.joints[e];
      const float w = in.weights[e];
      if (j >= joint_count) {
        return Invalid(absl::StrFormat("rig.weights.joints[%d] (vertex %d): joint %d is out of "
                                       "range (%d joints)", e, v, j, joint_count));
      }
      if (!Finite(w) || w < 0) {
        return Invalid(absl::StrFormat("rig.weights.weights[%d] (vertex %d): weight %g is %s", e, v,
                                       w, Finite(w) ? "negative" : "not finite"));
      }
      sum += w;
      if (w == 0) continue;
      if (!linear) {
        entries.push_back({static_cast<uint16_t>(j), static_cast<uint32_t>(entries.size()), w});
        continue;
      }
      auto same = std::find_if(row.begin(), row.end(), [&](auto& r) { return r.second == j; });
      if (same != row.end()) same->first += w;  // repeated joint: merge
      else row.emplace_back(w, static_cast<uint16_t>(j));
    }
    if (!linear) {
      std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.joint < b.joint; });
      size_t kept = 0;
      for (size_t k = 0; k < entries.size(); ++k) {
        if (kept > 0 && entries[kept - 1].joint == entries[k].joint) {
          entries[kept - 1].weight += entries[k].weight;  // repeated joint: merge, in entry order
        } else {
          entries[kept++] = entries[k];
        }
      }
      entries.resize(kept);
      std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.first < b.first; });
      for (const Entry& en : entries) row.emplace_back(en.weight, en.joint);
    }
    if (!(sum > 0)) {
      return Invalid(absl::StrFormat("rig.weights (vertex %d): no influence with a positive weight", v));
    }
    if (!in.normalize && std::abs(sum - 1.0) > limits.weight_sum_tolerance) {
      return Invalid(absl::StrFormat(
          "rig.weights (vertex %d): weights sum to %.6g, not 1 within %g; set "
          "rig.normalize_weights to rescale them", v, sum, limits.weight_sum_tolerance));
    }
    // Influences below kNegligibleWeight of the vertex's sum are dropped (see rig.h: below float
    // resolution, and denormal arithmetic costs the skinning kernels a microcode assist each).
    std::erase_if(row, [&](const auto& r) { return double(r.first) < kNegligibleWeight * sum; });
    // Decreasing weight: the first influence is the dominant one (DQS pivot).
    std::stable_sort(row.begin(), row.end(), [](auto& a, auto& b) { return a.first > b.first; });
    for (auto& [w, j] : row) {
      out.joints.push_back(j);
      out.weights.push_back(static_cast<float>(w / sum));  // exact partition of unity
    }
    out.offsets[v + 1] = static_cast<uint32_t>(out.joints.size());
    max_influences = std::max<uint32_t>(max_influences, static_cast<uint32_t>(row.size()));
  }
  out.joints.shrink_to_fit();
  out.weights.shrink_to_fit();
  return absl::OkStatus();
}

// The sphere-mesh's bones, their cones, the forest they form and the optional per-bone and
// per-point arrays (see SphereMesh).
absl::Status CheckSphereMesh(const SphereMesh& sm, size_t points, size_t joints) {
  const size_t spheres = sm.sphere_count(), bones = sm.bone_count();
  if (!sm.triangles.empty()) {
    return Invalid("rig.sphere_mesh.triangles: triangle elements are not supported (baseline skinning uses bones "
                   "only); leave them out");
  }
  if (auto st = CheckIndices(sm.bones, 2, spheres, "rig.sphere_mesh.bones", "spheres"); !st.ok()) return st;
  if (bones == 0) {
    if (!sm.bone_joints.empty() || !sm.bone_frames.empty() || !sm.point_bones.empty()) {
      return Invalid("rig.sphere_mesh.bones: the sphere-mesh has per-bone or per-point data but no bones");
    }
    return absl::OkStatus();  // spheres without bones: refused at upload (server), not here
  }
  std::vector<int32_t> ended_by(spheres, -1);
  auto centre = [&](uint32_t i) {
    return Eigen::Vector3d(sm.centers[3 * i], sm.centers[3 * i + 1], sm.centers[3 * i + 2]);
  };
  for (size_t k = 0; k < bones; ++k) {
    const uint32_t a = sm.bones[2 * k], b = sm.bones[2 * k + 1];
    if (a == b) return Invalid(absl::StrFormat("rig.sphere_mesh.bones[%d]: both ends are sphere %d", k, a));
    const double length = (centre(b) - centre(a)).norm();
    const double dr = std::abs(double(sm.radii[a]) - double(sm.radii[b]));
    if (!(dr < length)) {
      return Invalid(absl::StrFormat(
          "rig.sphere_mesh.bones[%d]: sphere %d (radius %g) and sphere %d (radius %g) are %g apart: one holds the "
          "other, the bone has no cone (the radii must differ by less than the distance)",
          k, a, sm.radii[a], b, sm.radii[b], length));
    }
    if (ended_by[b] >= 0) {
      return Invalid(absl::StrFormat(
          "rig.sphere_mesh.bones[%d]: sphere %d already ends bone %d (bones run from the root outwards: a bone's "
          "first sphere is on the root side, and a sphere ends at most one bone)",
          k, b, ended_by[b]));
    }
    ended_by[b] = int32_t(k);
  }
  // A junction's bones are compared pairwise for each point near it (baseline's encoding, K² per
  // point): a sphere joins at most kMaxBonesAtASphere of them (until 2026-12-03 any number: one
  // sphere of 20 000 bones in a 1.7 MB rig held a preparation for hours).
  {
    std::vector<uint32_t> degree(spheres, 0);
    for (uint32_t i : sm.bones) {
      if (++degree[i] > kMaxBonesAtASphere) {
        return Invalid(absl::StrFormat("rig.sphere_mesh.bones: sphere %d joins more than %d bones (a junction takes at most %d)",
                                       i, kMaxBonesAtASphere, kMaxBonesAtASphere));
      }
    }
  }
  // Acyclic: walking from each bone to its parent (the bone ending at its first sphere) ends. Each
  // bone is walked once (a walk stops at a bone already known to reach a root): linear, where
  // walking every bone to its root took B²/2 steps, minutes for a chain of a million bones
  // (until 2026-12-03).
  std::vector<uint8_t> walked(bones, 0);  // 0: not yet, 1: on this walk, 2: reaches a root
  for (size_t k = 0; k < bones; ++k) {
    int32_t at = int32_t(k);
    while (at >= 0 && walked[size_t(at)] == 0) {
      walked[size_t(at)] = 1;
      at = ended_by[sm.bones[2 * size_t(at)]];
    }
    if (at >= 0 && walked[size_t(at)] == 1) {
      return Invalid(absl::StrFormat("rig.sphere_mesh.bones[%d]: the bones form a cycle through it", at));
    }
    for (at = int32_t(k); at >= 0 && walked[size_t(at)] == 1; at = ended_by[sm.bones[2 * size_t(at)]]) {
      walked[size_t(at)] = 2;
    }
  }
  std::vector<uint8_t> used(spheres, 0);
  for (uint32_t i : sm.bones) used[i] = 1;
  for (size_t i = 0; i < spheres; ++i) {
    if (!used[i]) return Invalid(absl::StrFormat("rig.sphere_mesh.centers[%d]: sphere %d is in no bone", i, i));
  }
  if (!sm.bone_joints.empty()) {
    if (sm.bone_joints.size() != bones) {
      return Invalid(absl::StrCat("rig.sphere_mesh.bone_joints: ", sm.bone_joints.size(), " entries for ", bones,
                                  " bones"));
    }
    if (auto st = CheckIndices(sm.bone_joints, 1, joints, "rig.sphere_mesh.bone_joints", "joints"); !st.ok()) {
      return st;
    }
  }
  if (!sm.bone_frames.empty()) {
    if (sm.bone_frames.size() != 3 * bones) {
      return Invalid(absl::StrCat("rig.sphere_mesh.bone_frames: ", sm.bone_frames.size() / 3, " directions for ",
                                  bones, " bones"));
    }
    if (auto st = CheckPoints(sm.bone_frames, "rig.sphere_mesh.bone_frames"); !st.ok()) return st;
    for (size_t k = 0; k < bones; ++k) {
      const Eigen::Vector3d axis = (centre(sm.bones[2 * k + 1]) - centre(sm.bones[2 * k])).normalized();
      const Eigen::Vector3d e(sm.bone_frames[3 * k], sm.bone_frames[3 * k + 1], sm.bone_frames[3 * k + 2]);
      if (!((e - e.dot(axis) * axis).norm() > 1e-3 * e.norm())) {
        return Invalid(absl::StrFormat(
            "rig.sphere_mesh.bone_frames[%d]: (%g, %g, %g) is zero or along the bone; it must point away from the axis",
            k, e.x(), e.y(), e.z()));
      }
    }
  }
  if (!sm.point_bones.empty()) {
    if (sm.point_bones.size() != points) {
      return Invalid(absl::StrCat("rig.sphere_mesh.point_bones: ", sm.point_bones.size(), " entries for ", points,
                                  " points"));
    }
    if (auto st = CheckIndices(sm.point_bones, 1, bones, "rig.sphere_mesh.point_bones", "bones"); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace

int32_t HeaviestJoint(const SkinWeights& w, size_t v) {
  if (v + 1 >= w.offsets.size()) return -1;
  int32_t best = -1;
  float most = 0;
  for (uint32_t e = w.offsets[v]; e < w.offsets[v + 1]; ++e) {
    if (best < 0 || w.weights[e] > most) {
      most = w.weights[e];
      best = w.joints[e];
    }
  }
  return best;
}

size_t Rig::ResidentBytes() const {
  size_t b = sizeof(Rig) + name.size() + Bytes(positions) + Bytes(triangles) + Bytes(normals);
  b += Bytes(skeleton.parents) + Bytes(skeleton.rest_local) + Bytes(skeleton.inverse_bind) +
       Bytes(skeleton.order);
  for (const auto& s : skeleton.names) b += sizeof(s) + s.size();
  b += Bytes(weights.offsets) + Bytes(weights.joints) + Bytes(weights.weights);
  for (const auto& c : cages) b += sizeof(c) + Bytes(c.positions) + Bytes(c.triangles);
  b += Bytes(sphere_mesh.centers) + Bytes(sphere_mesh.radii) + Bytes(sphere_mesh.bones) +
       Bytes(sphere_mesh.triangles) + Bytes(sphere_mesh.bone_joints) + Bytes(sphere_mesh.bone_frames) +
       Bytes(sphere_mesh.point_bones);
  b += Bytes(tet_mesh.positions) + Bytes(tet_mesh.tets);
  for (const auto& a : attributes) b += sizeof(a) + Bytes(a.values);
  for (const auto& p : precomputed) b += sizeof(p) + p.data.size();
  return b;
}

absl::Status CheckKnownAttribute(const AttributeMap& m, size_t n, size_t joint_count, const std::string& field) {
  const bool segmentation = m.name == "segmentation";
  if (!segmentation && m.name != "dqs_blend" && m.name != "pbs_jiggle") return absl::OkStatus();
  const std::string known = absl::StrCat(field, " (", m.name, ")");
  if (m.components != 1 || m.values.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(known, ": ", m.components, " components and ", m.values.size(),
                                                   " values; one value per vertex (", n, ")"));
  }
  for (size_t v = 0; v < n; ++v) {
    const float x = m.values[v];
    if (segmentation && !(x >= 0 && x < float(joint_count) && x == std::floor(x))) {
      return absl::InvalidArgumentError(absl::StrCat(known, ".values[", v, "]: ", x,
                                                     " is not a joint index (the rig has ", joint_count, " joints)"));
    }
    if (!segmentation && !(x >= 0 && x <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(known, ".values[", v, "]: ", x, " is outside [0, 1]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Rig> BuildRig(RigInput input, const RigLimits& limits) {
  Rig& rig = input.rig;
  if (auto st = CheckPoints(rig.positions, "rig.mesh.positions"); !st.ok()) return st;
  const size_t n = rig.vertex_count();
  if (n == 0) return Invalid("rig.mesh.positions: the mesh has no vertices");
  if (n > limits.max_vertices) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rig.mesh.positions: ", n, " vertices exceed the limit of ", limits.max_vertices));
  }
  if (auto st = CheckIndices(rig.triangles, 3, n, "rig.mesh.triangles", "vertices"); !st.ok()) {
    return st;
  }
  if (!rig.normals.empty()) {
    if (rig.normals.size() != rig.positions.size()) {
      return Invalid(absl::StrCat("rig.mesh.normals: ", rig.normals.size() / 3, " normals for ", n,
                                  " vertices"));
    }
    if (auto st = CheckPoints(rig.normals, "rig.mesh.normals"); !st.ok()) return st;
  }
  if (auto st = BuildSkeleton(rig.skeleton, limits); !st.ok()) return st;
  if (auto st = BuildWeights(input.weights, n, rig.joint_count(), limits, rig.weights,
                             rig.max_influences);
      !st.ok()) {
    return st;
  }

  for (size_t c = 0; c < rig.cages.size(); ++c) {
    const Cage& cage = rig.cages[c];
    const std::string field = absl::StrCat("rig.cages[", c, "]");
    if (auto st = CheckPoints(cage.positions, field + ".positions"); !st.ok()) return st;
    if (cage.vertex_count() < 4) return Invalid(field + ".positions: a cage needs >= 4 vertices");
    if (cage.triangles.size() < 12) return Invalid(field + ".triangles: a cage needs >= 4 faces");
    if (auto st = CheckIndices(cage.triangles, 3, cage.vertex_count(), field + ".triangles",
                               "cage vertices");
        !st.ok()) {
      return st;
    }
    if (auto st = CheckCageClosedAndOriented(cage, field); !st.ok()) return st;
    if (auto st = CheckCageEncloses(cage, rig.positions, field, "rig.mesh.positions"); !st.ok()) return st;
  }

  const SphereMesh& sm = rig.sphere_mesh;
  if (auto st = CheckPoints(sm.centers, "rig.sphere_mesh.centers"); !st.ok()) return st;
  const size_t spheres = sm.centers.size() / 3;
  if (sm.radii.size() != spheres) {
    return Invalid(absl::StrCat("rig.sphere_mesh.radii: ", sm.radii.size(), " radii for ", spheres,
                                " spheres"));
  }
  for (size_t i = 0; i < spheres; ++i) {
    if (!Finite(sm.radii[i]) || sm.radii[i] <= 0) {
      return Invalid(absl::StrFormat("rig.sphere_mesh.radii[%d]: %g is not a positive radius", i,
                                     sm.radii[i]));
    }
  }
  if (auto st = CheckSphereMesh(sm, n, rig.joint_count()); !st.ok()) return st;

  const TetMeshData& tm = rig.tet_mesh;
  if (auto st = CheckPoints(tm.positions, "rig.tet_mesh.positions"); !st.ok()) return st;
  if (tm.particle_count() > limits.max_vertices) {
    return absl::ResourceExhaustedError(absl::StrCat("rig.tet_mesh.positions: ", tm.particle_count(),
                                                     " particles exceed the limit of ", limits.max_vertices));
  }
  if (!tm.positions.empty() && tm.tets.empty()) return Invalid("rig.tet_mesh.tets: particles but no tetrahedra");
  if (auto st = CheckIndices(tm.tets, 4, tm.particle_count(), "rig.tet_mesh.tets", "particles"); !st.ok()) return st;
  for (size_t t = 0; t < tm.tet_count(); ++t) {
    const uint32_t* q = &tm.tets[4 * t];
    for (int a = 0; a < 4; ++a) {
      for (int b = a + 1; b < 4; ++b) {
        if (q[a] == q[b]) {
          return Invalid(absl::StrFormat("rig.tet_mesh.tets[%d]: particle %d appears twice (%d, %d, %d, %d)", t,
                                         q[a], q[0], q[1], q[2], q[3]));
        }
      }
    }
  }

  absl::flat_hash_set<std::string_view> attr_names;
  for (size_t a = 0; a < rig.attributes.size(); ++a) {
    const AttributeMap& m = rig.attributes[a];
    const std::string field = absl::StrCat("rig.attributes[", a, "]");
    if (m.name.empty()) return Invalid(field + ".name: empty");
    if (!attr_names.insert(m.name).second) {
      return Invalid(absl::StrCat(field, ".name: \"", m.name, "\" is not unique"));
    }
    if (m.components == 0) return Invalid(field + ".components: must be >= 1");
    if (m.values.size() != n * m.components) {
      return Invalid(absl::StrCat(field, ".values: ", m.values.size(), " values, expected ", n,
                                  " vertices x ", m.components));
    }
    for (size_t i = 0; i < m.values.size(); ++i) {
      if (!Finite(m.values[i])) {
        return Invalid(absl::StrFormat("%s.values[%d] (vertex %d): not finite", field, i,
                                       i / m.components));
      }
    }
    // So that a rig its method would refuse fails at upload, not at session creation.
    if (auto st = CheckKnownAttribute(m, n, rig.joint_count(), field); !st.ok()) return st;
  }
  for (size_t p = 0; p < rig.precomputed.size(); ++p) {
    if (rig.precomputed[p].deformer.empty()) {
      return Invalid(absl::StrCat("rig.precomputed[", p, "].deformer: empty"));
    }
  }

  Eigen::Map<const Eigen::Matrix3Xf> pts(rig.positions.data(), 3, static_cast<Eigen::Index>(n));
  rig.bbox_min = pts.rowwise().minCoeff();
  rig.bbox_max = pts.rowwise().maxCoeff();
  return std::move(rig);
}

std::string NotSimilarity(const Skeleton& skeleton) {
  for (size_t j = 0; j < skeleton.inverse_bind.size(); ++j) {
    bool similarity;
    NearestSimilarity(skeleton.inverse_bind[j], &similarity);
    if (similarity) continue;
    return absl::StrCat("inverse_bind_matrices[", j, "] ",
                        skeleton.inverse_bind[j].leftCols<3>().determinant() < 0
                            ? "is a reflection (negative determinant)"
                            : "has shear or non-uniform scale");
  }
  return "";
}

}  // namespace sinew
