#include "core/geometry/mesh_quality.h"

#include <algorithm>
#include <functional>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>

#include <Eigen/Geometry>

#include "core/geometry/triangle.h"
#include "core/geometry/weld.h"
#include "core/geometry/winding_number.h"
#include "core/util/union_find.h"
#include "absl/container/flat_hash_map.h"

namespace sinew {
namespace {

constexpr uint32_t kLeafTriangles = 4;

Eigen::Vector3d P(std::span<const float> p, uint32_t i) {
  return Eigen::Vector3d(p[3 * i], p[3 * i + 1], p[3 * i + 2]);
}

// Möller–Trumbore: t of the hit of origin + t·dir with triangle (a, b, c), or +inf.
double RayTriangle(const Eigen::Vector3d& o, const Eigen::Vector3d& d, const Eigen::Vector3d& a,
                   const Eigen::Vector3d& b, const Eigen::Vector3d& c) {
  const Eigen::Vector3d e1 = b - a, e2 = c - a;
  const Eigen::Vector3d h = d.cross(e2);
  const double det = e1.dot(h);
  const double scale = e1.norm() * e2.norm() * d.norm();
  if (std::abs(det) <= 1e-14 * scale) return INFINITY;  // parallel
  const double inv = 1 / det;
  const Eigen::Vector3d s = o - a;
  // A small slack on the barycentric bounds: a ray through a vertex or along an edge must hit
  // one of the triangles around it, whatever the rounding.
  constexpr double kSlack = 1e-9;
  const double u = inv * s.dot(h);
  if (u < -kSlack || u > 1 + kSlack) return INFINITY;
  const Eigen::Vector3d q = s.cross(e1);
  const double v = inv * d.dot(q);
  if (v < -kSlack || u + v > 1 + kSlack) return INFINITY;
  const double t = inv * e2.dot(q);
  return t > 0 ? t : INFINITY;
}

// Squared distance from p to a box.
double PointBox2(const double p[3], const float lo[3], const float hi[3]) {
  double d2 = 0;
  for (int k = 0; k < 3; ++k) {
    const double e = std::max({double(lo[k]) - p[k], 0.0, p[k] - double(hi[k])});
    d2 += e * e;
  }
  return d2;
}


}  // namespace

double MeshVolume(std::span<const float> positions, std::span<const uint32_t> triangles) {
  const size_t n = positions.size() / 3;
  if (n == 0) return 0;
  Eigen::Vector3d o = Eigen::Vector3d::Zero();
  for (size_t i = 0; i < n; ++i) o += P(positions, uint32_t(i));
  o /= double(n);
  double six = 0;
  for (size_t t = 0; t + 2 < triangles.size(); t += 3) {
    const Eigen::Vector3d a = P(positions, triangles[t]) - o, b = P(positions, triangles[t + 1]) - o,
                          c = P(positions, triangles[t + 2]) - o;
    six += a.dot(b.cross(c));
  }
  return six / 6;
}

std::vector<int8_t> PieceFacing(std::span<const float> positions, std::span<const uint32_t> triangles,
                                std::span<const uint32_t> rep, size_t* flipped) {
  const size_t nv = positions.size() / 3, nt = triangles.size() / 3;
  const int8_t whole = MeshVolume(positions, triangles) < 0 ? -1 : 1;
  std::vector<int8_t> facing(nv, whole);
  if (flipped) *flipped = 0;
  if (nt == 0) return facing;
  UnionFind pieces(nv);
  for (size_t t = 0; t < nt; ++t) {
    pieces.Unite(rep[triangles[3 * t]], rep[triangles[3 * t + 1]]);
    pieces.Unite(rep[triangles[3 * t]], rep[triangles[3 * t + 2]]);
  }
  // A piece is open where one of its welded edges is in an odd number of triangles.
  absl::flat_hash_map<uint64_t, uint32_t> edges;
  edges.reserve(3 * nt);
  for (size_t t = 0; t < nt; ++t) {
    for (int k = 0; k < 3; ++k) {
      const uint32_t a = rep[triangles[3 * t + k]], b = rep[triangles[3 * t + (k + 1) % 3]];
      if (a != b) ++edges[(uint64_t(std::min(a, b)) << 32) | std::max(a, b)];
    }
  }
  std::vector<uint8_t> open(nv, 0);
  for (const auto& [key, count] : edges) {
    if (count % 2 != 0) open[pieces.Find(uint32_t(key >> 32))] = 1;
  }
  // Six times each piece's signed volume about its vertex centroid (any origin, for a closed
  // piece), its area, and its largest triangle (where it is probed below).
  std::vector<Eigen::Vector3d> centroid(nv, Eigen::Vector3d::Zero());
  std::vector<uint32_t> count(nv, 0);
  for (size_t v = 0; v < nv; ++v) {
    const uint32_t piece = pieces.Find(rep[v]);
    centroid[piece] += P(positions, uint32_t(v));
    ++count[piece];
  }
  for (size_t p = 0; p < nv; ++p) {
    if (count[p] > 0) centroid[p] /= double(count[p]);
  }
  std::vector<double> six(nv, 0), area(nv, 0), largest(nv, 0);
  std::vector<int64_t> probe_triangle(nv, -1);
  for (size_t t = 0; t < nt; ++t) {
    const uint32_t* f = &triangles[3 * t];
    const uint32_t piece = pieces.Find(rep[f[0]]);
    const Eigen::Vector3d& o = centroid[piece];
    const Eigen::Vector3d a = P(positions, f[0]) - o, b = P(positions, f[1]) - o, c = P(positions, f[2]) - o;
    six[piece] += a.dot(b.cross(c));
    const double twice = (b - a).cross(c - a).norm();
    area[piece] += twice / 2;
    if (twice > largest[piece]) {
      largest[piece] = twice;
      probe_triangle[piece] = int64_t(t);
    }
  }
  // Pieces with a side: closed ones, and open ones that nearly enclose a volume (a tube without
  // its caps, a bowl: |V| at least 0.05 of a sphere's of their area, about their vertex centroid;
  // an open tube six radii long reads 0.46, a sheet about 0). Other open pieces, whose volume has
  // no sign, take the whole mesh's.
  std::vector<uint32_t> sided;
  size_t with_triangles = 0;
  for (size_t p = 0; p < nv; ++p) {
    if (probe_triangle[p] < 0) continue;
    ++with_triangles;
    const double sphere = std::pow(area[p], 1.5) / (6 * std::sqrt(std::numbers::pi));
    if (six[p] != 0 && (!open[p] || std::abs(six[p]) / 6 >= 0.05 * sphere)) sided.push_back(uint32_t(p));
  }
  // Each of them: enclosed by the others or not, by their winding number just off its largest
  // triangle (the whole mesh's there, less the piece's own, summed exactly). One not enclosed faces
  // the way its own volume says; one enclosed keeps its winding relative to what encloses it (the
  // sign of that winding number: a mouth bag wound inward in a head stays so, and turns with the
  // head when the whole export is inside out).
  std::vector<int8_t> piece_facing(nv, whole);
  if (sided.size() == 1 && with_triangles == 1) {
    piece_facing[sided[0]] = six[sided[0]] < 0 ? -1 : 1;  // the mesh is one piece
  } else if (!sided.empty()) {
    std::vector<Eigen::Vector3d> probe(nv, Eigen::Vector3d::Zero());
    std::vector<uint8_t> is_sided(nv, 0);
    for (uint32_t p : sided) {
      is_sided[p] = 1;
      const uint32_t* f = &triangles[3 * size_t(probe_triangle[p])];
      const Eigen::Vector3d a = P(positions, f[0]), b = P(positions, f[1]), c = P(positions, f[2]);
      const Eigen::Vector3d n = (b - a).cross(c - a);
      probe[p] = (a + b + c) / 3 + 1e-3 * std::sqrt(n.norm()) * n.normalized();
    }
    std::vector<double> own(nv, 0);
    for (size_t t = 0; t < nt; ++t) {
      const uint32_t* f = &triangles[3 * t];
      const uint32_t piece = pieces.Find(rep[f[0]]);
      if (!is_sided[piece]) continue;
      const Eigen::Vector3d& q = probe[piece];
      own[piece] += SolidAngle(P(positions, f[0]) - q, P(positions, f[1]) - q, P(positions, f[2]) - q) /
                    (4 * std::numbers::pi);
    }
    const WindingNumberTree all(positions, triangles);
    for (uint32_t p : sided) {
      const double others = all(probe[p]) - own[p];
      piece_facing[p] = std::abs(others) > 0.5 ? (others < 0 ? -1 : 1) : (six[p] < 0 ? -1 : 1);
      if (flipped && piece_facing[p] != whole) ++*flipped;
    }
  }
  for (size_t v = 0; v < nv; ++v) facing[v] = piece_facing[pieces.Find(rep[v])];
  return facing;
}

RayCaster::RayCaster(std::span<const float> positions, std::span<const uint32_t> triangles)
    : p_(positions), t_(triangles) {
  const uint32_t n = uint32_t(triangles.size() / 3);
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0u);
  std::vector<float> centroids(3 * size_t(n));
  for (uint32_t t = 0; t < n; ++t) {
    for (int k = 0; k < 3; ++k) {
      centroids[3 * t + k] = (p_[3 * t_[3 * t] + k] + p_[3 * t_[3 * t + 1] + k] + p_[3 * t_[3 * t + 2] + k]) / 3;
    }
  }
  nodes_.reserve(n > 0 ? 2 * (n / kLeafTriangles + 1) : 0);
  if (n > 0) Build(0, n, centroids);
}

