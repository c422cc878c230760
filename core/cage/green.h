// Green coordinates (Lipman, Levin, Cohen-Or 2008) of points with respect to a closed triangle
// cage, with the exterior extension, and the per-frame deformation
//
//   η' = Σ_i φ_i(η) v'_i + Σ_j ψ_j(η) s_j n(t'_j)
//
// (seed-004 §4.3): v'_i deformed cage vertices, n(t'_j) unit outward normal of deformed face j,
// s_j its stretch factor. The coordinates are the boundary integrals of Green's third identity,
// G(ξ, η) = -1 / (4π |ξ - η|):
//
//   φ_i(η) = ∫_{N(v_i)} Γ_i(ξ) ∂G/∂n(ξ, η) dσ = (1/4π) Σ_{t ∋ v_i} ∫_t Γ_i(ξ) n·(ξ-η) / |ξ-η|³ dσ
//   ψ_j(η) = -∫_{t_j} G(ξ, η) dσ        = (1/4π) ∫_{t_j} 1 / |ξ-η| dσ   (> 0)
//
// with Γ_i the piecewise-linear hat function of vertex i. Inside the cage Σφ = 1 and
// Σφ_i v_i + Σψ_j n_j = η (rest reproduction), hence invariance under similarity transforms of
// the cage; GC are not affine invariant and not linear in the cage (normals, stretch).
//
// Evaluation [I]: instead of LLCO08's GCTriInt (angles, logarithms and a division by
// N_{l+1}·v_l that loses digits as the point approaches a face) each face is integrated with
// the equivalent closed forms of the constant single layer and the linear double layer of a flat
// triangle: the signed solid angle Ω_t (Van Oosterom–Strackee, atan2) and the edge integrals
// E_e = ∫_e 1/|ξ-η| ds = ln((|a|+|b|+L)/(|a|+|b|-L)):
//   ψ_t     = (Σ_e d_e E_e - h Ω_t) / 4π
//   φ_t,k   = (Γ_k(p) Ω_t - h Σ_e (∇Γ_k · ν_e) E_e) / 4π
// (h = signed distance from η to the face plane, positive on the inner side; p = projection of
// η on it; ν_e, d_e = outward in-plane edge normal and distance from p to edge e). They agree
// with a port of the LLCO08 algorithm (~1e-13) and with brute-force quadrature of the integrals
// above (see tests/core/green_test.cc). Near a face they stay exact to rounding at any distance
// (LLCO08's form loses ~ε·D/distance there: 5e-9 in φ at 1e-7·D); near an edge or vertex the
// error grows like ε·D/distance (|Σφ - 1| ≈ 5e-10 at 1e-8·D from an edge).
//
// Exterior points [X/C + I]: outside the cage the raw integrals give Σφ ≈ 0 and reproduce 0
// (CageLab's test: Σφ < 0.5 means outside). LLCO08's extension continues the coordinates
// analytically through an exit face t_e: solve η = Σ_k α_k v_{e,k} + β n_e with Σ_k α_k = 1
// (the 4x4 system of seed-004 §4.3, solved in closed form: β = n_e·(η - v_{e,1}), α = the
// barycentric coordinates of η - β n_e) and add α_k to φ_{e,k}, β to ψ_e. Exit face: the cage
// face nearest to η (Euclidean point-triangle distance); among faces at the same distance (the
// closest point on a shared edge or vertex) the one whose plane η lies furthest in front of,
// i.e. the face η "sees through". CageLab instead picks, among the cage faces crossed by mesh
// triangles, the one closest to the point; with points only (no mesh connectivity) the nearest
// face is its natural stand-in: a mesh vertex just outside face t has t as nearest face, and
// the result is continuous across the interior of t. The continuation jumps where the nearest
// face changes (the exterior medial axis of the cage), as any single-face extension must; the
// jump vanishes at rest and grows with the distance from the cage.
//
// Points on the cage (within 1e-8·D of its surface, where the integrals are singular or lose
// their digits) take the same extension through their nearest face, with the raw integrals
// sampled 1e-7·D outside the surface along its normal (the bisector on an edge, the sum of the
// face normals at a vertex); their coordinates are the interior limit up to O(1e-7·D), with
// Σφ = 1 and rest reproduction to ~1e-10·D.
//
// Preconditions: the cage is closed and outward oriented (counter-clockwise seen from outside,
// see cage_check.h), triangle indices are < vertices.cols(), faces have non-zero area
// (zero-area faces contribute nothing).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "core/cage/mvc.h"
#include "core/parallel/thread_pool.h"

namespace sinew {

struct GreenCoordinates {
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> phi;  // m x n (cage vertices)
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> psi;  // m x f (cage faces)
  // Per point: 1 if the exterior extension was applied (the point is outside the cage, or on
  // its surface within 1e-8·D), 0 for interior points.
  std::vector<uint8_t> exterior;
  // The first point inside the cage more than once (raw Σφ, its winding number, 1.5 or more: a
  // cage of overlapping closed shells, or one that passes through itself), and that sum; -1
  // when none. There the raw integrals reproduce w·η and sum to w, so its coordinates are wrong
  // (callers refuse it: cage-green; MVC divides by its sum and is not affected).
  int64_t first_overlap = -1;
  double overlap_winding = 0;
};

// Coordinates of points (3 x m) with respect to the rest cage; exterior points get the
// extension through their nearest face (see above). Parallel over points when pool is not null.
// `progress` (may be empty) is called after each chunk of points with the fraction done; once it
// returns false the chunks not started are skipped and the result is incomplete (the caller
// that refused discards it).
GreenCoordinates ComputeGreenCoordinates(const CageGeometry& cage, const Eigen::Matrix3Xd& points,
                                         ThreadPool* pool, const std::function<bool(double)>& progress = {});

// Per-face stretch factors s_j of the deformed cage relative to the rest cage (seed-004 §4.3):
// s_j = sqrt(|u'|²|v|² - 2(u'·v')(u·v) + |v'|²|u|²) / (√8 area(t_j)), u, v = edges v2-v1, v3-v1
// at rest, u', v' deformed. 1 at rest, k under uniform scale k, 1 under rotation. Zero-area rest
// faces get 1. deformed_vertices has the rest cage's shape (3 x n).
Eigen::VectorXd GreenStretch(const CageGeometry& rest, const Eigen::Matrix3Xd& deformed_vertices);

// scaled_normals row j = s_j n(t'_j) (f x 3), the face term of the deformation. Resized only when
// its row count is not the face count, so a reused matrix makes this allocation-free.
void GreenFaceTerms(const CageGeometry& rest, const Eigen::Matrix3Xd& deformed_vertices,
                    Eigen::Matrix<double, Eigen::Dynamic, 3, Eigen::RowMajor>& scaled_normals);

// out (3 floats per point, x y z) = Σ_i φ_i v'_i + Σ_j ψ_j scaled_normals_j for every point of gc
// (out.size() == 3 * gc.phi.rows()). Parallel over points when pool is not null. Allocates
// nothing.
void GreenDeform(const GreenCoordinates& gc, const Eigen::Matrix3Xd& deformed_vertices,
                 const Eigen::Matrix<double, Eigen::Dynamic, 3, Eigen::RowMajor>& scaled_normals,
                 std::span<float> out, ThreadPool* pool);

}  // namespace sinew
