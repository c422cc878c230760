#include "core/pbs/tet_mesh.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include <Eigen/Dense>

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

absl::StatusOr<TetMesh> VoxelTetMesh(const VoxelGrid& grid) {
  if (grid.voxel_count() == 0) return absl::InvalidArgumentError("tetrahedral mesh: the voxel grid is empty");
  TetMesh m;
  m.rest = grid.vertices;
  m.tets.reserve(6 * grid.voxel_count());
  m.voxel_first_tet.resize(grid.voxel_count());
  const double floor = 1e-12 * grid.h * grid.h * grid.h;
  for (size_t e = 0; e < grid.voxel_count(); ++e) {
    m.voxel_first_tet[e] = int32_t(m.tets.size());
    for (const auto& k : kVoxelTets) {
      std::array<uint32_t, 4> t;
      for (int i = 0; i < 4; ++i) t[i] = uint32_t(grid.corners[e][k[i]]);
      double v = SignedVolume(m.rest[t[0]], m.rest[t[1]], m.rest[t[2]], m.rest[t[3]]);
      if (v < 0) {
        std::swap(t[2], t[3]);
        v = -v;
      }
      if (v <= floor) {
        ++m.rejected;
        continue;
      }
      m.tets.push_back(t);
      m.rest_volume.push_back(v);
    }
  }
  return m;
}

void RemoveTets(TetMesh& mesh, std::span<const uint8_t> keep) {
  size_t kept = 0, voxel = 0;
  const size_t voxels = mesh.voxel_first_tet.size(), before = mesh.tets.size();
  std::vector<int32_t> first(voxels);
  for (size_t t = 0; t < before; ++t) {
    // Voxels whose first tet is t start at the compacted index.
    while (voxel < voxels && size_t(mesh.voxel_first_tet[voxel]) <= t) first[voxel++] = int32_t(kept);
    if (!keep[t]) continue;
    mesh.tets[kept] = mesh.tets[t];
    mesh.rest_volume[kept] = mesh.rest_volume[t];
    ++kept;
  }
  while (voxel < voxels) first[voxel++] = int32_t(kept);
  mesh.tets.resize(kept);
  mesh.rest_volume.resize(kept);
  mesh.voxel_first_tet = std::move(first);
  mesh.cut += before - kept;
}

double WindingNumber(std::span<const float> positions, std::span<const uint32_t> triangles, const Eigen::Vector3d& p) {
  double omega = 0;  // solid angles (Van Oosterom & Strackee)
  for (size_t t = 0; t + 2 < triangles.size(); t += 3) {
    Eigen::Vector3d v[3];
    for (int k = 0; k < 3; ++k) {
      const size_t i = triangles[t + k];
      v[k] = Eigen::Vector3d(positions[3 * i], positions[3 * i + 1], positions[3 * i + 2]) - p;
    }
    const double la = v[0].norm(), lb = v[1].norm(), lc = v[2].norm();
    const double num = v[0].dot(v[1].cross(v[2]));
    const double den = la * lb * lc + v[0].dot(v[1]) * lc + v[1].dot(v[2]) * la + v[2].dot(v[0]) * lb;
    omega += 2 * std::atan2(num, den);
  }
  return omega / (4 * std::numbers::pi);
}

TetEmbedding EmbedInTets(const TetMesh& mesh, const VoxelGrid& grid, std::span<const float> points,
                         const std::function<bool(size_t, uint32_t)>& fits) {
  TetEmbedding out;
  const size_t n = points.size() / 3;
  out.tet.resize(n);
  out.beta.resize(n);
  auto tets_of = [&](int32_t voxel) {
    const int32_t first = mesh.voxel_first_tet[voxel];
    const int32_t last = size_t(voxel) + 1 < mesh.voxel_first_tet.size() ? mesh.voxel_first_tet[voxel + 1]
                                                                           : int32_t(mesh.tets.size());
    return std::pair{first, last};
  };
  // Voxel centres (of voxels with tets), for points with no tet nearby.
  std::vector<Eigen::Vector3d> centre(grid.voxel_count());
  for (size_t e = 0; e < grid.voxel_count(); ++e) {
    centre[e] = (grid.vertices[grid.corners[e][0]] + grid.vertices[grid.corners[e][7]]) / 2;
  }
  for (size_t i = 0; i < n; ++i) {
    const Eigen::Vector3d q(points[3 * i], points[3 * i + 1], points[3 * i + 2]);
    double best_min = -std::numeric_limits<double>::infinity();
    bool found = false;
    // The tet whose smallest coordinate is largest (the containing one when there is one) among
    // the fitting tets of `voxel`.
    auto consider = [&](int32_t voxel, bool check) {
      if (voxel < 0) return;
      const auto [first, last] = tets_of(voxel);
      for (int32_t t = first; t < last; ++t) {
        if (check && fits && !fits(i, uint32_t(t))) continue;
        const auto b = Barycentric(mesh, uint32_t(t), q);
        const double lowest = *std::min_element(b.begin(), b.end());
        if (lowest > best_min) {
          best_min = lowest;
          out.tet[i] = uint32_t(t);
          out.beta[i] = b;
          found = true;
        }
      }
    };
    const std::array<int, 3> cell = grid.CellOf(q);
    // Its voxel, then (no tet contains it there) the 26 around it; fitting tets first.
    for (bool check : {true, false}) {
      consider(grid.VoxelAt(cell), check);
      if (found && best_min >= -1e-9) break;
      for (int dz = -1; dz <= 1; ++dz) {
        for (int dy = -1; dy <= 1; ++dy) {
          for (int dx = -1; dx <= 1; ++dx) {
            if (dx != 0 || dy != 0 || dz != 0) consider(grid.VoxelAt({cell[0] + dx, cell[1] + dy, cell[2] + dz}), check);
          }
        }
      }
      if (found) break;
    }
    if (!found) {  // far from every tet: the nearest voxel that has some
      double best = std::numeric_limits<double>::infinity();
      int32_t voxel = -1;
      for (size_t e = 0; e < centre.size(); ++e) {
        const auto [first, last] = tets_of(int32_t(e));
        const double d = (centre[e] - q).squaredNorm();
        if (first < last && d < best) {
          best = d;
          voxel = int32_t(e);
        }
      }
      consider(voxel, false);
    }
    out.outside += best_min < -1e-9;
  }
  return out;
}

}  // namespace sinew
