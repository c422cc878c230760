// Properties of maximum entropy coordinates (seed-004 §4.4, §5.2 step 3, §11 test 7): valid
// coordinates (positive, partition of unity, linear precision) for any positive prior inside the
// convex hull, the unique barycentric coordinates inside a tetrahedron, a valid prior returned
// unchanged, non-positive masses clamped, and a clean failure report outside the hull.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <random>
#include <vector>

#include <Eigen/Dense>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/cage/mec.h"
#include "core/cage/mvc.h"
#include "tests/core/obj_fixture.h"

namespace sinew {
namespace {

double Diagonal(const Eigen::Matrix3Xd& p) {
  return (p.rowwise().maxCoeff() - p.rowwise().minCoeff()).norm();
}

// Weights ≥ 0, all finite, summing to 1 within 1e-12; returns |Σ w p − x|.
double CheckValid(const Eigen::Matrix3Xd& points, const Eigen::Vector3d& x, const MecResult& r) {
  EXPECT_EQ(r.weights.size(), points.cols());
  if (r.weights.size() != points.cols()) return std::numeric_limits<double>::infinity();
  EXPECT_TRUE(r.weights.allFinite());
  EXPECT_GE(r.weights.minCoeff(), 0);
  EXPECT_NEAR(r.weights.sum(), 1, 1e-12);
  const double error = (points * r.weights - x).norm();
  // The reported error is computed relative to x: it differs from the direct one by the
  // rounding of Σ w p with large coordinates.
  const double rounding = 64 * std::numeric_limits<double>::epsilon() *
                          (points.cwiseAbs().maxCoeff() + x.cwiseAbs().maxCoeff());
  EXPECT_NEAR(r.linear_precision_error, error, 1e-12 * Diagonal(points) + rounding + 1e-6 * error);
  return error;
}

// The 8 corners of [-1, 1]³ plus `extra` random points inside it: the convex hull is the cube.
Eigen::Matrix3Xd CloudInCube(std::mt19937& rng, int extra) {
  std::uniform_real_distribution<double> u(-1, 1);
  Eigen::Matrix3Xd p(3, 8 + extra);
  for (int i = 0; i < 8; ++i) p.col(i) = Eigen::Vector3d(i & 1 ? 1 : -1, i & 2 ? 1 : -1, i & 4 ? 1 : -1);
  for (int i = 0; i < extra; ++i) p.col(8 + i) = Eigen::Vector3d(u(rng), u(rng), u(rng));
  return p;
}

TEST(MaximumEntropyCoordinatesTest, PositivePartitionOfUnityAndLinearPrecisionInsideHull) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(-0.95, 0.95);
  std::uniform_real_distribution<double> mass(1e-3, 1);
  double worst = 0;
  int max_iterations = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const Eigen::Matrix3Xd points = CloudInCube(rng, 4 + trial % 50);
    Eigen::VectorXd prior(points.cols());
    for (Eigen::Index i = 0; i < prior.size(); ++i) prior[i] = mass(rng);
    const Eigen::Vector3d x(u(rng), u(rng), u(rng));
    const MecResult r = MaximumEntropyCoordinates(points, prior, x);
    EXPECT_TRUE(r.converged) << "trial " << trial;
    const double error = CheckValid(points, x, r);
    EXPECT_LE(error, 1e-8 * Diagonal(points)) << "trial " << trial;
    worst = std::max(worst, error / Diagonal(points));
    max_iterations = std::max(max_iterations, r.iterations);
  }
  std::printf("[   info   ] random clouds: max linear-precision error %.2e D, at most %d Newton steps\n",
              worst, max_iterations);
}

