// Welding a rest mesh's vertex copies (core/geometry/weld.h): which vertex stands for which, by
// distance alone, checked against a brute-force reading of the rule.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/geometry/weld.h"

namespace sinew {
namespace {

double Distance(const std::vector<float>& p, size_t a, size_t b) {
  double d2 = 0;
  for (int c = 0; c < 3; ++c) d2 += (double(p[3 * a + c]) - p[3 * b + c]) * (double(p[3 * a + c]) - p[3 * b + c]);
  return std::sqrt(d2);
}

TEST(Weld, CopiesWithinTheToleranceShareTheFirstOfThem) {
  const std::vector<float> p = {0, 0, 0, 1e-7f, 0, 0, 1, 0, 0, 0, 0, 5e-7f, 1, 0, 1e-6f};
  EXPECT_EQ(WeldByPosition(p, 1e-6), (std::vector<uint32_t>{0, 0, 2, 0, 2}));
  EXPECT_EQ(WeldByPosition(p, 1e-8), (std::vector<uint32_t>{0, 1, 2, 3, 4}));
}

// Welding is not transitive: a copy is welded to a representative within the tolerance of it,
// never to one a chain of copies away, so no copy drifts from its representative.
TEST(Weld, ChainsOfNearCopiesDoNotDrift) {
  const std::vector<float> p = {0, 0, 0, 0.8f, 0, 0, 1.6f, 0, 0, 2.4f, 0, 0};
  EXPECT_EQ(WeldByPosition(p, 1.0), (std::vector<uint32_t>{0, 0, 2, 2}));
}

TEST(Weld, ZeroToleranceWeldsEqualPositionsWithEitherSignOfZero) {
  const std::vector<float> p = {0, 0, 0, -0.0f, 0, -0.0f, 1e-30f, 0, 0, 0, 0, 0};
  EXPECT_EQ(WeldByPosition(p, 0), (std::vector<uint32_t>{0, 0, 2, 0}));
}

TEST(Weld, NaNPositionsAreNeverWelded) {
  const float nan = std::nanf("");
  const std::vector<float> p = {nan, 0, 0, nan, 0, 0, 0, 0, 0};
  EXPECT_EQ(WeldByPosition(p, 0), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(RestWeldTolerance(p), 0.0);
  const std::vector<float> later = {0, 0, 0, 1, 0, 0, nan, 0, 0};  // not the first vertex
  EXPECT_EQ(RestWeldTolerance(later), 0.0);
}

// A degenerate triangle (two corners at one position) has no open edge there: the closed
// tetrahedra below, one with a sliver glued on, still leave their touching tips apart.
TEST(Weld, ADegenerateTriangleIsNoSeam) {
  const std::vector<float> tets = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1,
                                   0, 0, 2, 1, 0, 2, 0, 1, 2, 0, 0, 1 + 1e-7f, 0, 0, 1};
  // Vertex 8 repeats vertex 3's position: the triangle (3, 8, 1) collapses onto the edge 3–1.
  const std::vector<uint32_t> faces = {0, 2, 1, 0, 1, 3, 1, 2, 3, 2, 0, 3, 4, 5, 6, 4, 7, 5, 5, 7, 6, 6, 7, 4, 3, 8, 1};
  const std::vector<uint32_t> rep = WeldSeams(tets, faces, 1e-6);
  EXPECT_EQ(rep[8], 3u);
  EXPECT_EQ(rep[7], 7u);
}

// A cloud with copies scattered across the grid's cell borders: every vertex's representative is
// the first earlier representative within the tolerance, by brute force.
TEST(Weld, RepresentativesFollowTheRuleOnACloudOfNearCopies) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(-1, 1), jitter(-1.2e-3f, 1.2e-3f);
  std::vector<float> p;
  for (int i = 0; i < 400; ++i) {
    const float x = unit(rng), y = unit(rng), z = unit(rng);
    for (int copy = 0; copy < 1 + i % 4; ++copy) {
      p.insert(p.end(), {x + (copy ? jitter(rng) : 0), y + (copy ? jitter(rng) : 0), z + (copy ? jitter(rng) : 0)});
    }
  }
  const double tol = 1e-3;
  const std::vector<uint32_t> rep = WeldByPosition(p, tol);
  const size_t n = p.size() / 3;
  ASSERT_EQ(rep.size(), n);
  size_t welded = 0;
  std::vector<size_t> reps;
  for (size_t v = 0; v < n; ++v) {
    size_t expect = v;
    for (size_t r : reps) {
      if (Distance(p, v, r) <= tol) {
        expect = r;
        break;
      }
    }
    if (expect == v) reps.push_back(v);
    ASSERT_EQ(rep[v], expect) << "vertex " << v;
    if (rep[v] != v) ++welded;
  }
  EXPECT_GT(welded, 150u);  // the cloud has copies on both sides of the tolerance
  EXPECT_LT(welded, n - 400);
}

// A square of two triangles split along its diagonal, the second triangle's copies of the
// diagonal's ends 1e-7 off: an open seam, closed. Two closed tetrahedra whose tips touch 1e-7
// apart: no seam, left apart.
TEST(Weld, SeamsCloseAndTouchingClosedSurfacesStayApart) {
  const std::vector<float> square = {0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 1e-7f, 1, 1, 1e-7f, 0, 1, 0};
  const std::vector<uint32_t> two = {0, 1, 2, 3, 4, 5};
  EXPECT_EQ(WeldSeams(square, two, 1e-6), (std::vector<uint32_t>{0, 1, 2, 0, 2, 5}));
  EXPECT_EQ(WeldSeams(square, two, 0), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
  // Tetrahedra (outward) with tips at z = 1 and z = 1 + 1e-7.
  const std::vector<float> tets = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1,
                                   0, 0, 2, 1, 0, 2, 0, 1, 2, 0, 0, 1 + 1e-7f};
  const std::vector<uint32_t> faces = {0, 2, 1, 0, 1, 3, 1, 2, 3, 2, 0, 3, 4, 5, 6, 4, 7, 5, 5, 7, 6, 6, 7, 4};
  EXPECT_EQ(WeldSeams(tets, faces, 1e-6), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  // The same tips, the second tetrahedron open (its base missing): its tip is on no seam, the
  // base's corners are; the tips stay apart.
  const std::vector<uint32_t> open_faces = {0, 2, 1, 0, 1, 3, 1, 2, 3, 2, 0, 3, 4, 7, 5, 5, 7, 6, 6, 7, 4};
  EXPECT_EQ(WeldSeams(tets, open_faces, 1e-6)[7], 7u);
}

TEST(Weld, RestToleranceIsAHundredThousandthOfTheDiagonal) {
  const std::vector<float> p = {0, 0, 0, 3, 4, 0, 1, 1, 0};
  EXPECT_DOUBLE_EQ(RestWeldTolerance(p), 5e-5);
  EXPECT_EQ(RestWeldTolerance({}), 0.0);
}

}  // namespace
}  // namespace sinew
