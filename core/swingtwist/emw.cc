#include "core/swingtwist/emw.h"

#include <Eigen/Geometry>
#include <Eigen/SVD>
#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "core/geometry/triangle.h"
#include "core/swingtwist/sparse.h"

namespace sinew {
namespace {

using V3 = Eigen::Vector3d;

Eigen::Matrix3d Rotation(const V3& axis, double degrees) {
  return Eigen::AngleAxisd(degrees * std::numbers::pi / 180, axis).toRotationMatrix();
}

// Closed segment p0–p1 against the closed box [lo, hi] (slab test).
bool SegmentHitsBox(const V3& p0, const V3& p1, const V3& lo, const V3& hi) {
  double t0 = 0, t1 = 1;
  return ClipToBox(p0, V3(p1 - p0), lo, hi, t0, t1);
}

// Kabsch: the proper rotation maximising tr(R cov), by SVD.
Eigen::Matrix3d KabschRotation(const Eigen::Matrix3d& cov) {
  Eigen::JacobiSVD<Eigen::Matrix3d> svd(cov, Eigen::ComputeFullU | Eigen::ComputeFullV);
  Eigen::Matrix3d v = svd.matrixV();
  Eigen::Matrix3d r = v * svd.matrixU().transpose();
  if (r.determinant() < 0) {
    v.col(2) = -v.col(2);
    r = v * svd.matrixU().transpose();
  }
  return r;
}

}  // namespace

Eigen::Matrix3d FitRotation(const Eigen::Matrix3d& cov, const Eigen::Matrix3d& start, int* newton_steps) {
  // f(ω) = tr(exp([ω]) R cov) ≈ f(0) − 2 ω·n + ½ ωᵀ (S − tr(S) I) ω with N = R cov, S its
  // symmetric part and n the axial vector of its skew part: the step ω = −2 (tr(S) I − S)⁻¹ n,
  // a maximum's where tr(S) I − S is positive definite (a pure rotation φ away: |ω| = tan φ, the
  // error cubed at each step).
  constexpr int kSteps = 8;
  constexpr double kLargest = 0.5;   // radians: past it, no Newton step of the maximum near
  constexpr double kSettled = 1e-9;  // radians: the step after it is below rounding
  Eigen::Matrix3d r = start;
  for (int step = 0; step < kSteps; ++step) {
    const Eigen::Matrix3d nm = r * cov;
    const V3 n(0.5 * (nm(2, 1) - nm(1, 2)), 0.5 * (nm(0, 2) - nm(2, 0)), 0.5 * (nm(1, 0) - nm(0, 1)));
    const Eigen::Matrix3d sym = 0.5 * (nm + nm.transpose());
    const Eigen::Matrix3d h = sym.trace() * Eigen::Matrix3d::Identity() - sym;
    // Positive definite (Sylvester: the leading minors), then solved by its adjugate.
    const double m01 = h(0, 0) * h(1, 1) - h(0, 1) * h(0, 1);
    const double c00 = h(1, 1) * h(2, 2) - h(1, 2) * h(1, 2), c01 = h(0, 2) * h(1, 2) - h(0, 1) * h(2, 2),
                 c02 = h(0, 1) * h(1, 2) - h(0, 2) * h(1, 1), c11 = h(0, 0) * h(2, 2) - h(0, 2) * h(0, 2),
                 c12 = h(0, 1) * h(0, 2) - h(0, 0) * h(1, 2);
    const double det = h(0, 0) * c00 + h(0, 1) * c01 + h(0, 2) * c02;
    if (!(h(0, 0) > 0 && m01 > 0 && det > 0)) break;
    const V3 omega = (-2.0 / det) * V3(c00 * n.x() + c01 * n.y() + c02 * n.z(), c01 * n.x() + c11 * n.y() + c12 * n.z(),
                                       c02 * n.x() + c12 * n.y() + m01 * n.z());
    const double angle = omega.norm();
    if (!(angle <= kLargest)) break;  // NaN too
    if (angle > 0) r = Eigen::AngleAxisd(angle, omega / angle).toRotationMatrix() * r;
    if (angle < kSettled) {
      if (newton_steps) *newton_steps = step + 1;
      return r;
    }
  }
  if (newton_steps) *newton_steps = -1;
  return KabschRotation(cov);
}

namespace {
std::vector<Eigen::Matrix3d> Samples(std::initializer_list<V3> axes, int n) {
  std::vector<Eigen::Matrix3d> out;
  for (int q = n; q >= 1; --q) {  // q = n first: n = 1 gives the paper's order
    for (const V3& axis : axes) {
      out.push_back(Rotation(axis, -90.0 * q / n));
      out.push_back(Rotation(axis, 90.0 * q / n));
    }
  }
  return out;
}
}  // namespace

std::vector<Eigen::Matrix3d> SwingSamples(int n) { return Samples({V3::UnitX(), V3::UnitY()}, std::max(n, 1)); }
std::vector<Eigen::Matrix3d> TwistSamples(int n) { return Samples({V3::UnitZ()}, std::max(n, 1)); }

Dirichlet BoneDirichlet(const VoxelGrid& grid, std::span<const Eigen::Vector3d> rest_joints,
                        std::span<const int32_t> parents, size_t joint, size_t* conflicts) {
  const size_t nj = parents.size();
  // Whether a joint lies in `joint`'s subtree, each answered once (its walk towards the root
  // stops at a joint already answered): O(joints) a call, where a walk to the root per bone was
  // O(joints x depth), 4e9 steps for a chain of 65 535 (until 2026-12-03).
  std::vector<int8_t> below(nj, -1);  // -1 not known yet, 0 no, 1 yes
  below[joint] = 1;
  std::vector<int32_t> path;
  auto in_subtree = [&](int32_t x) {
    path.clear();
    while (x >= 0 && below[size_t(x)] < 0) {
      path.push_back(x);
      x = parents[size_t(x)];
    }
    const int8_t answer = x < 0 ? 0 : below[size_t(x)];
    for (int32_t q : path) below[size_t(q)] = answer;
    return answer == 1;
  };
  std::vector<uint8_t> claim(grid.vertices.size(), 0);  // bit 1: rotating, bit 2: fixed
  const double eps = 1e-9 * grid.h;
  for (size_t c = 0; c < nj; ++c) {
    const int32_t p = parents[c];
    if (p < 0) continue;
    const uint8_t bit = in_subtree(p) ? 1 : 2;
    const V3 a = rest_joints[p], b = rest_joints[c];
    const auto lo = grid.CellOf(a.cwiseMin(b) - V3::Constant(eps)), hi = grid.CellOf(a.cwiseMax(b) + V3::Constant(eps));
    for (int z = lo[2]; z <= hi[2]; ++z) {
      for (int y = lo[1]; y <= hi[1]; ++y) {
        for (int x = lo[0]; x <= hi[0]; ++x) {
          const int32_t v = grid.VoxelAt({x, y, z});
          if (v < 0) continue;
          const V3 box_lo = grid.origin + grid.h * V3(x, y, z) - V3::Constant(eps);
          const V3 box_hi = box_lo + V3::Constant(grid.h + 2 * eps);
          if (!SegmentHitsBox(a, b, box_lo, box_hi)) continue;
          for (int32_t corner : grid.corners[v]) claim[corner] |= bit;
        }
      }
    }
  }
  Dirichlet d(claim.size(), -1);
  size_t both = 0;
  for (size_t i = 0; i < claim.size(); ++i) {
    if (claim[i] == 1) d[i] = 1;
    else if (claim[i] == 2) d[i] = 0;
    both += claim[i] == 3;
  }
  if (conflicts) *conflicts = both;
  return d;
}

absl::StatusOr<EmwResult> SolveEmw(const VoxelGrid& grid, std::span<const Eigen::Vector3d> vertices,
                                   const Dirichlet& dirichlet, std::span<const Eigen::Matrix3d> samples,
                                   const EmwOptions& options, const std::function<bool()>& keep_going) {
  auto stopped = [&] { return keep_going && !keep_going(); };
  const auto cancelled = [] { return absl::CancelledError("emw: cancelled"); };
  const size_t n = grid.vertices.size(), m = grid.voxel_count(), k = samples.size();
  if (vertices.size() != n || dirichlet.size() != n || k == 0) {
    return absl::InternalError("emw: one position and one Dirichlet value per grid vertex, and samples");
  }
  // Components without a Dirichlet vertex (mesh parts with no bone inside: eyes, buttons) are
  // passengers: left out of the solve, they take the weight of the nearest solved vertex.
  std::vector<uint8_t> anchored(grid.components, 0);
  for (size_t i = 0; i < n; ++i) anchored[grid.component[i]] |= dirichlet[i] >= 0;
  if (std::find(anchored.begin(), anchored.end(), uint8_t{1}) == anchored.end()) {
    return absl::FailedPreconditionError(
        "elasticity weights: no part of the voxel grid contains a bone (are the joints inside the mesh?)");
  }
  auto passenger = [&](size_t i) { return !anchored[grid.component[i]]; };
  // Free vertices numbered 0..nf-1.
  std::vector<int32_t> free_index(n, -1);
  int32_t nf = 0;
  for (size_t i = 0; i < n; ++i) {
    if (dirichlet[i] < 0 && !passenger(i)) free_index[i] = nf++;
  }
  // u_{i,a} = (S_i − I) ṽ_a.
  std::vector<V3> u(k * n);
  for (size_t i = 0; i < k; ++i) {
    const Eigen::Matrix3d s = samples[i] - Eigen::Matrix3d::Identity();
    for (size_t a = 0; a < n; ++a) u[i * n + a] = s * vertices[a];
  }
  // H = Σ over samples and voxel edges, and the grid Laplacian L (edges with multiplicity).
  std::vector<Eigen::Triplet<double>> h_triplets, l_triplets;
  h_triplets.reserve(m * 12 * 4);
  l_triplets.reserve(m * 12 * 4);
  std::vector<double> h_diag(n, 0.0);
  for (size_t e = 0; e < m; ++e) {
    for (const auto& edge : kVoxelEdges) {
      const int32_t a = grid.corners[e][edge[0]], b = grid.corners[e][edge[1]];
      double aa = 0, bb = 0, ab = 0;
      for (size_t i = 0; i < k; ++i) {
        aa += u[i * n + a].squaredNorm();
        bb += u[i * n + b].squaredNorm();
        ab -= u[i * n + a].dot(u[i * n + b]);
      }
      h_diag[a] += aa;
      h_diag[b] += bb;
      const int32_t fa = free_index[a], fb = free_index[b];
      if (fa >= 0) {
        h_triplets.emplace_back(fa, fa, aa);
        l_triplets.emplace_back(fa, fa, 1);
      }
      if (fb >= 0) {
        h_triplets.emplace_back(fb, fb, bb);
        l_triplets.emplace_back(fb, fb, 1);
      }
      if (fa >= 0 && fb >= 0) {
        h_triplets.emplace_back(fa, fb, ab);
        h_triplets.emplace_back(fb, fa, ab);
        l_triplets.emplace_back(fa, fb, -1);
        l_triplets.emplace_back(fb, fa, -1);
      }
    }
  }
  double mean_diag = 0;
  for (double x : h_diag) mean_diag += x;
  mean_diag /= double(n);
  const double reg = options.epsilon * mean_diag;

  EmwResult result;
  result.weights.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    if (dirichlet[i] >= 0) result.weights[i] = dirichlet[i];
  }
  // Passengers copy the nearest solved vertex once the weights are known.
  const std::vector<int32_t> source = NearestAnchoredVertex(grid, anchored);
  auto carry_passengers = [&] {
    for (size_t i = 0; i < n; ++i) {
      if (source[i] >= 0) result.weights[i] = result.weights[source[i]];
    }
  };
  if (nf == 0) {
    carry_passengers();
    return result;
  }

