// Mean value coordinates (Ju, Schaefer, Warren 2005) of points with respect to a closed triangle
// cage: φ_j(x) with Σ_j φ_j = 1 and Σ_j φ_j c_j = x (linear precision), for x inside, on or
// outside the cage. They can be negative for non-convex cages and every cage vertex influences
// every point (dense rows).
//
// Robustness (seed-004 §4.2): spherical angles use the atan2 form; the sine of each dihedral
// angle comes from the determinant of the three unit vectors (no sqrt(1 − c²) cancellation);
// points within 1e-12·D of the cage surface (D = bounding-box diagonal) take the coordinates of
// their closest point on it: at a vertex φ = e_j, on an edge (including the diagonal of a
// triangulated quad) the 1-D interpolation of its two endpoints, on a face that triangle's
// barycentric coordinates. A triangle whose plane passes very close to x while x lies outside it,
// where the closed form cancels catastrophically, is evaluated by extrapolation from two points
// lifted off its plane (relative error ~1e-12), and contributes exactly nothing when x lies in
// its plane. Measured linear-precision errors stay below ~1e-12·D inside the test cages and right
// next to their surface; outside a cage rounding grows with the distance (the weights of the near
// and far sheets of the surface cancel), see tests/core/mvc_test.cc.
#pragma once

#include <cstdint>
#include <span>

#include <Eigen/Core>

#include "core/parallel/thread_pool.h"

namespace sinew {

// A closed, outward-oriented triangle cage.
struct CageGeometry {
  Eigen::Matrix3Xd vertices;                             // 3 x n
  Eigen::Matrix<uint32_t, 3, Eigen::Dynamic> triangles;  // 3 x f, counter-clockwise seen from outside
  double diagonal() const;                               // bounding-box diagonal D (0 when empty)
};

// MVC of one point x (inside, on, or outside the cage): writes n = cage.vertices.cols()
// coordinates to `out`. Partition of unity and linear precision Σ φ_j c_j = x hold up to
// rounding; on a vertex: e_j; on an edge: 1-D interpolation of its endpoints; on a face: the
// face's barycentric coordinates; in a face's plane but outside it: that triangle is skipped.
// Preconditions: out.size() == n (else nothing is written), triangle indices < n. An empty cage
// writes nothing; a non-finite x gets NaN coordinates. Allocates O(n + f) scratch.
void MeanValueCoordinates(const CageGeometry& cage, const Eigen::Vector3d& x, std::span<double> out);

// All points (3 x m) -> m x n row-major matrix Φ, row i = coordinates of point i, so that
// Φ · cage.vertices.transpose() reproduces points.transpose(). Parallel over points when pool
// is not null.
Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> MeanValueCoordinates(
    const CageGeometry& cage, const Eigen::Matrix3Xd& points, ThreadPool* pool);

}  // namespace sinew
