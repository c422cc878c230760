// The tetrahedral mesh of position-based skinning (Abu Rumman & Fratarcangeli, seed 002; notes in
// ../shared/specs/seed-002-position-based-skinning.md §2.1–2.2): its vertices are the simulation
// particles, and the render mesh follows them through fixed barycentric coordinates.
//
// Three sources make one: CGAL's Mesh_3 (core/pbs/mesher.h, surface-respecting), the client's
// own tets uploaded with the rig (Rig::tet_mesh), and the spec's voxel tetrahedralizer here —
// the solid voxelization of the rest mesh (core/swingtwist/voxels.h, robust to holes and several
// parts) with every occupied voxel split into the 6 tetrahedra around its main diagonal (corner 0
// to corner 7; Kuhn/Freudenthal), the same split in every voxel, so neighbouring voxels share
// their faces' diagonals and the mesh is conforming. It only approximates the surface; the
// embedding absorbs the mismatch.
//
// Data layout: particles as double rest positions (the solver keeps floats per session); tets as
// four particle indices ordered so that the signed rest volume (1/6)(p2−p1)×(p3−p1)·(p4−p1) is
// positive.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "absl/status/statusor.h"
#include "core/swingtwist/voxels.h"

namespace sinew {

struct TetMesh {
  std::vector<Eigen::Vector3d> rest;               // particles
  std::vector<std::array<uint32_t, 4>> tets;       // signed rest volume > 0
  std::vector<double> rest_volume;                 // per tet
  std::string source;                              // "voxels", "mesher" or "rig"
  size_t rejected = 0;                             // degenerate tets left out
  size_t reoriented = 0;                           // tets given inside out (rig), reordered
  size_t cut = 0;                                  // tets removed by RemoveTets (bridging parts)
};

// Signed volume (1/6)(b − a)×(c − a)·(d − a).
double SignedVolume(const Eigen::Vector3d& a, const Eigen::Vector3d& b, const Eigen::Vector3d& c,
                    const Eigen::Vector3d& d);

// Appends `tets` (indices into mesh.rest) to the mesh, each ordered so that its signed volume is
// positive (counted in `reoriented` when it was not); those with |volume| ≤ 1e-12 scale³ are
// left out and counted in `rejected`.
void AddTets(TetMesh& mesh, std::span<const std::array<uint32_t, 4>> tets, double scale);

// Removes the tets with keep[t] == 0.
void RemoveTets(TetMesh& mesh, std::span<const uint8_t> keep);

// The voxel tetrahedralization of `grid`. INVALID_ARGUMENT for an empty grid.
absl::StatusOr<TetMesh> VoxelTetMesh(const VoxelGrid& grid);

// The most tets an uploaded tet mesh may have at one particle: every constraint through a
// particle needs a colour of its own in the solver's colouring (its cost grows with the square of
// the count, and each colour is a barrier in every frame). A tetrahedralization has tens.
inline constexpr uint32_t kMaxTetsPerParticle = 1024;

// The tets uploaded with a rig: positions 3 floats per particle, tets 4 indices each (checked by
// BuildRig). FAILED_PRECONDITION when every tet is degenerate; RESOURCE_EXHAUSTED, naming the
// particle, when one is a corner of more than kMaxTetsPerParticle of the tets kept.
absl::StatusOr<TetMesh> UploadedTetMesh(std::span<const float> positions, std::span<const uint32_t> tets);

// Render-mesh vertices as barycentric combinations of one tet's particles (β sums to 1, so the
// rest positions are reproduced exactly). A point inside some tet takes it (β ≥ −1e-9);
// otherwise, among the tets near it (those in the cells of a uniform grid around it, the nearest
// cells that have any, and one ring more), the one whose smallest β is largest, with the
// extrapolated (possibly negative) β. With `fits`, tets for which fits(point, tet) holds are
// preferred where there are any. `progress` (optional) is told the fraction of points done every
// few thousand points; false from it stops the embedding (`stopped`, the rest left on tet 0).
struct TetEmbedding {
  std::vector<uint32_t> tet;                 // per point
  std::vector<std::array<double, 4>> beta;   // per point
  size_t outside = 0;                        // points in no tet (extrapolated)
  double farthest = 0;                       // of those, the farthest from its tet (at most), rig units
  size_t grid_cells = 0;                     // the search grid's: at most 2 (64 per tet + 4096)
  bool stopped = false;                      // progress said stop
};
TetEmbedding EmbedInTets(const TetMesh& mesh, std::span<const float> points,
                         const std::function<bool(size_t, uint32_t)>& fits = {},
                         const std::function<bool(double)>& progress = {});

}  // namespace sinew