  Eigen::SparseMatrix<double> lff(nf, nf), hff(nf, nf);
  lff.setFromTriplets(l_triplets.begin(), l_triplets.end());
  hff.setFromTriplets(h_triplets.begin(), h_triplets.end());
  hff += reg * lff;

  // The constrained columns' contribution to the right-hand sides: −(H_FC w_C), −(L_FC w_C).
  Eigen::VectorXd h_fixed = Eigen::VectorXd::Zero(nf), l_fixed = Eigen::VectorXd::Zero(nf);
  for (size_t e = 0; e < m; ++e) {
    for (const auto& edge : kVoxelEdges) {
      const int32_t a = grid.corners[e][edge[0]], b = grid.corners[e][edge[1]];
      for (auto [f, c] : {std::pair{a, b}, std::pair{b, a}}) {
        if (free_index[f] < 0 || dirichlet[c] != 1) continue;
        double fc = 0;
        for (size_t i = 0; i < k; ++i) fc -= u[i * n + f].dot(u[i * n + c]);
        h_fixed[free_index[f]] -= fc + reg * -1.0;
        l_fixed[free_index[f]] -= -1.0;
      }
    }
  }

  // Harmonic start.
  SpdSolver harmonic(lff);
  if (!harmonic.ok()) return absl::FailedPreconditionError("elasticity weights: the grid Laplacian did not factor");
  if (stopped()) return cancelled();
  const Eigen::VectorXd w0 = harmonic.solve(l_fixed);
  for (size_t i = 0; i < n; ++i) {
    if (free_index[i] >= 0) result.weights[i] = w0[free_index[i]];
  }
  SpdSolver solver(hff);
  if (!solver.ok()) {
    return absl::FailedPreconditionError("elasticity weights: the energy's system did not factor (a part without a bone?)");
  }
  if (stopped()) return cancelled();

