#include "core/pbs/tet_mesh.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

#include <Eigen/Dense>
#include <Eigen/Geometry>

namespace sinew {
namespace {

// The Kuhn split of a voxel: for each order of the three axes, the path of corners from 0 to 7
// adding one axis bit at a time (corner c at offset (c & 1, c >> 1 & 1, c >> 2 & 1)).
constexpr std::array<std::array<int, 4>, 6> kVoxelTets = {{
    {0, 1, 3, 7}, {0, 1, 5, 7}, {0, 2, 3, 7}, {0, 2, 6, 7}, {0, 4, 5, 7}, {0, 4, 6, 7},
}};

std::array<double, 4> Barycentric(const TetMesh& m, uint32_t t, const Eigen::Vector3d& q) {
  const auto& v = m.tets[t];
  Eigen::Matrix3d e;
  e.col(0) = m.rest[v[1]] - m.rest[v[0]];
  e.col(1) = m.rest[v[2]] - m.rest[v[0]];
  e.col(2) = m.rest[v[3]] - m.rest[v[0]];
  const Eigen::Vector3d b = e.partialPivLu().solve(q - m.rest[v[0]]);
  return {1 - b.sum(), b[0], b[1], b[2]};
}

}  // namespace

double SignedVolume(const Eigen::Vector3d& a, const Eigen::Vector3d& b, const Eigen::Vector3d& c,
                    const Eigen::Vector3d& d) {
  return (b - a).cross(c - a).dot(d - a) / 6;
}

void AddTets(TetMesh& mesh, std::span<const std::array<uint32_t, 4>> tets, double scale) {
  const double floor = 1e-12 * scale * scale * scale;
  mesh.tets.reserve(mesh.tets.size() + tets.size());
  mesh.rest_volume.reserve(mesh.tets.size() + tets.size());
  for (std::array<uint32_t, 4> t : tets) {
    double v = SignedVolume(mesh.rest[t[0]], mesh.rest[t[1]], mesh.rest[t[2]], mesh.rest[t[3]]);
    if (std::abs(v) <= floor) {
      ++mesh.rejected;
      continue;
    }
    if (v < 0) {
      std::swap(t[2], t[3]);
      v = -v;
      ++mesh.reoriented;
    }
    mesh.tets.push_back(t);
    mesh.rest_volume.push_back(v);
  }
}

absl::StatusOr<TetMesh> VoxelTetMesh(const VoxelGrid& grid) {
  if (grid.voxel_count() == 0) return absl::InvalidArgumentError("tetrahedral mesh: the voxel grid is empty");
  TetMesh m;
  m.source = "voxels";
  m.rest = grid.vertices;
  std::vector<std::array<uint32_t, 4>> tets;
  tets.reserve(6 * grid.voxel_count());
  for (size_t e = 0; e < grid.voxel_count(); ++e) {
    for (const auto& k : kVoxelTets) {
      std::array<uint32_t, 4> t;
      for (int i = 0; i < 4; ++i) t[i] = uint32_t(grid.corners[e][k[i]]);
      tets.push_back(t);
    }
  }
  AddTets(m, tets, grid.h);
  m.reoriented = 0;  // half the Kuhn split is left-handed by construction, not by anyone's mistake
  return m;
}

absl::StatusOr<TetMesh> UploadedTetMesh(std::span<const float> positions, std::span<const uint32_t> tets) {
  TetMesh m;
  m.source = "rig";
  m.rest.resize(positions.size() / 3);
  for (size_t i = 0; i < m.rest.size(); ++i) {
    m.rest[i] = Eigen::Vector3d(positions[3 * i], positions[3 * i + 1], positions[3 * i + 2]);
  }
  std::vector<std::array<uint32_t, 4>> quads(tets.size() / 4);
  for (size_t t = 0; t < quads.size(); ++t) {
    for (int k = 0; k < 4; ++k) quads[t][k] = tets[4 * t + k];
  }
  // Degenerate: below 1e-12 of the cube of the tets' mean edge length (spec 2.1). Until
  // 2026-12-07 the edge the tets would have if they filled the particles' box: one particle far
  // from the tets (unused) made good tets "degenerate", and all of them a wrong refusal.
  double edges = 0;
  size_t counted = 0;
  for (const auto& q : quads) {
    for (int a = 0; a < 4; ++a) {
      for (int b = a + 1; b < 4; ++b) {
        if (q[a] >= m.rest.size() || q[b] >= m.rest.size()) continue;
        edges += (m.rest[q[a]] - m.rest[q[b]]).norm();
        ++counted;
      }
    }
  }
  const double scale = counted ? edges / double(counted) : 0;
  AddTets(m, quads, scale);
  if (m.tets.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rig.tet_mesh: all ", quads.size(), " tets are degenerate (no volume)"));
  }
  // Until 2026-12-03 one particle in 400 000 tets made a colouring of 1.6e11 steps and 400 000
  // colours, each a barrier in every frame.
  std::vector<uint32_t> incident(m.rest.size(), 0);
  for (const auto& t : m.tets) {
    for (uint32_t p : t) {
      if (++incident[p] > kMaxTetsPerParticle) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "rig.tet_mesh: particle ", p, " is a corner of more than ", kMaxTetsPerParticle,
            " tets (a tetrahedralization has tens; the solver colours the constraints through each particle apart)"));
      }
    }
  }
  return m;
}