TEST(MaximumEntropyCoordinatesTest, InsideTetrahedronAnyPositivePriorGivesBarycentricCoordinates) {
  Eigen::Matrix3Xd tet(3, 4);
  tet << 0.1, 1.3, 0.2, 0.4,  //
      -0.2, 0.1, 1.1, 0.3,    //
      0.0, 0.2, -0.1, 1.2;
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> u(0.02, 1);
  std::uniform_real_distribution<double> log_mass(-20, 5);
  double worst = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Eigen::Vector4d bary(u(rng), u(rng), u(rng), u(rng));
    bary /= bary.sum();
    const Eigen::Vector3d x = tet * bary;
    Eigen::VectorXd prior(4);
    for (int i = 0; i < 4; ++i) prior[i] = std::exp(log_mass(rng));
    const MecResult r = MaximumEntropyCoordinates(tet, prior, x);
    EXPECT_TRUE(r.converged);
    CheckValid(tet, x, r);
    worst = std::max(worst, (r.weights - Eigen::VectorXd(bary)).cwiseAbs().maxCoeff());
  }
  std::printf("[   info   ] tetrahedron: max |MEC - barycentric| = %.2e\n", worst);
  EXPECT_LE(worst, 1e-10);
}

TEST(MaximumEntropyCoordinatesTest, ValidPriorIsReturnedUnchanged) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> mass(0.01, 1);
  for (int trial = 0; trial < 50; ++trial) {
    const Eigen::Matrix3Xd points = CloudInCube(rng, 20);
    Eigen::VectorXd w(points.cols());
    for (Eigen::Index i = 0; i < w.size(); ++i) w[i] = mass(rng);
    w /= w.sum();
    const Eigen::Vector3d x = points * w;
    // Masses need not be normalised: any positive multiple of valid coordinates.
    const MecResult r = MaximumEntropyCoordinates(points, 3.7 * w, x);
    EXPECT_TRUE(r.converged);
    CheckValid(points, x, r);
    EXPECT_LE((r.weights - w).cwiseAbs().maxCoeff(), 1e-8);
  }
}

TEST(MaximumEntropyCoordinatesTest, NonPositiveMassesAreClampedAndGiveValidCoordinates) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> u(-0.9, 0.9);
  std::uniform_real_distribution<double> mass(-1, 1);
  for (int trial = 0; trial < 100; ++trial) {
    const Eigen::Matrix3Xd points = CloudInCube(rng, 30);
    Eigen::VectorXd prior(points.cols());
    for (Eigen::Index i = 0; i < prior.size(); ++i) prior[i] = mass(rng);
    prior[trial % prior.size()] = 0;
    if (trial % 10 == 0) prior[(trial + 1) % prior.size()] = std::numeric_limits<double>::quiet_NaN();
    if (trial % 10 == 1) prior.setConstant(-1);  // nothing usable: uniform masses
    if (trial % 10 == 2) prior.setZero();
    const Eigen::Vector3d x(u(rng), u(rng), u(rng));
    const MecResult r = MaximumEntropyCoordinates(points, prior, x);
    EXPECT_TRUE(r.converged) << "trial " << trial;
    EXPECT_LE(CheckValid(points, x, r), 1e-8 * Diagonal(points)) << "trial " << trial;
  }
}

