// The geometric quality measure (core/geometry/mesh_quality.h) on shapes whose answer is known
// by construction: a closed box has no vertex inside itself; a box pushed into another box has
// exactly the vertices that went in, at the depth they went; a dent that does not pass through
// the skin is not a fold; volume and stretch follow a scale exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/geometry/mesh_quality.h"
#include "core/geometry/weld.h"

namespace sinew {
namespace {

// A closed box [lo, hi], each face an n × n grid of quads split into triangles, outward.
struct Mesh {
  std::vector<float> p;
  std::vector<uint32_t> t;
};

void AddBox(Mesh& m, const float lo[3], const float hi[3], int n) {
  // For each of the 6 faces: axis a fixed at lo or hi, (u, v) the other two, ordered so that
  // (u × v) points outwards.
  for (int a = 0; a < 3; ++a) {
    for (int side = 0; side < 2; ++side) {
      const int u = (a + 1) % 3, v = (a + 2) % 3;
      const uint32_t base = uint32_t(m.p.size() / 3);
      for (int j = 0; j <= n; ++j) {
        for (int i = 0; i <= n; ++i) {
          float x[3];
          x[a] = side ? hi[a] : lo[a];
          x[u] = lo[u] + (hi[u] - lo[u]) * float(i) / float(n);
          x[v] = lo[v] + (hi[v] - lo[v]) * float(j) / float(n);
          m.p.insert(m.p.end(), x, x + 3);
        }
      }
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < n; ++i) {
          const uint32_t c00 = base + uint32_t(j * (n + 1) + i), c10 = c00 + 1, c01 = c00 + uint32_t(n + 1),
                         c11 = c01 + 1;
          if (side) {  // outward +a: (u, v) counter-clockwise
            m.t.insert(m.t.end(), {c00, c10, c11, c00, c11, c01});
          } else {
            m.t.insert(m.t.end(), {c00, c11, c10, c00, c01, c11});
          }
        }
      }
    }
  }
}

Mesh Box(const float lo[3], const float hi[3], int n) {
  Mesh m;
  AddBox(m, lo, hi, n);
  return m;
}

// Box A = [0, 1]³ and box B = [0.8, 2] × [−0.1, 1.1]², which cuts 0.2 into A; n cells a face side.
constexpr float kBoxes[2][2][3] = {{{0, 0, 0}, {1, 1, 1}}, {{0.8f, -0.1f, -0.1f}, {2, 1.1f, 1.1f}}};
struct TwoBoxes {
  Mesh m;
  uint32_t a_count = 0;  // A's vertices come first
  int n = 0;
  // Vertex v's box (0: A, 1: B) and its index within that box.
  int BoxOf(uint32_t v) const { return v < a_count ? 0 : 1; }
  uint32_t Local(uint32_t v) const { return v < a_count ? v : v - a_count; }
  // On its face's border: a position the neighbouring face repeats with its own vertex.
  bool OnBorder(uint32_t v) const {
    const uint32_t per_face = uint32_t((n + 1) * (n + 1)), local = Local(v) % per_face;
    const uint32_t i = local % uint32_t(n + 1), j = local / uint32_t(n + 1);
    return i == 0 || j == 0 || i == uint32_t(n) || j == uint32_t(n);
  }
  // The axis of the face vertex v lies on.
  int Axis(uint32_t v) const { return int(Local(v) / uint32_t((n + 1) * (n + 1)) / 2); }
};
TwoBoxes OverlappingBoxes(int n) {
  TwoBoxes b;
  b.n = n;
  AddBox(b.m, kBoxes[0][0], kBoxes[0][1], n);
  b.a_count = uint32_t(b.m.p.size() / 3);
  AddBox(b.m, kBoxes[1][0], kBoxes[1][1], n);
  return b;
}
// x strictly inside box `k` of kBoxes moved by dx along x.
bool StrictlyInBox(const float* x, int k, float dx = 0) {
  const float* lo = kBoxes[k][0];
  const float* hi = kBoxes[k][1];
  return x[0] > lo[0] + dx && x[0] < hi[0] + dx && x[1] > lo[1] && x[1] < hi[1] && x[2] > lo[2] && x[2] < hi[2];
}
// x inside box `k` or on its surface (to 1e-6).
bool OnOrInBox(const float* x, int k) {
  constexpr float e = 1e-6f;
  const float* lo = kBoxes[k][0];
  const float* hi = kBoxes[k][1];
  return x[0] >= lo[0] - e && x[0] <= hi[0] + e && x[1] >= lo[1] - e && x[1] <= hi[1] + e && x[2] >= lo[2] - e &&
         x[2] <= hi[2] + e;
}