  std::vector<Eigen::Matrix3d> rotations(k * m, Eigen::Matrix3d::Identity());
  Eigen::VectorXd g(nf);
  const std::vector<double>& w = result.weights;
  for (int iteration = 0;; ++iteration) {
    // Local: best-fit rotations for the current weights, and the energy they give.
    double energy = 0;
    for (size_t i = 0; i < k; ++i) {
      for (size_t e = 0; e < m; ++e) {
        Eigen::Matrix3d cov = Eigen::Matrix3d::Zero();
        for (const auto& edge : kVoxelEdges) {
          const int32_t a = grid.corners[e][edge[0]], b = grid.corners[e][edge[1]];
          const V3 rest = vertices[a] - vertices[b];
          const V3 moved = rest + w[a] * u[i * n + a] - w[b] * u[i * n + b];
          cov += rest * moved.transpose();
        }
        // From the voxel's fit at the previous local step (the identity at the first).
        const Eigen::Matrix3d r = FitRotation(cov, rotations[i * m + e]);
        rotations[i * m + e] = r;
        for (const auto& edge : kVoxelEdges) {
          const int32_t a = grid.corners[e][edge[0]], b = grid.corners[e][edge[1]];
          const V3 rest = vertices[a] - vertices[b];
          const V3 moved = rest + w[a] * u[i * n + a] - w[b] * u[i * n + b];
          energy += 0.5 * (moved - r * rest).squaredNorm();
        }
      }
    }
    double smooth = 0;
    for (size_t e = 0; e < m; ++e) {
      for (const auto& edge : kVoxelEdges) {
        const double d = w[grid.corners[e][edge[0]]] - w[grid.corners[e][edge[1]]];
        smooth += d * d;
      }
    }
    energy += 0.5 * reg * smooth;
    result.energy.push_back(energy);
    const size_t count = result.energy.size();
    if (count >= 2) {
      const double before = result.energy[count - 2];
      if (before - energy <= options.tolerance * std::max(before, 1e-300)) break;
    }
    if (iteration >= options.max_iterations) break;
    if (stopped()) return cancelled();
    // Global: the weights for these rotations.
    g = h_fixed;
    for (size_t i = 0; i < k; ++i) {
      for (size_t e = 0; e < m; ++e) {
        const Eigen::Matrix3d rm = rotations[i * m + e] - Eigen::Matrix3d::Identity();
        for (const auto& edge : kVoxelEdges) {
          const int32_t a = grid.corners[e][edge[0]], b = grid.corners[e][edge[1]];
          const V3 c = rm * (vertices[a] - vertices[b]);
          if (free_index[a] >= 0) g[free_index[a]] += u[i * n + a].dot(c);
          if (free_index[b] >= 0) g[free_index[b]] -= u[i * n + b].dot(c);
        }
      }
    }
    const Eigen::VectorXd solved = solver.solve(g);
    for (size_t i = 0; i < n; ++i) {
      if (free_index[i] >= 0) result.weights[i] = solved[free_index[i]];
    }
    result.iterations = iteration + 1;
  }
  carry_passengers();
  return result;
}

}  // namespace sinew