TEST(MaximumEntropyCoordinatesTest, NegativeMvcMassesOfNonConvexCageGiveValidCoordinates) {
  // The SKELUP situation (seed-004 §5.2): masses from the MVC of a non-convex cage, some
  // negative, projected to valid coordinates w.r.t. the same cage's vertices.
  CageGeometry cage;
  const double xy[6][2] = {{0, 0}, {2, 0}, {2, 1}, {1, 1}, {1, 2}, {0, 2}};
  cage.vertices.resize(3, 12);
  for (int i = 0; i < 6; ++i) {
    cage.vertices.col(i) = Eigen::Vector3d(xy[i][0], xy[i][1], 0);
    cage.vertices.col(i + 6) = Eigen::Vector3d(xy[i][0], xy[i][1], 1);
  }
  const uint32_t cap[4][3] = {{3, 4, 5}, {3, 5, 0}, {3, 0, 1}, {3, 1, 2}};
  cage.triangles.resize(3, 20);
  Eigen::Index f = 0;
  for (const auto& c : cap) {
    cage.triangles.col(f++) << c[0] + 6, c[1] + 6, c[2] + 6;
    cage.triangles.col(f++) << c[0], c[2], c[1];
  }
  for (uint32_t i = 0; i < 6; ++i) {
    const uint32_t j = (i + 1) % 6;
    cage.triangles.col(f++) << i, j, j + 6;
    cage.triangles.col(f++) << i, j + 6, i + 6;
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.05, 0.95);
  int with_negative = 0;
  for (int trial = 0; trial < 100; ++trial) {
    Eigen::Vector3d x(2 * u(rng), u(rng), u(rng));
    if (trial % 2) std::swap(x.x(), x.y());
    std::vector<double> phi(12);
    MeanValueCoordinates(cage, x, phi);
    const Eigen::VectorXd prior = Eigen::Map<Eigen::VectorXd>(phi.data(), 12);
    if (prior.minCoeff() < 0) ++with_negative;
    const MecResult r = MaximumEntropyCoordinates(cage.vertices, prior, x);
    EXPECT_TRUE(r.converged);
    EXPECT_LE(CheckValid(cage.vertices, x, r), 1e-8 * cage.diagonal());
  }
  EXPECT_GT(with_negative, 0);
}

TEST(MaximumEntropyCoordinatesTest, InvariantUnderTranslationAndScaleOfThePoints) {
  std::mt19937 rng(6);
  std::uniform_real_distribution<double> u(-0.9, 0.9);
  std::uniform_real_distribution<double> mass(0.01, 1);
  const Eigen::Matrix3Xd points = CloudInCube(rng, 25);
  Eigen::VectorXd prior(points.cols());
  for (Eigen::Index i = 0; i < prior.size(); ++i) prior[i] = mass(rng);
  const Eigen::Vector3d x(u(rng), u(rng), u(rng));
  const MecResult r = MaximumEntropyCoordinates(points, prior, x);
  for (double scale : {1e-4, 1e4}) {
    const Eigen::Vector3d shift(140, -3e3, 17);
    const Eigen::Matrix3Xd moved = (scale * points).colwise() + shift;
    const MecResult m = MaximumEntropyCoordinates(moved, prior, scale * x + shift);
    EXPECT_TRUE(m.converged);
    CheckValid(moved, scale * x + shift, m);
    EXPECT_LE((m.weights - r.weights).cwiseAbs().maxCoeff(), 1e-9) << "scale " << scale;
  }
}

TEST(MaximumEntropyCoordinatesTest, FlatPointSetWithPointInItsPlaneConverges) {
  // A singular Hessian (all points in the plane z = 2): regularised, no NaN, exact in-plane.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  Eigen::Matrix3Xd points(3, 12);
  for (int i = 0; i < 12; ++i) points.col(i) = Eigen::Vector3d(u(rng), u(rng), 2);
  points.col(0) = Eigen::Vector3d(-1, -1, 2);
  points.col(1) = Eigen::Vector3d(1, -1, 2);
  points.col(2) = Eigen::Vector3d(0, 1, 2);
  const Eigen::Vector3d x(0, -0.2, 2);
  const MecResult r = MaximumEntropyCoordinates(points, Eigen::VectorXd::Ones(12), x);
  EXPECT_TRUE(r.converged);
  EXPECT_LE(CheckValid(points, x, r), 1e-8 * Diagonal(points));
}