TEST(MeshQuality, ClosedBoxHasNoVertexInsideAndItsVolume) {
  const float lo[3] = {0, 0, 0}, hi[3] = {1, 2, 3};
  const Mesh m = Box(lo, hi, 6);
  ThreadPool pool(2);
  const MeshQuality q = MeasureMeshQuality(m.p, m.p, m.t, &pool);
  EXPECT_EQ(q.inside_vertices, 0u);
  EXPECT_EQ(q.touching_vertices, 0u);
  EXPECT_NEAR(q.rest_volume, 6.0, 1e-5);
  EXPECT_NEAR(q.volume_ratio, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(q.edge_stretch_min, 1.0);
  EXPECT_DOUBLE_EQ(q.edge_stretch_max, 1.0);
}

TEST(MeshQuality, ScaleChangesVolumeByItsCubeAndStretchesEveryEdge) {
  const float lo[3] = {0, 0, 0}, hi[3] = {1, 1, 1};
  const Mesh m = Box(lo, hi, 4);
  std::vector<float> big = m.p;
  for (float& x : big) x = 2 * x + 5;
  const MeshQuality q = MeasureMeshQuality(m.p, big, m.t, nullptr);
  EXPECT_NEAR(q.volume_ratio, 8.0, 1e-5);
  EXPECT_NEAR(q.edge_stretch_min, 2.0, 1e-6);
  EXPECT_NEAR(q.edge_stretch_max, 2.0, 1e-6);
  EXPECT_EQ(q.inside_vertices, 0u);
}

// An open sheet in a slanted plane encloses no volume, but its float coordinates leave one of a
// few 1e-9: its volume ratio reads 1 whatever the bend (until 2026-12-07 about 4e6 for a bend of
// 0.2 (x − 0.5)²), while a closed box's still follows its scale.
TEST(MeshQuality, AMeshWithoutRestVolumeReadsVolumeRatioOne) {
  std::vector<float> rest, bent;
  std::vector<uint32_t> t;
  const int n = 4;
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) {
      const float x = float(i) / (n - 1), y = float(j) / (n - 1), z = 0.3f * x + 0.7f * y + 0.1f;
      rest.insert(rest.end(), {x, y, z});
      bent.insert(bent.end(), {x, y, z + 0.2f * (x - 0.5f) * (x - 0.5f)});
    }
  }
  for (int j = 0; j + 1 < n; ++j) {
    for (int i = 0; i + 1 < n; ++i) {
      const uint32_t a = uint32_t(j * n + i), b = a + 1, c = a + uint32_t(n), d = c + 1;
      t.insert(t.end(), {a, b, d, a, d, c});
    }
  }
  const MeshQuality q = MeasureMeshQuality(rest, bent, t, nullptr);
  EXPECT_LT(std::abs(q.rest_volume), 1e-6);
  EXPECT_EQ(q.volume_ratio, 1.0) << "rest volume " << q.rest_volume << ", volume " << q.volume;
  // Two closed unit cubes 1000 apart enclose their volume, however large their box: squashed to
  // half, the ratio reads 1/2.
  const float lo[3] = {0, 0, 0}, hi[3] = {1, 1, 1}, far_lo[3] = {1000, 0, 0}, far_hi[3] = {1001, 1, 1};
  Mesh two;
  AddBox(two, lo, hi, 2);
  AddBox(two, far_lo, far_hi, 2);
  std::vector<float> squashed = two.p;
  for (size_t i = 2; i < squashed.size(); i += 3) squashed[i] *= 0.5f;
  EXPECT_NEAR(MeasureMeshQuality(two.p, squashed, two.t, nullptr).volume_ratio, 0.5, 1e-6);
}

