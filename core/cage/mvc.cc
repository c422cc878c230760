#include "core/cage/mvc.h"

#include "core/geometry/triangle.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <Eigen/Geometry>

namespace sinew {

namespace {

constexpr size_t kGrain = 64;  // points per parallel chunk (one point costs O(faces))

// Points closer than kSnap·D to the cage surface take the barycentric coordinates of their
// closest point on it (linear-precision error = that distance): e_j at a vertex, the 1-D
// interpolation on an edge, the triangle's coordinates on a face. Further away the formula below
// stays accurate (see tests/core/mvc_test.cc), so the threshold only has to catch points on the
// surface or within rounding of it. This distance test replaces JSW05's angle test π − h < ε,
// which is distance-sensitive (π − h = O(distance²) over a face; seed-004 §4.2).
constexpr double kSnap = 1e-12;
// A triangle whose plane passes closer to x than kCoplanar times the distance from x to the
// triangle (x near its plane, outside it) is evaluated by extrapolation from two points lifted
// off the plane, see NearPlaneTriangleWeights.
constexpr double kCoplanar = 1e-3;

struct Snap {
  double distance = std::numeric_limits<double>::infinity();
  Eigen::Index face = -1;
  Eigen::Vector3d barycentric = Eigen::Vector3d::Zero();
};

struct Scratch {
  std::vector<Eigen::Vector3d> u;  // unit vectors from x to the cage vertices
  std::vector<double> d;           // distances from x to the cage vertices
  std::vector<double> face_distance;  // distance from x to each triangle
  void Resize(size_t vertices, size_t faces) {
    u.resize(vertices);
    d.resize(vertices);
    face_distance.resize(faces);
  }
};

// The closest point of the cage surface to x; fills scratch.face_distance.
Snap ClosestOnCage(const CageGeometry& cage, const Eigen::Vector3d& x, Scratch& scratch) {
  Snap best;
  const auto& V = cage.vertices;
  for (Eigen::Index f = 0; f < cage.triangles.cols(); ++f) {
    const Eigen::Vector3d a = V.col(cage.triangles(0, f));
    const Eigen::Vector3d b = V.col(cage.triangles(1, f));
    const Eigen::Vector3d c = V.col(cage.triangles(2, f));
    const Eigen::Vector3d l = ClosestPointBarycentric(a, b, c, x);
    const double d = (l[0] * a + l[1] * b + l[2] * c - x).norm();
    scratch.face_distance[f] = d;
    if (d < best.distance) {
      best.distance = d;
      best.face = f;
      best.barycentric = l;
    }
  }
  return best;
}

void WriteSnap(const CageGeometry& cage, const Snap& s, std::span<double> out) {
  if (s.face < 0) {  // no finite distance: non-finite x or cage
    std::fill(out.begin(), out.end(), std::numeric_limits<double>::quiet_NaN());
    return;
  }
  std::fill(out.begin(), out.end(), 0.0);
  for (int k = 0; k < 3; ++k) out[cage.triangles(k, s.face)] += s.barycentric[k];
}

// JSW05's contribution of one triangle to the unnormalised weights of its three vertices, from
// the unit vectors u_k and distances d_k from x to them. x must not lie on the triangle's
// supporting plane nor on one of its edge lines (returns false then, w untouched).
bool TriangleWeights(const Eigen::Vector3d* u[3], const double d[3], double w[3]) {
  // θ_k: the angle at x subtended by the edge opposite slot k, in the well-conditioned form
  // 2·atan2(|u_a − u_b|, |u_a + u_b|) (exactly π on the edge, unlike 2·asin(|u_a − u_b|/2)).
  double theta[3], sin_theta[3];
  for (int k = 0; k < 3; ++k) {
    const Eigen::Vector3d& a = *u[(k + 1) % 3];
    const Eigen::Vector3d& b = *u[(k + 2) % 3];
    theta[k] = 2 * std::atan2((a - b).norm(), (a + b).norm());
    sin_theta[k] = std::sin(theta[k]);
  }
  const double h = (theta[0] + theta[1] + theta[2]) / 2;
  // det[u1, u2, u3] = s_k·sin θ_{k−1}·sin θ_{k+1}, s_k the signed sine of the dihedral angle at
  // slot k (spherical sine rule): JSW05's s_k without the cancellation of sqrt(1 − c_k²).
  const double det = u[0]->dot(u[1]->cross(*u[2]));
  if (!(std::abs(det) > 0)) return false;
  double c[3];
  const double sin_h = std::sin(h);
  for (int k = 0; k < 3; ++k) {
    const double s = sin_theta[(k + 1) % 3] * sin_theta[(k + 2) % 3];
    if (!(s > 0)) return false;
    c[k] = 2 * sin_h * std::sin(h - theta[k]) / s - 1;  // cosine of the dihedral angle at slot k
  }
  // w_k = (θ_k − c_{k+1} θ_{k−1} − c_{k−1} θ_{k+1}) / (d_k sin θ_{k+1} s_{k−1}), with
  // s_{k−1} = det / (sin θ_k sin θ_{k+1}).
  for (int k = 0; k < 3; ++k) {
    const int k1 = (k + 1) % 3, k2 = (k + 2) % 3;
    w[k] = (theta[k] - c[k1] * theta[k2] - c[k2] * theta[k1]) * sin_theta[k] / (d[k] * det);
  }
  return true;
}

// The same from the triangle's corners p_k and an arbitrary point x.
bool TriangleWeightsAt(const Eigen::Vector3d p[3], const Eigen::Vector3d& x, double w[3]) {
  Eigen::Vector3d u[3];
  double d[3];
  for (int k = 0; k < 3; ++k) {
    u[k] = p[k] - x;
    d[k] = u[k].norm();
    if (!(d[k] > 0)) return false;
    u[k] /= d[k];
  }
  const Eigen::Vector3d* up[3] = {&u[0], &u[1], &u[2]};
  return TriangleWeights(up, d, w);
}

// x at signed height z above the plane of triangle p (unit normal n), with |z| much smaller than
// its distance r to the triangle. The triangle's weights are w(z) = z·G(z) with G smooth and even
// (w = z·∫_T λ_k(y) / |y − x|⁴ dy), but the closed form computes them from quantities that cancel
// to O(z²), losing all digits as z → 0. Evaluate G at two heights H, 2H ~ kCoplanar·r where the
// closed form is accurate, fit G(z) ≈ G0 + G1·z² and return z·G(z): relative error O((H/r)⁴).
// Exactly in the plane (z = 0) the triangle contributes nothing, as in JSW05.
void NearPlaneTriangleWeights(const Eigen::Vector3d p[3], const Eigen::Vector3d& n, double z,
                              double r, const Eigen::Vector3d& x, double w[3]) {
  w[0] = w[1] = w[2] = 0;
  if (z == 0) return;
  const Eigen::Vector3d foot = x - z * n;
  const double h1 = kCoplanar * r, h2 = 2 * h1;
  double w1[3], w2[3];
  if (!TriangleWeightsAt(p, foot + h1 * n, w1) || !TriangleWeightsAt(p, foot + h2 * n, w2)) return;
  for (int k = 0; k < 3; ++k) {
    const double g1 = w1[k] / h1, g2 = w2[k] / h2;
    const double slope = (g2 - g1) / (h2 * h2 - h1 * h1);
    w[k] = z * (g1 + slope * (z * z - h1 * h1));
  }
}

// `snap` is the absolute snapping distance kSnap·D.
void MeanValueCoordinatesImpl(const CageGeometry& cage, double snap, const Eigen::Vector3d& x,
                              std::span<double> out, Scratch& scratch) {
  const Eigen::Index n = cage.vertices.cols();
  const Eigen::Index faces = cage.triangles.cols();
  if (n == 0 || static_cast<Eigen::Index>(out.size()) != n) return;
  if (faces == 0) {  // no surface: the nearest vertex (degenerate input)
    Eigen::Index j = 0;
    (cage.vertices.colwise() - x).colwise().squaredNorm().minCoeff(&j);
    std::fill(out.begin(), out.end(), 0.0);
    out[j] = 1;
    return;
  }
  scratch.Resize(static_cast<size_t>(n), static_cast<size_t>(faces));

  // At a vertex, on an edge or a face, or within rounding of them: the closest point's
  // coordinates (e_j, 1-D interpolation, or the triangle's barycentric coordinates).
  const Snap closest = ClosestOnCage(cage, x, scratch);
  if (closest.distance <= snap) {
    WriteSnap(cage, closest, out);
    return;
  }

  for (Eigen::Index j = 0; j < n; ++j) {
    const Eigen::Vector3d v = cage.vertices.col(j) - x;
    const double dj = v.norm();
    scratch.d[j] = dj;
    scratch.u[j] = v / dj;  // dj > snap here, unless the cage has an unused vertex at x
  }
  std::fill(out.begin(), out.end(), 0.0);

  for (Eigen::Index f = 0; f < faces; ++f) {
    const uint32_t j[3] = {cage.triangles(0, f), cage.triangles(1, f), cage.triangles(2, f)};
    const Eigen::Vector3d p[3] = {cage.vertices.col(j[0]), cage.vertices.col(j[1]),
                                  cage.vertices.col(j[2])};
    const Eigen::Vector3d normal = (p[1] - p[0]).cross(p[2] - p[0]);
    const double twice_area = normal.norm();
    if (!(twice_area > 0)) continue;  // degenerate triangle: zero solid angle
    const Eigen::Vector3d unit_normal = normal / twice_area;
    const double z = unit_normal.dot(x - p[0]);
    const double r = scratch.face_distance[f];
    double w[3];
    if (std::abs(z) < kCoplanar * r) {
      NearPlaneTriangleWeights(p, unit_normal, z, r, x, w);
    } else {
      const Eigen::Vector3d* u[3] = {&scratch.u[j[0]], &scratch.u[j[1]], &scratch.u[j[2]]};
      const double d[3] = {scratch.d[j[0]], scratch.d[j[1]], scratch.d[j[2]]};
      if (!TriangleWeights(u, d, w)) continue;
    }
    for (int k = 0; k < 3; ++k) out[j[k]] += w[k];
  }

  double sum = 0;
  for (double w : out) sum += w;
  if (!std::isfinite(sum) || sum == 0) {
    // Only reachable with a broken (open, degenerate) cage: fall back to the closest point.
    WriteSnap(cage, closest, out);
    return;
  }
  const double inv = 1 / sum;
  for (double& w : out) w *= inv;
}

}  // namespace

double CageGeometry::diagonal() const {
  if (vertices.cols() == 0) return 0;
  return (vertices.rowwise().maxCoeff() - vertices.rowwise().minCoeff()).norm();
}

void MeanValueCoordinates(const CageGeometry& cage, const Eigen::Vector3d& x, std::span<double> out) {
  Scratch scratch;
  MeanValueCoordinatesImpl(cage, kSnap * cage.diagonal(), x, out, scratch);
}

Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> MeanValueCoordinates(
    const CageGeometry& cage, const Eigen::Matrix3Xd& points, ThreadPool* pool) {
  const Eigen::Index n = cage.vertices.cols();
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> phi(points.cols(), n);
  if (n == 0 || points.cols() == 0) return phi;
  const double snap = kSnap * cage.diagonal();
  ParallelFor(pool, static_cast<size_t>(points.cols()), kGrain, [&](size_t begin, size_t end) {
    Scratch scratch;
    for (size_t i = begin; i < end; ++i) {
      const Eigen::Index r = static_cast<Eigen::Index>(i);
      MeanValueCoordinatesImpl(cage, snap, points.col(r),
                               std::span<double>(phi.row(r).data(), static_cast<size_t>(n)), scratch);
    }
  });
  return phi;
}

}  // namespace sinew
