#include "core/swingtwist/voxels.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/geometry/nearest_point.h"
#include "core/util/union_find.h"

namespace sinew {
namespace {

using V3 = Eigen::Vector3d;

// Akenine-Möller's separating-axis test of a triangle against a cube (centre c, half-size r);
// touching counts as overlapping.
bool TriangleOverlapsCube(const V3& c, double r, const V3& p0, const V3& p1, const V3& p2) {
  const V3 a = p0 - c, b = p1 - c, d = p2 - c;
  for (int k = 0; k < 3; ++k) {
    if (std::min({a[k], b[k], d[k]}) > r || std::max({a[k], b[k], d[k]}) < -r) return false;
  }
  const V3 edges[3] = {b - a, d - b, a - d};
  for (const V3& e : edges) {
    for (int k = 0; k < 3; ++k) {
      const V3 axis = V3::Unit(k).cross(e);
      const double pa = axis.dot(a), pb = axis.dot(b), pd = axis.dot(d);
      const double rad = r * axis.cwiseAbs().sum();
      if (std::min({pa, pb, pd}) > rad || std::max({pa, pb, pd}) < -rad) return false;
    }
  }
  const V3 n = edges[0].cross(edges[1]);
  return std::abs(n.dot(a)) <= r * n.cwiseAbs().sum();
}

}  // namespace

std::array<int, 3> VoxelGrid::CellOf(const Eigen::Vector3d& p) const {
  std::array<int, 3> c;
  // Clamped as a double first: a point 2^31 cells away (a joint far off the mesh) made int()
  // undefined, INT_MIN on x86, and so cell 0 where the last was meant (until 2026-12-03).
  for (int k = 0; k < 3; ++k) {
    c[k] = int(std::clamp(std::floor((p[k] - origin[k]) / h), 0.0, double(dims[k] - 1)));
  }
  return c;
}

int32_t VoxelGrid::VoxelAt(const std::array<int, 3>& c) const {
  for (int k = 0; k < 3; ++k) {
    if (c[k] < 0 || c[k] >= dims[k]) return -1;
  }
  return voxel_of_cell[c[0] + size_t(dims[0]) * (c[1] + size_t(dims[1]) * c[2])];
}

std::vector<int32_t> NearestAnchoredVertex(const VoxelGrid& grid, const std::vector<uint8_t>& anchored) {
  const size_t n = grid.vertices.size();
  std::vector<int32_t> from(n, -1);
  // A k-d tree over the anchored vertices (until 2026-12-03 every unanchored vertex looked at
  // every anchored one: 5e10 steps, and this runs once per solve, for a detached prop at a fine
  // voxel size).
  std::vector<float> points;
  std::vector<int32_t> index;
  bool any_unanchored = false;
  for (size_t a = 0; a < n; ++a) {
    if (!anchored[grid.component[a]]) {
      any_unanchored = true;
      continue;
    }
    const Eigen::Vector3d& p = grid.vertices[a];
    points.insert(points.end(), {float(p.x()), float(p.y()), float(p.z())});
    index.push_back(int32_t(a));
  }
  if (!any_unanchored || index.empty()) return from;
  const NearestPointTree tree(points);
  for (size_t i = 0; i < n; ++i) {
    if (!anchored[grid.component[i]]) from[i] = index[tree.Nearest(grid.vertices[i])];
  }
  return from;
}

absl::StatusOr<VoxelGrid> Voxelize(std::span<const float> positions, std::span<const uint32_t> triangles,
                                   const VoxelOptions& options) {
  const double h = options.h;
  if (!(h > 0) || !std::isfinite(h)) return absl::InvalidArgumentError("voxel size: must be a positive number");
  if (triangles.empty() || positions.empty()) {
    return absl::InvalidArgumentError("voxelization needs a mesh with triangles");
  }
  const size_t nv = positions.size() / 3;
  auto point = [&](uint32_t i) { return V3(positions[3 * i], positions[3 * i + 1], positions[3 * i + 2]); };
  V3 lo = point(0), hi = point(0);
  for (size_t i = 1; i < nv; ++i) {
    lo = lo.cwiseMin(point(uint32_t(i)));
    hi = hi.cwiseMax(point(uint32_t(i)));
  }
  VoxelGrid g;
  g.h = h;
  g.origin = lo - V3::Constant(h);  // one voxel of padding
  double cells = 1;
  for (int k = 0; k < 3; ++k) {
    const double n = std::ceil((hi[k] - lo[k]) / h) + 2;
    cells *= n;
    g.dims[k] = int(std::min(n, 1e9));
  }
  if (cells > double(options.max_cells)) {
    return absl::ResourceExhaustedError(absl::StrCat("voxel size ", h, ": the grid would have ", cells,
                                                     " voxels, more than the limit of ", options.max_cells,
                                                     "; choose a larger voxel size"));
  }
  const int nx = g.dims[0], ny = g.dims[1], nz = g.dims[2];
  const size_t total = size_t(nx) * ny * nz;
  auto cell = [&](int x, int y, int z) { return size_t(x) + size_t(nx) * (size_t(y) + size_t(ny) * z); };

  // 2. Surface voxels.
  const size_t nt = triangles.size() / 3;
  auto box = [&](size_t t, std::array<int, 3>& a, std::array<int, 3>& b) {
    const V3 p0 = point(triangles[3 * t]), p1 = point(triangles[3 * t + 1]), p2 = point(triangles[3 * t + 2]);
    const V3 tlo = p0.cwiseMin(p1).cwiseMin(p2), thi = p0.cwiseMax(p1).cwiseMax(p2);
    for (int k = 0; k < 3; ++k) {
      a[k] = std::clamp(int(std::floor((tlo[k] - g.origin[k]) / h)), 0, g.dims[k] - 1);
      b[k] = std::clamp(int(std::floor((thi[k] - g.origin[k]) / h)), 0, g.dims[k] - 1);
    }
  };
  // The work below is bounded before it starts: the voxels of the triangles' boxes (each tested
  // against its triangle) and each axis's rows through them (at most a crossing each, 16 bytes).
  // A closed mesh needs a few per surface voxel; until 2026-12-02 a rig of 50 000 stacked
  // full-size quads at a fine voxel size asked for 8e9 crossings (128 GB) before anything
  // refused it.
  {
    double voxels = 0, rows[3] = {0, 0, 0};
    for (size_t t = 0; t < nt; ++t) {
      std::array<int, 3> a, b;
      box(t, a, b);
      const double d[3] = {double(b[0] - a[0] + 1), double(b[1] - a[1] + 1), double(b[2] - a[2] + 1)};
      voxels += d[0] * d[1] * d[2];
      for (int axis = 0; axis < 3; ++axis) rows[axis] += d[(axis + 1) % 3] * d[(axis + 2) % 3];
    }
    // Small triangles take a voxel and a row or two each: the limits grow with their number.
    // (A box's voxels overstate a long diagonal triangle's work: the voxel limit leaves room for
    // 32 such triangles across a grid at max_cells.)
    const double most_voxels = 32.0 * double(options.max_cells) + 64.0 * double(nt);
    const double most_rows = double(options.max_cells) / 4 + 4.0 * double(nt);
    if (voxels > most_voxels || std::max({rows[0], rows[1], rows[2]}) > most_rows) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "voxel size ", h, ": the triangles' boxes cover ", voxels, " voxels and ", std::max({rows[0], rows[1], rows[2]}),
          " rows of the grid, more than the limits of ", most_voxels, " and ", most_rows,
          " (overlapping or very large triangles); choose a larger voxel size"));
    }
  }
  std::vector<uint8_t> surface(total, 0);
  for (size_t t = 0; t < nt; ++t) {
    const V3 p0 = point(triangles[3 * t]), p1 = point(triangles[3 * t + 1]), p2 = point(triangles[3 * t + 2]);
    std::array<int, 3> a, b;
    box(t, a, b);
    for (int z = a[2]; z <= b[2]; ++z) {
      for (int y = a[1]; y <= b[1]; ++y) {
        for (int x = a[0]; x <= b[0]; ++x) {
          if (surface[cell(x, y, z)]) continue;
          const V3 c = g.origin + h * V3(x + 0.5, y + 0.5, z + 0.5);
          if (TriangleOverlapsCube(c, h / 2, p0, p1, p2)) surface[cell(x, y, z)] = 1;
        }
      }
    }
  }

  // 3. Interior votes: rows of voxel centres along each axis against every triangle. The rows
  // are nudged off the lattice by tiny irrational fractions of h, so that a row meets an edge
  // or a vertex of the mesh (and counts it twice or not at all) with probability zero.
  std::vector<uint8_t> votes(total, 0);
  const double nudge[3] = {0.5 + 1.1102230246e-7, 0.5 + 2.7182818285e-7, 0.5 + 3.1415926536e-7};
  for (int axis = 0; axis < 3; ++axis) {
    const int u = (axis + 1) % 3, v = (axis + 2) % 3;
    const int nu = g.dims[u], nw = g.dims[v];
    std::vector<std::pair<int64_t, double>> crossings;  // (row, coordinate along the axis)
    for (size_t t = 0; t < nt; ++t) {
      const V3 p[3] = {point(triangles[3 * t]), point(triangles[3 * t + 1]), point(triangles[3 * t + 2])};
      const double area = (p[1][u] - p[0][u]) * (p[2][v] - p[0][v]) - (p[2][u] - p[0][u]) * (p[1][v] - p[0][v]);
      if (area == 0) continue;  // edge-on to this axis
      double ulo = p[0][u], uhi = ulo, vlo = p[0][v], vhi = vlo;
      for (int k = 1; k < 3; ++k) {
        ulo = std::min(ulo, p[k][u]);
        uhi = std::max(uhi, p[k][u]);
        vlo = std::min(vlo, p[k][v]);
        vhi = std::max(vhi, p[k][v]);
      }
      const int i0 = std::max(0, int(std::ceil((ulo - g.origin[u]) / h - nudge[u])));
      const int i1 = std::min(nu - 1, int(std::floor((uhi - g.origin[u]) / h - nudge[u])));
      const int k0 = std::max(0, int(std::ceil((vlo - g.origin[v]) / h - nudge[v])));
      const int k1 = std::min(nw - 1, int(std::floor((vhi - g.origin[v]) / h - nudge[v])));
      for (int k = k0; k <= k1; ++k) {
        const double qv = g.origin[v] + (k + nudge[v]) * h;
        for (int i = i0; i <= i1; ++i) {
          const double qu = g.origin[u] + (i + nudge[u]) * h;
          // Barycentric coordinates of the row in the triangle's projection.
          const double w0 = ((p[1][u] - qu) * (p[2][v] - qv) - (p[2][u] - qu) * (p[1][v] - qv)) / area;
          const double w1 = ((p[2][u] - qu) * (p[0][v] - qv) - (p[0][u] - qu) * (p[2][v] - qv)) / area;
          const double w2 = 1 - w0 - w1;
          if (w0 < 0 || w1 < 0 || w2 < 0) continue;
          crossings.emplace_back(int64_t(i) + int64_t(nu) * k, w0 * p[0][axis] + w1 * p[1][axis] + w2 * p[2][axis]);
        }
      }
    }
    std::sort(crossings.begin(), crossings.end());
    for (size_t b = 0; b < crossings.size();) {
      size_t e = b;
      while (e < crossings.size() && crossings[e].first == crossings[b].first) ++e;
      const int i = int(crossings[b].first % nu), k = int(crossings[b].first / nu);
      size_t before = b;
      for (int m = 0; m < g.dims[axis]; ++m) {
        const double centre = g.origin[axis] + (m + 0.5) * h;
        while (before < e && crossings[before].second < centre) ++before;
        if ((before - b) % 2 == 1) {
          int c[3];
          c[axis] = m;
          c[u] = i;
          c[v] = k;
          ++votes[cell(c[0], c[1], c[2])];
        }
      }
      b = e;
    }
  }

  // The voxel CellOf gives each mesh vertex counts as surface: a vertex on a voxel face may
  // have been claimed by the neighbour only, rounding decides which.
  for (size_t i = 0; i < nv; ++i) {
    const V3 p = point(uint32_t(i));
    int c[3];
    for (int k = 0; k < 3; ++k) c[k] = std::clamp(int(std::floor((p[k] - g.origin[k]) / h)), 0, g.dims[k] - 1);
    surface[cell(c[0], c[1], c[2])] = 1;
  }

  // 4–5. Occupied voxels, their corners numbered in cell order, components.
  g.voxel_of_cell.assign(total, -1);
  std::vector<int32_t> vertex_of_corner(size_t(nx + 1) * (ny + 1) * (nz + 1), -1);
  for (int z = 0; z < nz; ++z) {
    for (int y = 0; y < ny; ++y) {
      for (int x = 0; x < nx; ++x) {
        const size_t c = cell(x, y, z);
        const bool on_surface = surface[c] != 0, inside = votes[c] >= 2;
        if (!on_surface && !inside) continue;
        g.surface_voxels += on_surface;
        g.interior_voxels += !on_surface;
        g.voxel_of_cell[c] = int32_t(g.cells.size());
        g.cells.push_back(int32_t(c));
        std::array<int32_t, 8> corner;
        for (int q = 0; q < 8; ++q) {
          const int cx = x + (q & 1), cy = y + (q >> 1 & 1), cz = z + (q >> 2 & 1);
          int32_t& id = vertex_of_corner[size_t(cx) + size_t(nx + 1) * (size_t(cy) + size_t(ny + 1) * cz)];
          if (id < 0) {
            id = int32_t(g.vertices.size());
            g.vertices.push_back(g.origin + h * V3(cx, cy, cz));
          }
          corner[q] = id;
        }
        g.corners.push_back(corner);
      }
    }
  }
  UnionFind sets(g.vertices.size());
  for (const auto& c : g.corners) {
    for (int q = 1; q < 8; ++q) sets.Unite(uint32_t(c[0]), uint32_t(c[q]));
  }
  const std::vector<uint32_t> label = sets.Labels();
  g.component.assign(label.begin(), label.end());
  for (uint32_t l : label) g.components = std::max(g.components, int(l) + 1);
  return g;
}

}  // namespace sinew