// Box B = [0.8, 2] × [−0.1, 1.1]² cuts 0.2 into box A = [0, 1]³ (each face has its own vertices,
// so a vertex's normal is its face's). Inside: exactly A's vertices strictly inside B and B's
// strictly inside A, each off a face's border as deep as the other box's nearer face along its
// normal line or as the nearest skin beyond its one-ring, whichever is nearer.
TEST(MeshQuality, VerticesPushedIntoAnotherPartAreInsideAtTheirDepth) {
  const TwoBoxes boxes = OverlappingBoxes(5);
  const Mesh& m = boxes.m;
  ThreadPool pool(2);
  const MeshQuality q = MeasureMeshQuality(m.p, m.p, m.t, &pool, {}, true);
  uint32_t expected = 0;
  double deepest = 0;
  for (uint32_t v = 0; v < m.p.size() / 3; ++v) {
    const float* x = &m.p[3 * v];
    const int own = boxes.BoxOf(v), other = 1 - own;
    const float* lo = kBoxes[other][0];
    const float* hi = kBoxes[other][1];
    const bool in = StrictlyInBox(x, other);
    expected += in;
    const int axis = boxes.Axis(v);
    if (in) {
      // Along the normal line to the other box's nearer face, bounded by the nearest skin beyond
      // the one-ring: the other box's surface, or the own face a cell away.
      double depth = std::min(x[axis] - lo[axis], hi[axis] - x[axis]);
      for (int k = 0; k < 3; ++k) depth = std::min({depth, double(x[k] - lo[k]), double(hi[k] - x[k])});
      depth = std::min(depth, (kBoxes[own][1][1] - kBoxes[own][0][1]) / double(boxes.n));
      deepest = std::max(deepest, depth);
      if (boxes.OnBorder(v)) {  // the next face's own vertices coincide with it
        EXPECT_LE(q.depth[v], depth + 1e-5) << "vertex " << v;
      } else {
        EXPECT_NEAR(q.depth[v], depth, 1e-5) << "vertex " << v;
      }
    } else {
      EXPECT_EQ(q.depth[v], 0.f) << "vertex " << v;
    }
  }
  EXPECT_GT(expected, 40u);
  EXPECT_EQ(q.inside_vertices + q.touching_vertices, expected) << "border vertices may only touch";
  EXPECT_NEAR(q.max_depth, deepest, 1e-5);
  EXPECT_NEAR(deepest, 0.2, 1e-6);
}

// A rig can be inside itself at rest (a character of overlapping meshes, clothes over a body):
// those vertices are counted once, on the rest mesh, and a frame's new_inside_vertices holds only
// what the pose added. Box B overlaps box A by 0.2 at rest; moved 0.3 further in, the vertices it
// newly swallowed (and its own that newly entered A) are the new ones, each strictly inside the
// other box now and not inside it at rest, and every such vertex off its face's border is counted.
TEST(MeshQuality, AnOverlapAtRestIsNotANewFold) {
  const TwoBoxes boxes = OverlappingBoxes(5);
  const Mesh& m = boxes.m;
  ThreadPool pool(2);
  const MeshQualityMeasure measure(m.p, m.t, {}, &pool);
  const MeshQuality at_rest = measure.Measure(m.p, &pool);
  EXPECT_GT(at_rest.inside_vertices, 40u);
  EXPECT_EQ(at_rest.rest_inside_vertices, at_rest.inside_vertices);
  EXPECT_EQ(at_rest.new_inside_vertices, 0u);
  EXPECT_EQ(at_rest.new_max_depth, 0.0);
  EXPECT_EQ(at_rest.new_deepest_vertex, -1);

  constexpr float kShift = 0.3f;
  std::vector<float> moved = m.p;
  for (size_t v = boxes.a_count; v < moved.size() / 3; ++v) moved[3 * v] -= kShift;
  const MeshQuality q = measure.Measure(moved, &pool, true);
  EXPECT_EQ(q.rest_inside_vertices, at_rest.inside_vertices);
  uint32_t counted = 0, expected_interior = 0;
  for (uint32_t v = 0; v < m.p.size() / 3; ++v) {
    const int other = 1 - boxes.BoxOf(v);
    const float* x = &m.p[3 * v];  // rest coordinates
    // B moved by −kShift: seen from A's vertices B's box shifts by −kShift, seen from B's A's by
    // +kShift.
    const bool in_now = StrictlyInBox(x, other, other == 1 ? -kShift : kShift);
    // At rest: strictly inside (never new), on the other box's surface (either way: A's edge at
    // x = 0.8 lies on B's face), or outside.
    const bool in_rest = StrictlyInBox(x, other), on_or_in_rest = OnOrInBox(x, other);
    const bool is_new = q.depth[v] > q.depth_tolerance && !measure.inside_at_rest()[v];
    counted += is_new;
    if (is_new) {
      EXPECT_TRUE(in_now && !in_rest) << "vertex " << v << " counted new";
    }
    if (!boxes.OnBorder(v) && in_now && !on_or_in_rest) {
      ++expected_interior;
      EXPECT_TRUE(is_new) << "vertex " << v << " newly inside the other box";
    }
  }
  EXPECT_EQ(q.new_inside_vertices, counted);
  EXPECT_GT(expected_interior, 10u);
  EXPECT_EQ(q.exposed_vertices, 0u) << "pushed further in, nothing inside at rest comes out";
}

