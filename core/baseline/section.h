// A baseline section of baseline skinning (seed 003, spec §3.4–3.10): the piece of one baseline
// on one bone between its anchors at the bone's two ends — an arc (convex joint), a crease
// (concave joint) or the meridian arc to the pole (free end), then the bone's generatrix,
// deformed by the twist and bend profile into a curve on the cone, then the other end's piece.
// A point is encoded once as (its section, the curvilinear ratio ρ of its base point in it, its
// height h over the base point along the detail direction); a frame builds the deformed section,
// puts the base point at the same ratio, rebuilds the detail direction there and lifts it by h.
//
// The same code builds the rest section (encoding) and the posed one (every frame), so that the
// rest pose returns every point to rounding. Plain C++ templates (see geometry.h).
#pragma once

#include "core/baseline/geometry.h"

namespace sinew::baseline {

// How the angle grows along a bone's generatrix, s(0) = 0, s(1) = 1: the paper's cubic
// 3u² − 2u³ (tangents kept at both ends, §3.7.1) or linear.
enum class Profile : uint8_t { kCubic = 0, kLinear = 1 };
template <class T> SINEW_BL_HD T Ramp(Profile p, T u) { return p == Profile::kCubic ? u * u * (T(3) - T(2) * u) : u; }
template <class T> SINEW_BL_HD T RampSlope(Profile p, T u) { return p == Profile::kCubic ? T(6) * u * (T(1) - u) : T(1); }

// One end of a point's bone as a frame sees it: the bone's cone from that end sphere, and either
// the neighbouring bone across the joint (its cone from the same sphere, and the azimuth on it of
// the baseline's segment there, as the bones' rigid motion left it) or a free extremity.
template <class T>
struct EndView {
  End<T> self;          // this bone from this end (rigid pose, no twist of its own)
  T psi = 0;            // the baseline's azimuth on this bone at this end, before the bend
  bool joint = false;   // false: a free extremity (the section ends at the pole)
  End<T> other;         // the neighbour from the same sphere
  T psi_other = 0;      // the baseline's azimuth on the neighbour there
  // The joint solve runs with this bone first (else the neighbour first): the same order from
  // both bones, so that both sections of a baseline end at the same anchor.
  bool first = true;
};

// Where a base point lies in its section.
enum class Piece : uint8_t {
  kStartArc = 0,    // the arc (or pole cap, or crease) at the start sphere
  kCurve = 1,       // the bone's (deformed) generatrix
  kEndArc = 2,      // the arc (or pole cap, or crease) at the end sphere
};

// The pieces of a section at one end.
enum class EndKind : uint8_t { kPole = 0, kArc = 1, kCrease = 2 };

template <class T>
struct EndPiece {
  EndKind kind = EndKind::kPole;
  T length = 0;       // of the piece, from the anchor (pole) to where the curve starts
  T target = 0;       // the curve's azimuth at this end (after the bend)
  T other_target = 0; // the neighbour's baseline azimuth there (after the bend)
  T cut = 0;          // crease: the curve's parameter (from this end, in [0, 1]) where it meets Σ
  Arc<T> arc;         // arc: its circle, the anchor's angle from the curve's end
  Plane<T> sigma;     // crease: Σ
  T crease_from = 0;  // crease: azimuths from the anchor Y* to the cut
  T crease_to = 0;
  bool degenerate = false;
};

template <class T>
struct Section {
  EndView<T> ends[2];      // start, end
  EndPiece<T> pieces[2];
  T phi0 = 0, phi1 = 0;    // the curve's azimuth at u = 0 and u = 1
  T u0 = 0, u1 = 1;        // the curve's range (cut at creases)
  T curve = 0;             // its length
  T length = 0;            // the whole section's
  Profile profile = Profile::kCubic;
  bool degenerate = false;
  SINEW_BL_HD T Azimuth(T u) const { return phi0 + (phi1 - phi0) * Ramp(profile, u); }
  // The curve point at u (from the start), on the bone's cone.
  SINEW_BL_HD V3<T> At(T u) const {
    const End<T>& s = ends[0].self;
    const T psi = Azimuth(u);
    return s.Tangent(psi) + (u * s.L) * s.g(psi);
  }
  SINEW_BL_HD T Speed(T u) const {
    const End<T>& s = ends[0].self;
    const T radius = s.k * ((T(1) - u) * s.r + u * ends[1].self.r);
    const T w = (phi1 - phi0) * RampSlope(profile, u);
    return std::sqrt(s.L * s.L + radius * radius * w * w);
  }
};

// Gauss–Legendre, 8 points on [-1, 1].
template <class T>
struct Gauss8 {
  static SINEW_BL_HD T x(int i) {
    constexpr double n[4] = {0.1834346424956498, 0.5255324099163290, 0.7966664774136267, 0.9602898564975363};
    return T(i < 4 ? -n[3 - i] : n[i - 4]);
  }
  static SINEW_BL_HD T w(int i) {
    constexpr double n[4] = {0.3626837833783620, 0.3137066458778873, 0.2223810344533745, 0.1012285362903763};
    return T(i < 4 ? n[3 - i] : n[i - 4]);
  }
};

// Length of the curve between u = a and u = b: exact for a straight (untwisted) curve, else
// composite 8-point Gauss–Legendre on up to 16 pieces (relative error ≤ 5e-11, spec §3.7.1).
template <class T>
SINEW_BL_HD T CurveLength(const Section<T>& s, T a, T b) {
  if (s.phi1 == s.phi0) return s.ends[0].self.L * (b - a);
  const int pieces = 16;
  const T h = (b - a) / T(pieces);
  T sum = 0;
  for (int p = 0; p < pieces; ++p) {
    const T mid = a + (T(p) + T(0.5)) * h;
    for (int i = 0; i < 8; ++i) sum += Gauss8<T>::w(i) * s.Speed(mid + T(0.5) * h * Gauss8<T>::x(i));
  }
  return T(0.5) * h * sum;
}

// The parameter u ≥ a at which the curve's length from a is `length` (Newton on u, with the
// bracket kept for bisection).
template <class T>
SINEW_BL_HD T CurveAtLength(const Section<T>& s, T a, T b, T length) {
  if (s.phi1 == s.phi0) {
    const T u = a + length / s.ends[0].self.L;
    return std::min(std::max(u, a), b);
  }
  T lo = a, hi = b;
  T u = a + (b - a) * (length / std::max(s.curve, T(1e-300)));
  for (int it = 0; it < 60; ++it) {
    u = std::min(std::max(u, lo), hi);
    const T f = CurveLength(s, a, u) - length;
    if (f > T(0)) hi = u; else lo = u;
    if (std::fabs(f) <= T(1e-14) * (T(1) + s.curve)) break;
    const T next = u - f / s.Speed(u);
    u = (next > lo && next < hi) ? next : T(0.5) * (lo + hi);
    if (hi - lo <= T(1e-15)) break;
  }
  return u;
}

// The crease Σ ∩ cone at azimuth ψ (the generatrix's point on Σ), seen from `e`.
template <class T>
SINEW_BL_HD V3<T> CreaseAt(const End<T>& e, const Plane<T>& sigma, T psi) {
  const V3<T> t = e.Tangent(psi), g = e.g(psi);
  const T dg = Dot(sigma.m, g);
  const T along = std::fabs(dg) > T(1e-12) ? -Side(sigma, t) / dg : T(0);
  return t + along * g;
}
template <class T>
SINEW_BL_HD T CreaseLength(const End<T>& e, const Plane<T>& sigma, T from, T to) {
  if (from == to) return 0;
  T sum = 0;
  const int pieces = 4;
  const T h = (to - from) / T(pieces);
  for (int p = 0; p < pieces; ++p) {
    const T mid = from + (T(p) + T(0.5)) * h;
    for (int i = 0; i < 8; ++i) {
      const T psi = mid + T(0.5) * h * Gauss8<T>::x(i);
      const T eps = T(1e-6);
      const V3<T> d = (T(0.5) / eps) * (CreaseAt(e, sigma, psi + eps) - CreaseAt(e, sigma, psi - eps));
      sum += Gauss8<T>::w(i) * Norm(d);
    }
  }
  return std::fabs(T(0.5) * h * sum);
}
template <class T>
SINEW_BL_HD T CreaseAtLength(const End<T>& e, const Plane<T>& sigma, T from, T to, T length, T total) {
  if (!(total > T(0))) return from;
  T lo = 0, hi = 1, f = length / total;
  for (int it = 0; it < 60; ++it) {
    const T psi = from + (to - from) * f;
    const T got = CreaseLength(e, sigma, from, psi);
    if (got > length) hi = f; else lo = f;
    if (std::fabs(got - length) <= T(1e-14) * (T(1) + total) || hi - lo < T(1e-15)) break;
    f = T(0.5) * (lo + hi);
  }
  return from + (to - from) * f;
}

// One end's piece of the section, once the curve's azimuths at both ends are known.
template <class T>
SINEW_BL_HD EndPiece<T> BuildEnd(const Section<T>& s, int side, const JointSolve<T>& joint) {
  const EndView<T>& v = s.ends[side];
  EndPiece<T> p;
  p.target = side == 0 ? s.phi0 : s.phi1;
  if (!v.joint) {  // the meridian arc from the curve's end to the pole
    p.kind = EndKind::kPole;
    p.length = v.self.r * std::acos(std::min(std::max(-v.self.s, T(-1)), T(1)));
    return p;
  }
  p.other_target = joint.psi2;
  const Pairing<T> pair = Meet(v.self, p.target, v.other, p.other_target);
  p.sigma = SeparatorPlane(v.self, v.other);
  p.degenerate = joint.degenerate;
  if (pair.concave) {
    // The curve cut where it meets Σ (from this end: u = 0 at its tangency circle), then the crease
    // to Y*, where the generatrix lines through the two targets meet (on Σ and on both cones).
    auto f = [&](T uj) { return Side(p.sigma, s.At(side == 0 ? uj : T(1) - uj)); };
    T lo = 0, hi = 1, flo = f(lo), fhi = f(hi);
    if ((flo < T(0)) != (fhi < T(0)) && flo != T(0)) {
      for (int it = 0; it < 100 && hi - lo > T(1e-15); ++it) {
        const T mid = T(0.5) * (lo + hi), fm = f(mid);
        if ((fm < T(0)) == (flo < T(0))) {
          lo = mid;
          flo = fm;
        } else {
          hi = mid;
        }
      }
      p.cut = T(0.5) * (lo + hi);
    } else {
      // The curve never meets Σ (tight folds, where the cones overlap along most of the bone):
      // cut at its end nearer Σ (spec §3.7.2 step 5's rare case; ours, pinned by a test).
      p.degenerate = true;
      p.cut = std::fabs(flo) <= std::fabs(fhi) ? T(0) : T(1);
    }
    p.kind = EndKind::kCrease;
    const T uc = side == 0 ? p.cut : T(1) - p.cut;
    p.crease_from = p.target;          // Y* is on the target generatrix
    p.crease_to = s.Azimuth(uc);       // the cut is on the curve
    p.length = CreaseLength(v.self, p.sigma, p.crease_from, p.crease_to);
    return p;
  }
  p.kind = EndKind::kArc;
  p.arc = ArcAt(v.self, p.target, v.other, pair.psi, joint.plane, p.sigma);
  p.degenerate = p.degenerate || p.arc.anchor_missed;
  p.length = p.arc.circle.r * p.arc.anchor;
  return p;
}

// Builds the section: the joint solves at both ends (§3.7.2), the bend and twist profile, the end
// pieces and the lengths. `twist`: the bone's twist about its axis (the end sphere's azimuths
// are ends[1].psi, which already include it).
template <class T>
SINEW_BL_HD void BuildSection(Section<T>& s) {
  JointSolve<T> joints[2];
  T targets[2];
  for (int side = 0; side < 2; ++side) {
    const EndView<T>& v = s.ends[side];
    targets[side] = v.psi;
    if (!v.joint) continue;
    // Both ends already in one sheaf plane (the rest pose, or a joint that did not bend): no
    // correction — and the rest pose reproduced exactly.
    const Plane<T> pa = SheafPlane(v.self, v.psi, v.other);
    const T off = Side(pa, v.other.Tangent(v.psi_other));
    if (std::fabs(off) <= T(1e-12) * v.self.r) {
      joints[side].plane = pa;
      joints[side].psi1 = v.psi;
      joints[side].psi2 = v.psi_other;
    } else if (v.first) {
      joints[side] = SolveJoint(v.self, v.psi, v.other, v.psi_other);
    } else {
      joints[side] = SolveJoint(v.other, v.psi_other, v.self, v.psi);
      const T mine = joints[side].psi2;
      joints[side].psi2 = joints[side].psi1;
      joints[side].psi1 = mine;
    }
    targets[side] = joints[side].psi1;
    s.degenerate = s.degenerate || joints[side].degenerate;
  }
  s.phi0 = targets[0];
  s.phi1 = targets[1];
  s.u0 = 0;
  s.u1 = 1;
  for (int side = 0; side < 2; ++side) {
    s.pieces[side] = BuildEnd(s, side, joints[side]);
    s.degenerate = s.degenerate || s.pieces[side].degenerate;
    if (s.pieces[side].kind == EndKind::kCrease) {
      if (side == 0) s.u0 = s.pieces[0].cut; else s.u1 = T(1) - s.pieces[1].cut;
    }
  }
  if (s.u1 < s.u0) {  // creases crossing each other on a short bone: an empty curve
    s.degenerate = true;
    s.u0 = s.u1 = T(0.5) * (s.u0 + s.u1);
  }
  s.curve = CurveLength(s, s.u0, s.u1);
  s.length = s.pieces[0].length + s.curve + s.pieces[1].length;
}

// A point of the section and its detail direction.
template <class T>
struct SectionPoint {
  V3<T> b, d;
  T cos_beta = 1;     // d · the surface normal (modulation, §3.10)
  Piece piece = Piece::kCurve;
  T u = 0;            // kCurve: parameter on the curve
  T psi = 0;          // kCurve: azimuth of its generatrix
  bool beyond = false;  // the detail direction's focus X is nearer than the point may be (see Lift)
  T focus = T(1e30);    // distance from b to X along d (kCurve; 1e30: none)
};

// The detail direction on a generatrix (§3.5, §3.9): at each end the construction of §3.3 through
// this generatrix gives an endpoint E and its direction (the cone normal at an arc or the pole,
// the direction from the joint's centre at a crease point); along the segment d(b) = (X − b)/|X − b|
// with X where the two endpoint lines meet (in front of the surface); the cone normal when they
// are parallel.
// The focus X of the detail lines of the generatrix at azimuth ψ: where the lines from its two
// endpoints along their directions meet. False when they are parallel (both ends convex or
// free: the direction is the cone normal all along).
template <class T>
SINEW_BL_HD bool Focus(const EndView<T> ends[2], T psi, V3<T>& x) {
  V3<T> e[2], d[2];
  for (int side = 0; side < 2; ++side) {
    const EndView<T>& v = ends[side];
    e[side] = v.self.Tangent(psi);
    d[side] = v.self.n(psi);
    if (!v.joint) continue;
    const Plane<T> p = SheafPlane(v.self, psi, v.other);
    const Pairing<T> pair = Pair(v.self, psi, v.other, p);
    if (pair.concave && pair.param <= v.self.L) {
      e[side] = e[side] + pair.param * v.self.g(psi);
      d[side] = Normalized(e[side] - v.self.c);
    }
  }
  const T c = Dot(d[0], d[1]);
  const T det = T(1) - c * c;
  if (!(det > T(1e-14))) return false;
  // e0 + λ d0 = e1 + μ d1 (coplanar lines; least squares)
  const V3<T> delta = e[1] - e[0];
  const T b1 = Dot(d[0], delta), b2 = -Dot(d[1], delta);
  x = e[0] + ((b1 + c * b2) / det) * d[0];
  return true;
}

template <class T>
SINEW_BL_HD void DetailOnGeneratrix(const EndView<T> ends[2], T psi, V3<T> b, SectionPoint<T>& out) {
  const V3<T> n = ends[0].self.n(psi);
  out.cos_beta = 1;
  out.d = n;
  V3<T> x;
  if (!Focus(ends, psi, x)) return;
  const V3<T> to = x - b;
  const T dist = Norm(to);
  if (dist > T(1e-12) * ends[0].self.r && Dot(to, n) > T(0)) {
    out.d = (T(1) / dist) * to;
    out.focus = dist;
    out.cos_beta = Dot(out.d, n);
  }
}

// The section's point at arc length σ from its start anchor, with its detail direction.
template <class T>
SINEW_BL_HD SectionPoint<T> PointAt(const Section<T>& s, T sigma) {
  SectionPoint<T> out;
  const T l0 = s.pieces[0].length;
  int side = -1;
  T along = 0;  // along the end piece, from its anchor (or pole)
  if (sigma < l0) {
    side = 0;
    along = sigma;
  } else if (sigma > l0 + s.curve && s.pieces[1].length > T(0)) {
    side = 1;
    along = s.length - sigma;
  }
  if (side < 0) {
    out.piece = Piece::kCurve;
    out.u = CurveAtLength(s, s.u0, s.u1, std::min(std::max(sigma - l0, T(0)), s.curve));
    out.psi = s.Azimuth(out.u);
    out.b = s.At(out.u);
    DetailOnGeneratrix(s.ends, out.psi, out.b, out);
    return out;
  }
  out.piece = side == 0 ? Piece::kStartArc : Piece::kEndArc;
  const EndView<T>& v = s.ends[side];
  const EndPiece<T>& p = s.pieces[side];
  along = std::min(std::max(along, T(0)), p.length);
  if (p.kind == EndKind::kPole) {
    // From the pole towards the curve's end on the meridian of its azimuth.
    const V3<T> pole = -1.0 * v.self.u;
    const V3<T> n = v.self.n(p.target);
    const T angle = p.length > T(0) ? p.length / v.self.r : T(0);
    const T t = angle - along / v.self.r;  // angle from n towards the pole
    V3<T> w = pole - Dot(pole, n) * n;
    w = Norm(w) > T(0) ? Normalized(w) : v.self.e(p.target);
    out.d = std::cos(t) * n + std::sin(t) * w;
    out.b = v.self.c + v.self.r * out.d;
  } else if (p.kind == EndKind::kArc) {
    const T t = p.arc.circle.r > T(0) ? p.arc.anchor - along / p.arc.circle.r : T(0);
    out.b = At(p.arc.circle, t);
    out.d = Normalized(out.b - v.self.c);
  } else {
    const T psi = CreaseAtLength(v.self, p.sigma, p.crease_from, p.crease_to, along, p.length);
    out.b = CreaseAt(v.self, p.sigma, psi);
    out.d = Normalized(out.b - v.self.c);
  }
  out.cos_beta = 1;
  return out;
}

}  // namespace sinew::baseline
