// The tetrahedral mesh of position-based skinning (Abu Rumman & Fratarcangeli, seed 002; notes in
// ../shared/specs/seed-002-position-based-skinning.md §2.1–2.2): its vertices are the simulation
// particles, and the render mesh follows them through fixed barycentric coordinates.
//
// Built here by the spec's voxel tetrahedralizer: the solid voxelization of the rest mesh
// (core/swingtwist/voxels.h, robust to holes and several parts) with every occupied voxel split
// into the 6 tetrahedra around its main diagonal (corner 0 to corner 7; Kuhn/Freudenthal), the
// same split in every voxel, so neighbouring voxels share their faces' diagonals and the mesh
// is conforming. Only approximates the surface; the embedding absorbs the mismatch.
//
// Data layout: particles as double rest positions (the solver keeps floats per session); tets as
// four particle indices ordered so that the signed rest volume (1/6)(p2−p1)×(p3−p1)·(p4−p1) is
// positive; voxel e's tets are 6e .. 6e+5 (the embedding's point location uses it).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "absl/status/statusor.h"
#include "core/swingtwist/voxels.h"

namespace sinew {

struct TetMesh {
  std::vector<Eigen::Vector3d> rest;               // particles (the voxel grid's vertices)
  std::vector<std::array<uint32_t, 4>> tets;       // signed rest volume > 0
  std::vector<double> rest_volume;                 // per tet
  std::vector<int32_t> voxel_first_tet;            // per occupied voxel: its first tet (6 each)
  size_t rejected = 0;                             // degenerate tets left out (none for voxels)
};

// Signed volume (1/6)(b − a)×(c − a)·(d − a).
double SignedVolume(const Eigen::Vector3d& a, const Eigen::Vector3d& b, const Eigen::Vector3d& c,
                    const Eigen::Vector3d& d);

// The voxel tetrahedralization of `grid`. INVALID_ARGUMENT for an empty grid.
absl::StatusOr<TetMesh> VoxelTetMesh(const VoxelGrid& grid);

// Render-mesh vertices as barycentric combinations of one tet's particles (β sums to 1, so the
// rest positions are reproduced exactly). A point inside a tet of its voxel takes that tet
// (β ≥ −1e-9); otherwise the tet of its voxel, or of the nearest occupied voxel, whose smallest
// β is largest, with the extrapolated (possibly negative) β.
struct TetEmbedding {
  std::vector<uint32_t> tet;                 // per point
  std::vector<std::array<double, 4>> beta;   // per point
  size_t outside = 0;                        // points in no tet (extrapolated)
};
TetEmbedding EmbedInTets(const TetMesh& mesh, const VoxelGrid& grid, std::span<const float> points);

}  // namespace sinew