TEST(MaximumEntropyCoordinatesTest, PointOutsideHullReportsFailureWithoutNaN) {
  std::mt19937 rng(8);
  const Eigen::Matrix3Xd points = CloudInCube(rng, 10);
  for (const Eigen::Vector3d& x : {Eigen::Vector3d(1.5, 0, 0), Eigen::Vector3d(3, 3, -3),
                                   Eigen::Vector3d(1 + 1e-4, 0.5, 0.5), Eigen::Vector3d(0, 0, 100)}) {
    const MecResult r = MaximumEntropyCoordinates(points, Eigen::VectorXd::Ones(points.cols()), x);
    EXPECT_FALSE(r.converged) << x.transpose();
    EXPECT_TRUE(std::isfinite(r.linear_precision_error));
    // At least the distance from x to the hull (the cube [-1, 1]³).
    const double distance = (x - x.cwiseMax(-1).cwiseMin(1)).norm();
    EXPECT_GE(r.linear_precision_error, 0.99 * distance) << x.transpose();
    EXPECT_GT(r.linear_precision_error, 1e-6 * Diagonal(points)) << x.transpose();
    CheckValid(points, x, r);
    EXPECT_LE(r.iterations, MecOptions().max_iterations);
  }
  // A single point that is not x: nothing can reproduce x.
  const MecResult single =
      MaximumEntropyCoordinates(Eigen::Matrix3Xd::Ones(3, 1), Eigen::VectorXd::Ones(1), Eigen::Vector3d::Zero());
  EXPECT_FALSE(single.converged);
  EXPECT_NEAR(single.linear_precision_error, std::sqrt(3.0), 1e-12);
  EXPECT_EQ(single.weights, Eigen::VectorXd::Ones(1));
}

TEST(MaximumEntropyCoordinatesTest, BadInputsGiveEmptyResult) {
  const MecResult none = MaximumEntropyCoordinates(Eigen::Matrix3Xd(3, 0), Eigen::VectorXd(), Eigen::Vector3d::Zero());
  EXPECT_FALSE(none.converged);
  EXPECT_EQ(none.weights.size(), 0);
  const MecResult mismatch =
      MaximumEntropyCoordinates(Eigen::Matrix3Xd::Zero(3, 4), Eigen::VectorXd::Ones(3), Eigen::Vector3d::Zero());
  EXPECT_FALSE(mismatch.converged);
  EXPECT_TRUE(std::isinf(mismatch.linear_precision_error));
}

// Non-finite input anywhere, or a mass floor that is no number, still gives weights that are
// positive and sum to 1 (mec.h: "for any input"), and an infinite error where x cannot be
// reproduced. Until 2026-12-07 a NaN in any point but the first (maxCoeff passes it over), or a
// NaN mass_floor (std::max keeps it), made every weight NaN.
TEST(MaximumEntropyCoordinatesTest, NonFiniteInputGivesValidWeights) {
  std::mt19937 rng(9);
  const Eigen::Matrix3Xd cube = CloudInCube(rng, 4);
  const Eigen::VectorXd ones = Eigen::VectorXd::Ones(cube.cols());
  auto valid = [](const MecResult& r) {
    return r.weights.allFinite() && (r.weights.array() >= 0).all() && std::abs(r.weights.sum() - 1) < 1e-12;
  };
  for (int at : {0, 5}) {
    for (double bad : {std::nan(""), double(INFINITY)}) {
      Eigen::Matrix3Xd points = cube;
      points(0, at) = bad;
      const MecResult r = MaximumEntropyCoordinates(points, ones, Eigen::Vector3d(0.1, 0.2, 0.3));
      EXPECT_TRUE(valid(r)) << "point " << at << " " << bad << ": " << r.weights.transpose();
      EXPECT_FALSE(r.converged);
      EXPECT_TRUE(std::isinf(r.linear_precision_error)) << r.linear_precision_error;
    }
  }
  const MecResult at_nan = MaximumEntropyCoordinates(cube, ones, Eigen::Vector3d(std::nan(""), 0, 0));
  EXPECT_TRUE(valid(at_nan)) << at_nan.weights.transpose();
  MecOptions no_floor;
  no_floor.mass_floor = std::nan("");
  Eigen::VectorXd prior = ones;
  prior[2] = 0;  // raised to the floor
  const MecResult r = MaximumEntropyCoordinates(cube, prior, Eigen::Vector3d(0.1, 0.2, 0.3), no_floor);
  EXPECT_TRUE(valid(r)) << r.weights.transpose();
  EXPECT_TRUE(r.converged);
}


