// Properties of Green coordinates (seed-004 §4.3, §11 item 6): rest reproduction and Σφ = 1
// inside, stretch factors, similarity invariance inside and outside (with the exterior
// extension), closed forms at the centre of regular cages, agreement with brute-force
// quadrature of the defining boundary integrals (no GCTriInt involved) and with a literal port
// of the LLCO08 algorithm, continuity across the cage, the (non-zero) error under a
// non-uniform scale, and rest reproduction on the SuperCages Arm.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Geometry>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/cage/green.h"
#include "core/deformer/deformer.h"
#include "tests/core/test_util.h"
#include "tests/core/obj_fixture.h"
#include "core/cage/mvc.h"
#include "core/parallel/thread_pool.h"

namespace sinew {
namespace {

using V3 = Eigen::Vector3d;
using RowMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using FaceTerms = Eigen::Matrix<double, Eigen::Dynamic, 3, Eigen::RowMajor>;
constexpr double kPi = std::numbers::pi;

// ---------------------------------------------------------------------------------------------
// Cages.

CageGeometry MakeCage(const std::vector<V3>& v, const std::vector<std::array<uint32_t, 3>>& t) {
  CageGeometry c;
  c.vertices.resize(3, static_cast<Eigen::Index>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) c.vertices.col(static_cast<Eigen::Index>(i)) = v[i];
  c.triangles.resize(3, static_cast<Eigen::Index>(t.size()));
  for (size_t j = 0; j < t.size(); ++j) {
    for (int k = 0; k < 3; ++k) c.triangles(k, static_cast<Eigen::Index>(j)) = t[j][k];
  }
  return c;
}

V3 Vert(const CageGeometry& c, Eigen::Index f, int k) { return c.vertices.col(c.triangles(k, f)); }

V3 FaceNormal(const CageGeometry& c, Eigen::Index f) {
  return (Vert(c, f, 1) - Vert(c, f, 0)).cross(Vert(c, f, 2) - Vert(c, f, 0)).normalized();
}

V3 FaceCentroid(const CageGeometry& c, Eigen::Index f) {
  return (Vert(c, f, 0) + Vert(c, f, 1) + Vert(c, f, 2)) / 3;
}

// Flips faces whose normal points towards the origin (for cages star-shaped about it).
CageGeometry OrientedAboutOrigin(const std::vector<V3>& v, std::vector<std::array<uint32_t, 3>> t) {
  for (auto& f : t) {
    const V3 n = (v[f[1]] - v[f[0]]).cross(v[f[2]] - v[f[0]]);
    if (n.dot(v[f[0]] + v[f[1]] + v[f[2]]) < 0) std::swap(f[1], f[2]);
  }
  return MakeCage(v, t);
}

// [-h, h]^3, each square split along one diagonal.
CageGeometry Cube(double h = 1) {
  std::vector<V3> v;
  for (int i = 0; i < 8; ++i) v.emplace_back(i & 1 ? h : -h, i & 2 ? h : -h, i & 4 ? h : -h);
  const std::vector<std::array<uint32_t, 3>> t = {{0, 1, 3}, {0, 3, 2}, {4, 5, 7}, {4, 7, 6},
                                                  {0, 1, 5}, {0, 5, 4}, {2, 3, 7}, {2, 7, 6},
                                                  {0, 2, 6}, {0, 6, 4}, {1, 3, 7}, {1, 7, 5}};
  return OrientedAboutOrigin(v, t);
}

CageGeometry RegularTetrahedron() {
  const std::vector<V3> v = {{1, 1, 1}, {1, -1, -1}, {-1, 1, -1}, {-1, -1, 1}};
  return OrientedAboutOrigin(v, {{0, 1, 2}, {0, 1, 3}, {0, 2, 3}, {1, 2, 3}});
}

CageGeometry RegularOctahedron() {
  const std::vector<V3> v = {{1, 0, 0}, {-1, 0, 0}, {0, 1, 0}, {0, -1, 0}, {0, 0, 1}, {0, 0, -1}};
  std::vector<std::array<uint32_t, 3>> t;
  for (uint32_t x : {0u, 1u}) {
    for (uint32_t y : {2u, 3u}) {
      for (uint32_t z : {4u, 5u}) t.push_back({x, y, z});
    }
  }
  return OrientedAboutOrigin(v, t);
}

// Icosphere (one subdivision: 42 vertices, 80 faces) with a smooth radial bump field: a
// non-convex cage, star-shaped about the origin. Radii in [0.62, 1.38].
CageGeometry BumpySphere() {
  const double g = (1 + std::sqrt(5.0)) / 2;
  std::vector<V3> v;
  for (double a : {-1.0, 1.0}) {
    for (double b : {-g, g}) {
      v.emplace_back(0, a, b);
      v.emplace_back(a, b, 0);
      v.emplace_back(b, 0, a);
    }
  }
  std::vector<std::array<uint32_t, 3>> t;
  for (uint32_t i = 0; i < 12; ++i) {
    for (uint32_t j = i + 1; j < 12; ++j) {
      for (uint32_t k = j + 1; k < 12; ++k) {
        auto edge = [&](uint32_t p, uint32_t q) { return std::abs((v[p] - v[q]).norm() - 2) < 1e-9; };
        if (edge(i, j) && edge(j, k) && edge(i, k)) t.push_back({i, j, k});
      }
    }
  }
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> mid;
  auto midpoint = [&](uint32_t p, uint32_t q) {
    const std::pair<uint32_t, uint32_t> key{std::min(p, q), std::max(p, q)};
    auto it = mid.find(key);
    if (it != mid.end()) return it->second;
    v.push_back((v[p] + v[q]) / 2);
    return mid[key] = static_cast<uint32_t>(v.size() - 1);
  };
  std::vector<std::array<uint32_t, 3>> fine;
  for (const auto& f : t) {
    const uint32_t a = midpoint(f[0], f[1]), b = midpoint(f[1], f[2]), c = midpoint(f[2], f[0]);
    fine.push_back({f[0], a, c});
    fine.push_back({f[1], b, a});
    fine.push_back({f[2], c, b});
    fine.push_back({a, b, c});
  }
  for (V3& p : v) {
    const V3 d = p.normalized();
    p = d * (1 + 0.22 * std::sin(3 * d.x() + 1) * std::cos(2 * d.y()) + 0.16 * d.z() * d.x());
  }
  return OrientedAboutOrigin(v, fine);
}

// An L-shaped prism (not star-shaped about any interior point's neighbourhood of the reflex
// edge): the polygon (0,0) (2,0) (2,1) (1,1) (1,2) (0,2) extruded over z in [0, 1].
CageGeometry LPrism() {
  const double p[6][2] = {{0, 0}, {2, 0}, {2, 1}, {1, 1}, {1, 2}, {0, 2}};
  std::vector<V3> v;
  for (double z : {0.0, 1.0}) {
    for (const auto& q : p) v.emplace_back(q[0], q[1], z);
  }
  std::vector<std::array<uint32_t, 3>> t;
  for (uint32_t k = 1; k + 1 < 6; ++k) {
    t.push_back({0, k + 1, k});          // bottom, seen from below
    t.push_back({6, 6 + k, 6 + k + 1});  // top
  }
  for (uint32_t i = 0; i < 6; ++i) {
    const uint32_t j = (i + 1) % 6;
    t.push_back({i, j, 6 + j});
    t.push_back({i, 6 + j, 6 + i});
  }
  return MakeCage(v, t);
}

// ---------------------------------------------------------------------------------------------
// Independent geometry (test side).

// Generalised winding number (sum of signed solid angles / 4π).
double Winding(const CageGeometry& c, const V3& x) {
  double w = 0;
  for (Eigen::Index f = 0; f < c.triangles.cols(); ++f) {
    const V3 a = Vert(c, f, 0) - x, b = Vert(c, f, 1) - x, d = Vert(c, f, 2) - x;
    const double la = a.norm(), lb = b.norm(), ld = d.norm();
    w += 2 * std::atan2(a.dot(b.cross(d)), la * lb * ld + a.dot(b) * ld + b.dot(d) * la + d.dot(a) * lb);
  }
  return w / (4 * kPi);
}

double SegmentDistance(const V3& x, const V3& a, const V3& b) {
  const V3 ab = b - a;
  const double t = std::clamp((x - a).dot(ab) / ab.squaredNorm(), 0.0, 1.0);
  return (x - (a + t * ab)).norm();
}

double TriangleDistance(const V3& x, const V3& a, const V3& b, const V3& c) {
  const V3 n = (b - a).cross(c - a).normalized();
  const V3 q = x - n.dot(x - a) * n;
  if ((b - a).cross(q - a).dot(n) >= 0 && (c - b).cross(q - b).dot(n) >= 0 &&
      (a - c).cross(q - c).dot(n) >= 0) {
    return std::abs(n.dot(x - a));
  }
  return std::min({SegmentDistance(x, a, b), SegmentDistance(x, b, c), SegmentDistance(x, c, a)});
}

// Distance to the cage surface and the nearest face.
std::pair<double, Eigen::Index> CageDistance(const CageGeometry& c, const V3& x) {
  std::pair<double, Eigen::Index> best{1e300, -1};
  for (Eigen::Index f = 0; f < c.triangles.cols(); ++f) {
    const double d = TriangleDistance(x, Vert(c, f, 0), Vert(c, f, 1), Vert(c, f, 2));
    if (d < best.first) best = {d, f};
  }
  return best;
}

// Random points with the given winding status at least `margin` from the surface, sampled in
// the bounding box grown by `grow` on every side.
Eigen::Matrix3Xd RandomPoints(const CageGeometry& c, int count, bool inside, double margin, double grow,
                              uint32_t seed) {
  std::mt19937 rng(seed);
  const V3 lo = c.vertices.rowwise().minCoeff().array() - grow;
  const V3 hi = c.vertices.rowwise().maxCoeff().array() + grow;
  std::vector<V3> pts;
  while (static_cast<int>(pts.size()) < count) {
    V3 x;
    for (int k = 0; k < 3; ++k) x[k] = std::uniform_real_distribution<double>(lo[k], hi[k])(rng);
    if ((Winding(c, x) > 0.5) != inside || CageDistance(c, x).first < margin) continue;
    pts.push_back(x);
  }
  Eigen::Matrix3Xd m(3, count);
  for (int i = 0; i < count; ++i) m.col(i) = pts[static_cast<size_t>(i)];
  return m;
}

// ---------------------------------------------------------------------------------------------
// Deformation in double precision (the library's GreenDeform writes floats).

Eigen::Matrix3Xd DeformDouble(const GreenCoordinates& gc, const CageGeometry& rest,
                              const Eigen::Matrix3Xd& deformed) {
  FaceTerms terms;
  GreenFaceTerms(rest, deformed, terms);
  const Eigen::MatrixXd r = gc.phi * deformed.transpose() + gc.psi * terms;  // m x 3
  return r.transpose();
}

// Σ φ_i v_i + Σ ψ_j n_j at rest.
Eigen::Matrix3Xd Reproduce(const GreenCoordinates& gc, const CageGeometry& c) {
  return DeformDouble(gc, c, c.vertices);
}

double MaxColumnDistance(const Eigen::Matrix3Xd& a, const Eigen::Matrix3Xd& b) {
  return (a - b).colwise().norm().maxCoeff();
}

double MaxSumError(const GreenCoordinates& gc) {
  return (gc.phi.rowwise().sum().array() - 1).abs().maxCoeff();
}

struct SimilarityMap {
  Eigen::Matrix3d rotation;
  double scale;
  V3 translation;
  Eigen::Matrix3Xd Apply(const Eigen::Matrix3Xd& p) const {
    return ((scale * rotation) * p).colwise() + translation;
  }
};

SimilarityMap RandomSimilarity(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  SimilarityMap s;
  s.rotation = Eigen::Quaterniond(u(rng), u(rng), u(rng), u(rng)).normalized().toRotationMatrix();
  s.scale = std::exp(u(rng));  // 0.37 .. 2.7
  s.translation = V3(u(rng), u(rng), u(rng)) * 5;
  return s;
}

std::vector<std::pair<std::string, CageGeometry>> TestCages() {
  return {{"cube", Cube(1)}, {"bumpy-sphere", BumpySphere()}, {"L-prism", LPrism()}};
}

// ---------------------------------------------------------------------------------------------
// Oracles that do not use the library's closed forms.

// Brute-force quadrature of the defining integrals (no extension):
//   φ_i = (1/4π) Σ_{t ∋ v_i} ∫_t Γ_i n·(ξ-η)/|ξ-η|³ dσ,  ψ_j = (1/4π) ∫_{t_j} 1/|ξ-η| dσ,
// each face split into N² sub-triangles with a 7-point degree-5 rule (Strang-Fix/Dunavant).
void QuadratureGc(const CageGeometry& c, const V3& eta, int N, Eigen::VectorXd& phi, Eigen::VectorXd& psi) {
  static const double kRule[7][3] = {{1.0 / 3, 1.0 / 3, 0.225},
                                     {0.059715871789770, 0.470142064105115, 0.132394152788506},
                                     {0.470142064105115, 0.059715871789770, 0.132394152788506},
                                     {0.470142064105115, 0.470142064105115, 0.132394152788506},
                                     {0.797426985353087, 0.101286507323456, 0.125939180544827},
                                     {0.101286507323456, 0.797426985353087, 0.125939180544827},
                                     {0.101286507323456, 0.101286507323456, 0.125939180544827}};
  phi.setZero(c.vertices.cols());
  psi.setZero(c.triangles.cols());
  for (Eigen::Index f = 0; f < c.triangles.cols(); ++f) {
    const V3 v0 = Vert(c, f, 0), e1 = Vert(c, f, 1) - v0, e2 = Vert(c, f, 2) - v0;
    const V3 n = e1.cross(e2).normalized();
    const double sub_area = 0.5 * e1.cross(e2).norm() / (N * N);
    double s_psi = 0;
    V3 s_phi = V3::Zero();
    auto sub = [&](double s0, double t0, double s1, double t1, double s2, double t2) {
      for (const auto& q : kRule) {
        const double b1 = q[0], b2 = q[1], b0 = 1 - b1 - b2;
        const double s = b0 * s0 + b1 * s1 + b2 * s2, t = b0 * t0 + b1 * t1 + b2 * t2;
        const V3 xi = v0 + s * e1 + t * e2;
        const V3 d = xi - eta;
        const double r = d.norm();
        s_psi += q[2] / r;
        const double k = q[2] * n.dot(d) / (r * r * r);
        s_phi += k * V3(1 - s - t, s, t);
      }
    };
    for (int i = 0; i < N; ++i) {
      for (int j = 0; i + j < N; ++j) {
        const double a = double(i) / N, b = double(j) / N, h = 1.0 / N;
        sub(a, b, a + h, b, a, b + h);
        if (i + j + 1 < N) sub(a + h, b, a + h, b + h, a, b + h);
      }
    }
    psi[f] = sub_area * s_psi / (4 * kPi);
    for (int k = 0; k < 3; ++k) phi[c.triangles(k, f)] += sub_area * s_phi[k] / (4 * kPi);
  }
}

// A literal port of the LLCO08 algorithm as written in seed-004 §4.3 (GCTriInt), angles via
// acos as in the paper. Interior points only (no extension).
double Sign(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }

double GcTriInt(const V3& p, const V3& t1, const V3& t2, const V3& eta) {
  const V3 a = t2 - t1, b = p - t1, c1 = t1 - p, c2 = t2 - p;
  if (b.norm() < 1e-300 || c2.norm() < 1e-300) return 0;  // degenerate: p at t1 or t2
  const double alpha = std::acos(std::clamp(a.dot(b) / (a.norm() * b.norm()), -1.0, 1.0));
  const double beta = std::acos(std::clamp(c1.dot(c2) / (c1.norm() * c2.norm()), -1.0, 1.0));
  const double lambda = b.squaredNorm() * std::sin(alpha) * std::sin(alpha);
  const double c = (p - eta).squaredNorm();
  if (lambda <= 0) return 0;
  auto F = [&](double theta) {
    const double S = std::sin(theta), C = std::cos(theta);
    return -0.5 * Sign(S) *
           (2 * std::sqrt(c) * std::atan(std::sqrt(c) * C / std::sqrt(lambda + S * S * c)) +
            std::sqrt(lambda) *
                std::log((2 * std::sqrt(lambda) * S * S / ((1 - C) * (1 - C))) *
                         (1 - 2 * c * C /
                                  (c * (1 + C) + lambda + std::sqrt(lambda * lambda + lambda * c * S * S)))));
  };
  return -1 / (4 * kPi) * std::abs(F(kPi - alpha) - F(kPi - alpha - beta) - std::sqrt(c) * beta);
}

void Llco08Gc(const CageGeometry& cage, const V3& eta, Eigen::VectorXd& phi, Eigen::VectorXd& psi) {
  phi.setZero(cage.vertices.cols());
  psi.setZero(cage.triangles.cols());
  for (Eigen::Index j = 0; j < cage.triangles.cols(); ++j) {
    const V3 n = FaceNormal(cage, j);
    V3 w[3], N[3];
    for (int k = 0; k < 3; ++k) w[k] = Vert(cage, j, k) - eta;
    const V3 p = w[0].dot(n) * n;
    double sum = 0, II[3];
    for (int k = 0; k < 3; ++k) {
      const V3& a = w[k];
      const V3& b = w[(k + 1) % 3];
      const double s = Sign((a - p).cross(b - p).dot(n));
      sum += s * GcTriInt(p, a, b, V3::Zero());
      II[k] = GcTriInt(V3::Zero(), b, a, V3::Zero());
      N[k] = b.cross(a).normalized();
    }
    const double I = -std::abs(sum);
    psi[j] = -I;
    V3 m = n * I;
    for (int k = 0; k < 3; ++k) m += N[k] * II[k];
    if (m.norm() > 1e-12) {
      for (int k = 0; k < 3; ++k) {
        const V3& Nk1 = N[(k + 1) % 3];
        phi[cage.triangles(k, j)] += Nk1.dot(m) / Nk1.dot(w[k]);
      }
    }
  }
}

// ∫ over an equilateral triangle with inradius r of 1/|ξ-η|, η at height h above its centre:
// six right triangles in polar coordinates about the centre, composite Simpson in the angle.
double EquilateralSingleLayer(double r, double h) {
  const int n = 4000;
  const double b = kPi / 3, dx = b / n;
  auto g = [&](double t) { return std::sqrt(r * r / (std::cos(t) * std::cos(t)) + h * h) - h; };
  double s = g(0) + g(b);
  for (int i = 1; i < n; ++i) s += (i % 2 ? 4 : 2) * g(i * dx);
  return 6 * s * dx / 3;
}

// ---------------------------------------------------------------------------------------------
// Tests.

TEST(GreenCoordinates, RestReproductionAndPartitionOfUnityInside) {
  ThreadPool pool(4);
  for (const auto& [name, cage] : TestCages()) {
    const double D = cage.diagonal();
    const Eigen::Matrix3Xd pts = RandomPoints(cage, 300, /*inside=*/true, 1e-3 * D, 0, 11);
    const GreenCoordinates gc = ComputeGreenCoordinates(cage, pts, &pool);
    const double rep = MaxColumnDistance(Reproduce(gc, cage), pts) / D;
    const double sum = MaxSumError(gc);
    std::printf("[%s] interior: max |Σφv + Σψn - η| = %.3g·D, max |Σφ - 1| = %.3g\n", name.c_str(), rep,
                sum);
    EXPECT_LE(rep, 1e-8) << name;
    EXPECT_LE(sum, 1e-10) << name;
    EXPECT_EQ(std::count(gc.exterior.begin(), gc.exterior.end(), 1), 0) << name;
    EXPECT_TRUE(gc.psi.minCoeff() > 0) << name;  // ψ_j = (1/4π) ∫ 1/r > 0
  }
}

TEST(GreenCoordinates, StretchIsOneAtRestKUnderUniformScaleOneUnderRotation) {
  for (const auto& [name, cage] : TestCages()) {
    const Eigen::VectorXd rest = GreenStretch(cage, cage.vertices);
    EXPECT_LE((rest.array() - 1).abs().maxCoeff(), 1e-12) << name;
    for (double k : {0.25, 1.7, 3.0}) {
      const Eigen::VectorXd s = GreenStretch(cage, k * cage.vertices);
      EXPECT_LE((s.array() - k).abs().maxCoeff(), 1e-12 * k) << name << " k=" << k;
    }
    const SimilarityMap rot{RandomSimilarity(5).rotation, 1.0, V3(0.3, -2, 7)};
    const Eigen::VectorXd s = GreenStretch(cage, rot.Apply(cage.vertices));
    EXPECT_LE((s.array() - 1).abs().maxCoeff(), 1e-12) << name;
    // The face terms are s_j times the unit normals of the deformed faces.
    FaceTerms terms;
    const Eigen::Matrix3Xd scaled = 2.5 * cage.vertices;
    GreenFaceTerms(cage, scaled, terms);
    ASSERT_EQ(terms.rows(), cage.triangles.cols());
    for (Eigen::Index f = 0; f < terms.rows(); ++f) {
      EXPECT_NEAR((terms.row(f).transpose() - 2.5 * FaceNormal(cage, f)).norm(), 0, 1e-12) << name;
    }
  }
}

TEST(GreenCoordinates, SimilarityInvarianceInside) {
  ThreadPool pool(4);
  for (const auto& [name, cage] : TestCages()) {
    const double D = cage.diagonal();
    const Eigen::Matrix3Xd pts = RandomPoints(cage, 200, true, 1e-3 * D, 0, 21);
    const GreenCoordinates gc = ComputeGreenCoordinates(cage, pts, &pool);
    double worst = 0;
    for (uint32_t seed : {1u, 2u, 3u}) {
      const SimilarityMap s = RandomSimilarity(seed);
      const double err =
          MaxColumnDistance(DeformDouble(gc, cage, s.Apply(cage.vertices)), s.Apply(pts)) / (s.scale * D);
      worst = std::max(worst, err);
    }
    std::printf("[%s] interior similarity error %.3g·(kD)\n", name.c_str(), worst);
    EXPECT_LE(worst, 1e-8) << name;
  }
}

TEST(GreenCoordinates, SimilarityInvarianceAndReproductionOutsideWithExtension) {
  ThreadPool pool(4);
  for (const auto& [name, cage] : TestCages()) {
    const double D = cage.diagonal();
    const Eigen::Matrix3Xd pts = RandomPoints(cage, 200, /*inside=*/false, 1e-3 * D, 0.5 * D, 31);
    const GreenCoordinates gc = ComputeGreenCoordinates(cage, pts, &pool);
    EXPECT_EQ(std::count(gc.exterior.begin(), gc.exterior.end(), 1), pts.cols()) << name;
    const double rep = MaxColumnDistance(Reproduce(gc, cage), pts) / D;
    const double sum = MaxSumError(gc);
    double worst = 0;
    for (uint32_t seed : {4u, 5u, 6u}) {
      const SimilarityMap s = RandomSimilarity(seed);
      const double err =
          MaxColumnDistance(DeformDouble(gc, cage, s.Apply(cage.vertices)), s.Apply(pts)) / (s.scale * D);
      worst = std::max(worst, err);
    }
    std::printf("[%s] exterior: reproduction %.3g·D, |Σφ - 1| %.3g, similarity error %.3g·(kD)\n",
                name.c_str(), rep, sum, worst);
    EXPECT_LE(rep, 1e-8) << name;
    EXPECT_LE(sum, 1e-10) << name;
    EXPECT_LE(worst, 1e-8) << name;
  }
}

// The exterior coordinates are the raw boundary integrals (here by quadrature) plus the
// extension through the exit face: α = barycentric coordinates of η's projection on that face's
// plane, β = its signed distance to the plane (the 4x4 system with Σα = 1, solved by LU here).
// Exit face: the nearest face; on a tie (nearest point on a shared edge or vertex) the face
// whose plane η lies furthest in front of.
TEST(GreenCoordinates, ExteriorIsQuadraturePlusNearestFaceExtension) {
  for (const auto& [name, cage] : TestCages()) {
    const double D = cage.diagonal();
    const Eigen::Matrix3Xd pts = RandomPoints(cage, 30, false, 0.08 * D, 0.3 * D, 41);
    const GreenCoordinates gc = ComputeGreenCoordinates(cage, pts, nullptr);
    double err_phi = 0, err_psi = 0;
    int ties = 0;
    for (Eigen::Index i = 0; i < pts.cols(); ++i) {
      const V3 x = pts.col(i);
      const double dmin = CageDistance(cage, x).first;
      Eigen::Index e = -1;
      double best_plane = -1e300;
      int candidates = 0;
      for (Eigen::Index f = 0; f < cage.triangles.cols(); ++f) {
        if (TriangleDistance(x, Vert(cage, f, 0), Vert(cage, f, 1), Vert(cage, f, 2)) > dmin + 1e-9 * D) continue;
        ++candidates;
        const double plane = FaceNormal(cage, f).dot(x - Vert(cage, f, 0));
        if (plane > best_plane) best_plane = plane, e = f;
      }
      ties += candidates > 1;
      Eigen::VectorXd phi, psi;
      QuadratureGc(cage, x, 48, phi, psi);
      Eigen::Matrix4d A;
      for (int k = 0; k < 3; ++k) A.col(k) << Vert(cage, e, k), 1;
      A.col(3) << FaceNormal(cage, e), 0;
      const Eigen::Vector4d ab = A.fullPivLu().solve(Eigen::Vector4d(x.x(), x.y(), x.z(), 1));
      for (int k = 0; k < 3; ++k) phi[cage.triangles(k, e)] += ab[k];
      psi[e] += ab[3];
      err_phi = std::max(err_phi, (gc.phi.row(i).transpose() - phi).cwiseAbs().maxCoeff());
      err_psi = std::max(err_psi, (gc.psi.row(i).transpose() - psi).cwiseAbs().maxCoeff() / D);
    }
    std::printf("[%s] exterior vs quadrature + extension (%ld points, %d on an edge/vertex tie): "
                "max |Δφ| %.3g, max |Δψ| %.3g·D\n",
                name.c_str(), long(pts.cols()), ties, err_phi, err_psi);
    EXPECT_LE(err_phi, 1e-9) << name;
    EXPECT_LE(err_psi, 1e-9) << name;
  }
}

// Points on the cage (vertices, edge midpoints, face centroids; snapped to the surface) get
// finite coordinates that reproduce them and deform close to a point 1e-6·D inside.
TEST(GreenCoordinates, PointsOnTheCage) {
  for (const auto& [name, cage] : TestCages()) {
    const double D = cage.diagonal();
    std::vector<V3> on, in;
    // Inward directions: the face normal, the bisector of an edge's two faces, the sum of a
    // vertex's face normals.
    std::vector<V3> vertex_normal(static_cast<size_t>(cage.vertices.cols()), V3::Zero());
    std::map<std::pair<uint32_t, uint32_t>, V3> edge_normal;
    for (Eigen::Index j = 0; j < cage.triangles.cols(); ++j) {
      const V3 n = FaceNormal(cage, j);
      on.push_back(FaceCentroid(cage, j));
      in.push_back(on.back() - 1e-6 * D * n);
      for (int k = 0; k < 3; ++k) {
        const uint32_t p = cage.triangles(k, j), q = cage.triangles((k + 1) % 3, j);
        vertex_normal[p] += n;
        edge_normal.try_emplace({std::min(p, q), std::max(p, q)}, V3::Zero()).first->second += n;
      }
    }
    for (const auto& [e, n] : edge_normal) {
      on.push_back((cage.vertices.col(e.first) + cage.vertices.col(e.second)) / 2);
      in.push_back(on.back() - 1e-6 * D * n.normalized());
    }
    for (Eigen::Index i = 0; i < cage.vertices.cols(); ++i) {
      on.push_back(cage.vertices.col(i));
      in.push_back(on.back() - 1e-6 * D * vertex_normal[static_cast<size_t>(i)].normalized());
    }
    Eigen::Matrix3Xd p_on(3, static_cast<Eigen::Index>(on.size())), p_in = p_on;
    for (size_t i = 0; i < on.size(); ++i) {
      p_on.col(static_cast<Eigen::Index>(i)) = on[i];
      p_in.col(static_cast<Eigen::Index>(i)) = in[i];
    }
    const GreenCoordinates g_on = ComputeGreenCoordinates(cage, p_on, nullptr);
    const GreenCoordinates g_in = ComputeGreenCoordinates(cage, p_in, nullptr);
    ASSERT_TRUE(g_on.phi.allFinite() && g_on.psi.allFinite()) << name;
    EXPECT_EQ(std::count(g_in.exterior.begin(), g_in.exterior.end(), 1), 0) << name;
    const double rep = MaxColumnDistance(Reproduce(g_on, cage), p_on) / D;
    std::mt19937 rng(101);
    std::uniform_real_distribution<double> u(-1, 1);
    Eigen::Matrix3Xd deformed = cage.vertices;
    for (Eigen::Index i = 0; i < deformed.cols(); ++i) deformed.col(i) += 0.05 * D * V3(u(rng), u(rng), u(rng));
    const double gap = MaxColumnDistance(DeformDouble(g_on, cage, deformed), DeformDouble(g_in, cage, deformed)) / D;
    std::printf("[%s] %zu points on the cage: reproduction %.3g·D, |Σφ - 1| %.3g, deformed vs 1e-6·D "
                "inside: %.3g·D\n",
                name.c_str(), on.size(), rep, MaxSumError(g_on), gap);
    EXPECT_LE(rep, 1e-8) << name;
    EXPECT_LE(MaxSumError(g_on), 1e-8) << name;
    EXPECT_LE(gap, 1e-4) << name;
  }
}

// By symmetry all φ are 1/n and all ψ equal at the centre of a regular tetrahedron and
// octahedron; ψ is the single-layer integral over one face (1-D quadrature of its closed polar
// form). At the centre of the cube [-1,1]^3, ψ of every triangle is half the integral of
// 1/(4π r) over a square at distance 1: (ln(2+√3) - π/6) / (2π).
TEST(GreenCoordinates, AnalyticValuesAtTheCentreOfRegularCages) {
  for (const auto& [name, cage] : std::vector<std::pair<std::string, CageGeometry>>{
           {"tetrahedron", RegularTetrahedron()}, {"octahedron", RegularOctahedron()}}) {
    const GreenCoordinates gc = ComputeGreenCoordinates(cage, Eigen::Matrix3Xd::Zero(3, 1), nullptr);
    const double n = double(cage.vertices.cols());
    EXPECT_LE((gc.phi.array() - 1 / n).abs().maxCoeff(), 1e-14) << name;
    const V3 a = Vert(cage, 0, 0), b = Vert(cage, 0, 1);
    const double h = std::abs(FaceNormal(cage, 0).dot(a));   // distance centre - face
    const double r = (a - b).norm() / (2 * std::sqrt(3.0));  // inradius of the face
    const double expected = EquilateralSingleLayer(r, h) / (4 * kPi);
    std::printf("[%s] ψ = %.15f, 1-D quadrature %.15f\n", name.c_str(), gc.psi(0, 0), expected);
    EXPECT_LE((gc.psi.array() - expected).abs().maxCoeff(), 1e-12) << name;
  }
  const CageGeometry cube = Cube(1);
  const GreenCoordinates gc = ComputeGreenCoordinates(cube, Eigen::Matrix3Xd::Zero(3, 1), nullptr);
  const double expected = (std::log(2 + std::sqrt(3.0)) - kPi / 6) / (2 * kPi);
  std::printf("[cube] ψ = %.15f, closed form %.15f; φ in [%.6f, %.6f]\n", gc.psi(0, 0), expected,
              gc.phi.minCoeff(), gc.phi.maxCoeff());
  EXPECT_LE((gc.psi.array() - expected).abs().maxCoeff(), 1e-14);
  EXPECT_LE(MaxSumError(gc), 1e-14);
  EXPECT_LE(Reproduce(gc, cube).col(0).norm(), 1e-14);
}

// The strongest known-values test: brute-force quadrature of the defining integrals, which
// shares no formula with the library, on a convex, a non-convex star-shaped and an L-shaped cage.
TEST(GreenCoordinates, MatchesBruteForceQuadratureOfTheBoundaryIntegrals) {
  for (const auto& [name, cage] : TestCages()) {
    const double D = cage.diagonal();
    const Eigen::Matrix3Xd pts = RandomPoints(cage, 6, true, 0.1 * D, 0, 51);
    const GreenCoordinates gc = ComputeGreenCoordinates(cage, pts, nullptr);
    double err_phi = 0, err_psi = 0;
    for (Eigen::Index i = 0; i < pts.cols(); ++i) {
      Eigen::VectorXd phi, psi;
      QuadratureGc(cage, pts.col(i), 32, phi, psi);
      err_phi = std::max(err_phi, (gc.phi.row(i).transpose() - phi).cwiseAbs().maxCoeff());
      err_psi = std::max(err_psi, (gc.psi.row(i).transpose() - psi).cwiseAbs().maxCoeff() / D);
    }
    std::printf("[%s] vs quadrature: max |Δφ| %.3g, max |Δψ| %.3g·D\n", name.c_str(), err_phi, err_psi);
    EXPECT_LE(err_phi, 1e-9) << name;
    EXPECT_LE(err_psi, 1e-9) << name;
  }
}

TEST(GreenCoordinates, MatchesTheLlco08Algorithm) {
  for (const auto& [name, cage] : TestCages()) {
    const double D = cage.diagonal();
    const Eigen::Matrix3Xd pts = RandomPoints(cage, 100, true, 1e-2 * D, 0, 61);
    const GreenCoordinates gc = ComputeGreenCoordinates(cage, pts, nullptr);
    double err_phi = 0, err_psi = 0;
    for (Eigen::Index i = 0; i < pts.cols(); ++i) {
      Eigen::VectorXd phi, psi;
      Llco08Gc(cage, pts.col(i), phi, psi);
      err_phi = std::max(err_phi, (gc.phi.row(i).transpose() - phi).cwiseAbs().maxCoeff());
      err_psi = std::max(err_psi, (gc.psi.row(i).transpose() - psi).cwiseAbs().maxCoeff() / D);
    }
    std::printf("[%s] vs LLCO08 GCTriInt port: max |Δφ| %.3g, max |Δψ| %.3g·D\n", name.c_str(), err_phi,
                err_psi);
    EXPECT_LE(err_phi, 1e-8) << name;
    EXPECT_LE(err_psi, 1e-8) << name;
  }
}

// GC are not affine invariant: a non-uniform scale of the cage does not map the points by the
// same scale. Documented, not asserted zero.
TEST(GreenCoordinates, NonUniformScaleDiffersFromTheAffineImage) {
  for (const auto& [name, cage] : TestCages()) {
    const double D = cage.diagonal();
    const Eigen::Matrix3Xd pts = RandomPoints(cage, 200, true, 1e-3 * D, 0, 71);
    const GreenCoordinates gc = ComputeGreenCoordinates(cage, pts, nullptr);
    const Eigen::Matrix3d A = V3(1.5, 1.0, 0.6).asDiagonal();
    const double err = MaxColumnDistance(DeformDouble(gc, cage, A * cage.vertices), A * pts) / D;
    std::printf("[%s] non-uniform scale (1.5, 1, 0.6): max |GC - affine image| = %.4g·D\n", name.c_str(),
                err);
    EXPECT_TRUE(std::isfinite(err)) << name;
    EXPECT_GT(err, 1e-6) << name;
  }
}

// Points ±δ about a face (one inside, one outside, extended through that face) deform to
// nearby positions under a generic deformation of the cage, for δ = 1e-7·D and larger; so do
// points about an edge (outside: the tie between its two faces) and the point on the face.
TEST(GreenCoordinates, ContinuousAcrossTheCage) {
  for (const auto& [name, cage] : TestCages()) {
    const double D = cage.diagonal();
    std::mt19937 rng(81);
    std::uniform_real_distribution<double> u(-1, 1);
    Eigen::Matrix3Xd deformed = cage.vertices;
    for (Eigen::Index i = 0; i < deformed.cols(); ++i) deformed.col(i) += 0.05 * D * V3(u(rng), u(rng), u(rng));

    for (double delta : {1e-7, 1e-5, 1e-3}) {
      const Eigen::Index f = cage.triangles.cols();
      Eigen::Matrix3Xd pts(3, 3 * f);
      for (Eigen::Index j = 0; j < f; ++j) {
        const V3 c = FaceCentroid(cage, j), n = FaceNormal(cage, j);
        pts.col(3 * j) = c - delta * D * n;
        pts.col(3 * j + 1) = c + delta * D * n;
        pts.col(3 * j + 2) = c;  // on the cage
      }
      const GreenCoordinates gc = ComputeGreenCoordinates(cage, pts, nullptr);
      const Eigen::Matrix3Xd out = DeformDouble(gc, cage, deformed);
      double jump = 0, on = 0;
      for (Eigen::Index j = 0; j < f; ++j) {
        EXPECT_EQ(gc.exterior[3 * j], 0) << name << " face " << j;
        EXPECT_EQ(gc.exterior[3 * j + 1], 1) << name << " face " << j;
        jump = std::max(jump, (out.col(3 * j) - out.col(3 * j + 1)).norm() / D);
        on = std::max(on, (out.col(3 * j + 2) - (out.col(3 * j) + out.col(3 * j + 1)) / 2).norm() / D);
      }
      const double rep = MaxColumnDistance(Reproduce(gc, cage), pts) / D;
      std::printf("[%s] face ±%g·D: max |η'_in - η'_out| = %.3g·D, on-face vs mean %.3g·D, "
                  "rest reproduction %.3g·D\n",
                  name.c_str(), delta, jump, on, rep);
      EXPECT_LE(jump, 20 * delta) << name;
      EXPECT_LE(on, 20 * delta) << name;
      EXPECT_LE(rep, 1e-8) << name;
    }

    // Edge midpoints, displaced along the bisector of the two faces.
    std::map<std::pair<uint32_t, uint32_t>, V3> edge_normal;
    for (Eigen::Index j = 0; j < cage.triangles.cols(); ++j) {
      for (int k = 0; k < 3; ++k) {
        const uint32_t p = cage.triangles(k, j), q = cage.triangles((k + 1) % 3, j);
        edge_normal.try_emplace({std::min(p, q), std::max(p, q)}, V3::Zero()).first->second += FaceNormal(cage, j);
      }
    }
    const double delta = 1e-7;
    Eigen::Matrix3Xd pts(3, 2 * static_cast<Eigen::Index>(edge_normal.size()));
    Eigen::Index col = 0;
    for (const auto& [e, n] : edge_normal) {
      const V3 mid = (cage.vertices.col(e.first) + cage.vertices.col(e.second)) / 2;
      pts.col(col++) = mid - delta * D * n.normalized();
      pts.col(col++) = mid + delta * D * n.normalized();
    }
    const GreenCoordinates gc = ComputeGreenCoordinates(cage, pts, nullptr);
    const Eigen::Matrix3Xd out = DeformDouble(gc, cage, deformed);
    double jump = 0;
    for (Eigen::Index i = 0; i < pts.cols(); i += 2) jump = std::max(jump, (out.col(i) - out.col(i + 1)).norm() / D);
    std::printf("[%s] edge ±%g·D: max |η'_in - η'_out| = %.3g·D\n", name.c_str(), delta, jump);
    EXPECT_LE(jump, 1e-5) << name;
  }
}

TEST(GreenCoordinates, PoolAndFloatDeformAgree) {
  const CageGeometry cage = BumpySphere();
  const double D = cage.diagonal();
  Eigen::Matrix3Xd pts(3, 400);
  pts << RandomPoints(cage, 200, true, 0, 0, 91), RandomPoints(cage, 200, false, 0, 0.2 * D, 92);
  ThreadPool pool(4);
  const GreenCoordinates a = ComputeGreenCoordinates(cage, pts, nullptr);
  const GreenCoordinates b = ComputeGreenCoordinates(cage, pts, &pool);
  EXPECT_EQ(a.phi, b.phi);
  EXPECT_EQ(a.psi, b.psi);
  EXPECT_EQ(a.exterior, b.exterior);

  std::mt19937 rng(93);
  std::uniform_real_distribution<double> u(-1, 1);
  Eigen::Matrix3Xd deformed = cage.vertices;
  for (Eigen::Index i = 0; i < deformed.cols(); ++i) deformed.col(i) += 0.1 * V3(u(rng), u(rng), u(rng));
  FaceTerms terms;
  GreenFaceTerms(cage, deformed, terms);
  std::vector<float> out(3 * pts.cols());
  GreenDeform(b, deformed, terms, out, &pool);
  const Eigen::Matrix3Xd ref = DeformDouble(a, cage, deformed);
  double err = 0;
  for (Eigen::Index i = 0; i < pts.cols(); ++i) {
    for (int k = 0; k < 3; ++k) err = std::max(err, std::abs(double(out[3 * i + k]) - ref(k, i)));
  }
  EXPECT_LE(err, 1e-6 * D);
  GreenFaceTerms(cage, cage.vertices, terms);
  GreenDeform(b, cage.vertices, terms, out, nullptr);
  err = 0;
  for (Eigen::Index i = 0; i < pts.cols(); ++i) {
    for (int k = 0; k < 3; ++k) err = std::max(err, std::abs(double(out[3 * i + k]) - pts(k, i)));
  }
  EXPECT_LE(err, 1e-6 * D);
}

// ---------------------------------------------------------------------------------------------
// A cage of two overlapping closed shells (a body box and a limb box, as artists build them):
// a point inside both has winding number 2, and Green's raw integrals sum to 2 and reproduce 2η
// there (MVC divides by its sum and reproduces η). The coordinates name the point; cage-green's
// preparation refuses the rig naming it, where until 2026-12-07 the point came out at twice its
// place at rest.
TEST(GreenCoordinates, APointInsideOverlappingShellsIsNamedAndRefused) {
  auto box = [](const V3& lo, const V3& hi) {
    CageGeometry c = Cube(1);
    for (Eigen::Index k = 0; k < c.vertices.cols(); ++k) {
      c.vertices.col(k) = lo + ((c.vertices.col(k).array() + 1) / 2 * (hi - lo).array()).matrix();
    }
    return c;
  };
  const CageGeometry a = box(V3(0, 0, 0), V3(2, 1, 1)), b = box(V3(1, 0.2, 0.2), V3(3, 0.8, 0.8));
  CageGeometry both;
  both.vertices.resize(3, a.vertices.cols() + b.vertices.cols());
  both.vertices << a.vertices, b.vertices;
  both.triangles.resize(3, a.triangles.cols() + b.triangles.cols());
  both.triangles << a.triangles, (b.triangles.array() + uint32_t(a.vertices.cols())).matrix();
  Eigen::Matrix3Xd points(3, 3);
  points.col(0) = V3(0.5, 0.5, 0.5);  // in the first box only
  points.col(1) = V3(1.5, 0.5, 0.5);  // in both
  points.col(2) = V3(2.5, 0.5, 0.5);  // in the second only
  const GreenCoordinates gc = ComputeGreenCoordinates(both, points, nullptr, {});
  EXPECT_EQ(gc.first_overlap, 1);
  EXPECT_NEAR(gc.overlap_winding, 2.0, 1e-9);
  const Eigen::Matrix3Xd at_rest = Reproduce(gc, both);
  EXPECT_LT((at_rest.col(0) - points.col(0)).norm(), 1e-9);
  EXPECT_GT((at_rest.col(1) - points.col(1)).norm(), 1.0) << "the case the refusal is for: 2η";
  // MVC divides by its sum: the same point is reproduced.
  const auto mvc = MeanValueCoordinates(both, points, nullptr);
  EXPECT_LT((both.vertices * mvc.row(1).transpose() - points.col(1)).norm(), 1e-9);

  // Through the method: a limb in its cage, plus a copy of the cage moved half a length along
  // the limb, overlapping it.
  RigInput in = testing::LimbWithCage(10, 8);
  Cage& cage = in.rig.cages[0];
  Eigen::Map<const Eigen::Matrix3Xf> v(cage.positions.data(), 3, Eigen::Index(cage.vertex_count()));
  const Eigen::Vector3f extent = v.rowwise().maxCoeff() - v.rowwise().minCoeff();
  Eigen::Index axis = 0;
  extent.maxCoeff(&axis);
  const size_t count = cage.vertex_count(), faces = cage.triangles.size();
  for (size_t k = 0; k < count; ++k) {
    for (int d = 0; d < 3; ++d) cage.positions.push_back(cage.positions[3 * k + d] + (d == axis ? extent[axis] / 2 : 0.f));
  }
  for (size_t f = 0; f < faces; ++f) cage.triangles.push_back(cage.triangles[f] + uint32_t(count));
  const Rig rig = testing::BuildOrDie(std::move(in));
  const MethodInfo* green = FindMethod("cage-green");
  ASSERT_NE(green, nullptr);
  auto config = ParseDeformerConfig(*green, {}, "deformer.cage_green");
  ASSERT_TRUE(config.ok()) << config.status();
  const auto refused = green->prepare(rig, *config, nullptr, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("rig.mesh.positions["));
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("cage-mvc"));
  // cage-mvc takes the same rig and reproduces it at rest.
  const MethodInfo* mvc_method = FindMethod("cage-mvc");
  auto mvc_config = ParseDeformerConfig(*mvc_method, {}, "deformer.cage_mvc");
  ASSERT_TRUE(mvc_config.ok());
  EXPECT_TRUE(mvc_method->prepare(rig, *mvc_config, nullptr, {}).ok());
}

// The SuperCages Arm (shared/data/supercages-arm).


TEST(GreenCoordinates, ArmRestReproduction) {
#ifndef SINEW_SHARED_DATA
  GTEST_SKIP() << "SINEW_SHARED_DATA not defined";
#else
  const std::string dir = std::string(SINEW_SHARED_DATA) + "/supercages-arm/";
  const Eigen::Matrix3Xd mesh = testing::ReadObjFixture(dir + "arm.obj").vertices;
  const CageGeometry cage = testing::ReadObjFixture(dir + "arm_cage.obj");
  if (mesh.cols() == 0 || cage.vertices.cols() == 0) GTEST_SKIP() << "no Arm data in " << dir;
  ASSERT_EQ(mesh.cols(), 2089);
  const double D = cage.diagonal();
  double volume = 0;
  for (Eigen::Index f = 0; f < cage.triangles.cols(); ++f) volume += Vert(cage, f, 0).dot(Vert(cage, f, 1).cross(Vert(cage, f, 2))) / 6;
  ASSERT_GT(volume, 0) << "cage not outward oriented";

  ThreadPool pool(4);
  const GreenCoordinates gc = ComputeGreenCoordinates(cage, mesh, &pool);
  const Eigen::VectorXd err = (Reproduce(gc, cage) - mesh).colwise().norm();
  const long exterior = std::count(gc.exterior.begin(), gc.exterior.end(), 1);
  int outside = 0, near = 0;
  double min_distance = 1e300;
  for (Eigen::Index i = 0; i < mesh.cols(); ++i) {
    const double d = CageDistance(cage, mesh.col(i)).first;
    min_distance = std::min(min_distance, d);
    if (Winding(cage, mesh.col(i)) < 0.5) ++outside;
    if (d < 1e-3 * D) ++near;
  }
  std::printf("Arm: %ld vertices, cage %ld vertices / %ld faces, D = %.4f; exterior (extension "
              "applied) %ld, winding < 0.5: %d, within 1e-3·D of the cage: %d, min distance %.3g·D\n",
              long(mesh.cols()), long(cage.vertices.cols()), long(cage.triangles.cols()), D, exterior,
              outside, near, min_distance / D);
  std::printf("Arm: rest reproduction max %.3g·D (median %.3g·D), max |Σφ - 1| %.3g\n", err.maxCoeff() / D,
              [&] {
                std::vector<double> e(err.data(), err.data() + err.size());
                std::nth_element(e.begin(), e.begin() + e.size() / 2, e.end());
                return e[e.size() / 2] / D;
              }(),
              MaxSumError(gc));
  EXPECT_LE(err.maxCoeff(), 1e-6 * D);
  EXPECT_LE(MaxSumError(gc), 1e-8);
  EXPECT_EQ(exterior, outside);

  // The float deformation path at rest.
  FaceTerms terms;
  GreenFaceTerms(cage, cage.vertices, terms);
  std::vector<float> out(3 * mesh.cols());
  GreenDeform(gc, cage.vertices, terms, out, &pool);
  double ferr = 0;
  for (Eigen::Index i = 0; i < mesh.cols(); ++i) {
    for (int k = 0; k < 3; ++k) ferr = std::max(ferr, std::abs(double(out[3 * i + k]) - mesh(k, i)));
  }
  std::printf("Arm: GreenDeform (float) at rest max error %.3g·D\n", ferr / D);
  EXPECT_LE(ferr, 1e-5 * D);
#endif
}

}  // namespace
}  // namespace sinew
