#include "core/implicit/bone_fields.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace sinew {
namespace {

Eigen::Vector3d Point(const std::vector<float>& xyz, size_t i) {
  return Eigen::Vector3d(xyz[3 * i], xyz[3 * i + 1], xyz[3 * i + 2]);
}

// Area-weighted vertex normals of the mesh (unit; zero for isolated vertices).
std::vector<Eigen::Vector3d> VertexNormals(const Rig& rig) {
  std::vector<Eigen::Vector3d> n(rig.vertex_count(), Eigen::Vector3d::Zero());
  if (rig.normals.size() == rig.positions.size()) {
    for (size_t i = 0; i < n.size(); ++i) n[i] = Point(rig.normals, i).normalized();
    return n;
  }
  for (size_t t = 0; t < rig.triangle_count(); ++t) {
    const uint32_t* f = &rig.triangles[3 * t];
    const Eigen::Vector3d a = Point(rig.positions, f[0]), b = Point(rig.positions, f[1]), c = Point(rig.positions, f[2]);
    const Eigen::Vector3d w = (b - a).cross(c - a);  // twice the area, along the normal
    for (int k = 0; k < 3; ++k) n[f[k]] += w;
  }
  for (auto& v : n) {
    if (v.norm() > 0) v.normalize();
  }
  return n;
}

}  // namespace

Eigen::Vector3d ClosestOnSegment(const Eigen::Vector3d& x, const Eigen::Vector3d& a, const Eigen::Vector3d& b) {
  const Eigen::Vector3d ab = b - a;
  const double t = std::clamp((x - a).dot(ab) / std::max(ab.squaredNorm(), 1e-300), 0.0, 1.0);
  return a + t * ab;
}

std::vector<Eigen::Vector3d> JointBindPositions(const Rig& rig) {
  std::vector<Eigen::Vector3d> pos(rig.joint_count());
  for (size_t j = 0; j < pos.size(); ++j) pos[j] = Inverse(rig.skeleton.inverse_bind[j]).col(3);
  return pos;
}

Eigen::Vector3d LeafBoneEnd(const Rig& rig, std::span<const Eigen::Vector3d> pos, size_t j,
                            std::span<const uint32_t> piece) {
  const int p = rig.skeleton.parents[j];
  Eigen::Vector3d axis = p >= 0 ? Eigen::Vector3d(pos[j] - pos[size_t(p)]) : Eigen::Vector3d(Eigen::Vector3d::UnitX());
  if (axis.norm() < 1e-12) axis = Eigen::Vector3d::UnitX();
  axis.normalize();
  double far = 0;
  for (uint32_t v : piece) far = std::max(far, (Point(rig.positions, v) - pos[j]).dot(axis));
  return pos[j] + std::max(far, 1e-6) * axis;
}

bool HasSegmentationAttribute(const Rig& rig) {
  return std::any_of(rig.attributes.begin(), rig.attributes.end(),
                     [](const AttributeMap& m) { return m.name == "segmentation"; });
}

absl::StatusOr<std::vector<int32_t>> Segmentation(const Rig& rig) {
  const size_t n = rig.vertex_count();
  std::vector<int32_t> joint(n);
  for (size_t a = 0; a < rig.attributes.size(); ++a) {
    const AttributeMap& m = rig.attributes[a];
    if (m.name != "segmentation") continue;
    const std::string field = absl::StrCat("rig.attributes[", a, "]");
    if (auto st = CheckKnownAttribute(m, n, rig.joint_count(), field); !st.ok()) return st;
    for (size_t v = 0; v < n; ++v) joint[v] = int32_t(m.values[v]);
    return joint;
  }
  if (rig.weights.offsets.empty()) {
    return absl::FailedPreconditionError("implicit fields need skinning weights or a segmentation attribute");
  }
  // The influence with the largest weight is stored first.
  for (size_t v = 0; v < n; ++v) joint[v] = rig.weights.joints[rig.weights.offsets[v]];
  return joint;
}

