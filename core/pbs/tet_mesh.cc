#include "core/pbs/tet_mesh.h"

#include <algorithm>
#include <limits>

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

TetEmbedding EmbedInTets(const TetMesh& mesh, const VoxelGrid& grid, std::span<const float> points) {
  TetEmbedding out;
  const size_t n = points.size() / 3;
  out.tet.resize(n);
  out.beta.resize(n);
  // Voxel centres, for points whose voxel is empty (a surface vertex just outside the solid).
  std::vector<Eigen::Vector3d> centre(grid.voxel_count());
  for (size_t e = 0; e < grid.voxel_count(); ++e) {
    centre[e] = (grid.vertices[grid.corners[e][0]] + grid.vertices[grid.corners[e][7]]) / 2;
  }
  for (size_t i = 0; i < n; ++i) {
    const Eigen::Vector3d q(points[3 * i], points[3 * i + 1], points[3 * i + 2]);
    int32_t voxel = grid.VoxelAt(grid.CellOf(q));
    if (voxel < 0) {
      double best = std::numeric_limits<double>::infinity();
      for (size_t e = 0; e < centre.size(); ++e) {
        const double d = (centre[e] - q).squaredNorm();
        if (d < best) {
          best = d;
          voxel = int32_t(e);
        }
      }
    }
    // The voxel's tet whose smallest coordinate is largest: the containing one when there is one.
    const int32_t first = mesh.voxel_first_tet[voxel];
    const int32_t last = size_t(voxel) + 1 < mesh.voxel_first_tet.size() ? mesh.voxel_first_tet[voxel + 1]
                                                                           : int32_t(mesh.tets.size());
    double best_min = -std::numeric_limits<double>::infinity();
    for (int32_t t = first; t < last; ++t) {
      const auto b = Barycentric(mesh, uint32_t(t), q);
      const double lowest = *std::min_element(b.begin(), b.end());
      if (lowest > best_min) {
        best_min = lowest;
        out.tet[i] = uint32_t(t);
        out.beta[i] = b;
      }
    }
    out.outside += best_min < -1e-9;
  }
  return out;
}

}  // namespace sinew