void RemoveTets(TetMesh& mesh, std::span<const uint8_t> keep) {
  size_t kept = 0;
  const size_t before = mesh.tets.size();
  for (size_t t = 0; t < before; ++t) {
    if (!keep[t]) continue;
    mesh.tets[kept] = mesh.tets[t];
    mesh.rest_volume[kept] = mesh.rest_volume[t];
    ++kept;
  }
  mesh.tets.resize(kept);
  mesh.rest_volume.resize(kept);
  mesh.cut += before - kept;
}

namespace {

// The tets binned by their bounding boxes into a uniform grid of cells of about six tets' volume
// (compressed rows: cell c's tets are items[first[c] .. first[c + 1])).
struct TetGrid {
  Eigen::Vector3d origin = Eigen::Vector3d::Zero();
  double s = 1;
  std::array<int, 3> dims{1, 1, 1};
  std::vector<uint32_t> first;
  std::vector<uint32_t> items;
  // Per cell: the Chebyshev distance (in cells) to the nearest cell holding a tet, so a search
  // starts at the first ring that has one. Until 2026-12-03 it walked the empty rings between:
  // a point in the middle of two tight clusters of tets at opposite corners of the box visited
  // nearly every cell (tens of millions), for each of a million render vertices.
  std::vector<uint32_t> empty_rings;

