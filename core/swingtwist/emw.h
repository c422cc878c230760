// Energy-minimizing weights (Kavan & Sorkine 2012 §3.2, Eq. 3; spec §2.2–2.4): for one joint,
// the weight w_a of the rotating transform at every grid vertex such that LBS between "the
// subtree turned by a sample rotation" and "the rest held still" deforms the voxel grid as
// elastically as it can, summed over a few sample rotations (swing: R_x(±90°), R_y(±90°);
// twist: R_z(±90°), in the joint's canonical frame).
//
// Energy: Σ_samples Σ_voxels min_R ½ Σ_{12 cube edges (a,b)} ‖(v_a − v_b) − R (ṽ_a − ṽ_b)‖²
// with v_a = ṽ_a + w_a (S_i − I) ṽ_a (the per-edge, best-fit form of Eq. 1; the paper's "min" over
// rᵀKv is a sign slip, spec §2.2). Dirichlet data: w = 1 on the vertices of voxels a rotating
// bone passes through, 0 for the other bones, free where both claim a vertex (the joint).
//
// Solver: local/global block descent. Local: per sample and voxel a 3×3 Procrustes rotation (FitRotation).
// Global: the quadratic in w with the rotations fixed; its matrix H depends only on the samples,
// the grid and the Dirichlet split, so it is factored once (sparse Cholesky) and each iteration is one
// back-substitution (CHOLMOD, sparse.h). H is singular where every sample leaves a vertex in place (the joint point,
// the twist axis): ε·mean(diag H)·L (L the grid's graph Laplacian) is added, ε = 1e-6. Starts
// from harmonic weights (L w = 0, same Dirichlet data); stops when the energy decreases by less
// than `tolerance` relative, or after `max_iterations`.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/swingtwist/voxels.h"

namespace sinew {

struct EmwOptions {
  double epsilon = 1e-6;
  int max_iterations = 30;
  double tolerance = 1e-4;
};

struct EmwResult {
  std::vector<double> weights;  // per grid vertex
  // The energy (with the ε term) of the harmonic start and after each iteration.
  std::vector<double> energy;
  int iterations = 0;
};

// Per grid vertex: 1 or 0 (Dirichlet) or -1 (free).
using Dirichlet = std::vector<int8_t>;

// `vertices`: the grid vertices in the joint's canonical frame (the samples turn about its
// origin). A connected component of the grid without a Dirichlet vertex (a mesh part with no
// bone inside, e.g. an eyeball) is left out of the solve and takes, vertex by vertex, the weight
// of the nearest solved grid vertex. FAILED_PRECONDITION when no component has a Dirichlet
// vertex or the factorization fails. `keep_going` (may be empty) is asked after each of the two
// factorizations and before each local/global iteration; when it returns false the solve ends
// with CANCELLED, so a caller waits at most one factorization or one iteration for it to stop.
absl::StatusOr<EmwResult> SolveEmw(const VoxelGrid& grid, std::span<const Eigen::Vector3d> vertices,
                                   const Dirichlet& dirichlet, std::span<const Eigen::Matrix3d> samples,
                                   const EmwOptions& options = {},
                                   const std::function<bool()>& keep_going = {});

// The local step's fit: the proper rotation R maximising tr(R cov), cov = Σ rest movedᵀ over a
// voxel's edges (moved ≈ R rest, Kabsch's answer: JacobiSVD's V Uᵀ with the reflection turned
// away). Newton steps on R ← exp([ω]) R from `start` — the voxel's fit at the previous local
// step, which the next hardly moves (two or three steps); JacobiSVD where a step would not be a
// Newton step of a maximum (the fit over 0.5 rad from `start`, a cov of rank one or less, or
// singular values whose pairwise sums vanish) or it has not settled within eight. Agrees with
// Kabsch's to rounding (tests/core/emw_test.cc); `newton_steps` (when given): the steps taken,
// or -1 where it fell back to the SVD.
Eigen::Matrix3d FitRotation(const Eigen::Matrix3d& cov, const Eigen::Matrix3d& start, int* newton_steps = nullptr);

// The samples in the joint's canonical frame: with n = 1 the paper's (R_x(±90°), R_y(±90°) for
// the swing; R_z(±90°) for the twist); with n > 1 the angles ±(90°/n)·q, q = 1..n, about each
// axis (4n swing and 2n twist samples; the paper's Fig. 11 compares 4 with 32).
std::vector<Eigen::Matrix3d> SwingSamples(int n = 1);
std::vector<Eigen::Matrix3d> TwistSamples(int n = 1);

// Bones as segments from a joint to each of its children, moving with the joint (its proximal
// end). For joint j: 1 on the vertices of voxels that a bone of j's subtree passes through, 0
// for every other bone's, -1 (free) for vertices both claim and for the rest. The voxel test
// is a closed slab test widened by 1e-9 h. `conflicts`: vertices both claimed.
Dirichlet BoneDirichlet(const VoxelGrid& grid, std::span<const Eigen::Vector3d> rest_joints,
                        std::span<const int32_t> parents, size_t joint, size_t* conflicts = nullptr);

}  // namespace sinew