// The inner layer brought out (exposed_vertices: a body through its clothes). Box B moved 0.3
// away from A no longer overlaps it: every vertex inside or touching at rest (A's face in B,
// B's face in A, the border vertices on the other's surface) is outside now, and counted; at rest
// none is.
TEST(MeshQuality, SkinInsideAtRestThatAPoseBringsOutIsCounted) {
  const TwoBoxes boxes = OverlappingBoxes(5);
  const Mesh& m = boxes.m;
  const MeshQualityMeasure measure(m.p, m.t);
  EXPECT_EQ(measure.Measure(m.p, nullptr).exposed_vertices, 0u);
  uint32_t inside_at_rest = 0;
  for (uint8_t in : measure.inside_at_rest()) inside_at_rest += in;
  EXPECT_GT(inside_at_rest, 40u);
  std::vector<float> apart = m.p;
  for (size_t v = boxes.a_count; v < apart.size() / 3; ++v) apart[3 * v] += 0.3f;
  const MeshQuality q = measure.Measure(apart, nullptr);
  EXPECT_EQ(q.exposed_vertices, inside_at_rest);
  EXPECT_EQ(q.inside_vertices + q.touching_vertices, 0u);
  // Moved 0.5 sideways (along y; B still cuts 0.2 into A, over part of A's height): what left
  // the overlap comes out (B's face above A, A's face below B), the rest stays inside.
  std::vector<float> partly = m.p;
  for (size_t v = boxes.a_count; v < partly.size() / 3; ++v) partly[3 * v + 1] += 0.5f;
  const MeshQuality half = measure.Measure(partly, nullptr);
  EXPECT_GT(half.exposed_vertices, 0u);
  EXPECT_LT(half.exposed_vertices, inside_at_rest);
}

// Touching is a band on both sides of the skin: skin inside another part at rest that a pose
// leaves a hair outside it (two halves of a mesh overlapping at a seam, a layer pressed on the
// one over it) lies on that skin and has not come out. Box B, 0.2 into A at rest (A's face at
// x = 1 in B, B's face at x = 0.8 in A), moved 0.2 and half the touching depth away: those faces
// lie that half apart, nothing is exposed; moved twice the depth further, all of it is. Until
// 2026-12-06 every vertex inside or touching at rest counted once outside.
TEST(MeshQuality, SkinThatAPoseLeavesAHairOutsideHasNotComeOut) {
  const TwoBoxes boxes = OverlappingBoxes(5);
  const Mesh& m = boxes.m;
  const MeshQualityMeasure measure(m.p, m.t);
  const double tolerance = measure.Measure(m.p, nullptr).depth_tolerance;
  ASSERT_GT(tolerance, 0.01);
  uint32_t inside_at_rest = 0;
  for (uint8_t in : measure.inside_at_rest()) inside_at_rest += in;
  EXPECT_GT(inside_at_rest, 40u);
  for (const double beyond : {0.5, 2.0}) {
    const float shift = float(0.2 + beyond * tolerance);
    std::vector<float> apart = m.p;
    for (size_t v = boxes.a_count; v < apart.size() / 3; ++v) apart[3 * v] += shift;
    // Every vertex inside at rest is now that far from the other box (B moved), as a solid.
    for (uint32_t v = 0; v < m.p.size() / 3; ++v) {
      if (!measure.inside_at_rest()[v]) continue;
      const int other = 1 - boxes.BoxOf(v);
      double d2 = 0;
      for (int a = 0; a < 3; ++a) {
        const double dx = other == 1 && a == 0 ? shift : 0.0;
        const double x = apart[3 * v + a];
        const double out = std::max({kBoxes[other][0][a] + dx - x, x - kBoxes[other][1][a] - dx, 0.0});
        d2 += out * out;
      }
      ASSERT_NEAR(std::sqrt(d2), beyond * tolerance, 1e-5) << "vertex " << v;
    }
    const MeshQuality q = measure.Measure(apart, nullptr);
    EXPECT_EQ(q.inside_vertices + q.touching_vertices, 0u) << beyond;
    EXPECT_EQ(q.exposed_vertices, beyond < 1 ? 0u : inside_at_rest) << beyond;
  }
}