int32_t RayCaster::Build(uint32_t first, uint32_t count, std::vector<float>& centroids) {
  const int32_t index = int32_t(nodes_.size());
  nodes_.emplace_back();
  Node node{};
  node.first = first;
  node.count = count;
  float clo[3] = {INFINITY, INFINITY, INFINITY}, chi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (int k = 0; k < 3; ++k) {
    node.lo[k] = INFINITY;
    node.hi[k] = -INFINITY;
  }
  for (uint32_t a = first; a < first + count; ++a) {
    const uint32_t t = order_[a];
    for (int c = 0; c < 3; ++c) {
      for (int k = 0; k < 3; ++k) {
        const float x = p_[3 * t_[3 * t + c] + k];
        node.lo[k] = std::min(node.lo[k], x);
        node.hi[k] = std::max(node.hi[k], x);
      }
    }
    for (int k = 0; k < 3; ++k) {
      clo[k] = std::min(clo[k], centroids[3 * t + k]);
      chi[k] = std::max(chi[k], centroids[3 * t + k]);
    }
  }
  if (count > kLeafTriangles) {
    int axis = 0;
    for (int k = 1; k < 3; ++k) {
      if (chi[k] - clo[k] > chi[axis] - clo[axis]) axis = k;
    }
    const uint32_t half = count / 2;
    std::nth_element(order_.begin() + first, order_.begin() + first + half, order_.begin() + first + count,
                     [&](uint32_t a, uint32_t b) { return centroids[3 * a + axis] < centroids[3 * b + axis]; });
    node.left = Build(first, half, centroids);
    node.right = Build(first + half, count - half, centroids);
  }
  nodes_[index] = node;
  return index;
}

