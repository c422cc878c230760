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
// positive; voxel e's tets start at voxel_first_tet[e], 6 each until RemoveTets cuts some.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
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
  size_t cut = 0;                                  // tets removed by RemoveTets (bridging parts)
};

// Removes the tets with keep[t] == 0; voxel_first_tet follows (a voxel may be left with none).
void RemoveTets(TetMesh& mesh, std::span<const uint8_t> keep);

// The generalized winding number of the triangle mesh at p (±1 inside, 0 outside; holes blur it).
double WindingNumber(std::span<const float> positions, std::span<const uint32_t> triangles, const Eigen::Vector3d& p);

// Signed volume (1/6)(b − a)×(c − a)·(d − a).
double SignedVolume(const Eigen::Vector3d& a, const Eigen::Vector3d& b, const Eigen::Vector3d& c,
                    const Eigen::Vector3d& d);

// The voxel tetrahedralization of `grid`. INVALID_ARGUMENT for an empty grid.
absl::StatusOr<TetMesh> VoxelTetMesh(const VoxelGrid& grid);

// Render-mesh vertices as barycentric combinations of one tet's particles (β sums to 1, so the
// rest positions are reproduced exactly). A point inside a tet of its voxel takes that tet
// (β ≥ −1e-9); otherwise the tet of its voxel and the 26 around it (or, with none there, of the
// nearest voxel with tets) whose smallest β is largest, with the extrapolated (possibly negative)
// β. With `fits`, tets for which fits(point, tet) holds are preferred where there are any.
struct TetEmbedding {
  std::vector<uint32_t> tet;                 // per point
  std::vector<std::array<double, 4>> beta;   // per point
  size_t outside = 0;                        // points in no tet (extrapolated)
};
TetEmbedding EmbedInTets(const TetMesh& mesh, const VoxelGrid& grid, std::span<const float> points,
                         const std::function<bool(size_t, uint32_t)>& fits = {});

}  // namespace sinew
