#include "core/geometry/triangle.h"

namespace sinew {

Eigen::Vector3d ClosestPointBarycentric(const Eigen::Vector3d& a, const Eigen::Vector3d& b, const Eigen::Vector3d& c,
                                        const Eigen::Vector3d& p) {
  const Eigen::Vector3d ab = b - a, ac = c - a, ap = p - a;
  const double d1 = ab.dot(ap), d2 = ac.dot(ap);
  if (d1 <= 0 && d2 <= 0) return {1, 0, 0};
  const Eigen::Vector3d bp = p - b;
  const double d3 = ab.dot(bp), d4 = ac.dot(bp);
  if (d3 >= 0 && d4 <= d3) return {0, 1, 0};
  const double vc = d1 * d4 - d3 * d2;
  if (vc <= 0 && d1 >= 0 && d3 <= 0 && d1 - d3 > 0) {
    const double v = d1 / (d1 - d3);
    return {1 - v, v, 0};
  }
  const Eigen::Vector3d cp = p - c;
  const double d5 = ab.dot(cp), d6 = ac.dot(cp);
  if (d6 >= 0 && d5 <= d6) return {0, 0, 1};
  const double vb = d5 * d2 - d1 * d6;
  if (vb <= 0 && d2 >= 0 && d6 <= 0 && d2 - d6 > 0) {
    const double w = d2 / (d2 - d6);
    return {1 - w, 0, w};
  }
  const double va = d3 * d6 - d5 * d4;
  if (va <= 0 && d4 - d3 >= 0 && d5 - d6 >= 0 && (d4 - d3) + (d5 - d6) > 0) {
    const double w = (d4 - d3) / ((d4 - d3) + (d5 - d6));
    return {0, 1 - w, w};
  }
  const double sum = va + vb + vc;
  if (sum > 0 && va >= 0 && vb >= 0 && vc >= 0) return Eigen::Vector3d(va, vb, vc) / sum;
  // Degenerate triangle (collinear, or two corners at one point, whose edge regions above have no
  // length to divide by: until 2026-12-07 a == b gave 0/0 there): closest point over its edges.
  Eigen::Vector3d best(1, 0, 0);
  double best_d = (p - a).squaredNorm();
  const Eigen::Vector3d* v[3] = {&a, &b, &c};
  for (int k = 0; k < 3; ++k) {
    const Eigen::Vector3d& s = *v[k];
    const Eigen::Vector3d& e = *v[(k + 1) % 3];
    const Eigen::Vector3d se = e - s;
    const double len2 = se.squaredNorm();
    const double t = len2 > 0 ? std::clamp(se.dot(p - s) / len2, 0.0, 1.0) : 0.0;
    const double d = (p - (s + t * se)).squaredNorm();
    if (d < best_d) {
      best_d = d;
      best.setZero();
      best[k] = 1 - t;
      best[(k + 1) % 3] = t;
    }
  }
  return best;
}

}  // namespace sinew
