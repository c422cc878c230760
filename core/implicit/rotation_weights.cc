#include "core/implicit/rotation_weights.h"

#include <algorithm>
#include <cmath>

#include <Eigen/SparseCholesky>
#include <Eigen/SparseCore>

#include "absl/strings/str_cat.h"

#include "core/geometry/mesh_quality.h"
#include "core/implicit/bone_fields.h"

namespace sinew {
namespace {

Eigen::Vector3d Node(std::span<const float> rest, size_t i) {
  return Eigen::Vector3d(rest[3 * i], rest[3 * i + 1], rest[3 * i + 2]);
}

}  // namespace

absl::StatusOr<NodeWeights> BoneHeatWeights(const Rig& rig, std::span<const float> rest,
                                            std::span<const uint32_t> node_of_vertex,
                                            std::span<const uint32_t> ring_offsets, std::span<const uint32_t> ring,
                                            std::span<const float> cot, double mean_edge,
                                            const std::function<bool(double)>& progress) {
  const auto cancelled = [] { return absl::CancelledError("bone heat weights: cancelled"); };
  const size_t nn = rest.size() / 3, joints = rig.joint_count();
  if (rig.weights.offsets.empty()) return absl::FailedPreconditionError("bone heat weights need skinning weights");
  // The bones: the joints with skinning weight somewhere.
  std::vector<uint8_t> used(joints, 0);
  for (size_t e = 0; e < rig.weights.joints.size(); ++e) {
    if (rig.weights.weights[e] > 0) used[rig.weights.joints[e]] = 1;
  }
  // Bounded before the work: each node weighs every bone (distances, a sort, ray casts) and each
  // bone may need a solve over every node, on one thread (until 2026-12-03 a million nodes and
  // thousands of bones held a preparation thread for hours).
  const uint64_t bones = uint64_t(std::count(used.begin(), used.end(), uint8_t{1}));
  if (uint64_t(nn) * bones > kMaxBoneHeatPairs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "deformer.implicit.rotation_weights: harmonic weights for ", nn, " nodes x ", bones,
        " weighted bones; at most ", kMaxBoneHeatPairs, " node-bone pairs (use rotation_weights skinning)"));
  }
  // Their segments: to each child's bind position; a leaf's along its parent as far as its
  // piece reaches (bone_fields.h's LeafBoneEnd). Unlike the fields' bones, a segment does not run
  // on through children that own no piece (2026-12-05): such a chain's joints are bones here.
  auto segmentation = Segmentation(rig);
  if (!segmentation.ok()) return segmentation.status();
  std::vector<std::vector<uint32_t>> pieces(joints);
  for (size_t v = 0; v < rig.vertex_count(); ++v) pieces[size_t((*segmentation)[v])].push_back(uint32_t(v));
  const std::vector<Eigen::Vector3d> pos = JointBindPositions(rig);
  std::vector<std::vector<std::pair<Eigen::Vector3d, Eigen::Vector3d>>> segments(joints);
  for (size_t j = 0; j < joints; ++j) {
    const int p = rig.skeleton.parents[j];
    if (p >= 0) segments[size_t(p)].emplace_back(pos[size_t(p)], pos[j]);
  }
  for (size_t j = 0; j < joints; ++j) {
    if (segments[j].empty()) segments[j].emplace_back(pos[j], LeafBoneEnd(rig, pos, j, pieces[j]));
  }
  // Each node's nearest visible bone: the segment from the node to the bone's closest point
  // crosses no triangle but the node's own (BP07; where no bone is visible, the nearest one).
  // Its distance, floored at a thousandth of an edge, sets H.
  const RayCaster mesh(rig.positions, rig.triangles);
  std::vector<int32_t> nearest(nn, -1);
  std::vector<double> h(nn, 0);
  struct Candidate {
    double d;
    uint32_t j;
    Eigen::Vector3d q;
  };
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < nn; ++i) {
    // The nearest visible bones: half of the work (ray casts per node and bone).
    if (progress && i % 1024 == 0 && !progress(0.5 * double(i) / double(nn))) return cancelled();
    const Eigen::Vector3d p = Node(rest, i);
    candidates.clear();
    for (size_t j = 0; j < joints; ++j) {
      if (!used[j]) continue;
      Candidate c{1e300, uint32_t(j), p};
      for (const auto& [a, b] : segments[j]) {
        const Eigen::Vector3d q = ClosestOnSegment(p, a, b);
        if ((q - p).norm() < c.d) c = {(q - p).norm(), uint32_t(j), q};
      }
      candidates.push_back(c);
    }
    std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) { return a.d < b.d; });
    if (candidates.empty()) continue;
    const Candidate* pick = &candidates[0];
    for (const Candidate& c : candidates) {
      const Eigen::Vector3d dir = c.q - p;
      const double origin[3] = {p.x(), p.y(), p.z()}, direction[3] = {dir.x(), dir.y(), dir.z()};
      const double t = mesh.First(origin, direction, [&](uint32_t u) { return node_of_vertex[u] == i; });
      if (!(t < 1.0)) {
        pick = &c;
        break;
      }
    }
    nearest[i] = int32_t(pick->j);
    const double d = std::max(pick->d, 1e-3 * mean_edge);
    h[i] = 1.0 / (d * d);
  }
  // Barycentric areas (floored so that an isolated node still has a row of its own).
  std::vector<double> area(nn, 0);
  for (size_t t = 0; t < rig.triangle_count(); ++t) {
    const uint32_t a = node_of_vertex[rig.triangles[3 * t]], b = node_of_vertex[rig.triangles[3 * t + 1]],
                   c = node_of_vertex[rig.triangles[3 * t + 2]];
    const double s = (Node(rest, b) - Node(rest, a)).cross(Node(rest, c) - Node(rest, a)).norm() / 6;
    area[a] += s;
    area[b] += s;
    area[c] += s;
  }
  double mean_area = 0;
  for (double s : area) mean_area += s / double(nn);
  for (double& s : area) s = std::max(s, 1e-6 * mean_area + 1e-300);
  // L + A H.
  std::vector<Eigen::Triplet<double>> entries;
  entries.reserve(ring.size() + nn);
  for (size_t i = 0; i < nn; ++i) {
    double diag = area[i] * h[i];
    for (uint32_t r = ring_offsets[i]; r < ring_offsets[i + 1]; ++r) {
      entries.emplace_back(int(i), int(ring[r]), -double(cot[r]));
      diag += cot[r];
    }
    entries.emplace_back(int(i), int(i), diag);
  }
  Eigen::SparseMatrix<double> m(static_cast<Eigen::Index>(nn), static_cast<Eigen::Index>(nn));
  m.setFromTriplets(entries.begin(), entries.end());
  Eigen::SimplicialLDLT<Eigen::SparseMatrix<double>> solver(m);
  if (solver.info() != Eigen::Success) return absl::InternalError("bone heat weights: the factorisation failed");
  // One solve per bone that is nearest to some node; each node keeps its largest weights.
  struct Entry {
    float w;
    uint16_t j;
  };
  std::vector<Entry> top(nn * kMaxRotationWeights, Entry{0.f, 0});
  std::vector<uint8_t> count(nn, 0);
  Eigen::VectorXd rhs(nn);
  for (size_t j = 0; j < joints; ++j) {
    bool any = false;
    for (size_t i = 0; i < nn; ++i) {
      rhs[Eigen::Index(i)] = nearest[i] == int32_t(j) ? area[i] * h[i] : 0.0;
      any = any || nearest[i] == int32_t(j);
    }
    if (progress && !progress(0.5 + 0.5 * double(j) / double(joints))) return cancelled();
    if (!any) continue;
    const Eigen::VectorXd w = solver.solve(rhs);
    for (size_t i = 0; i < nn; ++i) {
      const float wi = float(std::clamp(w[Eigen::Index(i)], 0.0, 1.0));
      if (!(wi > 1e-4f)) continue;
      Entry* t = &top[i * kMaxRotationWeights];
      int k = count[i];
      if (k == kMaxRotationWeights) {
        if (!(wi > t[k - 1].w)) continue;
        --k;
      } else {
        ++count[i];
      }
      // Insert keeping the largest first (earlier joints first among equals).
      while (k > 0 && t[k - 1].w < wi) {
        t[k] = t[k - 1];
        --k;
      }
      t[k] = Entry{wi, uint16_t(j)};
    }
  }
  NodeWeights out;
  out.offsets.assign(1, 0);
  for (size_t i = 0; i < nn; ++i) {
    const Entry* t = &top[i * kMaxRotationWeights];
    double sum = 0;
    for (int k = 0; k < count[i]; ++k) sum += t[k].w;
    if (!(sum > 0)) {  // no weight above the floor: the nearest bone alone
      out.joints.push_back(uint16_t(std::max(nearest[i], 0)));
      out.weights.push_back(1.f);
    } else {
      for (int k = 0; k < count[i]; ++k) {
        out.joints.push_back(t[k].j);
        out.weights.push_back(float(t[k].w / sum));
      }
    }
    out.offsets.push_back(uint32_t(out.joints.size()));
  }
  return out;
}

}  // namespace sinew
