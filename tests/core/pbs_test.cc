// Position-based skinning's building blocks (seed 002; spec §2.1–2.2, §2.5–2.6, §2.9): the voxel
// tetrahedralization, the render mesh's embedding, the corrected volume constraint (against the
// paper's misprint) and the constraint colouring.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "core/pbs/constraints.h"
#include "core/pbs/tet_mesh.h"
#include "tests/core/test_util.h"

namespace sinew {
namespace {

using V3 = Eigen::Vector3d;

double Volume(const V3 p[4]) { return SignedVolume(p[0], p[1], p[2], p[3]); }

// The spec's errata check (§2.6): on randomly perturbed tets, the corrected gradients are the
// volume's derivative (central differences) and one projection with k = 1 shrinks |C| almost
// always; the gradients as printed (each cross product on the wrong particle, the step's sign
// flipped) shrink it about half the time — the control that shows the test can fail.
TEST(PbsVolume, CorrectedGradientsAreTheDerivativeAndTheMisprintIsNot) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  size_t corrected = 0, printed = 0;
  constexpr int kTrials = 2000;
  double worst_gradient = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    V3 rest[4];
    do {
      for (auto& p : rest) p = V3(u(rng), u(rng), u(rng));
    } while (Volume(rest) < 0.05);
    V3 moved[4];
    for (int i = 0; i < 4; ++i) moved[i] = rest[i] + 0.2 * V3(u(rng), u(rng), u(rng));
    const float v0 = float(Volume(rest));
    Eigen::Vector3f p[4], g[4];
    for (int i = 0; i < 4; ++i) p[i] = moved[i].cast<float>();
    const float c = VolumeGradients(p, v0, g);
    for (int i = 0; i < 4; ++i) {
      for (int a = 0; a < 3; ++a) {
        V3 plus[4], minus[4];
        std::copy(moved, moved + 4, plus);
        std::copy(moved, moved + 4, minus);
        plus[i][a] += 1e-6;
        minus[i][a] -= 1e-6;
        worst_gradient = std::max(worst_gradient, std::abs((Volume(plus) - Volume(minus)) / 2e-6 - g[i][a]));
      }
    }
    // One projection each way, from the same positions.
    float x[12];
    for (int i = 0; i < 4; ++i) {
      for (int a = 0; a < 3; ++a) x[3 * i + a] = p[i][a];
    }
    ProjectVolume({{0, 1, 2, 3}, v0}, 1.f, x);
    V3 after[4];
    for (int i = 0; i < 4; ++i) after[i] = V3(x[3 * i], x[3 * i + 1], x[3 * i + 2]);
    corrected += std::abs(Volume(after) - v0) < std::abs(c);
    // The paper's Eqs. 10–17: "∇p2" is our ∇4, "∇p3" our ∇2, "∇p4" our ∇3, added with +s.
    const Eigen::Vector3f printed_grad[4] = {g[0], g[3], g[1], g[2]};
    float norm = 0;
    for (const auto& q : printed_grad) norm += q.squaredNorm();
    const float s = c / norm;
    V3 misprinted[4];
    for (int i = 0; i < 4; ++i) misprinted[i] = (p[i] + s * printed_grad[i]).cast<double>();
    printed += std::abs(Volume(misprinted) - v0) < std::abs(c);
  }
  std::printf("|C| shrinks after one projection: corrected %zu, printed %zu of %d; gradient error %.1e\n", corrected,
              printed, kTrials, worst_gradient);
  EXPECT_LE(worst_gradient, 1e-5);
  EXPECT_GE(corrected, size_t(0.99 * kTrials));
  EXPECT_LE(printed, size_t(0.75 * kTrials));
}

struct Cylinder {
  Rig rig = testing::BuildOrDie(testing::ElbowCylinder());
  VoxelGrid grid = *Voxelize(rig.positions, rig.triangles, {0.25});
  TetMesh mesh = *VoxelTetMesh(grid);
};