double RayCaster::First(const double origin[3], const double direction[3],
                        const std::function<bool(uint32_t)>& skip_vertex) const {
  if (nodes_.empty()) return INFINITY;
  const Eigen::Vector3d o(origin[0], origin[1], origin[2]), d(direction[0], direction[1], direction[2]);
  double best = INFINITY;
  int32_t stack[128];
  int top = 0;
  stack[top++] = 0;
  while (top > 0) {
    const Node& node = nodes_[stack[--top]];
    double t0 = 0, t1 = best;
    if (!ClipToBox(origin, direction, node.lo, node.hi, t0, t1)) continue;
    if (node.left < 0) {
      for (uint32_t a = node.first; a < node.first + node.count; ++a) {
        const uint32_t t = order_[a];
        const uint32_t i = t_[3 * t], j = t_[3 * t + 1], k = t_[3 * t + 2];
        if (skip_vertex(i) || skip_vertex(j) || skip_vertex(k)) continue;
        best = std::min(best, RayTriangle(o, d, P(p_, i), P(p_, j), P(p_, k)));
      }
      continue;
    }
    if (top + 2 <= 128) {
      stack[top++] = node.left;
      stack[top++] = node.right;
    }
  }
  return best;
}

double RayCaster::Nearest(const double point[3], const std::function<bool(uint32_t)>& skip_vertex) const {
  if (nodes_.empty()) return INFINITY;
  const Eigen::Vector3d q(point[0], point[1], point[2]);
  double best2 = INFINITY;
  int32_t stack[128];
  int top = 0;
  stack[top++] = 0;
  while (top > 0) {
    const Node& node = nodes_[stack[--top]];
    if (PointBox2(point, node.lo, node.hi) >= best2) continue;
    if (node.left < 0) {
      for (uint32_t a = node.first; a < node.first + node.count; ++a) {
        const uint32_t t = order_[a];
        const uint32_t i = t_[3 * t], j = t_[3 * t + 1], k = t_[3 * t + 2];
        if (skip_vertex(i) || skip_vertex(j) || skip_vertex(k)) continue;
        best2 = std::min(best2, (ClosestPointOnTriangle(P(p_, i), P(p_, j), P(p_, k), q) - q).squaredNorm());
      }
      continue;
    }
    // Nearer child last (popped first).
    const Node& l = nodes_[node.left];
    const Node& r = nodes_[node.right];
    const bool left_first = PointBox2(point, l.lo, l.hi) <= PointBox2(point, r.lo, r.hi);
    if (top + 2 <= 128) {
      stack[top++] = left_first ? node.right : node.left;
      stack[top++] = left_first ? node.left : node.right;
    }
  }
  return std::sqrt(best2);
}

