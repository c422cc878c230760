#include "core/cage/green.h"

#include <atomic>
#include "core/geometry/triangle.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numbers>

#include <Eigen/Geometry>

namespace sinew {

namespace {

constexpr size_t kGrain = 16;  // points per parallel chunk (one point costs O(faces))
constexpr double kInv4Pi = 0.25 * std::numbers::inv_pi;

// Points closer than kSnap·D to the cage surface are "on the cage": the integrals are singular
// there, and within ~1e-8·D of an edge they lose digits (the direction from the edge to the point
// is only known to rounding/distance). They take the exterior extension through their nearest
// face with the raw integrals sampled kSample·D outside the surface (see green.h).
constexpr double kSnap = 1e-8;
constexpr double kSample = 1e-7;

// A rest face with everything the per-point integrals need.
struct Face {
  uint32_t v[3] = {0, 0, 0};
  bool valid = false;                           // non-zero area
  Eigen::Vector3d n = Eigen::Vector3d::Zero();  // unit outward normal
  double two_area = 0;
  double len[3] = {0, 0, 0};  // edge e runs from v[e] to v[(e+1)%3]
  Eigen::Vector3d nu[3];      // outward in-plane unit normal of edge e
  Eigen::Vector3d grad[3];    // ∇Γ_k, gradient of the barycentric coordinate of v[k]
  Eigen::Matrix3d grad_nu;    // (k, e) -> ∇Γ_k · ν_e
};

std::vector<Face> PrepareFaces(const CageGeometry& cage) {
  const auto& V = cage.vertices;
  std::vector<Face> faces(static_cast<size_t>(cage.triangles.cols()));
  for (Eigen::Index f = 0; f < cage.triangles.cols(); ++f) {
    Face& t = faces[static_cast<size_t>(f)];
    for (int k = 0; k < 3; ++k) t.v[k] = cage.triangles(k, f);
    const Eigen::Vector3d p[3] = {V.col(t.v[0]), V.col(t.v[1]), V.col(t.v[2])};
    const Eigen::Vector3d c = (p[1] - p[0]).cross(p[2] - p[0]);
    t.two_area = c.norm();
    if (!(t.two_area > 0) || !std::isfinite(t.two_area)) continue;
    t.valid = true;
    t.n = c / t.two_area;
    for (int e = 0; e < 3; ++e) {
      const Eigen::Vector3d d = p[(e + 1) % 3] - p[e];
      t.len[e] = d.norm();
      t.nu[e] = d.cross(t.n).normalized();
    }
    for (int k = 0; k < 3; ++k) t.grad[k] = t.n.cross(p[(k + 2) % 3] - p[(k + 1) % 3]) / t.two_area;
    for (int k = 0; k < 3; ++k) {
      for (int e = 0; e < 3; ++e) t.grad_nu(k, e) = t.grad[k].dot(t.nu[e]);
    }
  }
  return faces;
}

// The raw boundary integrals at x (no extension): adds φ to phi[0..n) (which the caller zeroed)
// and writes ψ to psi[0..f). Per face, with a_k = v_k - x:
//   Ω = 2 atan2(det[a0,a1,a2], |a0||a1||a2| + (a0·a1)|a2| + (a1·a2)|a0| + (a2·a0)|a1|)
//   E_e = ∫_e 1/|ξ-x| ds = ln((S+L)/(S-L)), S = |a_e| + |a_e+1|, L = edge length, with
//         S - L = 2P/(S+L), P = |a||b| + a·b (= |a×b|² / (|a||b| - a·b) when a·b < 0)
//   ψ = (Σ_e d_e E_e - h Ω) / 4π,  φ_k += (Γ_k(p) Ω - h Σ_e ∇Γ_k·ν_e E_e) / 4π.
void RawIntegrals(const std::vector<Face>& faces, const Eigen::Matrix3Xd& V, const Eigen::Vector3d& x,
                  double* phi, double* psi) {
  for (size_t f = 0; f < faces.size(); ++f) {
    const Face& t = faces[f];
    if (!t.valid) {
      psi[f] = 0;
      continue;
    }
    const Eigen::Vector3d a[3] = {V.col(t.v[0]) - x, V.col(t.v[1]) - x, V.col(t.v[2]) - x};
    const double l[3] = {a[0].norm(), a[1].norm(), a[2].norm()};
    const double det = a[0].dot(a[1].cross(a[2]));
    const double den = l[0] * l[1] * l[2] + a[0].dot(a[1]) * l[2] + a[1].dot(a[2]) * l[0] +
                       a[2].dot(a[0]) * l[1];
    const double omega = 2 * std::atan2(det, den);  // signed solid angle, > 0 on the inner side
    const double h = t.n.dot(a[0] + a[1] + a[2]) / 3;  // distance to the plane, > 0 on the inner side
    Eigen::Vector3d E;
    double single = 0;  // Σ_e d_e E_e
    for (int e = 0; e < 3; ++e) {
      const Eigen::Vector3d& p = a[e];
      const Eigen::Vector3d& q = a[(e + 1) % 3];
      const double ll = l[e] * l[(e + 1) % 3];
      const double dot = p.dot(q);
      const double P = dot >= 0 ? ll + dot : p.cross(q).squaredNorm() / (ll - dot);
      const double S = l[e] + l[(e + 1) % 3];
      // x on the edge itself (P = 0) only happens for points the caller snapped; there d_e and h
      // vanish and the term is 0.
      E[e] = P > 0 ? std::log1p(t.len[e] * (S + t.len[e]) / P) : 0.0;
      single += t.nu[e].dot(p) * E[e];
    }
    psi[f] = kInv4Pi * (single - h * omega);
    for (int k = 0; k < 3; ++k) {
      const double gamma = t.n.dot(a[(k + 1) % 3].cross(a[(k + 2) % 3])) / t.two_area;  // Γ_k(p)
      phi[t.v[k]] += kInv4Pi * (gamma * omega - h * t.grad_nu.row(k).dot(E));
    }
  }
}

struct Nearest {
  Eigen::Index face = -1;
  double distance = std::numeric_limits<double>::infinity();
  Eigen::Vector3d point = Eigen::Vector3d::Zero();
};

// The exit face of x: the nearest face; among faces at the same distance (closest point on a
// shared edge or vertex) the one whose plane x lies furthest in front of.
Nearest NearestFace(const std::vector<Face>& faces, const Eigen::Matrix3Xd& V, const Eigen::Vector3d& x,
                    double tiny2) {
  Nearest best;
  double best_d2 = std::numeric_limits<double>::infinity();
  double best_plane = -std::numeric_limits<double>::infinity();
  for (size_t f = 0; f < faces.size(); ++f) {
    const Face& t = faces[f];
    if (!t.valid) continue;
    const Eigen::Vector3d a = V.col(t.v[0]);
    const Eigen::Vector3d q = ClosestPointOnTriangle(a, V.col(t.v[1]), V.col(t.v[2]), x);
    const double d2 = (q - x).squaredNorm();
    const double plane = t.n.dot(x - a);
    const double tol = 1e-10 * best_d2 + tiny2;
    if (d2 < best_d2 - tol || (d2 <= best_d2 + tol && plane > best_plane)) {
      best.face = static_cast<Eigen::Index>(f);
      best.point = q;
      best_d2 = std::min(best_d2, d2);
      best_plane = plane;
    }
  }
  best.distance = std::sqrt(best_d2);
  return best;
}

// Outward direction of the cage at x's closest point: the sum of the normals of the faces
// touching it (the face normal inside a face, the bisector on an edge).
Eigen::Vector3d SurfaceNormal(const std::vector<Face>& faces, const Eigen::Matrix3Xd& V,
                              const Eigen::Vector3d& x, const Nearest& nearest, double touch) {
  Eigen::Vector3d u = Eigen::Vector3d::Zero();
  for (const Face& t : faces) {
    if (!t.valid) continue;
    const Eigen::Vector3d q = ClosestPointOnTriangle(V.col(t.v[0]), V.col(t.v[1]), V.col(t.v[2]), x);
    if ((q - x).norm() <= nearest.distance + touch) u += t.n;
  }
  const double len = u.norm();
  const Eigen::Vector3d& n = faces[static_cast<size_t>(nearest.face)].n;
  return len > 1e-3 ? Eigen::Vector3d(u / len) : n;
}

}  // namespace

GreenCoordinates ComputeGreenCoordinates(const CageGeometry& cage, const Eigen::Matrix3Xd& points,
                                         ThreadPool* pool, const std::function<bool(double)>& progress) {
  const Eigen::Index n = cage.vertices.cols();
  const Eigen::Index f = cage.triangles.cols();
  const Eigen::Index m = points.cols();
  GreenCoordinates gc;
  gc.phi.setZero(m, n);
  gc.psi.setZero(m, f);
  gc.exterior.assign(static_cast<size_t>(m), 0);
  if (n == 0 || f == 0 || m == 0) return gc;

  const std::vector<Face> faces = PrepareFaces(cage);
  const Eigen::Matrix3Xd& V = cage.vertices;
  const double D = cage.diagonal();
  const double snap = kSnap * D;
  const double sample = kSample * D;
  const double tiny2 = 1e-24 * D * D;

  std::atomic<size_t> done{0};
  std::atomic<bool> stop{false};
  std::mutex overlap_mu;
  ParallelFor(pool, static_cast<size_t>(m), kGrain, [&](size_t begin, size_t end) {
    if (stop) return;
    for (size_t i = begin; i < end; ++i) {
      const Eigen::Index r = static_cast<Eigen::Index>(i);
      const Eigen::Vector3d x = points.col(r);
      double* phi = gc.phi.row(r).data();
      double* psi = gc.psi.row(r).data();

      const Nearest exit = NearestFace(faces, V, x, tiny2);
      if (exit.face < 0) continue;  // no valid face: all zero
      const bool on_cage = exit.distance <= snap;
      // On the cage: sample the integrals just outside the surface instead of at x.
      const Eigen::Vector3d at =
          on_cage ? Eigen::Vector3d(exit.point + sample * SurfaceNormal(faces, V, x, exit, snap)) : x;
      RawIntegrals(faces, V, at, phi, psi);

      double sum = 0;
      for (Eigen::Index j = 0; j < n; ++j) sum += phi[j];
      const bool inside = sum >= 0.5;  // raw Σφ is the winding number: 1 inside, 0 outside
      if (sum >= 1.5) {  // inside twice (overlapping shells): reported, the lowest index first
        std::lock_guard lock(overlap_mu);
        if (gc.first_overlap < 0 || r < gc.first_overlap) {
          gc.first_overlap = r;
          gc.overlap_winding = sum;
        }
      }
      if (inside && !on_cage) continue;

      // Extension through the exit face e: η_rest = Σ α_k v_ek + β n_e with Σ α_k = s, where
      // (η_rest, s) = (x, 1) when the raw integrals were taken outside (they reproduce 0 with
      // Σφ = 0), and (x - at, 0) when they were taken inside (they reproduce `at` with Σφ = 1).
      // Closed-form solution of the 4x4 system [v_e1 v_e2 v_e3 n_e; 1 1 1 0] (α, β) = (η_rest, s).
      const Face& t = faces[static_cast<size_t>(exit.face)];
      const double s = inside ? 0.0 : 1.0;
      const Eigen::Vector3d rest = inside ? Eigen::Vector3d(x - at) : x;
      const Eigen::Vector3d y = rest - s * V.col(t.v[0]);
      const double a1 = t.grad[1].dot(y);
      const double a2 = t.grad[2].dot(y);
      phi[t.v[0]] += s - a1 - a2;
      phi[t.v[1]] += a1;
      phi[t.v[2]] += a2;
      psi[exit.face] += t.n.dot(y);
      gc.exterior[i] = 1;
    }
    const size_t d = done.fetch_add(end - begin) + (end - begin);
    if (progress && !progress(double(d) / double(m))) stop = true;
  });
  return gc;
}

namespace {
// Stretch factor of a face whose rest edges u, v (area `area` > 0) became up, vp.
double FaceStretch(const Eigen::Vector3d& u, const Eigen::Vector3d& v, const Eigen::Vector3d& up,
                   const Eigen::Vector3d& vp, double area) {
  const double r = up.squaredNorm() * v.squaredNorm() - 2 * up.dot(vp) * u.dot(v) + vp.squaredNorm() * u.squaredNorm();
  return std::sqrt(std::max(r, 0.0)) / (std::sqrt(8.0) * area);
}
}  // namespace

Eigen::VectorXd GreenStretch(const CageGeometry& rest, const Eigen::Matrix3Xd& deformed_vertices) {
  const Eigen::Index f = rest.triangles.cols();
  Eigen::VectorXd s(f);
  const auto& V = rest.vertices;
  const auto& W = deformed_vertices;
  for (Eigen::Index j = 0; j < f; ++j) {
    const uint32_t i0 = rest.triangles(0, j), i1 = rest.triangles(1, j), i2 = rest.triangles(2, j);
    const Eigen::Vector3d u = V.col(i1) - V.col(i0), v = V.col(i2) - V.col(i0);
    const Eigen::Vector3d up = W.col(i1) - W.col(i0), vp = W.col(i2) - W.col(i0);
    const double area = 0.5 * u.cross(v).norm();
    s[j] = area > 0 ? FaceStretch(u, v, up, vp, area) : 1.0;
  }
  return s;
}

void GreenFaceTerms(const CageGeometry& rest, const Eigen::Matrix3Xd& deformed_vertices,
                    Eigen::Matrix<double, Eigen::Dynamic, 3, Eigen::RowMajor>& scaled_normals) {
  const Eigen::Index f = rest.triangles.cols();
  if (scaled_normals.rows() != f) scaled_normals.resize(f, 3);
  const auto& V = rest.vertices;
  const auto& W = deformed_vertices;
  for (Eigen::Index j = 0; j < f; ++j) {
    const uint32_t i0 = rest.triangles(0, j), i1 = rest.triangles(1, j), i2 = rest.triangles(2, j);
    const Eigen::Vector3d u = V.col(i1) - V.col(i0), v = V.col(i2) - V.col(i0);
    const Eigen::Vector3d up = W.col(i1) - W.col(i0), vp = W.col(i2) - W.col(i0);
    const double area = 0.5 * u.cross(v).norm();
    const Eigen::Vector3d c = up.cross(vp);
    const double len = c.norm();
    if (!(area > 0) || !(len > 0)) {  // degenerate rest or deformed face: no face term
      scaled_normals.row(j).setZero();
      continue;
    }
    scaled_normals.row(j) = (FaceStretch(u, v, up, vp, area) / len) * c.transpose();
  }
}

void GreenDeform(const GreenCoordinates& gc, const Eigen::Matrix3Xd& deformed_vertices,
                 const Eigen::Matrix<double, Eigen::Dynamic, 3, Eigen::RowMajor>& scaled_normals,
                 std::span<float> out, ThreadPool* pool) {
  const Eigen::Index m = gc.phi.rows();
  const Eigen::Index n = gc.phi.cols();
  const Eigen::Index f = gc.psi.cols();
  const double* W = deformed_vertices.data();  // 3 x n, column-major: x y z per vertex
  const double* N = scaled_normals.data();     // f x 3, row-major: x y z per face
  ParallelFor(pool, static_cast<size_t>(m), 64, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const double* phi = gc.phi.row(static_cast<Eigen::Index>(i)).data();
      const double* psi = gc.psi.row(static_cast<Eigen::Index>(i)).data();
      double x = 0, y = 0, z = 0;
      for (Eigen::Index j = 0; j < n; ++j) {
        x += phi[j] * W[3 * j];
        y += phi[j] * W[3 * j + 1];
        z += phi[j] * W[3 * j + 2];
      }
      for (Eigen::Index j = 0; j < f; ++j) {
        x += psi[j] * N[3 * j];
        y += psi[j] * N[3 * j + 1];
        z += psi[j] * N[3 * j + 2];
      }
      out[3 * i] = static_cast<float>(x);
      out[3 * i + 1] = static_cast<float>(y);
      out[3 * i + 2] = static_cast<float>(z);
    }
  });
}

}  // namespace sinew