// Six positive tets per voxel filling it exactly (the total is the voxels' volume), conforming:
// every triangle is shared by at most two tets, and the ones on the boundary are exactly two per
// boundary square of the voxel solid.
TEST(PbsTetMesh, VoxelTetsFillTheVoxelsAndConform) {
  const Cylinder c;
  ASSERT_EQ(c.mesh.tets.size(), 6 * c.grid.voxel_count());
  EXPECT_EQ(c.mesh.rejected, 0u);
  double total = 0;
  for (size_t t = 0; t < c.mesh.tets.size(); ++t) {
    const auto& v = c.mesh.tets[t];
    const V3 p[4] = {c.mesh.rest[v[0]], c.mesh.rest[v[1]], c.mesh.rest[v[2]], c.mesh.rest[v[3]]};
    EXPECT_GT(Volume(p), 0) << t;
    EXPECT_NEAR(Volume(p), c.mesh.rest_volume[t], 1e-15);
    total += c.mesh.rest_volume[t];
  }
  const double h3 = c.grid.h * c.grid.h * c.grid.h;
  EXPECT_NEAR(total, c.grid.voxel_count() * h3, 1e-9 * total);
  std::map<std::array<uint32_t, 3>, int> faces;
  for (const auto& t : c.mesh.tets) {
    for (int skip = 0; skip < 4; ++skip) {
      std::array<uint32_t, 3> f;
      for (int i = 0, k = 0; i < 4; ++i) {
        if (i != skip) f[k++] = t[i];
      }
      std::sort(f.begin(), f.end());
      ++faces[f];
    }
  }
  size_t boundary_triangles = 0;
  for (const auto& [f, n] : faces) {
    EXPECT_LE(n, 2);
    boundary_triangles += n == 1;
  }
  size_t boundary_squares = 0;
  for (size_t e = 0; e < c.grid.voxel_count(); ++e) {
    const int cell = c.grid.cells[e];
    const std::array<int, 3> at = {cell % c.grid.dims[0], cell / c.grid.dims[0] % c.grid.dims[1],
                                   cell / (c.grid.dims[0] * c.grid.dims[1])};
    for (int axis = 0; axis < 3; ++axis) {
      for (int step : {-1, 1}) {
        std::array<int, 3> n = at;
        n[axis] += step;
        const bool inside = n[axis] >= 0 && n[axis] < c.grid.dims[axis];
        boundary_squares += !inside || c.grid.VoxelAt(n) < 0;
      }
    }
  }
  std::printf("%zu voxels, %zu particles, %zu tets, %zu boundary squares\n", c.grid.voxel_count(), c.mesh.rest.size(),
              c.mesh.tets.size(), boundary_squares);
  EXPECT_EQ(boundary_triangles, 2 * boundary_squares);
}

// The render mesh in its tets: β sums to 1 and reproduces every rest vertex.
TEST(PbsTetMesh, EmbeddingReproducesTheRestMesh) {
  const Cylinder c;
  const TetEmbedding e = EmbedInTets(c.mesh, c.grid, c.rig.positions);
  ASSERT_EQ(e.tet.size(), c.rig.vertex_count());
  double worst = 0;
  for (size_t i = 0; i < e.tet.size(); ++i) {
    V3 q = V3::Zero();
    double sum = 0;
    for (int k = 0; k < 4; ++k) {
      q += e.beta[i][k] * c.mesh.rest[c.mesh.tets[e.tet[i]][k]];
      sum += e.beta[i][k];
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
    worst = std::max(worst, (q - V3(c.rig.positions[3 * i], c.rig.positions[3 * i + 1], c.rig.positions[3 * i + 2])).norm());
  }
  std::printf("%zu of %zu render vertices outside every tet (extrapolated); worst rest error %.1e\n", e.outside,
              e.tet.size(), worst);
  EXPECT_LE(worst, 1e-9);
}

// Colouring (§2.9): no two constraints of one colour share a particle; the colour count lies
// between the largest number of constraints on one particle and the largest dual degree + 1;
// the same input gives the same colouring.
TEST(PbsColouring, NoColourSharesAParticleAndTheCountIsWithinItsBounds) {
  const Cylinder c;
  const auto edges = TetEdges(c.mesh.tets, c.mesh.rest);
  std::vector<std::array<uint32_t, 2>> stretch;
  for (const auto& e : edges) stretch.push_back({e.a, e.b});
  auto check = [&](auto particles, const char* what) {
    using Span = std::span<const typename decltype(particles)::value_type>;
    const Colouring col = ColourConstraints(Span(particles), c.mesh.rest.size());
    ASSERT_EQ(col.order.size(), particles.size());
    std::vector<uint32_t> incidence(c.mesh.rest.size(), 0);
    for (const auto& p : particles) {
      for (uint32_t i : p) ++incidence[i];
    }
    const uint32_t lower = *std::max_element(incidence.begin(), incidence.end());
    size_t upper = 0;  // the largest true dual degree + 1
    std::vector<std::vector<uint32_t>> by_particle(c.mesh.rest.size());
    for (uint32_t k = 0; k < particles.size(); ++k) {
      for (uint32_t i : particles[k]) by_particle[i].push_back(k);
    }
    for (uint32_t k = 0; k < particles.size(); ++k) {
      std::set<uint32_t> neighbours;
      for (uint32_t i : particles[k]) neighbours.insert(by_particle[i].begin(), by_particle[i].end());
      upper = std::max(upper, neighbours.size());  // includes k itself: degree + 1
    }
    for (size_t colour = 0; colour < col.colours(); ++colour) {
      std::set<uint32_t> used;
      for (uint32_t at = col.offsets[colour]; at < col.offsets[colour + 1]; ++at) {
        for (uint32_t i : particles[col.order[at]]) EXPECT_TRUE(used.insert(i).second) << what << " colour " << colour;
      }
    }
    std::printf("%s: %zu constraints, %zu colours (bounds %u .. %zu)\n", what, particles.size(), col.colours(), lower,
                upper);
    EXPECT_GE(col.colours(), lower);
    EXPECT_LE(col.colours(), upper);
    const Colouring again = ColourConstraints(Span(particles), c.mesh.rest.size());
    EXPECT_EQ(again.order, col.order);
    EXPECT_EQ(again.offsets, col.offsets);
  };
  check(stretch, "stretch");
  check(c.mesh.tets, "volume");
}

}  // namespace
}  // namespace sinew
