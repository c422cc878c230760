// Composition operators of implicit skinning (seed 000 §2.5, spec §5 test 6 and 14): boundary
// conditions of Eq. 4.3 hold at the nodes, the profile is 0.5, the contact valley runs along the
// diagonal to 0.5 + ½dκ and is flat, g is symmetric, stays in [0, 1], has no spurious 0.5
// iso-lines, is C¹ away from the (0,0) corner; the bulge profile dips to ≈0.422; grids round-trip
// through the disk cache and a corrupt file is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>

#include "core/implicit/hrbf.h"
#include "core/implicit/operators.h"

namespace sinew {
namespace {

OperatorGridOptions Small() { return {65, 9, 0.95}; }

const CompositionOperators& Ops() {
  static auto ops = [] {
    ThreadPool pool(2);
    auto c = OperatorGrid::Build(OperatorShape::kContact, Small(), &pool);
    auto b = OperatorGrid::Build(OperatorShape::kBulge, Small(), &pool);
    EXPECT_TRUE(c.ok() && b.ok());
    auto o = std::make_unique<CompositionOperators>();
    o->contact = std::move(*c);
    o->bulge = std::move(*b);
    return o;
  }();
  return *ops;
}

TEST(Operators, BoundaryConditionsHoldAtTheNodes) {
  for (const OperatorGrid* g : {&Ops().contact, &Ops().bulge}) {
    const int n = g->resolution();
    const double h = 1.0 / (n - 1);
    for (int k = 0; k < g->slices(); ++k) {
      for (int t = 2; t < n; ++t) {
        EXPECT_NEAR(g->Node(t, 0, k), t * h, 1e-6);  // g(f, 0) = f
        EXPECT_NEAR(g->Node(0, t, k), t * h, 1e-6);  // g(0, f) = f
        EXPECT_NEAR(g->Node(t, n - 1, k), 1.0, 1e-6);
        EXPECT_NEAR(g->Node(n - 1, t, k), 1.0, 1e-6);
        // Zero normal slope on the axes (layer 1 copies layer 0).
        if (t < n - 1) {
          EXPECT_NEAR(g->Node(t, 1, k), g->Node(t, 0, k), 1e-6);
          EXPECT_NEAR(g->Node(1, t, k), g->Node(0, t, k), 1e-6);
        }
      }
    }
  }
}

TEST(Operators, ContactProfileValleyAndRange) {
  const OperatorGrid& g = Ops().contact;
  const int n = g.resolution(), half = (n - 1) / 2;
  for (int k = 0; k < g.slices(); ++k) {
    const double d = double(k) / (g.slices() - 1);
    const int end = half + int(std::lround(0.5 * d * 0.95 * (n - 1)));
    for (int t = 2; t <= half; ++t) {
      EXPECT_NEAR(g.Node(t, half, k), 0.5, 1e-6);  // purple and yellow segments
      EXPECT_NEAR(g.Node(half, t, k), 0.5, 1e-6);
    }
    for (int t = half; t <= end; ++t) {
      EXPECT_NEAR(g.Node(t, t, k), 0.5, 1e-6) << "green segment d=" << d;
      if (t > half && t <= half + 3 * (end - half) / 4) {
        // Flat valley: both derivatives vanish on the segment.
        float g1, g2;
        g.Sample(float(t) / (n - 1), float(t) / (n - 1), float(d), &g1, &g2);
        EXPECT_NEAR(g1, 0, 0.05) << "t=" << t << " d=" << d;
        EXPECT_NEAR(g2, 0, 0.05);
      }
    }
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < n; ++i) {
        const float v = g.Node(i, j, k);
        EXPECT_GE(v, -1e-6f);
        EXPECT_LE(v, 1 + 1e-6f);
        EXPECT_NEAR(v, g.Node(j, i, k), 1e-5) << "symmetry";
        const bool on_profile = (j == half && i <= half) || (i == half && j <= half) || (i == j && i >= half && i <= end);
        if (on_profile || (i < 2 && j < 2)) continue;
        // No spurious 0.5 iso-lines: below 0.5 only inside the L, above elsewhere.
        if (i < half && j < half) {
          EXPECT_LT(v, 0.5) << i << "," << j << " d=" << d;
        } else {
          EXPECT_GT(v, 0.5) << i << "," << j << " d=" << d;
        }
      }
    }
  }
}

