// Solid voxelization of a rest mesh for the elasticity-inspired weights (Kavan & Sorkine 2012
// §3.1, §3.5; spec §2.1): the paper voxelizes with binvox (Nooruddin & Turk 2003), which
// tolerates imperfect meshes. This is that algorithm without the dependency:
//   1. a regular grid of voxel size h over the mesh's bounding box padded by one voxel;
//   2. surface voxels: every voxel a triangle overlaps (separating-axis test);
//   3. interior voxels: along each axis, rows of voxel centres are cast against the triangles;
//      a centre is inside for that axis after an odd number of crossings; inside when at least 2
//      of the 3 axes say so — a hole or a duplicated surface fools one axis, not two;
//   4. occupied = surface ∪ interior, and the voxel CellOf gives every mesh vertex (so that
//      each vertex has an occupied voxel to interpolate from);
//   5. grid vertices = the corners of occupied voxels, numbered compactly, and their connected
//      components through shared corners (the solver couples voxels that share one corner).
// Deterministic; memory is bounded by `max_cells` (the padded grid's voxel count).
#pragma once

#include <array>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/rig/rig.h"

namespace sinew {

struct VoxelGrid {
  double h = 0;
  Eigen::Vector3d origin = Eigen::Vector3d::Zero();  // corner of voxel (0, 0, 0)
  std::array<int, 3> dims{};                        // voxels per axis
  // Occupied voxels: their cell (x + dims.x (y + dims.y z)) and corner vertices, corner c at
  // offset (c & 1, c >> 1 & 1, c >> 2 & 1).
  std::vector<int32_t> cells;
  std::vector<std::array<int32_t, 8>> corners;
  std::vector<Eigen::Vector3d> vertices;  // grid vertices (corners of occupied voxels)
  std::vector<int32_t> component;         // per grid vertex
  int components = 0;
  size_t surface_voxels = 0, interior_voxels = 0;  // interior: occupied by the vote, not the surface

  size_t voxel_count() const { return cells.size(); }
  // The voxel containing p (clamped to the grid) as integer coordinates.
  std::array<int, 3> CellOf(const Eigen::Vector3d& p) const;
  // Index of the occupied voxel at integer coordinates, or -1.
  int32_t VoxelAt(const std::array<int, 3>& c) const;

  std::vector<int32_t> voxel_of_cell;  // per cell of the grid: occupied voxel index or -1
};

// The 12 edges of a voxel as pairs of corner numbers (corners that differ in one offset bit).
inline constexpr int kVoxelEdges[12][2] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {0, 2}, {1, 3},
                                           {4, 6}, {5, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}};

// For grid vertices of components that are not `anchored` (per component), the nearest grid
// vertex of an anchored component (a k-d tree over them, in float); -1 for vertices of anchored components. The
// solvers leave unanchored parts (a mesh part with no bone or joint in it) out and copy these.
std::vector<int32_t> NearestAnchoredVertex(const VoxelGrid& grid, const std::vector<uint8_t>& anchored);

struct VoxelOptions {
  double h = 0;                      // voxel size, > 0
  size_t max_cells = size_t{1} << 26;  // of the padded grid
};

// INVALID_ARGUMENT for h <= 0 or a mesh without triangles; RESOURCE_EXHAUSTED (naming the
// voxel size and the cell count) when the grid would exceed max_cells, or when the triangles'
// bounding boxes cover more than 32·max_cells + 64·triangles voxels or, along an axis, more than
// max_cells / 4 + 4·triangles rows (overlapping or huge triangles at a fine voxel size).
absl::StatusOr<VoxelGrid> Voxelize(std::span<const float> positions, std::span<const uint32_t> triangles,
                                   const VoxelOptions& options);

}  // namespace sinew
