// Energy-minimizing weights (Kavan & Sorkine 2012 §3.2; spec §2.4 and §4.4–4.8) on the spec's
// test cylinder: radius 1, length 6, two collinear bones meeting at x = 3, voxel size 0.25.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include <Eigen/SVD>

#include "core/procedural/limb.h"
#include "core/swingtwist/emw.h"
#include "core/swingtwist/swing_twist.h"
#include "core/swingtwist/weights.h"
#include "tests/core/test_util.h"

namespace sinew {
namespace {

Rig Cylinder() { return testing::BuildOrDie(testing::ElbowCylinder()); }

struct Problem {
  VoxelGrid grid;
  std::vector<Eigen::Vector3d> local;  // grid vertices in the elbow's canonical frame
  Dirichlet dirichlet;
  size_t conflicts = 0;
};

Problem Elbow(const Rig& rig, double h) {
  Problem p;
  auto grid = Voxelize(rig.positions, rig.triangles, {h});
  EXPECT_TRUE(grid.ok()) << grid.status();
  p.grid = std::move(*grid);
  auto frames = ComputeCanonicalFrames(rig);
  EXPECT_TRUE(frames.ok());
  for (const auto& v : p.grid.vertices) p.local.push_back(frames->inverse[1] * v.homogeneous());
  p.dirichlet = BoneDirichlet(p.grid, frames->rest, rig.skeleton.parents, 1, &p.conflicts);
  return p;
}

// The local step's rotation fit is Kabsch's (the proper rotation maximising tr(R cov), by SVD here)
// to rounding, for a voxel's covariances turned a little from the last fit (the warm start the
// solve gives it: found by a few Newton steps, not the SVD), turned far (up to 180°: the SVD it falls
// back to), stretched unevenly, flat (rank 2), reflected (det < 0: the reflection turned away)
// and zero; and a fit fed back as the next start a hundred times stays a rotation.
TEST(Emw, TheRotationFitIsKabschsFromAnyStart) {
  auto kabsch = [](const Eigen::Matrix3d& cov) {
    Eigen::JacobiSVD<Eigen::Matrix3d> svd(cov, Eigen::ComputeFullU | Eigen::ComputeFullV);
    const double d = (svd.matrixV() * svd.matrixU().transpose()).determinant() < 0 ? -1.0 : 1.0;
    return Eigen::Matrix3d(svd.matrixV() * Eigen::Vector3d(1, 1, d).asDiagonal() * svd.matrixU().transpose());
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  auto rotation = [&](double max_angle) {
    const Eigen::Vector3d axis = Eigen::Vector3d(u(rng), u(rng), u(rng)).normalized();
    return Eigen::AngleAxisd(max_angle * std::abs(u(rng)), axis).toRotationMatrix();
  };
  auto random_matrix = [&] { return Eigen::Matrix3d(Eigen::Matrix3d::NullaryExpr([&] { return u(rng); })); };
  int cases = 0;
  for (double stretch : {0.0, 0.3, 1.0}) {
    for (double turn : {1e-6, 1e-3, 0.1, 0.4, 1.5, std::numbers::pi}) {
      for (int k = 0; k < 50; ++k) {
        // cov = rest movedᵀ summed, moved = Q (stretched rest): cov = Σ x xᵀ Fᵀ Qᵀ.
        const Eigen::Matrix3d q = rotation(std::numbers::pi);
        Eigen::Matrix3d f = Eigen::Matrix3d::Identity() + stretch * random_matrix();
        if (k % 10 == 1) f.col(2).setZero();  // flat
        if (k % 10 == 2) f.col(0) *= -1;      // reflected
        if (k % 10 == 3) f.setZero();         // nothing to fit
        const Eigen::Matrix3d cov = 0.0625 * (q * f).transpose();  // a voxel's size² scale
        const Eigen::Matrix3d want = kabsch(cov);
        const Eigen::Matrix3d start = rotation(turn) * want;
        int steps = 0;
        const Eigen::Matrix3d got = FitRotation(cov, start, &steps);
        ++cases;
        EXPECT_NEAR((got.transpose() * got - Eigen::Matrix3d::Identity()).norm(), 0, 1e-12) << "case " << cases;
        EXPECT_NEAR(got.determinant(), 1, 1e-12) << "case " << cases;
        EXPECT_NEAR((got * cov).trace(), (want * cov).trace(), 1e-12 * (1 + cov.norm())) << "case " << cases;
        // The maximiser is unique but for a zero cov and a reflection of equal singular values
        // (stretch 0); any will do there. At stretch 1 the cov may be nearly so.
        const bool unique = k % 10 != 3 && !(k % 10 == 2 && stretch == 0);
        if (unique && stretch < 1) EXPECT_NEAR((got - want).norm(), 0, 1e-9) << "case " << cases;
        // Found by Newton steps, not the SVD, from a start near the fit: what makes it faster.
        if (unique && stretch < 1 && turn <= 0.1) {
          EXPECT_GE(steps, 1) << "case " << cases << " fell back to the SVD";
          EXPECT_LE(steps, 5) << "case " << cases;  // quadratic from 0.1 rad: 1e-2, 1e-4, 1e-8, 1e-16
        }
      }
    }
  }
  // Warm starts chained, as the solve's iterations chain them: still a rotation, still Kabsch's.
  const Eigen::Matrix3d cov =
      0.0625 * rotation(2.0).transpose() * (Eigen::Matrix3d::Identity() + 0.2 * random_matrix());
  Eigen::Matrix3d r = Eigen::Matrix3d::Identity();
  for (int k = 0; k < 100; ++k) r = FitRotation(cov + 1e-6 * k * Eigen::Matrix3d::Identity(), r);
  EXPECT_NEAR((r.transpose() * r - Eigen::Matrix3d::Identity()).norm(), 0, 1e-12);
  EXPECT_NEAR((r - kabsch(cov + 99e-6 * Eigen::Matrix3d::Identity())).norm(), 0, 1e-9);
}

// The solves' memory is estimated from the grid before any solve starts: a voxel size and sample
// count whose solves would need more than kElasticWeightsMaxBytes are refused, naming both (until
// 2026-12-03 only joints x grid vertices were bounded, and 16 samples at a fine voxel size asked
// for tens of GB). Here about 2 M voxels with 16 samples: ~11 GB estimated, where 1 sample would be
// ~7.6 GB.
TEST(Emw, SolvesPastTheirMemoryBoundAreRefusedBeforeTheyStart) {
  const Rig rig = Cylinder();
  auto frames = ComputeCanonicalFrames(rig);
  ASSERT_TRUE(frames.ok());
  ElasticWeightsOptions options;
  options.voxel_size = 6.0 / 284;
  options.swing_samples = 16;
  ElasticWeightsStats stats;
  const auto st = ComputeElasticWeights(rig, *frames, options, nullptr, {}, &stats).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("swing_samples"));
  EXPECT_GT(ElasticWeightsBytes(double(stats.voxels), double(stats.grid_vertices), 16, 1), kElasticWeightsMaxBytes);
  EXPECT_LT(ElasticWeightsBytes(double(stats.voxels), double(stats.grid_vertices), 1, 1), kElasticWeightsMaxBytes);
}

// §4.4, §4.5, §4.7: the bones' vertices keep exactly their Dirichlet values; the free ones —
// including the joint point and the twist axis, which no sample moves (the ε guard) — stay in
// [−1e-3, 1 + 1e-3]; the joint's voxels are claimed by both bones and left free.
TEST(Emw, DirichletValuesExactAndWeightsInRange) {
  const Rig rig = Cylinder();
  const Problem p = Elbow(rig, 0.25);
  size_t ones = 0, zeros = 0;
  for (int8_t d : p.dirichlet) {
    ones += d == 1;
    zeros += d == 0;
  }
  EXPECT_GT(ones, 0u);
  EXPECT_GT(zeros, 0u);
  EXPECT_EQ(p.conflicts, 27u);  // the spec's count for the collinear cylinder: the 3 × 3 × 3 around the joint
  for (const auto& samples : {SwingSamples(), TwistSamples()}) {
    auto r = SolveEmw(p.grid, p.local, p.dirichlet, samples);
    ASSERT_TRUE(r.ok()) << r.status();
    double lo = 1, hi = 0;
    for (size_t i = 0; i < r->weights.size(); ++i) {
      ASSERT_TRUE(std::isfinite(r->weights[i]));
      if (p.dirichlet[i] >= 0) {
        ASSERT_EQ(r->weights[i], double(p.dirichlet[i])) << i;
      }
      lo = std::min(lo, r->weights[i]);
      hi = std::max(hi, r->weights[i]);
    }
    EXPECT_GE(lo, -1e-3);
    EXPECT_LE(hi, 1 + 1e-3);
  }
}

// §4.6: the energy never increases from the harmonic start, and the descent stops within 30
// iterations; the result is below the harmonic weights' energy.
TEST(Emw, EnergyDescendsFromTheHarmonicStart) {
  const Rig rig = Cylinder();
  const Problem p = Elbow(rig, 0.25);
  for (const auto& samples : {SwingSamples(), TwistSamples()}) {
    auto r = SolveEmw(p.grid, p.local, p.dirichlet, samples);
    ASSERT_TRUE(r.ok());
    ASSERT_GE(r->energy.size(), 2u);
    for (size_t i = 1; i < r->energy.size(); ++i) EXPECT_LE(r->energy[i], r->energy[i - 1] * (1 + 1e-9)) << i;
    EXPECT_LT(r->energy.back(), r->energy.front());
    EXPECT_LT(r->iterations, 30);
    std::printf("grid: %zu voxels, %zu vertices; %d iterations; energy %.4f (harmonic %.4f)\n", p.grid.voxel_count(),
                p.grid.vertices.size(), r->iterations, r->energy.back(), r->energy.front());
  }
}

// The symmetric cylinder bends about its middle: the swing weight of the joint's cross-section
// is one half (the prototype: 0.500).
TEST(Emw, SymmetricJointPlaneWeighsHalf) {
  const Rig rig = Cylinder();
  const Problem p = Elbow(rig, 0.25);
  auto r = SolveEmw(p.grid, p.local, p.dirichlet, SwingSamples());
  ASSERT_TRUE(r.ok());
  double sum = 0, worst = 0;
  size_t count = 0;
  for (size_t i = 0; i < p.grid.vertices.size(); ++i) {
    if (std::abs(p.grid.vertices[i].x() - 3) > 1e-9) continue;
    sum += r->weights[i];
    worst = std::max(worst, std::abs(r->weights[i] - 0.5));
    ++count;
  }
  ASSERT_GT(count, 0u);
  std::printf("joint plane: %zu vertices, mean swing weight %.4f, farthest from 1/2 by %.4f\n", count, sum / count, worst);
  EXPECT_NEAR(sum / count, 0.5, 0.01);
  EXPECT_LE(worst, 0.05);
}

// §4.8: 4 swing samples and 32 (R_x, R_y at ±11.25° q, q = 1..8) give almost the same weights.
TEST(Emw, FourSamplesAlmostEqualThirtyTwo) {
  const Rig rig = Cylinder();
  const Problem p = Elbow(rig, 0.25);
  // R_x, R_y at ±11.25°·q, q = 1..8: what swing_samples = 8 asks for.
  const std::vector<Eigen::Matrix3d> dense = SwingSamples(8);
  for (int q = 1; q <= 8; ++q) {
    const Eigen::Matrix3d want = Eigen::AngleAxisd(-11.25 * q * std::numbers::pi / 180, Eigen::Vector3d::UnitY()).toRotationMatrix();
    EXPECT_TRUE(std::any_of(dense.begin(), dense.end(), [&](const Eigen::Matrix3d& m) { return (m - want).norm() < 1e-12; }))
        << q;
  }
  ASSERT_EQ(dense.size(), 32u);
  EXPECT_EQ(SwingSamples(1).size(), 4u);
  EXPECT_EQ(TwistSamples(3).size(), 6u);
  auto four = SolveEmw(p.grid, p.local, p.dirichlet, SwingSamples());
  auto many = SolveEmw(p.grid, p.local, p.dirichlet, dense);
  ASSERT_TRUE(four.ok() && many.ok());
  double worst = 0, mean = 0;
  for (size_t i = 0; i < four->weights.size(); ++i) {
    const double d = std::abs(four->weights[i] - many->weights[i]);
    worst = std::max(worst, d);
    mean += d / four->weights.size();
  }
  std::printf("4 vs 32 samples: max %.4f, mean %.4f\n", worst, mean);
  EXPECT_LE(worst, 0.05);
  EXPECT_LE(mean, 0.01);
}

// A separate mesh part with no bone in it (a box beside the forearm, like an eyeball or a
// button) is not part of the solve: every grid vertex of it takes the weight of the nearest
// solved vertex. A grid with no bone at all is refused.
TEST(Emw, PartsWithoutABoneTakeTheNearestSolvedWeight) {
  const Rig rig = Cylinder();
  std::vector<float> positions = rig.positions;
  std::vector<uint32_t> triangles = rig.triangles;
  const uint32_t base = uint32_t(positions.size() / 3);
  for (int q = 0; q < 8; ++q) {  // a 0.6-wide box centred at (4.5, 2, 0), 0.7 from the cylinder
    positions.insert(positions.end(), {float(4.2 + 0.6 * (q & 1)), float(1.7 + 0.6 * (q >> 1 & 1)),
                                       float(-0.3 + 0.6 * (q >> 2 & 1))});
  }
  const uint32_t faces[12][3] = {{0, 2, 1}, {1, 2, 3}, {4, 5, 6}, {5, 7, 6}, {0, 1, 4}, {1, 5, 4},
                                 {2, 6, 3}, {3, 6, 7}, {0, 4, 2}, {2, 4, 6}, {1, 3, 5}, {3, 7, 5}};
  for (const auto& f : faces) triangles.insert(triangles.end(), {base + f[0], base + f[1], base + f[2]});
  auto grid = Voxelize(positions, triangles, {0.25});
  ASSERT_TRUE(grid.ok());
  ASSERT_EQ(grid->components, 2);
  auto frames = ComputeCanonicalFrames(rig);
  std::vector<Eigen::Vector3d> local;
  for (const auto& v : grid->vertices) local.push_back(frames->inverse[1] * v.homogeneous());
  Dirichlet dirichlet = BoneDirichlet(*grid, frames->rest, rig.skeleton.parents, 1);
  auto r = SolveEmw(*grid, local, dirichlet, SwingSamples());
  ASSERT_TRUE(r.ok()) << r.status();
  const int body = grid->component[0];
  size_t passengers = 0;
  for (size_t i = 0; i < grid->vertices.size(); ++i) {
    if (grid->component[i] == body) continue;
    ++passengers;
    double best = 1e300, want = -1;
    for (size_t a = 0; a < grid->vertices.size(); ++a) {
      if (grid->component[a] != body) continue;
      const double d = (grid->vertices[a] - grid->vertices[i]).squaredNorm();
      if (d < best) {
        best = d;
        want = r->weights[a];
      }
    }
    EXPECT_EQ(r->weights[i], want) << i;
  }
  EXPECT_GT(passengers, 0u);
  EXPECT_GT(r->weights.back(), 0.9);  // the box sits beside the forearm: it turns with it

  for (auto& d : dirichlet) d = -1;
  const auto st = SolveEmw(*grid, local, dirichlet, SwingSamples()).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("contains a bone"));
}

}  // namespace
}  // namespace sinew