// new_deepest_vertex names where the pose folded the skin deepest: a new inside vertex whose depth
// is new_max_depth, in whatever order the vertices come. Box B is sheared into A so that the new
// vertices' depths differ; the mesh is then numbered again with those vertices from the shallowest
// to the deepest, so that the first one found is not the deepest.
TEST(MeshQuality, TheDeepestNewInsideVertexIsNamed) {
  const TwoBoxes boxes = OverlappingBoxes(5);
  const uint32_t n = uint32_t(boxes.m.p.size() / 3);
  ThreadPool pool(2);
  std::vector<float> depth_as_built;
  std::vector<uint32_t> order(n);  // new index -> index as built
  std::iota(order.begin(), order.end(), 0u);
  for (const bool renumbered : {false, true}) {
    Mesh m = boxes.m;
    std::vector<float> moved(m.p.size());
    for (uint32_t v = 0; v < n; ++v) {
      const uint32_t built = order[v];
      for (int k = 0; k < 3; ++k) m.p[3 * v + k] = boxes.m.p[3 * built + k];
      for (int k = 0; k < 3; ++k) moved[3 * v + k] = m.p[3 * v + k];
      // Box B sheared into A: its low-y end 0.1 further in x, its high-y end 0.4.
      if (built >= boxes.a_count) moved[3 * v] -= 0.1f + 0.25f * (m.p[3 * v + 1] + 0.1f);
    }
    std::vector<uint32_t> index_of(n);
    for (uint32_t v = 0; v < n; ++v) index_of[order[v]] = v;
    for (uint32_t& i : m.t) i = index_of[i];
    const MeshQualityMeasure measure(m.p, m.t, {}, &pool);
    EXPECT_EQ(measure.Measure(m.p, &pool).new_deepest_vertex, -1) << "nothing new at rest";
    const MeshQuality q = measure.Measure(moved, &pool, true);
    auto is_new = [&](uint32_t v) { return q.depth[v] > q.depth_tolerance && !measure.inside_at_rest()[v]; };
    float shallowest = INFINITY, deepest = 0;
    uint32_t first_new = n;
    for (uint32_t v = 0; v < n; ++v) {
      if (!is_new(v)) continue;
      first_new = std::min(first_new, v);
      shallowest = std::min(shallowest, q.depth[v]);
      deepest = std::max(deepest, q.depth[v]);
    }
    const char* where = renumbered ? "renumbered shallowest first" : "as built";
    EXPECT_LT(shallowest + 0.01f, deepest) << "the new vertices' depths differ";
    ASSERT_GE(q.new_deepest_vertex, 0) << where;
    const size_t at = size_t(q.new_deepest_vertex);
    EXPECT_TRUE(is_new(uint32_t(at))) << where;
    EXPECT_NEAR(q.depth[at], deepest, 1e-6) << where;
    EXPECT_NEAR(q.new_max_depth, deepest, 1e-6) << where;
    if (renumbered) {
      EXPECT_LT(q.depth[first_new] + 0.01f, deepest) << "the first new vertex is a shallow one";
    } else {
      // Number the new vertices from the shallowest, the rest after them, for the second pass.
      depth_as_built.assign(q.depth.begin(), q.depth.end());
      std::vector<uint8_t> fresh(n);
      for (uint32_t v = 0; v < n; ++v) fresh[v] = is_new(v);
      std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
        if (fresh[a] != fresh[b]) return fresh[a] > fresh[b];
        return fresh[a] && depth_as_built[a] < depth_as_built[b];
      });
    }
  }
}

// A dent: the middle vertex of a face pushed 0.6 or 0.9 in (a spike into the box that does not
// pass through the skin) is not inside; pushed through the opposite face it is.
TEST(MeshQuality, ADentIsNotAFoldUntilItGoesThroughTheSkin) {
  const float lo[3] = {0, 0, 0}, hi[3] = {1, 1, 1};
  const Mesh m = Box(lo, hi, 4);
  // The centre of the x = 1 face (a = 0, side 1): the 2nd face block, grid (2, 2).
  const uint32_t centre = 1 * 25 + 2 * 5 + 2;
  ASSERT_FLOAT_EQ(m.p[3 * centre], 1.f);
  ASSERT_FLOAT_EQ(m.p[3 * centre + 1], 0.5f);
  std::vector<float> dent = m.p;
  dent[3 * centre] = 0.4f;
  MeshQuality q = MeasureMeshQuality(m.p, dent, m.t, nullptr);
  EXPECT_EQ(q.inside_vertices + q.touching_vertices, 0u);
  EXPECT_LT(q.volume_ratio, 1.0);
  dent[3 * centre] = 0.1f;  // 0.1 from the x = 0 face, the skin not crossed
  q = MeasureMeshQuality(m.p, dent, m.t, nullptr);
  EXPECT_EQ(q.inside_vertices + q.touching_vertices, 0u);
  // Through the x = 0 face, 0.3 beyond it: the spike's walls have passed through the skin and
  // the space around its tip is inside out (winding −1).
  dent[3 * centre] = -0.3f;
  q = MeasureMeshQuality(m.p, dent, m.t, nullptr, {}, true);
  EXPECT_GE(q.inside_vertices, 1u);
  EXPECT_GT(q.depth[centre], 0.25f) << "the face it went through is 0.3 away along the spike";
  EXPECT_LT(q.depth[centre], 0.4f);
}

