// Contact at a bent joint, measured on the skin (issue 15), for the cylinder and character
// tests: no measure uses a method's fields.
// - crossing: how far skin that clearly belongs to one piece (the parent or the child piece's
//   weight ≥ 0.95) ends up past the bisector plane of the bend, on the other piece's side;
// - contact crossing: how far such skin ends up past the surface where the two pieces meet.
//   That is the bisector plane only for pieces of one thickness. Where one is thinner (a forearm
//   against an upper arm, a tapering piece) the skins meet off it: two inner skins at angle θ
//   whose distances from their bones' axes are R1 and R2 cross (R1 − R2) / (2 cos(θ/2)) from the
//   plane, on the thinner piece's side (at a 150° bend, θ = 30°: 0.52 (R1 − R2)), and so does
//   the surface where a point is as deep inside one piece as inside the other. So: each piece's
//   rest skin (the triangles most of whose weight is the piece's) is posed rigidly with its bone;
//   a vertex of piece A at signed distances d_A, d_B from the two (negative inside, by winding
//   number) is (d_A − d_B) / 2 past the equal-depth surface. 0 for a vertex on that surface,
//   negative on its own side, half its depth in B for a vertex that went rigidly into B. Along a
//   line through both pieces (two slabs meeting) that is never more than the vertex's depth in B
//   (−d_B), and a vertex outside B has crossed nothing. Off such a line it can be: skin of A
//   bulging out of its piece beside the crease (along A's normal, where B's skin runs) grows d_A
//   without entering B, and (d_A − d_B) / 2 would count the bulge (seen on the Arm's finger
//   joints: 0.33 mesh units outside A, 0.04 outside B, 1.1 units on its own side of the
//   bisector). So a vertex counts min((d_A − d_B) / 2, −d_B): only inside B, and at most its depth
//   there. On the cylinders the two readings agree to 0.001 R;
// - inside: vertices inside the deformed skin deeper than a tenth of an edge
//   (core/geometry/mesh_quality.h), and the deepest;
// - crease inside: of those, the ones that were not inside the rest skin (MeshQuality's new
//   inside vertices) and lie within two radii of the joint: the bend's own folds. A character
//   whose meshes overlap at rest (clothes over a body) has vertices inside that no pose made, and
//   a bend can also push a far part into another (BCN_Epileptic's hand into its thigh at a 90°
//   elbow) — a collision of the pose, not a fold of the joint, and the same under every method;
// - crease contact crossing: the contact crossing of the vertices within two radii of the joint
//   (BCN_Epileptic's hand enters its chest at a 150° elbow, five radii from the joint: the whole
//   reading is that collision, the crease one is the elbow's).
// Each maximum also names its vertex (-1: none), for diagnostics.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "core/geometry/mesh_quality.h"
#include "core/geometry/winding_number.h"
#include "core/rig/rig.h"
#include "core/rig/transform.h"

namespace sinew::testing {

struct ContactSkin {
  double crossing = 0;  // mesh units
  double contact_crossing = 0;  // mesh units (0: none past the surface, or not measured)
  double crease_contact_crossing = 0;  // mesh units, within two radii of the joint
  uint32_t inside = 0;
  double depth = 0;     // deepest inside vertex, mesh units (0: none)
  uint32_t crease_inside = 0;  // (measured with RigidPieces only)
  double crease_depth = 0;     // mesh units (0: none)
  int64_t contact_vertex = -1, crease_contact_vertex = -1, crease_vertex = -1;  // behind each maximum
};

// A piece's rest skin posed rigidly: the triangles whose vertices' summed weight is more the
// piece's than the other's, over every rest vertex moved by `t`; its nearest-triangle and
// winding-number trees (core/geometry).
class PosedPiece {
 public:
  PosedPiece(const Rig& rig, std::span<const double> weight, std::span<const double> other, const Affine34d& t)
      : positions_(Posed(rig, t)),
        triangles_(Triangles(rig, weight, other)),
        nearest_(positions_, triangles_),
        winding_(positions_, triangles_) {}
  PosedPiece(const PosedPiece&) = delete;  // the trees point into the vectors
  PosedPiece& operator=(const PosedPiece&) = delete;

  // Negative inside (winding number above ½; the piece's skin is open where it meets the other).
  double SignedDistance(const Eigen::Vector3d& x) const {
    const double d = nearest_.Nearest(x.data(), [](uint32_t) { return false; });
    return winding_(x) > 0.5 ? -d : d;
  }