  explicit TetGrid(const TetMesh& m) {
    Eigen::Vector3d lo = Eigen::Vector3d::Constant(INFINITY), hi = -lo;
    double volume = 0;
    for (size_t t = 0; t < m.tets.size(); ++t) {
      for (uint32_t p : m.tets[t]) {
        lo = lo.cwiseMin(m.rest[p]);
        hi = hi.cwiseMax(m.rest[p]);
      }
      volume += m.rest_volume[t];
    }
    first.assign(2, 0);
    if (m.tets.empty()) return;
    origin = lo;
    // The edge of a cube holding six average tets (a voxel, for the voxel tets).
    s = std::max(std::cbrt(6 * volume / double(m.tets.size())), 1e-12 * std::max(1.0, (hi - lo).maxCoeff()));
    // About 64 cells per tet, plus 4096 (a few tets in a large box): coarser cells by the cube
    // root of the excess, then, while the whole cells are more than twice that, by the root over
    // the axes longer than a cell. Until 2026-12-07 only the first: a box long on one axis alone
    // (two clusters of tets far apart on a line) kept about cells^(2/3) budget^(1/3) cells,
    // gigabytes for a rig of a thousand tets.
    const double budget = 64.0 * double(m.tets.size()) + 4096;
    const double cells = (hi - lo).cwiseMax(Eigen::Vector3d::Constant(s)).prod() / (s * s * s);
    if (cells > budget) s *= std::cbrt(cells / budget);
    constexpr double kMostPerAxis = double(1 << 24);  // the int cell coordinates' room, with margin
    for (;;) {
      double whole = 1, most = 1;
      int long_axes = 0;
      for (int k = 0; k < 3; ++k) {
        const double axis = std::max(1.0, std::ceil((hi[k] - lo[k]) / s));
        whole *= axis;
        most = std::max(most, axis);
        long_axes += (hi[k] - lo[k]) > s;
      }
      if (whole <= 2 * budget && most <= kMostPerAxis) break;
      s *= 1.0001 * std::max(std::pow(whole / budget, 1.0 / std::max(1, long_axes)), most / kMostPerAxis);
    }
    for (int k = 0; k < 3; ++k) dims[k] = std::max(1, int(std::ceil((hi[k] - lo[k]) / s)));
    // And at most that many (cell, tet) entries: slivers across the whole box (an uploaded tet
    // mesh may hold thousands) would otherwise enter every cell, and their count wrapped the
    // 32-bit row offsets (a write past `items`). Coarser cells until they fit; one cell holds
    // every tet once.
    std::vector<Eigen::AlignedBox3d> boxes(m.tets.size());  // each tet's, for the count and both passes
    for (size_t t = 0; t < m.tets.size(); ++t) {
      for (uint32_t p : m.tets[t]) boxes[t].extend(m.rest[p]);
    }
    const double entry_budget = std::min(budget, double(std::numeric_limits<uint32_t>::max()));
    for (;;) {
      double entries = 0;
      for (const auto& box : boxes) {
        const std::array<int, 3> a = CellOf(box.min()), b = CellOf(box.max());
        entries += double(b[0] - a[0] + 1) * double(b[1] - a[1] + 1) * double(b[2] - a[2] + 1);
      }
      if (entries <= entry_budget || (dims[0] == 1 && dims[1] == 1 && dims[2] == 1)) break;
      s *= 2;
      for (int k = 0; k < 3; ++k) dims[k] = std::max(1, int(std::ceil((hi[k] - lo[k]) / s)));
    }
    const size_t n = size_t(dims[0]) * dims[1] * dims[2];
    first.assign(n + 1, 0);
    for (int pass = 0; pass < 2; ++pass) {
      for (uint32_t t = 0; t < m.tets.size(); ++t) {
        const std::array<int, 3> a = CellOf(boxes[t].min()), b = CellOf(boxes[t].max());
        for (int z = a[2]; z <= b[2]; ++z) {
          for (int y = a[1]; y <= b[1]; ++y) {
            for (int x = a[0]; x <= b[0]; ++x) {
              const size_t c = Index({x, y, z});
              if (pass == 0) {
                ++first[c + 1];
              } else {
                items[first[c]++] = t;
              }
            }
          }
        }
      }
      if (pass == 0) {
        for (size_t c = 0; c < n; ++c) first[c + 1] += first[c];
        items.resize(first[n]);
      } else {  // first[c] now holds the end of cell c: shift back
        for (size_t c = n; c > 0; --c) first[c] = first[c - 1];
        first[0] = 0;
      }
    }
    // Breadth first from every cell that holds a tet over the 26 neighbours: the layers are the
    // Chebyshev distances. O(27 cells).
    empty_rings.assign(n, std::numeric_limits<uint32_t>::max());
    std::vector<uint32_t> queue;
    queue.reserve(n);
    for (size_t c = 0; c < n; ++c) {
      if (first[c + 1] > first[c]) {
        empty_rings[c] = 0;
        queue.push_back(uint32_t(c));
      }
    }
    for (size_t head = 0; head < queue.size(); ++head) {
      const size_t c = queue[head];
      const int x = int(c % size_t(dims[0])), y = int(c / size_t(dims[0]) % size_t(dims[1])),
                z = int(c / (size_t(dims[0]) * size_t(dims[1])));
      for (int dz = -1; dz <= 1; ++dz) {
        for (int dy = -1; dy <= 1; ++dy) {
          for (int dx = -1; dx <= 1; ++dx) {
            const int nx = x + dx, ny = y + dy, nz = z + dz;
            if (nx < 0 || ny < 0 || nz < 0 || nx >= dims[0] || ny >= dims[1] || nz >= dims[2]) continue;
            const size_t e = Index({nx, ny, nz});
            if (empty_rings[e] != std::numeric_limits<uint32_t>::max()) continue;
            empty_rings[e] = empty_rings[c] + 1;
            queue.push_back(uint32_t(e));
          }
        }
      }
    }
  }
  std::array<int, 3> CellOf(const Eigen::Vector3d& p) const {
    std::array<int, 3> c;
    for (int k = 0; k < 3; ++k) c[k] = int(std::clamp(std::floor((p[k] - origin[k]) / s), 0.0, double(dims[k] - 1)));
    return c;
  }
  size_t Index(const std::array<int, 3>& c) const { return c[0] + size_t(dims[0]) * (c[1] + size_t(dims[1]) * c[2]); }
  // f(tet) for the tets of the cells at Chebyshev distance r from c (a tet may come twice), in
  // z, y, x order. Only the shell's cells are visited: inside a row that is not on one of its
  // faces, the two ends (until 2026-12-02 the whole cube was walked and tested, O(r³) a ring).
  template <class F>
  void Ring(const std::array<int, 3>& c, int r, const F& f) const {
    const auto cell = [&](int x, int y, int z) {
      const size_t i = Index({x, y, z});
      for (uint32_t k = first[i]; k < first[i + 1]; ++k) f(items[k]);
    };
    const int x0 = std::max(0, c[0] - r), x1 = std::min(dims[0] - 1, c[0] + r);
    for (int z = std::max(0, c[2] - r); z <= std::min(dims[2] - 1, c[2] + r); ++z) {
      for (int y = std::max(0, c[1] - r); y <= std::min(dims[1] - 1, c[1] + r); ++y) {
        if (std::abs(z - c[2]) == r || std::abs(y - c[1]) == r) {
          for (int x = x0; x <= x1; ++x) cell(x, y, z);
        } else {
          if (c[0] - r >= 0) cell(c[0] - r, y, z);
          if (r > 0 && c[0] + r <= dims[0] - 1) cell(c[0] + r, y, z);
        }
      }
    }
  }
};

}  // namespace