// An imported mesh repeats a vertex per face corner: the report must not take a vertex's own
// copies for other skin. The two boxes of the test above, once with every position welded and
// once with three vertices per triangle, give every copy its welded vertex's depth.
TEST(MeshQuality, VerticesRepeatedPerCornerAreOneVertex) {
  const Mesh boxes = OverlappingBoxes(5).m;
  // Welded: one vertex per position.
  Mesh welded;
  std::vector<uint32_t> index_of(boxes.p.size() / 3);
  for (uint32_t v = 0; v < boxes.p.size() / 3; ++v) {
    uint32_t found = uint32_t(welded.p.size() / 3);
    for (uint32_t u = 0; u < welded.p.size() / 3; ++u) {
      if (welded.p[3 * u] == boxes.p[3 * v] && welded.p[3 * u + 1] == boxes.p[3 * v + 1] &&
          welded.p[3 * u + 2] == boxes.p[3 * v + 2]) {
        found = u;
        break;
      }
    }
    if (found == welded.p.size() / 3) welded.p.insert(welded.p.end(), &boxes.p[3 * v], &boxes.p[3 * v + 3]);
    index_of[v] = found;
  }
  for (uint32_t i : boxes.t) welded.t.push_back(index_of[i]);
  // Split: three vertices per triangle.
  Mesh split;
  std::vector<uint32_t> welded_of;
  for (uint32_t i : welded.t) {
    split.p.insert(split.p.end(), &welded.p[3 * i], &welded.p[3 * i + 3]);
    split.t.push_back(uint32_t(split.t.size()));
    welded_of.push_back(i);
  }
  const MeshQuality a = MeasureMeshQuality(welded.p, welded.p, welded.t, nullptr, {}, true);
  const MeshQuality b = MeasureMeshQuality(split.p, split.p, split.t, nullptr, {}, true);
  ASSERT_GT(a.inside_vertices, 40u);
  for (size_t v = 0; v < welded_of.size(); ++v) {
    EXPECT_NEAR(b.depth[v], a.depth[welded_of[v]], 1e-6) << "copy " << v << " of vertex " << welded_of[v];
  }
  EXPECT_NEAR(b.max_depth, a.max_depth, 1e-6);
  EXPECT_NEAR(b.max_depth, 0.2, 1e-5);
}

// A ball (poles on the x axis) appended to `m`, outward.
void AddBall(Mesh& m, const float c[3], float r, int rings, int segments) {
  const uint32_t base = uint32_t(m.p.size() / 3);
  m.p.insert(m.p.end(), {c[0] - r, c[1], c[2]});  // pole −x
  for (int i = 1; i < rings; ++i) {
    const double th = M_PI * i / rings;
    for (int j = 0; j < segments; ++j) {
      const double ph = 2 * M_PI * j / segments;
      m.p.insert(m.p.end(), {float(c[0] - r * std::cos(th)), float(c[1] + r * std::sin(th) * std::cos(ph)),
                             float(c[2] + r * std::sin(th) * std::sin(ph))});
    }
  }
  m.p.insert(m.p.end(), {c[0] + r, c[1], c[2]});  // pole +x
  const uint32_t last = uint32_t(m.p.size() / 3 - 1);
  auto at = [&](int i, int j) { return base + 1 + uint32_t((i - 1) * segments + (j % segments)); };
  for (int j = 0; j < segments; ++j) {
    m.t.insert(m.t.end(), {base, at(1, j + 1), at(1, j)});
    m.t.insert(m.t.end(), {last, at(rings - 1, j), at(rings - 1, j + 1)});
    for (int i = 1; i + 1 < rings; ++i) {
      m.t.insert(m.t.end(), {at(i, j), at(i, j + 1), at(i + 1, j + 1), at(i, j), at(i + 1, j + 1), at(i + 1, j)});
    }
  }
}

// A ball pressed 1e-6 into a box's face (a contact): its pole touches, nothing is inside; pressed
// 0.05 in, its pole is inside 0.05 deep.
TEST(MeshQuality, PiecesPressedTogetherTouchButAreNotInside) {
  const float lo[3] = {0, 0, 0}, hi[3] = {1, 1, 1};
  for (float press : {1e-6f, 0.05f}) {
    Mesh m;
    AddBox(m, lo, hi, 8);
    const float c[3] = {1 + 0.3f - press, 0.5f, 0.5f};
    const uint32_t pole = uint32_t(m.p.size() / 3);
    AddBall(m, c, 0.3f, 16, 24);
    ASSERT_FLOAT_EQ(m.p[3 * pole], 1 - press);
    // The ball has no rest volume of its own to compare: measure against itself.
    const MeshQuality q = MeasureMeshQuality(m.p, m.p, m.t, nullptr, {}, true);
    EXPECT_NEAR(q.volume_ratio, 1.0, 1e-12);
    if (press < 1e-3f) {
      EXPECT_EQ(q.inside_vertices, 0u);
      EXPECT_GE(q.touching_vertices, 1u);
      EXPECT_GT(q.depth[pole], 0.f);
      EXPECT_LE(q.max_depth, q.depth_tolerance);
    } else {
      EXPECT_GE(q.inside_vertices, 1u);
      EXPECT_NEAR(q.depth[pole], 0.05, 1e-6);
    }
  }
}

