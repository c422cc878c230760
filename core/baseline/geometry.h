// The geometry of baseline skinning (Fu, Chaine & Digne 2021, seed 003; notes in
// ../shared/specs/seed-003-baseline-skinning.md, whose section numbers are cited below): cones of
// sphere-mesh bones seen from a joint sphere, sheaf planes, the pairing of generatrices across a
// joint, separator planes and pivot circles, and the joint solve that moves a baseline's two
// segment ends to one common sheaf plane after a bend (§3.7.2).
//
// Plain C++ templates over the scalar type (double on the CPU; a device kernel can compile the
// same code for float): no Eigen, no allocation, no exceptions. Every function that can meet a
// degenerate configuration says what it does then and reports it through a flag.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define SINEW_BL_HD __host__ __device__ inline
#else
#define SINEW_BL_HD inline
#endif

namespace sinew::baseline {

template <class T>
struct V3 {
  T x = 0, y = 0, z = 0;
};
template <class T> SINEW_BL_HD V3<T> operator+(V3<T> a, V3<T> b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
template <class T> SINEW_BL_HD V3<T> operator-(V3<T> a, V3<T> b) { return {a.x - b.x, a.y - b.y, a.z - b.z}; }
template <class T> SINEW_BL_HD V3<T> operator-(V3<T> a) { return {-a.x, -a.y, -a.z}; }
template <class T> SINEW_BL_HD V3<T> operator*(T s, V3<T> a) { return {s * a.x, s * a.y, s * a.z}; }
template <class T> SINEW_BL_HD T Dot(V3<T> a, V3<T> b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
template <class T> SINEW_BL_HD V3<T> Cross(V3<T> a, V3<T> b) {
  return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}
template <class T> SINEW_BL_HD T Norm(V3<T> a) { return std::sqrt(Dot(a, a)); }
template <class T> SINEW_BL_HD V3<T> Normalized(V3<T> a) {
  const T n = Norm(a);
  return n > T(0) ? (T(1) / n) * a : a;
}

constexpr double kPi = 3.14159265358979323846;

// The angle in (−π, π] equal to `a` modulo 2π.
template <class T>
SINEW_BL_HD T WrapAngle(T a) {
  const T two_pi = T(2 * kPi);
  if (a > T(-kPi) && a <= T(kPi)) return a;
  if (a > T(-3 * kPi) && a <= T(3 * kPi)) return a > T(0) ? a - two_pi : a + two_pi;
  a = std::fmod(a, two_pi);
  if (a > T(kPi)) a -= two_pi;
  if (a <= T(-kPi)) a += two_pi;
  return a;
}

// A plane {x : m·x = d}, m unit.
template <class T>
struct Plane {
  V3<T> m;
  T d = 0;
};
template <class T> SINEW_BL_HD T Side(const Plane<T>& p, V3<T> x) { return Dot(p.m, x) - p.d; }

// A circle: centre, radius, unit normal and an orthonormal basis (u, v) of its plane with
// u × v = normal; the point at angle t is centre + radius (cos t u + sin t v).
template <class T>
struct Circle {
  V3<T> c, n, u, v;
  T r = 0;
};
template <class T> SINEW_BL_HD V3<T> At(const Circle<T>& k, T t) {
  return k.c + k.r * (std::cos(t) * k.u + std::sin(t) * k.v);
}
template <class T>
SINEW_BL_HD void Basis(V3<T> n, V3<T>& u, V3<T>& v) {  // any orthonormal basis ⟂ n (unit)
  const V3<T> helper = std::fabs(n.x) < T(0.6) ? V3<T>{1, 0, 0} : (std::fabs(n.y) < T(0.6) ? V3<T>{0, 1, 0} : V3<T>{0, 0, 1});
  u = Normalized(Cross(n, helper));
  v = Cross(n, u);
}

// Where circle k meets plane p: A cos t + B sin t = C, solved for cos t and sin t without
// trigonometry. n = 2, or 1 when tangent; 0 when the plane misses the circle, with root 0 the
// circle's point closest to the plane (and `missed` set). angle(i) is t in (−π, π].
template <class T>
struct CircleRoots {
  int n = 0;
  bool missed = false;
  T c[2] = {1, 1}, s[2] = {0, 0};
  SINEW_BL_HD T angle(int i) const { return std::atan2(s[i], c[i]); }
};
template <class T>
SINEW_BL_HD CircleRoots<T> CirclePlane(const Circle<T>& k, const Plane<T>& p) {
  CircleRoots<T> out;
  const T A = k.r * Dot(p.m, k.u), B = k.r * Dot(p.m, k.v), C = p.d - Dot(p.m, k.c);
  const T hyp = std::sqrt(A * A + B * B);
  if (!(hyp > T(0))) {  // the circle lies in a plane parallel to p
    out.missed = true;
    return out;
  }
  const T ca = A / hyp, sa = B / hyp;  // the direction of the point nearest p's side
  T x = C / hyp;
  if (x > T(1) && x < T(1) + T(1e-9)) x = T(1);  // tangent, to rounding
  if (x < T(-1) && x > T(-1) - T(1e-9)) x = T(-1);
  if (x > T(1) || x < T(-1)) {
    const T sign = x > T(0) ? T(1) : T(-1);
    out.c[0] = out.c[1] = sign * ca;
    out.s[0] = out.s[1] = sign * sa;
    out.missed = true;
    return out;
  }
  const T y = std::sqrt(std::max(T(0), T(1) - x * x));
  // t = base ± acos x, base the angle of (A, B).
  out.c[0] = ca * x - sa * y;
  out.s[0] = sa * x + ca * y;
  out.c[1] = ca * x + sa * y;
  out.s[1] = sa * x - ca * y;
  out.n = y > T(0) ? 2 : 1;
  return out;
}
// The angles t at which circle k meets plane p (CirclePlane's roots as angles): the number of
// roots, and *missed as CirclePlane's.
template <class T>
SINEW_BL_HD int CirclePlane(const Circle<T>& k, const Plane<T>& p, T t[2], bool* missed = nullptr) {
  const CircleRoots<T> r = CirclePlane(k, p);
  t[0] = r.angle(0);
  t[1] = r.n == 2 ? r.angle(1) : t[0];
  if (missed && r.missed) *missed = true;
  return r.n;
}
template <class T> SINEW_BL_HD V3<T> At(const Circle<T>& k, T c, T s) { return k.c + k.r * (c * k.u + s * k.v); }

// A bone's cone seen from one of its two end spheres J (§3.1, the "implicit form"): J's centre
// c and radius r, u the unit axis from c towards the bone's far end, σ the half-angle seen from
// J (sin σ = (r − r_far) / ℓ: positive when the bone narrows away from J), and the bone's
// azimuth basis (e0, e1 ⟂ u; the same for both ends of a bone, so an azimuth names one
// generatrix from either end). L is the generatrix length ℓ cos σ.
// One generatrix of a cone (End below) at an azimuth, from one sine and cosine: the radial
// direction e, the outward normal n, the generatrix direction g (from J outwards) and its point t
// on the circle of tangency.
template <class T>
struct Generatrix {
  V3<T> e, n, g, t;
};

template <class T>
struct End {
  V3<T> c, u, e0, e1;
  T r = 0, s = 0, k = 1, L = 0;
  SINEW_BL_HD Generatrix<T> Gen(T psi) const { return Gen(std::cos(psi), std::sin(psi)); }
  // The generatrix at the azimuth whose cosine and sine are c and s (a CircleRoots root of the
  // circle of tangency).
  SINEW_BL_HD Generatrix<T> Gen(T c_, T s_) const {
    Generatrix<T> out;
    out.e = c_ * e0 + s_ * e1;
    out.n = s * u + k * out.e;
    out.g = k * u - s * out.e;
    out.t = c + r * out.n;
    return out;
  }
  SINEW_BL_HD V3<T> e(T psi) const { return std::cos(psi) * e0 + std::sin(psi) * e1; }
  SINEW_BL_HD V3<T> n(T psi) const { return s * u + k * e(psi); }           // outward cone normal
  SINEW_BL_HD V3<T> g(T psi) const { return k * u - s * e(psi); }           // generatrix, from J outwards
  SINEW_BL_HD V3<T> Tangent(T psi) const { return c + r * n(psi); }         // on the circle of tangency
  SINEW_BL_HD bool cone() const { return std::fabs(s) > T(1e-9); }          // else a cylinder
  SINEW_BL_HD V3<T> apex() const { return c + (r / s) * u; }
  // The circle of tangency at J, in azimuth: At(circle, ψ) = Tangent(ψ).
  SINEW_BL_HD Circle<T> TangencyCircle() const {
    Circle<T> k_;
    k_.c = c + (r * s) * u;
    k_.r = r * k;
    k_.n = u;
    k_.u = e0;
    k_.v = e1;
    return k_;
  }
  // The azimuth of direction x around the axis (0 when x is on the axis).
  SINEW_BL_HD T Azimuth(V3<T> x) const {
    const T a = Dot(x, e0), b = Dot(x, e1);
    return (a == T(0) && b == T(0)) ? T(0) : std::atan2(b, a);
  }
};

// The sheaf plane of a joint (§3.3 step 2) through the generatrix of `self` at azimuth ψ: it
// holds that generatrix and the other cone's apex (for a cylinder, its axis direction); two
// cylinders: parallel to both axes; collinear cylinders (every plane through the generatrix
// qualifies): the meridian plane.
template <class T>
SINEW_BL_HD Plane<T> SheafPlane(const End<T>& self, const Generatrix<T>& gen, const End<T>& other) {
  const V3<T> p = gen.t, g = gen.g;
  V3<T> m = other.cone() ? Cross(g, other.apex() - p) : Cross(g, other.u);
  const T scale = other.cone() ? Norm(other.apex() - p) : T(1);
  if (!(Norm(m) > T(1e-9) * scale)) m = Cross(self.u, gen.e);  // the meridian plane
  m = Normalized(m);
  return {m, Dot(m, p)};
}
template <class T>
SINEW_BL_HD Plane<T> SheafPlane(const End<T>& self, T psi, const End<T>& other) {
  return SheafPlane(self, self.Gen(psi), other);
}

// The sheaf plane through the point x: it holds the line of the two apexes (cylinders: their
// directions), or, when x lies on that line, `fallback`.
template <class T>
SINEW_BL_HD Plane<T> SheafPlaneThrough(V3<T> x, const End<T>& a, const End<T>& b, const Plane<T>& fallback) {
  V3<T> m;
  T scale = 1;
  if (a.cone() && b.cone()) {
    m = Cross(b.apex() - a.apex(), x - a.apex());
    scale = Norm(b.apex() - a.apex()) * Norm(x - a.apex());
  } else if (a.cone()) {
    m = Cross(b.u, x - a.apex());
    scale = Norm(x - a.apex());
  } else if (b.cone()) {
    m = Cross(a.u, x - b.apex());
    scale = Norm(x - b.apex());
  } else {
    m = Cross(a.u, b.u);
    if (!(Norm(m) > T(1e-9))) {
      m = Cross(a.u, x - a.c);
      scale = Norm(x - a.c);
    }
  }
  if (!(Norm(m) > T(1e-12) * scale) || !(scale > T(0))) return fallback;
  m = Normalized(m);
  return {m, Dot(m, x)};
}

// The separator plane Σ of two cones tangent to one sphere J (§3.2): it carries their
// intersection; two cylinders: the bisector plane through J's centre. A bone folded exactly
// back onto an identical cone (the plane is undefined) takes the plane ⟂ a.u through c.
template <class T>
SINEW_BL_HD Plane<T> SeparatorPlane(const End<T>& a, const End<T>& b) {
  const V3<T> w = (T(1) / a.k) * a.u - (T(1) / b.k) * b.u;
  const T rhs = a.r * (a.s / a.k - b.s / b.k);
  const T n = Norm(w);
  if (!(n > T(1e-12))) return {a.u, Dot(a.u, a.c)};
  return {(T(1) / n) * w, (rhs + Dot(w, a.c)) / n};
}

// γ of a cone at q (§3.1): the signed distance along the generatrix from its circle of
// tangency (+ towards the bone). At a junction the cell of a cone is where its γ is largest.
template <class T>
SINEW_BL_HD T Gamma(const End<T>& e, V3<T> q) {
  return (Dot(q - e.c, e.u) - e.r * e.s) / e.k;
}

// The generatrix of `other` in plane p paired with `self`'s generatrix at azimuth ψ (§3.3 step
// 2): of the (up to) two generatrices of `other` in p, the one whose line meets self's at a point
// Y with equal parameters along both (measured from each tangency point outwards); then Y lies
// on the separator plane. `param` is that parameter: ≥ 0 means the baseline has a crease at J
// (concave case, Y on both cone parts), < 0 an arc round J (convex case). A generatrix whose
// tangency point is self's (a straight joint: the two cones continue each other) pairs first,
// convex with no arc; parallel lines pair with the nearest tangency point, convex.
template <class T>
struct Pairing {
  T psi = 0;       // azimuth of the paired generatrix on `other`
  T param = -1;    // along both generatrices to their meeting point Y
  bool concave = false;
  bool missed = false;  // the plane missed other's circle of tangency: the closest generatrix
};
// Where the generatrix lines of self at ψ and of other at ψo (in one sheaf plane) meet: their
// common parameter from the tangency points outwards (the Pairing's), and whether that makes a
// crease. The same tangency point: convex with no arc; parallel lines: convex.
template <class T>
SINEW_BL_HD Pairing<T> Meet(const End<T>& self, T psi, const End<T>& other, T psi_o) {
  Pairing<T> out;
  out.psi = psi_o;
  const Generatrix<T> a = self.Gen(psi), b = other.Gen(psi_o);
  const V3<T> p1 = a.t, g1 = a.g, p2 = b.t, g2 = b.g;
  const V3<T> delta = p2 - p1;
  const T c = Dot(g1, g2);
  const T det = T(1) - c * c;
  if (Norm(delta) <= T(1e-6) * self.r || !(det > T(1e-12))) {
    out.param = T(-1e-30);
  } else {
    const T b1 = Dot(g1, delta), b2 = -Dot(g2, delta);
    out.param = T(0.5) * ((b1 + c * b2) / det + (c * b1 + b2) / det);
  }
  out.concave = out.param >= T(0);
  return out;
}

template <class T>
SINEW_BL_HD Pairing<T> Pair(const End<T>& self, const Generatrix<T>& gen, const End<T>& other, const Plane<T>& p) {
  Pairing<T> out;
  const CircleRoots<T> roots = CirclePlane(other.TangencyCircle(), p);
  const int n = roots.n == 0 ? 1 : roots.n;  // 0: the closest point
  out.missed = roots.missed;
  const V3<T> p1 = gen.t, g1 = gen.g;
  T best = T(1e30);
  int chosen = 0;
  for (int i = 0; i < n; ++i) {
    const Generatrix<T> o = other.Gen(roots.c[i], roots.s[i]);
    const V3<T> p2 = o.t, g2 = o.g;
    const V3<T> delta = p2 - p1;
    const T c = Dot(g1, g2);
    const T det = T(1) - c * c;
    T score, param;
    if (Norm(delta) <= T(1e-6) * self.r) {  // the same tangency point (to float input): the cones continue each other
      score = T(-1);
      param = T(-1e-30);
    } else if (det > T(1e-12)) {
      // p1 + s g1 = p2 + t g2 (least squares: the lines lie in one plane)
      const T b1 = Dot(g1, delta), b2 = -Dot(g2, delta);
      const T s = (b1 + c * b2) / det, t = (c * b1 + b2) / det;
      score = std::fabs(s - t);
      param = T(0.5) * (s + t);
    } else {
      score = T(1e20) + Norm(delta);  // parallel: the nearest, convex with no arc
      param = T(-1e30);
    }
    if (score < best) {
      best = score;
      chosen = i;
      out.param = param;
    }
  }
  out.psi = roots.angle(chosen);
  out.concave = out.param >= T(0);
  return out;
}
template <class T>
SINEW_BL_HD Pairing<T> Pair(const End<T>& self, T psi, const End<T>& other, const Plane<T>& p) {
  return Pair(self, self.Gen(psi), other, p);
}

// The arc round J of a convex baseline piece in plane p (§3.3 step 3): from self's tangency point
// T1 (where the baseline arrives along self's generatrix, towards J) on the circle p ∩ J to the
// other's tangency point T2, in the sense that continues self's generatrix (C¹); and where it
// crosses the separator plane Σ (the anchor, §3.4). Angles from T1, in [0, sweep].
template <class T>
struct Arc {
  Circle<T> circle;   // p ∩ J, u at T1, v the sense of travel
  T sweep = 0;        // angle from T1 to T2
  T anchor = 0;       // angle from T1 to the anchor
  bool anchor_missed = false;  // Σ does not cross the arc: the nearer end is taken
};
template <class T>
SINEW_BL_HD Arc<T> ArcAt(const End<T>& self, T psi1, const End<T>& other, T psi2, const Plane<T>& p,
                         const Plane<T>& sigma) {
  Arc<T> a;
  const Generatrix<T> g1 = self.Gen(psi1);
  const V3<T> t1 = g1.t, t2 = other.Tangent(psi2);
  const T dist = Side(p, self.c);
  a.circle.c = self.c - dist * p.m;
  a.circle.r = std::sqrt(std::max(T(0), self.r * self.r - dist * dist));
  a.circle.n = p.m;
  const V3<T> radial = t1 - a.circle.c;
  if (!(a.circle.r > T(1e-12) * self.r) || !(Norm(radial) > T(0))) {  // p tangent to J: a point
    Basis(p.m, a.circle.u, a.circle.v);
    a.circle.r = 0;
    a.anchor_missed = false;
    return a;
  }
  a.circle.u = Normalized(radial);
  // The sense of travel: continuing −g (self's generatrix towards J) round the circle.
  const T sense = Dot(p.m, Cross(a.circle.u, -g1.g)) >= T(0) ? T(1) : T(-1);
  a.circle.n = sense * p.m;
  a.circle.v = Cross(a.circle.n, a.circle.u);
  const V3<T> w = t2 - a.circle.c;
  T sweep = std::atan2(Dot(w, a.circle.v), Dot(w, a.circle.u));
  if (sweep < T(0)) sweep += T(2 * kPi);
  if (Norm(t2 - t1) <= T(1e-6) * self.r) sweep = 0;  // the cones continue each other: no arc
  a.sweep = sweep;
  const CircleRoots<T> roots = CirclePlane(a.circle, sigma);
  T best = T(-1);
  for (int i = 0; i < roots.n; ++i) {
    T t = roots.angle(i);
    if (t < T(0)) t += T(2 * kPi);
    if (t <= sweep + T(1e-12) && (best < T(0) || t < best)) best = t;
  }
  if (best < T(0)) {  // Σ misses the arc (rounding at a zero-length arc, or a degenerate joint)
    a.anchor_missed = sweep > T(1e-9);
    best = T(0.5) * sweep;
  }
  a.anchor = std::min(best, sweep);
  return a;
}

// The sheaf's axis line: through both apexes, or through the cone's apex along the cylinder's
// axis; false for two cylinders (their sheaf is a family of parallel planes).
template <class T>
SINEW_BL_HD bool SheafAxis(const End<T>& a, const End<T>& b, V3<T>& origin, V3<T>& dir) {
  if (a.cone() && b.cone()) {
    const V3<T> d = b.apex() - a.apex();
    if (!(Norm(d) > T(1e-9) * a.r)) return false;
    origin = a.apex();
    dir = Normalized(d);
    return true;
  }
  if (a.cone() || b.cone()) {
    origin = a.cone() ? a.apex() : b.apex();
    dir = a.cone() ? b.u : a.u;
    return true;
  }
  return false;
}

// A bend's joint solve (§3.7.2 steps 1–3): self's and the other bone's baseline ends at J are
// at azimuths psi1 (self) and psi2 (other) after the bones moved rigidly; the intermediate sheaf
// plane P* balances them through the pivot circle Π = Σ ∩ J, and the targets are where P* meets
// each circle of tangency. Returns the target azimuths; at rest (both ends in one sheaf plane)
// they are the current ones, to rounding.
template <class T>
struct JointSolve {
  T psi1 = 0, psi2 = 0;  // targets: self's and other's azimuths in P*
  Plane<T> plane;        // P*
  bool degenerate = false;  // the pivot circle is empty or a plane missed a circle: a fallback was used
};

// P* for the ends at psi1 and psi2: Qa, Qb where the sheaf planes through the two ends (Pa, Pb)
// meet Π, each the point nearest its own end; M the midpoint of the minor arc QaQb; P* the sheaf
// plane through M. An empty Π (extreme folds with unequal cones): through the ends' midpoint.
template <class T>
SINEW_BL_HD Plane<T> IntermediatePlane(const End<T>& self, T psi1, const End<T>& other, T psi2, bool* degenerate) {
  const Generatrix<T> g1 = self.Gen(psi1), g2 = other.Gen(psi2);
  const V3<T> t1 = g1.t, t2 = g2.t;
  const Plane<T> pa = SheafPlane(self, g1, other), pb = SheafPlane(other, g2, self);
  const Plane<T> sigma = SeparatorPlane(self, other);
  const T dist = Side(sigma, self.c);
  Circle<T> pivot;
  pivot.c = self.c - dist * sigma.m;
  pivot.r = std::sqrt(std::max(T(0), self.r * self.r - dist * dist));
  pivot.n = sigma.m;
  Basis(sigma.m, pivot.u, pivot.v);
  if (!(pivot.r > T(1e-9) * self.r)) {
    *degenerate = true;
    return SheafPlaneThrough(T(0.5) * (t1 + t2), self, other, pa);
  }
  const CircleRoots<T> ra = CirclePlane(pivot, pa), rb = CirclePlane(pivot, pb);
  auto nearest = [&](const CircleRoots<T>& roots, V3<T> to) {
    V3<T> best = At(pivot, roots.c[0], roots.s[0]);
    if (roots.n == 2) {
      const V3<T> q = At(pivot, roots.c[1], roots.s[1]);
      if (Norm(q - to) < Norm(best - to)) best = q;
    }
    return best;
  };
  const V3<T> qa = nearest(ra, t1), qb = nearest(rb, t2);
  *degenerate = *degenerate || ra.missed || rb.missed;
  V3<T> mid = (qa - pivot.c) + (qb - pivot.c);
  if (!(Norm(mid) > T(1e-12) * self.r)) mid = Cross(pivot.n, qa - pivot.c);  // antipodal: a quarter turn
  return SheafPlaneThrough(pivot.c + pivot.r * Normalized(mid), self, other, pa);
}

template <class T>
SINEW_BL_HD JointSolve<T> SolveJoint(const End<T>& self, T psi1, const End<T>& other, T psi2) {
  JointSolve<T> out;
  out.plane = IntermediatePlane(self, psi1, other, psi2, &out.degenerate);
  // T1*: of the two points where P* meets self's circle of tangency, the one that moves with the
  // baseline: baselines never cross (§3.3), so when the baseline's ends move on (both azimuths a
  // little larger) its target moves on the same way. The point nearest T1 is not always that one:
  // near the bend's sides it can be the other baseline's of the same plane, and the bundle would
  // fold over (a tear). Both or neither moving on: the nearest.
  const Circle<T> k1 = self.TangencyCircle();  // At(k1, c, s) is self's Tangent at that azimuth
  const CircleRoots<T> roots = CirclePlane(k1, out.plane);
  out.degenerate = out.degenerate || roots.missed;
  const Generatrix<T> g0 = self.Gen(psi1);
  int chosen = 0;
  if (roots.n == 2 && Norm(At(k1, roots.c[1], roots.s[1]) - g0.t) < Norm(At(k1, roots.c[0], roots.s[0]) - g0.t)) chosen = 1;
  if (roots.n == 2) {
    // The neighbouring baseline: self's azimuth a little larger, the other's a little larger or
    // smaller as the sheaf pairs them (for two bones leaving J back to back their azimuths turn
    // opposite ways): the way the current sheaf's pairing turns.
    const T eps = sizeof(T) >= 8 ? T(1e-5) : T(1e-3);
    const Generatrix<T> g1 = self.Gen(psi1 + eps);
    const T here = Pair(self, g0, other, SheafPlane(self, g0, other)).psi;
    const T there = Pair(self, g1, other, SheafPlane(self, g1, other)).psi;
    const T turn = WrapAngle(there - here);
    bool ignored = false;
    const Plane<T> moved =
        IntermediatePlane(self, psi1 + eps, other, psi2 + (turn >= T(0) ? eps : -eps), &ignored);
    const CircleRoots<T> next = CirclePlane(k1, moved);
    if (next.n == 2) {
      bool onward[2];
      for (int i = 0; i < 2; ++i) {
        // The moved plane's point that continues root i (the nearer of the two, largest cosine
        // of the turn), and whether that turn is positive (its sine).
        T cosine[2], sine[2];
        for (int j = 0; j < 2; ++j) {
          cosine[j] = next.c[j] * roots.c[i] + next.s[j] * roots.s[i];
          sine[j] = next.s[j] * roots.c[i] - next.c[j] * roots.s[i];
        }
        onward[i] = (cosine[0] > cosine[1] ? sine[0] : sine[1]) > T(0);
      }
      if (onward[0] != onward[1]) chosen = onward[0] ? 0 : 1;
    }
  }
  out.psi1 = psi1 + WrapAngle(roots.angle(chosen) - psi1);
  // T2*: its pair on the other cone.
  const Pairing<T> pair = Pair(self, self.Gen(roots.c[chosen], roots.s[chosen]), other, out.plane);
  out.psi2 = psi2 + WrapAngle(pair.psi - psi2);
  out.degenerate = out.degenerate || pair.missed;
  return out;
}

}  // namespace sinew::baseline
