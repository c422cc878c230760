// Welding a rest mesh's vertex copies (core/geometry/weld.h): which vertex stands for which, by
// distance alone, checked against a brute-force reading of the rule.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
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

// A cloud of `count` points, point i with i % 4 copies beside it jittered within 1.2e-3 (across the
// grid's cell borders); with `exact_copies`, each point's second copy is exact.
std::vector<float> NearCopies(uint32_t seed, int count, bool exact_copies) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1, 1), jitter(-1.2e-3f, 1.2e-3f);
  std::vector<float> p;
  for (int i = 0; i < count; ++i) {
    const float x = unit(rng), y = unit(rng), z = unit(rng);
    for (int copy = 0; copy < 1 + i % 4; ++copy) {
      const bool moved = copy > 0 && !(exact_copies && copy == 2);
      p.insert(p.end(), {x + (moved ? jitter(rng) : 0), y + (moved ? jitter(rng) : 0), z + (moved ? jitter(rng) : 0)});
    }
  }
  return p;
}

// The welding rule by brute force: each vertex's representative is the first earlier
// representative within `tol` that `may(representative, vertex)` allows, else itself.
template <class May>
std::vector<uint32_t> RepresentativesByBruteForce(const std::vector<float>& p, double tol, May may) {
  const size_t n = p.size() / 3;
  std::vector<uint32_t> rep(n), reps;
  for (size_t v = 0; v < n; ++v) {
    rep[v] = uint32_t(v);
    for (uint32_t r : reps) {
      if (Distance(p, v, r) <= tol && may(r, v)) {
        rep[v] = r;
        break;
      }
    }
    if (rep[v] == v) reps.push_back(uint32_t(v));
  }
  return rep;
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
  const std::vector<float> p = NearCopies(7, 400, false);
  const double tol = 1e-3;
  const std::vector<uint32_t> rep = WeldByPosition(p, tol);
  const size_t n = p.size() / 3;
  ASSERT_EQ(rep, RepresentativesByBruteForce(p, tol, [](size_t, size_t) { return true; }));
  size_t welded = 0;
  for (size_t v = 0; v < n; ++v) welded += rep[v] != v;
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
  // Of the vertices the triangles use: one that none uses, far away, widens nothing (until
  // 2026-12-07 a vertex 300 units off a unit mesh made the tolerance 0.003 and welded two
  // sheets 0.002 apart). Without triangles, every vertex counts.
  const std::vector<float> with_far = {0, 0, 0, 3, 4, 0, 1, 1, 0, 300, 0, 0};
  const std::vector<uint32_t> triangle = {0, 1, 2};
  EXPECT_DOUBLE_EQ(RestWeldTolerance(with_far, triangle), 5e-5);
  EXPECT_GT(RestWeldTolerance(with_far, {}), 2e-3);
}

}  // namespace
}  // namespace sinew

namespace sinew {
namespace {

// WeldSeams' own grid walk (since 2026-12-07: closed vertices look only at open representatives,
// copies of a position take its first vertex's) gives WeldByPosition's representatives under the
// seam rule, checked by brute force on a cloud of near copies whose triangles leave some edges
// open (used once) and some closed, exact copies among them.
TEST(Weld, SeamsFollowTheRuleOnACloudOfNearCopiesWithOpenAndClosedEdges) {
  std::mt19937 rng(11);
  const std::vector<float> p = NearCopies(11, 300, true);
  const size_t n = p.size() / 3;
  std::uniform_int_distribution<uint32_t> any(0, uint32_t(n - 1));
  std::vector<uint32_t> tris;
  for (int t = 0; t < 500; ++t) {
    const uint32_t a = any(rng), b = any(rng), c = any(rng);
    tris.insert(tris.end(), {a, b, c});
    if (t % 3 == 0) tris.insert(tris.end(), {a, c, b});  // its edges used twice: closed there
  }
  const double tol = 1e-3;
  const std::vector<uint32_t> got = WeldSeams(p, tris, tol);
  // Brute force: equal positions, edges of the equal-position mesh used once are open.
  std::vector<uint32_t> equal(n);
  for (size_t v = 0; v < n; ++v) {
    equal[v] = uint32_t(v);
    for (size_t u = 0; u < v; ++u) {
      if (p[3 * u] == p[3 * v] && p[3 * u + 1] == p[3 * v + 1] && p[3 * u + 2] == p[3 * v + 2]) {
        equal[v] = uint32_t(u);
        break;
      }
    }
  }
  std::map<std::pair<uint32_t, uint32_t>, int> uses;
  for (size_t t = 0; t < tris.size(); t += 3) {
    for (int k = 0; k < 3; ++k) {
      const uint32_t a = equal[tris[t + k]], b = equal[tris[t + (k + 1) % 3]];
      if (a != b) ++uses[{std::min(a, b), std::max(a, b)}];
    }
  }
  std::vector<bool> open(n, false);
  for (const auto& [e, k] : uses) {
    if (k == 1) open[e.first] = open[e.second] = true;
  }
  const std::vector<uint32_t> want = RepresentativesByBruteForce(
      p, tol, [&](size_t r, size_t v) { return equal[r] == equal[v] || open[equal[r]] || open[equal[v]]; });
  ASSERT_EQ(got, want);
  size_t welded_near = 0;
  for (size_t v = 0; v < n; ++v) welded_near += got[v] != v && equal[v] != equal[got[v]];
  EXPECT_GT(welded_near, 50u);  // near copies welded across open seams
  size_t apart = 0;  // near copies both closed, kept apart
  for (size_t v = 0; v < n; ++v) {
    for (size_t u = 0; u < v; ++u) apart += got[v] == v && got[u] == u && Distance(p, u, v) <= tol;
  }
  EXPECT_GT(apart, 0u);
}

}  // namespace
}  // namespace sinew
