// Solid voxelization for the elasticity-inspired weights (spec §2.1), checked against the
// geometry: the voxels hold the solid (every voxel whose centre is inside is occupied, every
// mesh vertex lies in one), reach no farther than a voxel's half-diagonal beyond it, cover at
// least the mesh's volume (divergence theorem), survive holes, and split separate parts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/swingtwist/voxels.h"

namespace sinew {
namespace {

struct Mesh {
  std::vector<float> positions;
  std::vector<uint32_t> triangles;
};

// A closed, outward-oriented UV sphere.
Mesh Sphere(const Eigen::Vector3d& centre, double radius, int rings = 24, int segments = 48) {
  Mesh m;
  auto add = [&](const Eigen::Vector3d& p) {
    for (int k = 0; k < 3; ++k) m.positions.push_back(float(centre[k] + radius * p[k]));
  };
  add({0, 0, 1});
  for (int r = 1; r < rings; ++r) {
    const double th = std::numbers::pi * r / rings;
    for (int s = 0; s < segments; ++s) {
      const double ph = 2 * std::numbers::pi * s / segments;
      add({std::sin(th) * std::cos(ph), std::sin(th) * std::sin(ph), std::cos(th)});
    }
  }
  add({0, 0, -1});
  const uint32_t south = uint32_t(m.positions.size() / 3 - 1);
  auto ring = [&](int r, int s) { return uint32_t(1 + (r - 1) * segments + (s % segments)); };
  for (int s = 0; s < segments; ++s) m.triangles.insert(m.triangles.end(), {0, ring(1, s), ring(1, s + 1)});
  for (int r = 1; r + 1 < rings; ++r) {
    for (int s = 0; s < segments; ++s) {
      m.triangles.insert(m.triangles.end(), {ring(r, s), ring(r + 1, s), ring(r + 1, s + 1)});
      m.triangles.insert(m.triangles.end(), {ring(r, s), ring(r + 1, s + 1), ring(r, s + 1)});
    }
  }
  for (int s = 0; s < segments; ++s) m.triangles.insert(m.triangles.end(), {ring(rings - 1, s), south, ring(rings - 1, s + 1)});
  return m;
}

Mesh Join(const Mesh& a, const Mesh& b) {
  Mesh m = a;
  const uint32_t base = uint32_t(a.positions.size() / 3);
  m.positions.insert(m.positions.end(), b.positions.begin(), b.positions.end());
  for (uint32_t t : b.triangles) m.triangles.push_back(base + t);
  return m;
}

double Volume(const Mesh& m) {  // divergence theorem
  double v = 0;
  for (size_t t = 0; t < m.triangles.size(); t += 3) {
    Eigen::Vector3d p[3];
    for (int k = 0; k < 3; ++k) {
      const uint32_t i = m.triangles[t + k];
      p[k] = Eigen::Vector3d(m.positions[3 * i], m.positions[3 * i + 1], m.positions[3 * i + 2]);
    }
    v += p[0].dot(p[1].cross(p[2])) / 6;
  }
  return v;
}

Eigen::Vector3d Centre(const VoxelGrid& g, size_t voxel) {
  const int32_t c = g.cells[voxel];
  const int x = c % g.dims[0], y = c / g.dims[0] % g.dims[1], z = c / (g.dims[0] * g.dims[1]);
  return g.origin + g.h * Eigen::Vector3d(x + 0.5, y + 0.5, z + 0.5);
}

// Every voxel centre of the grid that lies inside the solid (by more than the mesh's chordal
// error) is occupied; no occupied voxel's centre is farther than half a voxel diagonal outside.
void ExpectHoldsTheSphere(const VoxelGrid& g, double radius, double chord) {
  size_t missed = 0, far = 0;
  for (int z = 0; z < g.dims[2]; ++z) {
    for (int y = 0; y < g.dims[1]; ++y) {
      for (int x = 0; x < g.dims[0]; ++x) {
        const Eigen::Vector3d c = g.origin + g.h * Eigen::Vector3d(x + 0.5, y + 0.5, z + 0.5);
        missed += c.norm() < radius - chord && g.VoxelAt({x, y, z}) < 0;
      }
    }
  }
  for (size_t v = 0; v < g.voxel_count(); ++v) far += Centre(g, v).norm() > radius + std::sqrt(3.0) / 2 * g.h;
  EXPECT_EQ(missed, 0u);
  EXPECT_EQ(far, 0u);
}

TEST(Voxels, HoldTheSolidAndNoMore) {
  const Mesh m = Sphere({0, 0, 0}, 1);
  const double chord = 1 - std::cos(std::numbers::pi / 24);  // the polygon's deepest dent
  for (double h : {0.2, 0.1, 0.0625}) {
    auto g = Voxelize(m.positions, m.triangles, {h});
    ASSERT_TRUE(g.ok()) << g.status();
    ExpectHoldsTheSphere(*g, 1, chord);
    const double occupied = double(g->voxel_count()) * h * h * h;
    EXPECT_GE(occupied, Volume(m)) << h;
    EXPECT_LE(occupied, 4.0 / 3 * std::numbers::pi * std::pow(1 + std::sqrt(3.0) * h, 3)) << h;
    EXPECT_GT(g->interior_voxels, 0u);
    for (size_t i = 0; i < m.positions.size() / 3; ++i) {
      const Eigen::Vector3d p(m.positions[3 * i], m.positions[3 * i + 1], m.positions[3 * i + 2]);
      ASSERT_GE(g->VoxelAt(g->CellOf(p)), 0) << "vertex " << i << " at h " << h;
    }
    // Corners sit at their voxel's lattice points.
    for (size_t v = 0; v < g->voxel_count(); v += 37) {
      const Eigen::Vector3d lo = Centre(*g, v) - Eigen::Vector3d::Constant(h / 2);
      for (int q = 0; q < 8; ++q) {
        const Eigen::Vector3d want = lo + h * Eigen::Vector3d(q & 1, q >> 1 & 1, q >> 2 & 1);
        EXPECT_LE((g->vertices[g->corners[v][q]] - want).norm(), 1e-12);
      }
    }
    EXPECT_EQ(g->components, 1);
  }
}

// A point outside the grid maps to the nearest boundary cell on each axis, also one 2^31 and
// more cells away (a joint far off the mesh), whose int conversion was undefined and gave cell 0
// where the last was meant until 2026-12-03.
TEST(Voxels, FarPointsMapToTheNearestBoundaryCell) {
  const Mesh m = Sphere({0, 0, 0}, 1);
  auto g = Voxelize(m.positions, m.triangles, {0.1});
  ASSERT_TRUE(g.ok()) << g.status();
  for (double far : {10.0, 1e12, 1e30}) {
    const std::array<int, 3> hi = g->CellOf(Eigen::Vector3d(far, far, far));
    const std::array<int, 3> lo = g->CellOf(Eigen::Vector3d(-far, -far, -far));
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(hi[k], g->dims[k] - 1) << "axis " << k << " at " << far;
      EXPECT_EQ(lo[k], 0) << "axis " << k << " at " << -far;
    }
  }
}

// Holes: with a band of triangles missing the vote still fills the inside.
TEST(Voxels, InteriorSurvivesHoles) {
  Mesh m = Sphere({0, 0, 0}, 1);
  m.triangles.erase(m.triangles.begin() + 3 * 300, m.triangles.begin() + 3 * 340);  // 40 triangles
  auto g = Voxelize(m.positions, m.triangles, {0.1});
  ASSERT_TRUE(g.ok());
  ExpectHoldsTheSphere(*g, 1, 1 - std::cos(std::numbers::pi / 24));
}

// Separate parts are separate components; parts that touch are one.
TEST(Voxels, PartsAreComponentsThroughSharedCorners) {
  auto apart = Voxelize(Join(Sphere({0, 0, 0}, 1), Sphere({3, 0, 0}, 0.5)).positions,
                        Join(Sphere({0, 0, 0}, 1), Sphere({3, 0, 0}, 0.5)).triangles, {0.1});
  ASSERT_TRUE(apart.ok());
  EXPECT_EQ(apart->components, 2);
  const Mesh touching = Join(Sphere({0, 0, 0}, 1), Sphere({1.45, 0, 0}, 0.5));
  auto one = Voxelize(touching.positions, touching.triangles, {0.1});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->components, 1);
}