// A closed piece wound the other way on its own (a part exported mirrored) is turned around by
// itself, while one inside another part (a mouth bag wound inward in a head) stays as modelled,
// and sheets take the mesh's sign: box A outward, box B beside it wound inward, box C inside A
// wound inward. At rest no vertex of B reads inside the skin, as with B wound outward (until
// 2026-12-07 the mesh's sign was taken for every piece: all of B's read inside).
TEST(MeshQuality, APieceWoundTheOtherWayOnItsOwnIsTurnedAround) {
  const float a_lo[3] = {0, 0, 0}, a_hi[3] = {1, 1, 1}, b_lo[3] = {2, 0, 0}, b_hi[3] = {2.8f, 0.8f, 0.8f},
              c_lo[3] = {0.3f, 0.3f, 0.3f}, c_hi[3] = {0.6f, 0.6f, 0.6f};
  Mesh m;
  AddBox(m, a_lo, a_hi, 4);
  const uint32_t b_first = uint32_t(m.p.size() / 3), b_triangle = uint32_t(m.t.size());
  AddBox(m, b_lo, b_hi, 4);
  const uint32_t c_first = uint32_t(m.p.size() / 3), c_triangle = uint32_t(m.t.size());
  AddBox(m, c_lo, c_hi, 4);
  const uint32_t n = uint32_t(m.p.size() / 3);
  for (size_t t = b_triangle; t + 2 < m.t.size(); t += 3) std::swap(m.t[t + 1], m.t[t + 2]);  // B and C inward
  const std::vector<uint32_t> rep = WeldSeams(m.p, m.t, RestWeldTolerance(m.p, m.t));
  size_t flipped = 0;
  const std::vector<int8_t> facing = PieceFacing(m.p, m.t, rep, &flipped);
  EXPECT_EQ(flipped, 1u);
  for (uint32_t v = 0; v < n; ++v) {
    EXPECT_EQ(facing[v], v >= b_first && v < c_first ? -1 : 1) << "vertex " << v;
  }
  // B alone turned: measured at rest like the mesh with B outward (C's vertices read inside A in
  // both).
  Mesh b_outward = m;
  for (size_t t = b_triangle; t < c_triangle; t += 3) std::swap(b_outward.t[t + 1], b_outward.t[t + 2]);
  const MeshQuality turned = MeasureMeshQuality(m.p, m.p, m.t, nullptr, {}, true);
  const MeshQuality reference = MeasureMeshQuality(b_outward.p, b_outward.p, b_outward.t, nullptr, {}, true);
  EXPECT_EQ(turned.inside_vertices, reference.inside_vertices);
  for (uint32_t v = b_first; v < c_first; ++v) EXPECT_EQ(turned.depth[v], 0.f) << "B's vertex " << v;
  // Open pieces: B without one face (a tube without its caps, nearly enclosing a volume) still
  // takes its own sign; a flat sheet wound downwards (no volume, no side) takes the mesh's.
  Mesh open = m;
  open.t.erase(open.t.begin() + b_triangle + 96, open.t.begin() + b_triangle + 2 * 96);  // one face: 32 triangles
  const uint32_t sheet = uint32_t(open.p.size() / 3);
  for (int j = 0; j <= 4; ++j) {
    for (int i = 0; i <= 4; ++i) open.p.insert(open.p.end(), {5 + 0.25f * float(i), 0.25f * float(j), 0});
  }
  for (uint32_t j = 0; j < 4; ++j) {
    for (uint32_t i = 0; i < 4; ++i) {
      const uint32_t c00 = sheet + 5 * j + i, c10 = c00 + 1, c01 = c00 + 5, c11 = c01 + 1;
      open.t.insert(open.t.end(), {c00, c11, c10, c00, c01, c11});  // normal −z
    }
  }
  const std::vector<int8_t> open_facing = PieceFacing(open.p, open.t, WeldSeams(open.p, open.t, RestWeldTolerance(open.p, open.t)));
  EXPECT_EQ(open_facing[b_first], -1);
  EXPECT_EQ(open_facing[sheet], 1);
  EXPECT_EQ(open_facing[0], 1);
}

