// HRBF fields (seed 000 §2.2) and the compact-support remap (§2.3): the fit interpolates its
// samples' values and gradients, has the thesis' sign convention and the remap's C² joins.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/implicit/hrbf.h"

namespace sinew {
namespace {

// m points spread evenly on a sphere (Fibonacci lattice) and their outward normals.
void Sphere(int m, double radius, Eigen::Matrix3Xd* points, Eigen::Matrix3Xd* normals) {
  points->resize(3, m);
  normals->resize(3, m);
  const double golden = std::numbers::pi * (3 - std::sqrt(5.0));
  for (int i = 0; i < m; ++i) {
    const double y = 1 - 2 * (i + 0.5) / m, r = std::sqrt(1 - y * y), a = golden * i;
    const Eigen::Vector3d n(r * std::cos(a), y, r * std::sin(a));
    normals->col(i) = n;
    points->col(i) = radius * n;
  }
}

TEST(Hrbf, InterpolatesSampleValuesAndGradients) {
  Eigen::Matrix3Xd p, n;
  Sphere(80, 2.0, &p, &n);
  auto h = Hrbf::Fit(p, n);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_LT(h->max_value_residual(), 1e-9);
  EXPECT_LT(h->max_gradient_residual(), 1e-9);
  for (int i = 0; i < p.cols(); ++i) {
    Eigen::Vector3d g;
    EXPECT_NEAR(h->ValueAndGradient(p.col(i), &g), 0.0, 1e-9);
    EXPECT_LE((g - n.col(i)).norm(), 1e-9);
  }
}

// d < 0 inside, > 0 outside, and the zero set follows the sampled surface between samples.
TEST(Hrbf, SignConventionAndSurfaceBetweenSamples) {
  Eigen::Matrix3Xd p, n, q, qn;
  Sphere(100, 1.0, &p, &n);
  auto h = Hrbf::Fit(p, n);
  ASSERT_TRUE(h.ok());
  EXPECT_LT(h->Value(Eigen::Vector3d::Zero()), 0);
  EXPECT_GT(h->Value(Eigen::Vector3d(3, 0, 0)), 0);
  Sphere(37, 1.0, &q, &qn);  // other points of the same sphere
  for (int i = 0; i < q.cols(); ++i) {
    Eigen::Vector3d g;
    const double d = h->ValueAndGradient(q.col(i), &g);
    EXPECT_LT(std::abs(d) / g.norm(), 0.02) << "distance to the zero set at " << i;
    EXPECT_GT(g.normalized().dot(qn.col(i)), 0.99);
  }
}

TEST(Hrbf, GradientMatchesFiniteDifferences) {
  Eigen::Matrix3Xd p, n;
  Sphere(60, 1.5, &p, &n);
  auto h = Hrbf::Fit(p, n);
  ASSERT_TRUE(h.ok());
  for (const Eigen::Vector3d& x : {Eigen::Vector3d(0.3, -0.2, 0.5), Eigen::Vector3d(2, 1, -1), Eigen::Vector3d(0, 0, 0.1)}) {
    Eigen::Vector3d g;
    h->ValueAndGradient(x, &g);
    for (int c = 0; c < 3; ++c) {
      Eigen::Vector3d e = Eigen::Vector3d::Zero();
      e[c] = 1e-6;
      const double fd = (h->Value(x + e) - h->Value(x - e)) / 2e-6;
      EXPECT_NEAR(g[c], fd, 1e-5 * std::max(1.0, std::abs(fd)));
    }
  }
}

// The same samples in metres, centimetres and millimetres fit alike, into the same field scaled:
// a rig's units do not decide whether it prepares. (A review, 2026-12-07, suspected that the
// value residual, a length held to an absolute 1e-6, refused near-duplicate samples in
// centimetres; measured here, residuals are about 1e-14 at 50 units and 1e-16 at 0.06.)
TEST(Hrbf, AFitDoesNotDependOnTheUnits) {
  Eigen::Matrix3Xd unit, n;
  Sphere(40, 1.0, &unit, &n);
  // A near-duplicate of sample 0 (as an unsnapped mirror seam leaves), with its normal.
  unit.conservativeResize(3, 41);
  n.conservativeResize(3, 41);
  const Eigen::Vector3d tangent = n.col(0).unitOrthogonal();
  unit.col(40) = unit.col(0) + 3.3e-4 * tangent;
  n.col(40) = n.col(0);
  auto reference = Hrbf::Fit(0.06 * unit, n);
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (const double scale : {6.0, 50.0}) {
    SCOPED_TRACE(scale);
    auto h = Hrbf::Fit(scale * unit, n);
    ASSERT_TRUE(h.ok()) << h.status();
    // The same field, scaled: d_scale(s x) = (s / 0.06) d_0.06(0.06 x).
    for (const Eigen::Vector3d& x : {Eigen::Vector3d(0.3, -0.2, 0.5), Eigen::Vector3d(1.5, 0.5, -1), Eigen::Vector3d(0, 0, 0)}) {
      const double expected = scale / 0.06 * reference->Value(0.06 * x);
      EXPECT_NEAR(h->Value(scale * x), expected, 1e-6 * scale * std::max(1.0, std::abs(expected) / scale));
    }
  }
}

TEST(Hrbf, RejectsBadInput) {
  Eigen::Matrix3Xd p(3, 2), n(3, 3);
  EXPECT_EQ(Hrbf::Fit(p, n).status().code(), absl::StatusCode::kInvalidArgument);
  Eigen::Matrix3Xd same(3, 3), normals(3, 3);
  same.setZero();
  normals.setZero();
  normals.row(0).setOnes();
  EXPECT_EQ(Hrbf::Fit(same, normals).status().code(), absl::StatusCode::kFailedPrecondition);
}

// t_r(−r) = 1, t_r(0) = 0.5, t_r(r) = 0, decreasing, and C² at ±r (first and second
// derivatives vanish from both sides).
TEST(CompactSupport, QuinticWithC2Joins) {
  const double r = 0.7;
  EXPECT_DOUBLE_EQ(CompactSupport(-r, r), 1.0);
  EXPECT_DOUBLE_EQ(CompactSupport(0, r), 0.5);
  EXPECT_NEAR(CompactSupport(r, r), 0.0, 1e-15);
  EXPECT_NEAR(CompactSupportDerivative(0, r), -15.0 / (16 * r), 1e-12);
  double last = 2;
  for (double d = -1.5 * r; d <= 1.5 * r; d += r / 100) {
    const double t = CompactSupport(d, r);
    EXPECT_LE(t, last + 1e-15);
    last = t;
    const double h = 1e-6;
    EXPECT_NEAR(CompactSupportDerivative(d, r), (CompactSupport(d + h, r) - CompactSupport(d - h, r)) / (2 * h), 1e-6);
  }
  for (double edge : {-r, r}) {
    const double h = 1e-4;
    for (double side : {-1.0, 1.0}) {
      const double x = edge + side * h;
      EXPECT_NEAR(CompactSupportDerivative(x, r), 0.0, 1e-6);
      const double second = (CompactSupportDerivative(x + 1e-7, r) - CompactSupportDerivative(x - 1e-7, r)) / 2e-7;
      EXPECT_NEAR(second, 0.0, 1e-2) << "t'' near " << edge;
    }
  }
  // The inverse values the notes quote: t = 0.3 at u ≈ 0.220, t = 0.9 at u ≈ −0.507.
  EXPECT_NEAR(CompactSupport(0.220 * r, r), 0.3, 2e-3);
  EXPECT_NEAR(CompactSupport(-0.507 * r, r), 0.9, 2e-3);
}

}  // namespace
}  // namespace sinew
