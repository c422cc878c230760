// Small exact-geometry pieces shared by the cage, swing/twist and quality code: the closest point
// of a triangle, and a ray or segment clipped to a box.
#pragma once

#include <algorithm>

#include <Eigen/Core>

namespace sinew {

// Barycentric coordinates (λ0, λ1, λ2) of the point of triangle (a, b, c) closest to p (Ericson,
// Real-Time Collision Detection §5.1.5), with exact zeros in the edge and vertex regions.
// Degenerate triangles fall back to the closest of their three edges.
Eigen::Vector3d ClosestPointBarycentric(const Eigen::Vector3d& a, const Eigen::Vector3d& b, const Eigen::Vector3d& c,
                                        const Eigen::Vector3d& p);

// The point of triangle (a, b, c) closest to p.
inline Eigen::Vector3d ClosestPointOnTriangle(const Eigen::Vector3d& a, const Eigen::Vector3d& b,
                                              const Eigen::Vector3d& c, const Eigen::Vector3d& p) {
  const Eigen::Vector3d l = ClosestPointBarycentric(a, b, c, p);
  return l[0] * a + l[1] * b + l[2] * c;
}

// Slab test: narrows [t0, t1] to the parameters t of origin + t·direction inside the closed box
// [lo, hi]; false when nothing is left. A direction parallel to a slab (±0) is decided by the
// origin alone (0 × ∞ would be NaN where the origin lies on the slab's face).
template <class P, class B>
bool ClipToBox(const P& origin, const P& direction, const B& lo, const B& hi, double& t0, double& t1) {
  for (int k = 0; k < 3; ++k) {
    const double o = double(origin[k]), d = double(direction[k]), l = double(lo[k]), h = double(hi[k]);
    if (d == 0) {
      if (o < l || o > h) return false;
      continue;
    }
    double a = (l - o) / d, b = (h - o) / d;
    if (a > b) std::swap(a, b);
    t0 = std::max(t0, a);
    t1 = std::min(t1, b);
    if (t0 > t1) return false;
  }
  return true;
}

}  // namespace sinew