MeshQualityMeasure::MeshQualityMeasure(std::span<const float> rest, std::span<const uint32_t> triangles,
                                       const MeshQualityOptions& options, ThreadPool* pool)
    : triangles_(triangles) {
  const size_t n = rest.size() / 3;
  // Vertices welded by rest position (core/geometry/weld.h, WeldSeams: imported meshes repeat a
  // vertex per face corner or per UV seam, a few ulps apart on a mirror seam): normals, edge
  // lengths, one-rings and the triangles a vertex's own are taken over its welded copies, so that
  // a copy is never "the nearest skin" of another.
  weld_ = WeldSeams(rest, triangles, RestWeldTolerance(rest, triangles));
  // Rest edge lengths (each triangle's three), their mean, the rest volume.
  rest_length_.resize(triangles.size());
  double sum = 0;
  for (size_t t = 0; t + 2 < triangles.size(); t += 3) {
    for (int k = 0; k < 3; ++k) {
      rest_length_[t + k] = (P(rest, triangles[t + k]) - P(rest, triangles[t + (k + 1) % 3])).norm();
      sum += rest_length_[t + k];
    }
  }
  depth_tolerance_ = options.touching_edge_fraction * (triangles.empty() ? 0 : sum / double(triangles.size()));
  rest_volume_ = MeshVolume(rest, triangles);
  // A volume within rounding of 0 is none: an open sheet in a slanted plane, whose float
  // coordinates leave a few 1e-10, read a volume ratio of millions under a small bend (until
  // 2026-12-07). Rounding is judged against the sum of the triangles' |signed tetra volumes|
  // (what the volume is the sum of, with signs), not the box: two closed cubes far apart keep
  // their volume.
  double magnitude = 0;
  for (size_t t = 0; t + 2 < triangles.size(); t += 3) {
    magnitude += std::abs(P(rest, triangles[t]).dot(P(rest, triangles[t + 1]).cross(P(rest, triangles[t + 2])))) / 6;
  }
  rest_volume_none_ = !(std::abs(rest_volume_) > 1e-6 * magnitude);
  // A mesh that encloses a negative volume was exported inside out (a negative scale; its
  // normals point in): it is measured turned around, its outside along −n. Until 2026-12-05
  // every vertex of such a mesh read inside the skin. So is a closed piece wound the other way
  // on its own, outside the rest (PieceFacing: a part exported mirrored; until 2026-12-07 each of
  // its vertices read inside). A piece wound inward inside another, a mouth bag, is left as wound.
  facing_ = PieceFacing(rest, triangles, weld_);
  // Welded one-rings (CSR), for the depth's nearest-skin query.
  ring_start_.assign(n + 1, 0);
  for (size_t t = 0; t + 2 < triangles.size(); t += 3) {
    for (int k = 0; k < 3; ++k) ring_start_[weld_[triangles[t + k]] + 1] += 2;
  }
  for (size_t v = 0; v < n; ++v) ring_start_[v + 1] += ring_start_[v];
  ring_.resize(ring_start_[n]);
  std::vector<uint32_t> fill(ring_start_.begin(), ring_start_.end() - 1);
  for (size_t t = 0; t + 2 < triangles.size(); t += 3) {
    for (int k = 0; k < 3; ++k) {
      const uint32_t v = weld_[triangles[t + k]];
      ring_[fill[v]++] = weld_[triangles[t + (k + 1) % 3]];
      ring_[fill[v]++] = weld_[triangles[t + (k + 2) % 3]];
    }
  }
  // Where the rest mesh is inside itself: the frame measure, once, on the rest positions.
  const MeshQuality at_rest = Measure(rest, pool, true);
  inside_at_rest_.resize(n);
  for (size_t v = 0; v < n; ++v) inside_at_rest_[v] = at_rest.depth[v] > 0;
  rest_inside_vertices_ = at_rest.inside_vertices;
}

