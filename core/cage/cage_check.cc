#include "core/cage/cage_check.h"

#include <algorithm>
#include <vector>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/geometry/mesh_quality.h"
#include "core/geometry/triangle.h"
#include "core/geometry/winding_number.h"

namespace sinew {
namespace {

Eigen::Vector3d Vertex(const Cage& c, uint32_t i) {
  return Eigen::Vector3d(c.positions[3 * i], c.positions[3 * i + 1], c.positions[3 * i + 2]);
}

}  // namespace

absl::Status CheckCageVerticesOnFaces(const Cage& cage, const std::string& field) {
  std::vector<bool> on_face(cage.vertex_count(), false);
  for (uint32_t v : cage.triangles) {
    if (v < on_face.size()) on_face[v] = true;
  }
  if (auto it = std::find(on_face.begin(), on_face.end(), false); it != on_face.end()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".positions: vertex ", it - on_face.begin(),
                                                   " is on no triangle; remove it from the cage"));
  }
  return absl::OkStatus();
}

absl::Status CheckCageClosedAndOriented(const Cage& cage, const std::string& field) {
  // Directed edge (a, b) -> face using it; a closed, consistently oriented surface uses every
  // directed edge once and its reverse once.
  absl::flat_hash_map<uint64_t, uint32_t> directed;
  const size_t faces = cage.triangles.size() / 3;
  for (size_t f = 0; f < faces; ++f) {
    const uint32_t* t = &cage.triangles[3 * f];
    if (t[0] == t[1] || t[1] == t[2] || t[2] == t[0]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.triangles[%d]: degenerate face (%d, %d, %d)", field, f, t[0], t[1], t[2]));
    }
    for (int k = 0; k < 3; ++k) {
      const uint64_t key = (uint64_t{t[k]} << 32) | t[(k + 1) % 3];
      if (auto [it, inserted] = directed.emplace(key, static_cast<uint32_t>(f)); !inserted) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s.triangles[%d]: edge %d->%d is also used in the same direction by face %d: the "
            "cage is not consistently oriented (or not manifold)",
            field, f, t[k], t[(k + 1) % 3], it->second));
      }
    }
  }
  for (const auto& [key, f] : directed) {
    const uint64_t reverse = (key << 32) | (key >> 32);
    if (!directed.contains(reverse)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.triangles[%d]: edge %d->%d has no opposite face: the cage is not closed", field, f,
          uint32_t(key >> 32), uint32_t(key & 0xffffffffu)));
    }
  }
  double volume = 0;  // divergence theorem
  for (size_t f = 0; f < faces; ++f) {
    const uint32_t* t = &cage.triangles[3 * f];
    volume += Vertex(cage, t[0]).dot(Vertex(cage, t[1]).cross(Vertex(cage, t[2]))) / 6;
  }
  if (!(volume > 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.triangles: the faces point inwards (signed volume %g); reverse their vertex order",
        field, volume));
  }
  return absl::OkStatus();
}

double CageWindingNumber(const Cage& cage, const Eigen::Vector3d& x) {
  // Van Oosterom–Strackee solid angle of each face, summed, over 4π.
  double total = 0;
  const size_t faces = cage.triangles.size() / 3;
  for (size_t f = 0; f < faces; ++f) {
    const uint32_t* t = &cage.triangles[3 * f];
    total += SolidAngle(Vertex(cage, t[0]) - x, Vertex(cage, t[1]) - x, Vertex(cage, t[2]) - x);
  }
  return total / (4 * std::numbers::pi);
}

absl::Status CheckCageEncloses(const Cage& cage, std::span<const float> points, const std::string& field,
                               const std::string& points_field) {
  Eigen::Map<const Eigen::Matrix3Xf> v(cage.positions.data(), 3, static_cast<Eigen::Index>(cage.vertex_count()));
  const Eigen::Vector3d lo = v.rowwise().minCoeff().cast<double>(), hi = v.rowwise().maxCoeff().cast<double>();
  // The exact sum costs every face per point (about 30 ns a pair): a million points in a cage of
  // 100 000 faces took most of an hour, on the upload's thread. Past kExactWork face-point pairs
  // the fast hierarchy answers (O(log faces) per point; nodes near the point are summed exactly,
  // a far node's error is about (radius / distance)² of its share), and the exact sum decides
  // wherever it reads within 0.25 of ½. That is not a proven bound: a cage folded in many
  // layers around a point could add far nodes' errors past it. Points that read near ½ (on or
  // within about an edge of the cage) each cost the exact sum, as before.
  constexpr double kExactWork = 4e6;
  const size_t n = points.size() / 3;
  std::optional<WindingNumberTree> tree;
  if (double(n) * double(cage.triangles.size() / 3) > kExactWork) tree.emplace(cage.positions, cage.triangles);
  // A point on the cage's surface is enclosed: its winding number reads 0, ½ or 1 there by the
  // sign of a zero (until 2026-12-07 a mesh touching its cage's -x face was refused where the
  // mirror one was taken). "On" is within float rounding of a face: positions arrive as floats,
  // and a point placed on a slanted face lands up to half an ulp of its coordinates off it (until
  // 2026-12-07 the tolerance was 1e-12 of the diagonal, and such a mesh was refused); the
  // deformers take points a hair outside (MVC's and Green's extensions). Nearest face from a
  // hierarchy, built on first need: until 2026-12-07 each such point cost every face twice, and a
  // mesh used as its own cage (every point on it) took 8 s at 12 642 vertices, minutes past that.
  const double scale = std::max(lo.cwiseAbs().maxCoeff(), hi.cwiseAbs().maxCoeff());
  const double on_tolerance = std::max(1e-12 * (hi - lo).norm(), 4 * double(std::numeric_limits<float>::epsilon()) * scale);
  std::optional<RayCaster> faces;
  auto on_cage = [&](const Eigen::Vector3d& x) {
    if (!faces) faces.emplace(cage.positions, cage.triangles);
    return faces->Nearest(x.data(), [](uint32_t) { return false; }) <= on_tolerance;
  };
  for (size_t i = 0; i < n; ++i) {
    const Eigen::Vector3d x(points[3 * i], points[3 * i + 1], points[3 * i + 2]);
    // Outside the cage's bounding box (by more than the tolerance) means outside the cage;
    // otherwise the winding number.
    const bool in_box = (x.array() >= lo.array() - on_tolerance).all() && (x.array() <= hi.array() + on_tolerance).all();
    double w = 0.0;
    if (in_box) {
      if (!tree) {
        w = CageWindingNumber(cage, x);
      } else if (w = (*tree)(x); !(std::abs(w - 0.5) > 0.25)) {
        w = on_cage(x) ? 1.0 : CageWindingNumber(cage, x);  // near ½: on the cage, or the exact sum
      }
    }
    if (!(w > 0.5) && in_box && on_cage(x)) w = 1.0;
    if (!(w > 0.5)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s[%d]: point (%g, %g, %g) lies outside %s (winding number %.3f); the cage must enclose "
          "the mesh", points_field, i, x.x(), x.y(), x.z(), field, w));
    }
  }
  return absl::OkStatus();
}

}  // namespace sinew