absl::StatusOr<std::vector<BoneField>> FitBoneFields(const Rig& rig, const BoneFieldOptions& options) {
  const size_t n = rig.vertex_count(), joints = rig.joint_count();
  auto segmentation = Segmentation(rig);
  if (!segmentation.ok()) return segmentation.status();
  std::vector<std::vector<uint32_t>> pieces(joints);
  for (size_t v = 0; v < n; ++v) pieces[(*segmentation)[v]].push_back(static_cast<uint32_t>(v));
  // Until 2026-12-02 up to 65 535 fields were fitted and baked: 34 GB of grids.
  const size_t owning = size_t(std::count_if(pieces.begin(), pieces.end(), [](const auto& p) { return p.size() >= 8; }));
  if (owning > options.max_fields) {
    return absl::ResourceExhaustedError(absl::StrCat("implicit skinning: ", owning,
                                                     " bones own 8 vertices or more; at most ", options.max_fields,
                                                     " bone fields (512 KB each) are taken"));
  }
  const std::vector<Eigen::Vector3d> normals = VertexNormals(rig);
  // Bone ends: the joint's bind position and its first child's (a leaf extends along its
  // parent's direction to its piece's farthest projection).
  const std::vector<Eigen::Vector3d> pos = JointBindPositions(rig);
  std::vector<int> child(joints, -1);
  for (size_t j = 0; j < joints; ++j) {
    const int p = rig.skeleton.parents[j];
    if (p >= 0 && child[p] < 0) child[p] = static_cast<int>(j);
  }

  std::vector<BoneField> fields;
  for (size_t j = 0; j < joints; ++j) {
    const auto& piece = pieces[j];
    if (piece.size() < 8) continue;
    BoneField field;
    field.joint = static_cast<int>(j);
    field.b0 = pos[j];
    field.b1 = child[j] >= 0 ? pos[child[j]] : LeafBoneEnd(rig, pos, j, piece);
    const Eigen::Vector3d ab = field.b1 - field.b0;
    const double len2 = std::max(ab.squaredNorm(), 1e-300);
    // Candidates: the piece's vertices away from the joints (Eq. 4.2).
    std::vector<uint32_t> candidates;
    for (uint32_t v : piece) {
      const double t = (Point(rig.positions, v) - field.b0).dot(ab) / len2;
      if (t > options.cull && t < 1 - options.cull && normals[v].norm() > 0) candidates.push_back(v);
    }
    if (candidates.size() < size_t(std::max(options.min_samples, 4))) continue;
    // Poisson disk by dart throwing over the candidates in a seeded order: the minimum distance
    // is halved until about the target count is reached.
    std::vector<uint32_t> order = candidates;
    std::shuffle(order.begin(), order.end(), std::mt19937(options.seed + static_cast<uint32_t>(j)));
    Eigen::Vector3d lo = Point(rig.positions, order[0]), hi = lo;
    for (uint32_t v : order) {
      lo = lo.cwiseMin(Point(rig.positions, v));
      hi = hi.cwiseMax(Point(rig.positions, v));
    }
    std::vector<uint32_t> chosen;
    for (double rmin = (hi - lo).norm() / 2; rmin > 1e-12; rmin *= 0.8) {
      chosen.clear();
      for (uint32_t v : order) {
        const Eigen::Vector3d x = Point(rig.positions, v);
        bool far_enough = true;
        for (uint32_t c : chosen) {
          if ((Point(rig.positions, c) - x).norm() < rmin) {
            far_enough = false;
            break;
          }
        }
        if (far_enough) chosen.push_back(v);
        if (static_cast<int>(chosen.size()) > options.target_samples) break;
      }
      if (static_cast<int>(chosen.size()) >= options.target_samples || chosen.size() == order.size()) break;
    }
    // Closure points on the axis, at each end's distance to the nearest mesh vertex (§2.2).
    const Eigen::Vector3d a = ab.normalized();
    double s0 = 1e300, s1 = 1e300;
    for (uint32_t v : piece) {
      s0 = std::min(s0, (Point(rig.positions, v) - field.b0).norm());
      s1 = std::min(s1, (Point(rig.positions, v) - field.b1).norm());
    }
    Eigen::Matrix3Xd centers(3, chosen.size() + 2), nrm(3, chosen.size() + 2);
    for (size_t k = 0; k < chosen.size(); ++k) {
      centers.col(k) = Point(rig.positions, chosen[k]);
      nrm.col(k) = normals[chosen[k]];
    }
    centers.col(chosen.size()) = field.b0 - s0 * a;
    nrm.col(chosen.size()) = -a;
    centers.col(chosen.size() + 1) = field.b1 + s1 * a;
    nrm.col(chosen.size() + 1) = a;
    auto hrbf = Hrbf::Fit(centers, nrm);
    if (!hrbf.ok()) {
      return absl::Status(hrbf.status().code(), absl::StrCat("bone ", j, " (", rig.skeleton.names[j], "): ", hrbf.status().message()));
    }
    if (static_cast<int>(chosen.size()) < options.min_samples) continue;
    field.hrbf = std::move(*hrbf);
    field.samples = chosen.size();
    for (uint32_t c : chosen) {
      const Eigen::Vector3d x = Point(rig.positions, c);
      field.radius = std::max(field.radius, (x - ClosestOnSegment(x, field.b0, field.b1)).norm());
    }
    fields.push_back(std::move(field));
  }
  return fields;
}

}  // namespace sinew