size_t MeshQualityMeasure::Bytes() const {
  return sizeof(*this) + 4 * (weld_.size() + ring_start_.size() + ring_.size()) + 8 * rest_length_.size() +
         inside_at_rest_.size() + facing_.size();
}

MeshQuality MeshQualityMeasure::Measure(std::span<const float> deformed, ThreadPool* pool, bool per_vertex) const {
  MeshQuality q;
  const std::span<const uint32_t> triangles = triangles_;
  const size_t n = deformed.size() / 3;
  // Normals and mean incident edge lengths (per welded vertex), edge stretch.
  std::vector<Eigen::Vector3d> normal(n, Eigen::Vector3d::Zero());
  std::vector<double> edge_sum(n, 0);
  std::vector<uint32_t> edge_count(n, 0);
  q.edge_stretch_min = INFINITY;
  q.edge_stretch_max = 0;
  size_t stretched = 0;     // edges measured
  bool non_finite = false;  // a triangle's vertex not finite
  for (size_t t = 0; t + 2 < triangles.size(); t += 3) {
    const uint32_t c[3] = {triangles[t], triangles[t + 1], triangles[t + 2]};
    const Eigen::Vector3d a = P(deformed, c[0]), b = P(deformed, c[1]), d = P(deformed, c[2]);
    non_finite |= !(a.allFinite() && b.allFinite() && d.allFinite());  // on edges measured or not
    const Eigen::Vector3d area = (b - a).cross(d - a);
    for (int k = 0; k < 3; ++k) {
      normal[weld_[c[k]]] += area;
      const uint32_t i = c[k], j = c[(k + 1) % 3];
      const double len = (P(deformed, i) - P(deformed, j)).norm();
      for (uint32_t e : {i, j}) {
        edge_sum[weld_[e]] += len;
        ++edge_count[weld_[e]];
      }
      // Not between welded copies (one point: their rest edge, a sliver's, is rounding, and so is
      // its ratio; until 2026-12-07 a rigid motion of a mesh with one read 1.12).
      const double rest_len = rest_length_[t + k];
      if (rest_len > 0 && weld_[i] != weld_[j]) {
        const double ratio = len / rest_len;
        q.edge_stretch_min = std::min(q.edge_stretch_min, ratio);
        q.edge_stretch_max = std::max(q.edge_stretch_max, ratio);
        ++stretched;
      }
    }
  }
  // [1, 1] only where no edge was measured: a skin collapsed to a point reads [0, 0] (until
  // 2026-12-07 [1, 1], as did one of NaNs, whose lengths min and max skipped).
  if (non_finite) {
    q.edge_stretch_min = q.edge_stretch_max = std::numeric_limits<double>::quiet_NaN();
  } else if (stretched == 0) {
    q.edge_stretch_min = q.edge_stretch_max = 1;
  }
  q.depth_tolerance = depth_tolerance_;
  q.volume = MeshVolume(deformed, triangles);
  q.rest_volume = rest_volume_;
  q.volume_ratio = rest_volume_none_ ? 1 : q.volume / q.rest_volume;
  if (per_vertex) q.depth.assign(n, 0.f);

  // β = 2 (Barill et al.'s default): the decision is between 0 and ±1, far from its ½ threshold.
  const WindingNumberTree winding(deformed, triangles, 2.0);
  const RayCaster rays(deformed, triangles);
  const bool know_rest = inside_at_rest_.size() == n;
  // Per vertex: depth when inside (> 0), 0 outside; and whether skin inside or touching at rest
  // is exposed now: outside, and beyond the touching band, farther than depth_tolerance from the
  // nearest skin beyond its one-ring. Skin that touched the skin over it at rest, a hair inside,
  // and now lies a hair outside (two halves of a mesh overlapping at a seam) has not come out.
  // Until 2026-12-06 it counted: most of Testwuson's under the elastic method (100–120 vertices
  // a frame of its clip, 41–52 now), its chest's mirrored halves overlapping by a hair along the
  // midline.
  std::vector<double> depth(n, 0);
  std::vector<uint8_t> exposed(n, 0);
  ParallelFor(pool, n, 256, [&](size_t b, size_t e) {
    for (size_t v = b; v < e; ++v) {
      const uint32_t w = weld_[v];
      const double len = normal[w].norm();
      if (edge_count[w] == 0 || !(len > 0)) continue;
      const Eigen::Vector3d nrm = double(facing_[w]) * normal[w] / len;
      const Eigen::Vector3d x = P(deformed, uint32_t(v));
      const double o[3] = {x.x(), x.y(), x.z()};
      // The distance to the nearest skin beyond the vertex's one-ring.
      const auto beyond_ring = [&] {
        const uint32_t* r0 = ring_.data() + ring_start_[w];
        const uint32_t* r1 = ring_.data() + ring_start_[w + 1];
        return rays.Nearest(o, [&](uint32_t u) { return weld_[u] == w || std::find(r0, r1, weld_[u]) != r1; });
      };
      const double eps = 1e-3 * edge_sum[w] / edge_count[w];
      if (!(std::abs(winding(x + eps * nrm)) > 0.5)) {
        exposed[v] = know_rest && inside_at_rest_[v] && beyond_ring() > depth_tolerance_;
        continue;
      }
      const double up[3] = {nrm.x(), nrm.y(), nrm.z()}, down[3] = {-nrm.x(), -nrm.y(), -nrm.z()};
      auto own = [&](uint32_t u) { return weld_[u] == w; };
      double dep = std::min(rays.First(o, up, own), rays.First(o, down, own));
      // Where the skin is crumpled the normal may run along the other part: bound the depth by
      // the distance to the nearest skin beyond the one-ring.
      dep = std::min(dep, beyond_ring());
      if (!std::isfinite(dep)) dep = 0;  // inside an open part with nothing near: depth unknown
      depth[v] = std::max(dep, 1e-300);  // > 0 marks "inside"
    }
  });
  q.rest_inside_vertices = rest_inside_vertices_;
  for (size_t v = 0; v < n; ++v) {
    if (!(depth[v] > 0)) {
      q.exposed_vertices += exposed[v];
      continue;
    }
    const double known = depth[v] >= 1e-200 ? depth[v] : 0.0;
    if (depth[v] > q.depth_tolerance) {
      ++q.inside_vertices;
      if (know_rest && !inside_at_rest_[v]) {
        ++q.new_inside_vertices;
        if (q.new_deepest_vertex < 0 || known > q.new_max_depth) {
          q.new_max_depth = known;
          q.new_deepest_vertex = int64_t(v);
        }
      }
    } else {
      ++q.touching_vertices;
    }
    q.max_depth = std::max(q.max_depth, known);
    if (per_vertex) q.depth[v] = std::max(float(depth[v]), std::numeric_limits<float>::min());
  }
  if (per_vertex) q.exposed = std::move(exposed);
  return q;
}

MeshQuality MeasureMeshQuality(std::span<const float> rest, std::span<const float> deformed,
                               std::span<const uint32_t> triangles, ThreadPool* pool,
                               const MeshQualityOptions& options, bool per_vertex) {
  return MeshQualityMeasure(rest, triangles, options).Measure(deformed, pool, per_vertex);
}

}  // namespace sinew