TEST(Voxels, BadSizesAreRefused) {
  const Mesh m = Sphere({0, 0, 0}, 1);
  EXPECT_EQ(Voxelize(m.positions, m.triangles, {0}).status().code(), absl::StatusCode::kInvalidArgument);
  VoxelOptions fine{1e-3};
  fine.max_cells = 1 << 20;
  const auto st = Voxelize(m.positions, m.triangles, fine).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("voxel size 0.001"));
  EXPECT_EQ(Voxelize(m.positions, {}, {0.1}).status().code(), absl::StatusCode::kInvalidArgument);
}

// 2 000 stacked unit squares at a voxel size of 1/400: a grid of 13 M voxels, within its limit
// of 67 M, but every triangle crosses 80 000 rows (until 2026-12-02: 3e8 crossings, 5 GB, before
// anything refused). Refused up front, naming the voxel size; the same squares at 1/20 pass.
TEST(Voxels, OverlappingLargeTrianglesAreRefusedBeforeTheWork) {
  Mesh m;
  for (int q = 0; q < 2000; ++q) {
    const float z = 0.5f + 1e-4f * float(q);
    const uint32_t b = uint32_t(m.positions.size() / 3);
    m.positions.insert(m.positions.end(), {0, 0, z, 1, 0, z, 1, 1, z, 0, 1, z});
    m.triangles.insert(m.triangles.end(), {b, b + 1, b + 2, b, b + 2, b + 3});
  }
  const auto st = Voxelize(m.positions, m.triangles, {1.0 / 400}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("voxel size 0.0025: the triangles' boxes cover"));
  EXPECT_TRUE(Voxelize(m.positions, m.triangles, {1.0 / 20}).ok());
}

}  // namespace
}  // namespace sinew