TetEmbedding EmbedInTets(const TetMesh& mesh, std::span<const float> points,
                         const std::function<bool(size_t, uint32_t)>& fits,
                         const std::function<bool(double)>& progress) {
  TetEmbedding out;
  const size_t n = points.size() / 3;
  out.tet.assign(n, 0);
  out.beta.assign(n, {1, 0, 0, 0});
  if (mesh.tets.empty()) {
    out.outside = n;
    return out;
  }
  const TetGrid grid(mesh);
  out.grid_cells = grid.empty_rings.size();
  const int reach = std::max({grid.dims[0], grid.dims[1], grid.dims[2]});
  std::vector<uint64_t> seen(mesh.tets.size(), 0);
  uint64_t stamp = 0;
  // Asked every few thousand points: overlapping uploaded tets (slivers across the box) cost a
  // solve per tet in the point's cell, minutes on a large rig that a cancel could not end until
  // 2026-12-07.
  const size_t every = std::clamp<size_t>(n / 16, 1, 4096);
  for (size_t i = 0; i < n; ++i) {
    if (progress && i % every == 0 && !progress(double(i) / double(n))) {
      out.stopped = true;
      return out;
    }
    const Eigen::Vector3d q(points[3 * i], points[3 * i + 1], points[3 * i + 2]);
    const std::array<int, 3> cell = grid.CellOf(q);
    double best_min = -std::numeric_limits<double>::infinity();
    bool found = false;
    // The tet whose smallest coordinate is largest (the containing one where there is one): in
    // the point's cell (which holds every tet containing it), else out to one ring beyond the
    // first ring that has any tet; fitting tets first, over the same cells.
    for (bool check : {true, false}) {
      if (check && !fits) continue;
      ++stamp;
      int last = reach;
      for (int r = int(grid.empty_rings[grid.Index(cell)]); r <= last; ++r) {  // the rings before are empty
        bool any = false;
        grid.Ring(cell, r, [&](uint32_t t) {
          any = true;
          if (seen[t] == stamp) return;
          seen[t] = stamp;
          if (check && !fits(i, t)) return;
          const auto b = Barycentric(mesh, t, q);
          const double lowest = *std::min_element(b.begin(), b.end());
          if (lowest > best_min) {
            best_min = lowest;
            out.tet[i] = t;
            out.beta[i] = b;
            found = true;
          }
        });
        if (found && best_min >= -1e-9) break;
        if (any) last = std::min(last, r + 1);
      }
      if (found) break;
    }
    if (best_min < -1e-9) {
      ++out.outside;
      // Distance to the tet's point with the negative coordinates clamped away: an upper bound
      // of the distance to the tet.
      std::array<double, 4> b = out.beta[i];
      double sum = 0;
      for (double& x : b) sum += x = std::max(x, 0.0);
      Eigen::Vector3d nearest = Eigen::Vector3d::Zero();
      for (int k = 0; k < 4; ++k) nearest += (b[k] / sum) * mesh.rest[mesh.tets[out.tet[i]][k]];
      out.farthest = std::max(out.farthest, (nearest - q).norm());
    }
  }
  return out;
}

}  // namespace sinew