TEST(MaximumEntropyCoordinatesTest, ArmJointsGetValidCageCoordinatesFromSkinMasses) {
  // The SuperCages skeleton updater on the Arm fixture (seed-004 §5.2 steps 2–3): MVC of each
  // rest joint w.r.t. the (open) skin, plain and localised with s = 0.1, transferred to the cage
  // through Φ, then projected by MEC. The masses include non-positive values (clamped).
#ifndef SINEW_SHARED_DATA
  GTEST_SKIP() << "SINEW_SHARED_DATA is not defined";
#else
  const std::string dir = std::string(SINEW_SHARED_DATA) + "/supercages-arm/";
  std::ifstream skt(dir + "arm.skt"), skw(dir + "arm.skw");
  if (!std::ifstream(dir + "arm.obj") || !std::ifstream(dir + "arm_cage.obj") || !skt || !skw) {
    GTEST_SKIP() << "no Arm fixture in " << dir;
  }
  const CageGeometry skin = testing::ReadObjFixture(dir + "arm.obj");
  const CageGeometry cage = testing::ReadObjFixture(dir + "arm_cage.obj");
  std::vector<Eigen::Vector3d> joints;
  std::string line;
  while (std::getline(skt, line)) {
    std::istringstream s(line);
    std::string key, name;
    int index = 0, parent = 0;
    Eigen::Vector3d a;
    if (s >> key && key == "j" && s >> index >> name >> parent >> a.x() >> a.y() >> a.z()) joints.push_back(a);
  }
  ASSERT_EQ(joints.size(), 25u);
  const Eigen::Index m = skin.vertices.cols();
  Eigen::MatrixXd omega = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(joints.size()), m);
  for (int j = 0, v = 0; std::getline(skw, line);) {
    std::istringstream s(line);
    double w = 0;
    if (s >> j >> v >> w) omega(j, v) = w;
  }
  const Eigen::MatrixXd phi = MeanValueCoordinates(cage, skin.vertices, nullptr);
  const double d = cage.diagonal();
  double worst = 0;
  int non_positive = 0, max_iterations = 0;
  for (size_t j = 0; j < joints.size(); ++j) {
    std::vector<double> mvc(static_cast<size_t>(m));
    MeanValueCoordinates(skin, joints[j], mvc);
    Eigen::RowVectorXd plain(m), localised(m);
    for (Eigen::Index i = 0; i < m; ++i) {
      const double w = std::clamp(omega(static_cast<Eigen::Index>(j), i), 0.0, 1.0);
      plain[i] = mvc[static_cast<size_t>(i)];
      localised[i] = plain[i] * std::max(0.0, -1 + std::pow(w, 0.1) + std::pow(1 - w, 0.1));
    }
    for (const Eigen::RowVectorXd* masses : {&plain, &localised}) {
      const Eigen::VectorXd mu = (*masses * phi).transpose();
      non_positive += static_cast<int>((mu.array() <= 0).count());
      const MecResult r = MaximumEntropyCoordinates(cage.vertices, mu, joints[j]);
      EXPECT_TRUE(r.converged) << "joint " << j;
      EXPECT_LE(CheckValid(cage.vertices, joints[j], r), 1e-8 * d) << "joint " << j;
      worst = std::max(worst, r.linear_precision_error / d);
      max_iterations = std::max(max_iterations, r.iterations);
    }
  }
  EXPECT_GT(non_positive, 0);
  std::printf("[   info   ] Arm joints: %d non-positive cage masses clamped, max linear-precision error "
              "%.2e D, at most %d Newton steps\n", non_positive, worst, max_iterations);
#endif
}

}  // namespace
}  // namespace sinew
