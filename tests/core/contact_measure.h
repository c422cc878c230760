// Contact at a bent joint, measured on the skin (issue 15), for the cylinder and character
// tests: neither measure uses a method's fields.
// - crossing: how far skin that clearly belongs to one piece (the parent or the child piece's
//   weight ≥ 0.95) ends up past the bisector plane of the bend, on the other piece's side;
// - inside: vertices inside the deformed skin deeper than a tenth of an edge
//   (core/geometry/mesh_quality.h), and the deepest.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "core/geometry/mesh_quality.h"
#include "core/rig/rig.h"

namespace sinew::testing {

struct ContactSkin {
  double crossing = 0;  // mesh units
  uint32_t inside = 0;
  double depth = 0;     // deepest inside vertex, mesh units (0: none)
};

// The weight of a piece per vertex: the summed weights of the joints `in_piece` names.
template <class Pred>
std::vector<double> PieceWeight(const Rig& rig, Pred in_piece) {
  std::vector<double> w(rig.vertex_count(), 0);
  const SkinWeights& s = rig.weights;
  for (size_t v = 0; v < w.size(); ++v) {
    for (uint32_t e = s.offsets[v]; e < s.offsets[v + 1]; ++e) {
      if (in_piece(s.joints[e])) w[v] += s.weights[e];
    }
  }
  return w;
}

// `pivot` the joint, `parent_dir` the parent bone's direction into it, `child_dir` the posed
// child bone's direction out of it (both unit).
inline ContactSkin MeasureContact(const Rig& rig, std::span<const float> out, const Eigen::Vector3d& pivot,
                                  const Eigen::Vector3d& parent_dir, const Eigen::Vector3d& child_dir,
                                  std::span<const double> parent_weight, std::span<const double> child_weight) {
  const Eigen::Vector3d n = (parent_dir + child_dir).normalized();  // from the parent's side to the child's
  ContactSkin s;
  for (size_t v = 0; v < rig.vertex_count(); ++v) {
    const Eigen::Vector3d x(out[3 * v], out[3 * v + 1], out[3 * v + 2]);
    const double side = n.dot(x - pivot);
    if (parent_weight[v] >= 0.95) s.crossing = std::max(s.crossing, side);  // the parent's skin past the plane
    if (child_weight[v] >= 0.95) s.crossing = std::max(s.crossing, -side);  // the child's
  }
  const MeshQuality q = MeasureMeshQuality(rig.positions, out, rig.triangles, nullptr);
  s.inside = q.inside_vertices;
  s.depth = q.inside_vertices ? q.max_depth : 0;
  return s;
}

}  // namespace sinew::testing