TEST(Operators, CleanUnionMatchesMaxOnTheSurfaceAndIsSmooth) {
  const OperatorGrid& g = Ops().contact;
  // On the 0.5 iso-line of max the clean union is 0.5 too.
  for (float t = 0.05f; t <= 0.5f; t += 0.05f) {
    EXPECT_NEAR(g.Sample(t, 0.5f, 0, nullptr, nullptr), 0.5, 1e-4);
    EXPECT_NEAR(g.Sample(0.5f, t, 0, nullptr, nullptr), 0.5, 1e-4);
  }
}

// Largest change of the derivative channels between neighbouring nodes with f1, f2 in
// [4h, 0.9]: a C¹ operator's jumps shrink with the cell size, a crease (like max, whose
// derivative jumps by 1 across the diagonal at every resolution) does not. The (0,0) corner, where
// Eq. 4.3 and the zero slopes clash, and the end of full contact next to the bone (f > 0.9) are
// left out.
double WorstDerivativeJump(const OperatorGrid& g) {
  const int n = g.resolution();
  const float h = 1.0f / (n - 1);
  double worst = 0;
  for (int k = 0; k < g.slices(); ++k) {
    const float d = float(k) / (g.slices() - 1);
    for (int j = 4; j < 0.9 * (n - 1); ++j) {
      for (int i = 4; i < 0.9 * (n - 1); ++i) {
        float a1, a2, b1, b2, c1, c2;
        g.Sample(i * h, j * h, d, &a1, &a2);
        g.Sample((i + 1) * h, j * h, d, &b1, &b2);
        g.Sample(i * h, (j + 1) * h, d, &c1, &c2);
        worst = std::max<double>({worst, std::abs(b1 - a1) + std::abs(b2 - a2), std::abs(c1 - a1) + std::abs(c2 - a2)});
      }
    }
  }
  return worst;
}

TEST(Operators, DerivativesAreContinuous) {
  for (OperatorShape shape : {OperatorShape::kContact, OperatorShape::kBulge}) {
    auto coarse = OperatorGrid::Build(shape, {33, 5, 0.95});
    auto fine = OperatorGrid::Build(shape, {65, 5, 0.95});
    ASSERT_TRUE(coarse.ok() && fine.ok());
    const double a = WorstDerivativeJump(*coarse), b = WorstDerivativeJump(*fine);
    EXPECT_LT(b, 0.85 * a) << "shape " << int(shape) << ": jumps " << a << " -> " << b << " do not shrink";
  }
}

TEST(Operators, BulgeProfileDipsToTheDerivedDepth) {
  // Clamped cubic B-spline through the thesis' control points at d_b = 1.
  double lowest = 1, at = 0;
  for (int s = 0; s <= 10000; ++s) {
    const Eigen::Vector2d p = BulgeProfile(1.0, s / 10000.0);
    if (p.y() < lowest) {
      lowest = p.y();
      at = p.x();
    }
  }
  EXPECT_NEAR(lowest, 0.422, 0.002);
  EXPECT_NEAR(at, 0.354, 0.01);
  EXPECT_NEAR(BulgeProfile(1.0, 0).y(), 0.5, 1e-12);
  EXPECT_NEAR(BulgeProfile(1.0, 1).x(), 0.5, 1e-12);
  EXPECT_NEAR(BulgeProfile(0.0, 0.3).y(), 0.5, 1e-12);  // aligned at d_b = 0
  // In the grid: at d_b = 1 the 0.5 iso-line passes below f2 = 0.5 near f1 ≈ 0.35.
  const OperatorGrid& g = Ops().bulge;
  EXPECT_GT(g.Sample(0.354f, 0.45f, 1.0f, nullptr, nullptr), 0.5);
  EXPECT_LT(g.Sample(0.354f, 0.40f, 1.0f, nullptr, nullptr), 0.5);
  // The surface moves out by t_r⁻¹(0.422) ≈ 0.083 r, bounded by t_r⁻¹(0.40) ≈ 0.108 r.
  double lo = 0, hi = 1;
  for (int it = 0; it < 60; ++it) {
    const double mid = (lo + hi) / 2;
    (CompactSupport(mid, 1.0) > lowest ? lo : hi) = mid;
  }
  EXPECT_NEAR(lo, 0.083, 0.003);
  EXPECT_LT(lo, 0.108);
}