 private:
  static std::vector<float> Posed(const Rig& rig, const Affine34d& t) {
    std::vector<float> out(rig.positions.size());
    for (size_t v = 0; v < rig.vertex_count(); ++v) {
      const Eigen::Vector3d x(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
      const Eigen::Vector3d y = t.leftCols<3>() * x + t.col(3);
      for (int k = 0; k < 3; ++k) out[3 * v + k] = float(y[k]);
    }
    return out;
  }
  static std::vector<uint32_t> Triangles(const Rig& rig, std::span<const double> weight, std::span<const double> other) {
    std::vector<uint32_t> out;
    for (size_t f = 0; f + 2 < rig.triangles.size(); f += 3) {
      double mine = 0, theirs = 0;
      for (int k = 0; k < 3; ++k) {
        mine += weight[rig.triangles[f + k]];
        theirs += other[rig.triangles[f + k]];
      }
      if (mine > theirs) out.insert(out.end(), {rig.triangles[f], rig.triangles[f + 1], rig.triangles[f + 2]});
    }
    return out;
  }

  std::vector<float> positions_;
  std::vector<uint32_t> triangles_;
  RayCaster nearest_;
  WindingNumberTree winding_;
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

// The pieces' rigid poses for the contact crossing: the skinning transforms of a joint of each
// (the parent piece's and the child piece's) in the measured pose. `reach`: vertices farther than
// this on their own side of the bisector plane are taken not to be past the contact surface (its
// offset is below a piece's radius).
struct RigidPieces {
  Affine34d parent, child;
  double reach = 0;
};

// `pivot` the joint, `parent_dir` the parent bone's direction into it, `child_dir` the posed
// child bone's direction out of it (both unit). `rigid`: also the contact crossing. `quality`:
// the rig's MeshQualityMeasure, which measures the rest mesh when made, so a caller measuring many
// poses of one rig makes it once (null: one is made here).
inline ContactSkin MeasureContact(const Rig& rig, std::span<const float> out, const Eigen::Vector3d& pivot,
                                  const Eigen::Vector3d& parent_dir, const Eigen::Vector3d& child_dir,
                                  std::span<const double> parent_weight, std::span<const double> child_weight,
                                  const RigidPieces* rigid = nullptr, const MeshQualityMeasure* quality = nullptr) {
  const Eigen::Vector3d n = (parent_dir + child_dir).normalized();  // from the parent's side to the child's
  ContactSkin s;
  for (size_t v = 0; v < rig.vertex_count(); ++v) {
    const Eigen::Vector3d x(out[3 * v], out[3 * v + 1], out[3 * v + 2]);
    const double side = n.dot(x - pivot);
    if (parent_weight[v] >= 0.95) s.crossing = std::max(s.crossing, side);  // the parent's skin past the plane
    if (child_weight[v] >= 0.95) s.crossing = std::max(s.crossing, -side);  // the child's
  }
  if (rigid) {
    const PosedPiece parent(rig, parent_weight, child_weight, rigid->parent);
    const PosedPiece child(rig, child_weight, parent_weight, rigid->child);
    for (size_t v = 0; v < rig.vertex_count(); ++v) {
      const bool of_parent = parent_weight[v] >= 0.95, of_child = child_weight[v] >= 0.95;
      if (!of_parent && !of_child) continue;
      const Eigen::Vector3d x(out[3 * v], out[3 * v + 1], out[3 * v + 2]);
      const double past_plane = of_parent ? n.dot(x - pivot) : -n.dot(x - pivot);
      if (past_plane < -rigid->reach) continue;
      const double own = (of_parent ? parent : child).SignedDistance(x);
      const double other = (of_parent ? child : parent).SignedDistance(x);
      const double crossed = std::min(0.5 * (own - other), -other);
      if (crossed > s.contact_crossing) {
        s.contact_crossing = crossed;
        s.contact_vertex = int64_t(v);
      }
      if (crossed > s.crease_contact_crossing && (x - pivot).norm() <= 2 * rigid->reach) {
        s.crease_contact_crossing = crossed;
        s.crease_contact_vertex = int64_t(v);
      }
    }
  }
  std::optional<MeshQualityMeasure> own;
  if (!quality) quality = &own.emplace(rig.positions, rig.triangles);
  const MeshQualityMeasure& measure = *quality;
  const MeshQuality q = measure.Measure(out, nullptr, rigid != nullptr);
  s.inside = q.inside_vertices;
  s.depth = q.inside_vertices ? q.max_depth : 0;
  if (rigid) {  // the new inside vertices (MeshQuality::new_inside_vertices) near the joint
    for (size_t v = 0; v < rig.vertex_count(); ++v) {
      if (!(q.depth[v] > q.depth_tolerance) || measure.inside_at_rest()[v]) continue;
      const Eigen::Vector3d x(out[3 * v], out[3 * v + 1], out[3 * v + 2]);
      if ((x - pivot).norm() > 2 * rigid->reach) continue;
      ++s.crease_inside;
      if (double(q.depth[v]) > s.crease_depth) {
        s.crease_depth = double(q.depth[v]);
        s.crease_vertex = int64_t(v);
      }
    }
  }
  return s;
}

}  // namespace sinew::testing