// A mesh exported inside out (every triangle wound inward, as a negative scale leaves it:
// assimp-testmodels' animation_with_skeleton.fbx) is measured turned around: the ball pressed
// 0.05 into the box reads as it does wound outward — the cap in the box inside, its pole 0.05 deep —
// where every vertex read inside the skin before 2026-12-05.
TEST(MeshQuality, AMeshInsideOutIsMeasuredTurnedAround) {
  const float lo[3] = {0, 0, 0}, hi[3] = {1, 1, 1};
  Mesh m;
  AddBox(m, lo, hi, 8);
  const float c[3] = {1 + 0.3f - 0.05f, 0.5f, 0.5f};
  const uint32_t pole = uint32_t(m.p.size() / 3);
  AddBall(m, c, 0.3f, 16, 24);
  const MeshQuality out = MeasureMeshQuality(m.p, m.p, m.t, nullptr, {}, true);
  for (size_t t = 0; t + 2 < m.t.size(); t += 3) std::swap(m.t[t + 1], m.t[t + 2]);
  const MeshQuality in = MeasureMeshQuality(m.p, m.p, m.t, nullptr, {}, true);
  EXPECT_LT(in.rest_volume, 0);
  EXPECT_EQ(in.inside_vertices, out.inside_vertices);
  EXPECT_LT(in.inside_vertices, m.p.size() / 3 / 10);  // the ball's cap in the box, not the whole mesh
  EXPECT_NEAR(in.depth[pole], 0.05, 1e-6);
  EXPECT_NEAR(in.volume_ratio, 1.0, 1e-12);
}

// Edge stretch says what happened to the edges: a skin collapsed to one point has every edge at
// length 0 ([0, 0]), and a skin with a vertex not finite reads NaN. Until 2026-12-07 both read
// [1, 1], a perfect skin: "no edge measured" and "every edge 0" were one case, and min and max
// skipped the NaN lengths.
TEST(MeshQuality, ACollapsedSkinStretchesToZeroAndANonFiniteOneReadsNaN) {
  const float lo[3] = {0, 0, 0}, hi[3] = {1, 1, 1};
  const Mesh m = Box(lo, hi, 3);
  const std::vector<float> point(m.p.size(), 0.5f);
  const MeshQuality collapsed = MeasureMeshQuality(m.p, point, m.t, nullptr);
  EXPECT_EQ(collapsed.edge_stretch_min, 0.0);
  EXPECT_EQ(collapsed.edge_stretch_max, 0.0);
  EXPECT_EQ(collapsed.volume_ratio, 0.0);
  for (float bad : {NAN, INFINITY}) {
    std::vector<float> stretched = m.p;
    for (size_t k = 0; k < stretched.size(); k += 3) stretched[k] *= 3;
    stretched[3 * 7 + 1] = bad;  // one coordinate of one vertex
    const MeshQuality q = MeasureMeshQuality(m.p, stretched, m.t, nullptr);
    EXPECT_TRUE(std::isnan(q.edge_stretch_min) && std::isnan(q.edge_stretch_max))
        << bad << ": [" << q.edge_stretch_min << ", " << q.edge_stretch_max << "]";
  }
}

// Edges between welded copies (a sliver triangle whose two corners are one point, a few ulps
// apart) are no edges of the skin: a rigid motion stretches nothing. Until 2026-12-07 such an
// edge's ratio, rounding over rounding, read 1.12 under a turn that kept every real edge to 1e-6.
TEST(MeshQuality, EdgesBetweenWeldedCopiesAreNotStretched) {
  Mesh m;
  const float c[3] = {0, 0, 0};
  AddBall(m, c, 1.0f, 12, 16);
  // A sliver: a copy of vertex 5, 1.2e-7 away (welded: the tolerance is 1e-5 of the diagonal),
  // in a triangle with it and its neighbour.
  const uint32_t copy = uint32_t(m.p.size() / 3);
  m.p.insert(m.p.end(), {m.p[15] + 1.2e-7f, m.p[16], m.p[17]});
  m.t.insert(m.t.end(), {5, copy, 6});
  ASSERT_EQ(WeldSeams(m.p, m.t, RestWeldTolerance(m.p, m.t))[copy], 5u);
  // A turn of 0.7 rad about z and a shift, rounded to float.
  const double a = 0.7, cs = std::cos(a), sn = std::sin(a);
  std::vector<float> moved(m.p.size());
  for (size_t v = 0; v < m.p.size() / 3; ++v) {
    const double x = m.p[3 * v], y = m.p[3 * v + 1], z = m.p[3 * v + 2];
    moved[3 * v] = float(cs * x - sn * y + 0.3);
    moved[3 * v + 1] = float(sn * x + cs * y - 0.2);
    moved[3 * v + 2] = float(z + 0.1);
  }
  const MeshQuality q = MeasureMeshQuality(m.p, moved, m.t, nullptr);
  EXPECT_NEAR(q.edge_stretch_min, 1.0, 1e-5);
  EXPECT_NEAR(q.edge_stretch_max, 1.0, 1e-5);
}

}  // namespace
}  // namespace sinew