TEST(Operators, Controllers) {
  const double pi = std::numbers::pi;
  EXPECT_EQ(ContactController(0), 0);
  EXPECT_EQ(ContactController(pi / 2), 0);
  EXPECT_NEAR(ContactController(3 * pi / 4), 0.5, 1e-12);
  EXPECT_NEAR(ContactController(pi), 1, 1e-12);
  EXPECT_EQ(BulgeController(0), 0);
  EXPECT_GT(BulgeController(0.3), 0.05);  // the bulge starts at small angles
  EXPECT_NEAR(BulgeController(pi / 2), 1, 1e-12);
  EXPECT_NEAR(BulgeController(pi), 1, 1e-12);
}

// A NaN input (an infinite gradient makes the controller's d one) reads as 0, like a clamped
// one: until 2026-12-07 it was cast to int unchecked (undefined; on x86 a read far outside the
// grid).
TEST(Operators, ANanInputReadsAsZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const OperatorGrid* g : {&Ops().contact, &Ops().bulge}) {
    float a1, a2, b1, b2;
    EXPECT_EQ(g->Sample(nan, 0.6f, 0.4f, &a1, &a2), g->Sample(0, 0.6f, 0.4f, &b1, &b2));
    EXPECT_EQ(a1, b1);
    EXPECT_EQ(a2, b2);
    EXPECT_EQ(g->Sample(0.6f, nan, 0.4f, &a1, &a2), g->Sample(0.6f, 0, 0.4f, &b1, &b2));
    EXPECT_EQ(g->Sample(0.55f, 0.6f, nan, &a1, &a2), g->Sample(0.55f, 0.6f, 0, &b1, &b2));
    EXPECT_EQ(a2, b2);
    EXPECT_EQ(g->Sample(nan, nan, nan, nullptr, nullptr), 0.f);  // g(0, 0) = 0
  }
}

TEST(Operators, DiskCacheRoundTripAndCorruption) {
  const auto dir = std::filesystem::temp_directory_path() / ("sinew-op-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "c.sinewop").string();
  ASSERT_TRUE(Ops().contact.Save(path).ok());
  auto back = OperatorGrid::Load(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->resolution(), Ops().contact.resolution());
  EXPECT_EQ(back->Sample(0.3f, 0.7f, 0.4f, nullptr, nullptr), Ops().contact.Sample(0.3f, 0.7f, 0.4f, nullptr, nullptr));
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4000);
    f.put('\x7f');
  }
  EXPECT_EQ(OperatorGrid::Load(path).status().code(), absl::StatusCode::kDataLoss);
  std::filesystem::resize_file(path, 100);
  EXPECT_EQ(OperatorGrid::Load(path).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(OperatorGrid::Load((dir / "missing").string()).status().code(), absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

// The cache directory's files must hold what their names say: a bulge grid copied over the
// contact one, and a grid of another resolution under the bulge's name, are built again and
// written over (until 2026-12-07 only κ was compared, and the swapped grid was used: implicit
// skin 6.5 % of a radius off at 120°).
TEST(Operators, ACacheFileHoldingAnotherGridIsBuiltAgain) {
  const auto dir = std::filesystem::temp_directory_path() / ("sinew-opcache-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const OperatorGridOptions o = Small();
  const std::string stem = "-" + std::to_string(o.resolution) + "x" + std::to_string(o.slices) + "-k950.sinewop";
  ASSERT_TRUE(Ops().bulge.Save((dir / ("contact" + stem)).string()).ok());
  auto coarse = OperatorGrid::Build(OperatorShape::kBulge, {33, 9, 0.95}, nullptr);
  ASSERT_TRUE(coarse.ok());
  ASSERT_TRUE(coarse->Save((dir / ("bulge" + stem)).string()).ok());
  const std::string before = OperatorCacheDirectory();
  SetOperatorCacheDirectory(dir.string());
  auto shared = SharedOperators(o);
  SetOperatorCacheDirectory(before);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ((*shared)->contact.shape(), OperatorShape::kContact);
  EXPECT_EQ((*shared)->bulge.resolution(), o.resolution);
  for (float d : {0.f, 0.4f}) {
    EXPECT_EQ((*shared)->contact.Sample(0.3f, 0.7f, d, nullptr, nullptr), Ops().contact.Sample(0.3f, 0.7f, d, nullptr, nullptr));
    EXPECT_EQ((*shared)->bulge.Sample(0.6f, 0.55f, d, nullptr, nullptr), Ops().bulge.Sample(0.6f, 0.55f, d, nullptr, nullptr));
  }
  auto rewritten = OperatorGrid::Load((dir / ("contact" + stem)).string());
  ASSERT_TRUE(rewritten.ok());
  EXPECT_EQ(rewritten->shape(), OperatorShape::kContact);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sinew
