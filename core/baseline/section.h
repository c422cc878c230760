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
  // The joint's solve is given (interpolated from the frame's joint table, joint_table.h):
  // BuildSection takes `solved` instead of solving.
  bool given = false;
  JointSolve<T> solved;
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
    const Generatrix<T> gen = s.Gen(Azimuth(u));
    return gen.t + (u * s.L) * gen.g;
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

// ∫ speed over [a, b] by the 8-point rule (b < a: negative).
template <class T, class F>
SINEW_BL_HD T Gauss8Length(const F& speed, T a, T b) {
  const T mid = T(0.5) * (a + b), half = T(0.5) * (b - a);
  T sum = 0;
  for (int i = 0; i < 8; ++i) sum += Gauss8<T>::w(i) * speed(mid + half * Gauss8<T>::x(i));
  return half * sum;
}

// The length of a curve of speed `speed` over [a, b] (b ≥ a) by composite 8-point Gauss–Legendre
// on `pieces` equal pieces.
template <class T, class F>
SINEW_BL_HD T CompositeLength(const F& speed, T a, T b, int pieces) {
  const T h = (b - a) / T(pieces);
  T sum = 0;
  for (int p = 0; p < pieces; ++p) sum += Gauss8Length(speed, a + T(p) * h, p + 1 == pieces ? b : a + T(p + 1) * h);
  return sum;
}

// The x in [a, b] at which CompositeLength(speed, a, x, ·) reaches `length`, consistently with
// CompositeLength(speed, a, b, pieces): the pieces' lengths are summed up to the piece that holds
// it, then Newton on x (derivative: the speed) with that piece's rule from its start and its
// bracket kept for bisection. Lengths beyond [0, total] clamp to the ends.
template <class T, class F>
SINEW_BL_HD T CompositeAtLength(const F& speed, T a, T b, int pieces, T length) {
  if (!(length > T(0))) return a;
  const T h = (b - a) / T(pieces);
  T before = 0, x0 = a, x1 = b, piece = 0;
  for (int p = 0; p < pieces; ++p) {
    x0 = a + T(p) * h;
    x1 = p + 1 == pieces ? b : a + T(p + 1) * h;
    piece = Gauss8Length(speed, x0, x1);
    if (before + piece >= length || p + 1 == pieces) break;
    before += piece;
  }
  const T want = length - before;
  if (!(want < piece)) return x1;
  T lo = x0, hi = x1;
  T x = x0 + (x1 - x0) * (want / piece);
  const T tolerance = T(sizeof(T) >= 8 ? 1e-14 : 1e-6) * (T(1) + before + piece);
  for (int it = 0; it < 40; ++it) {
    const T f = Gauss8Length(speed, x0, x) - want;
    if (f > T(0)) hi = x; else lo = x;
    if (std::fabs(f) <= tolerance || hi - lo <= T(1e-15) * (T(1) + std::fabs(x))) break;
    const T v = speed(x);
    const T next = v > T(0) ? x - f / v : T(0.5) * (lo + hi);
    x = (next > lo && next < hi) ? next : T(0.5) * (lo + hi);
  }
  return x;
}

// The pieces the curve's length takes for a relative error ≤ 1e-12 (spec §3.7.1 allows an
// adaptive rule with that target): the integrand sqrt(L² + ρ²θ'²) needs more pieces as the
// azimuthal speed grows against L; measured for the cubic profile, ρ·|Δφ|/L ≤ 12 (1 piece up to
// 0.05, 3 at 0.5, 10 at 2, 30 at 8), with a margin; 16 pieces gave ≤ 5e-11 to |Δφ| = 2π.
template <class T>
SINEW_BL_HD int CurvePieces(const Section<T>& s) {
  const End<T>& e = s.ends[0].self;
  const T rho = e.k * std::max(e.r, s.ends[1].self.r);
  const T ratio = rho * std::fabs(s.phi1 - s.phi0) / std::max(e.L, T(1e-300));
  const T pieces = T(1) + std::ceil(T(4.5) * ratio);
  return pieces < T(48) ? int(pieces) : 48;
}

// Length of the curve between u = a and u = b: exact for a straight (untwisted) curve, else
// composite 8-point Gauss–Legendre (CurvePieces).
template <class T>
SINEW_BL_HD T CurveLength(const Section<T>& s, T a, T b) {
  if (s.phi1 == s.phi0) return s.ends[0].self.L * (b - a);
  return CompositeLength([&s](T u) { return s.Speed(u); }, a, b, CurvePieces(s));
}

// The parameter u ≥ a at which the curve's length from a is `length`.
template <class T>
SINEW_BL_HD T CurveAtLength(const Section<T>& s, T a, T b, T length) {
  if (s.phi1 == s.phi0) {
    const T u = a + length / s.ends[0].self.L;
    return std::min(std::max(u, a), b);
  }
  return CompositeAtLength([&s](T u) { return s.Speed(u); }, a, b, CurvePieces(s), length);
}

// The crease Σ ∩ cone at azimuth ψ (the generatrix's point on Σ), seen from `e`, and its
// derivative in ψ (when `tangent` is given). Where the generatrix runs (nearly) parallel to Σ the
// point would leave for infinity: its distance along the generatrix is held to [−L, 2L] (a
// degenerate fold; the section says so, see BuildEnd), so that no point flies away.
template <class T>
SINEW_BL_HD V3<T> CreaseAt(const End<T>& e, const Plane<T>& sigma, T psi, V3<T>* tangent = nullptr,
                           bool* held = nullptr) {
  const Generatrix<T> gen = e.Gen(psi);
  const T dg = Dot(sigma.m, gen.g);
  const T side = Side(sigma, gen.t);
  T along = 0;
  bool cut = false;
  if (std::fabs(dg) > T(1e-12)) {
    along = -side / dg;
    cut = along >= -e.L && along <= T(2) * e.L;
    along = std::min(std::max(along, -e.L), T(2) * e.L);
  }
  if (held != nullptr && !cut) *held = true;
  if (tangent != nullptr) {
    // t' = r k e', g' = −s e'.
    const V3<T> de = std::cos(psi) * e.e1 - std::sin(psi) * e.e0;
    const T dside = e.r * e.k * Dot(sigma.m, de), ddg = -e.s * Dot(sigma.m, de);
    const T dalong = cut ? -(dside * dg - side * ddg) / (dg * dg) : T(0);
    *tangent = (e.r * e.k) * de + dalong * gen.g + (-e.s * along) * de;
  }
  return gen.t + along * gen.g;
}
template <class T>
SINEW_BL_HD T CreaseSpeed(const End<T>& e, const Plane<T>& sigma, T psi, bool* held = nullptr) {
  V3<T> d;
  CreaseAt(e, sigma, psi, &d, held);
  return Norm(d);
}
// The pieces of a crease's azimuth range for its length: one per 0.1 radian (relative error
// ≤ 2e-13 on folds of 30° to 170° for ranges to a quarter turn; 0.2 radian gave 5e-11 and one
// piece for a quarter turn 3e-5; tests/core/baseline_geometry_test.cc).
template <class T>
SINEW_BL_HD int CreasePieces(T from, T to) {
  const T pieces = T(1) + std::floor(std::fabs(to - from) / T(0.1));
  return pieces < T(16) ? int(pieces) : 16;
}
// The crease's length between azimuths `from` and `to` (either order): composite 8-point
// Gauss–Legendre on CreasePieces; `held` set when CreaseAt held a node near the bone.
template <class T>
SINEW_BL_HD T CreaseLength(const End<T>& e, const Plane<T>& sigma, T from, T to, bool* held = nullptr) {
  if (from == to) return 0;
  const T lo = std::min(from, to), hi = std::max(from, to);
  return CompositeLength([&](T psi) { return CreaseSpeed(e, sigma, psi, held); }, lo, hi, CreasePieces(from, to));
}
// The azimuth, from `from` towards `to`, at which the crease's length from `from` is `length`
// (`total`: the whole length).
template <class T>
SINEW_BL_HD T CreaseAtLength(const End<T>& e, const Plane<T>& sigma, T from, T to, T length, T total) {
  if (!(total > T(0)) || from == to) return from;
  // Measured from `from` in a parameter w ∈ [0, 1] (ψ = from + (to − from) w), so that the
  // pieces are CreaseLength's whichever way round the range is.
  const T span = std::fabs(to - from);
  auto speed = [&](T w) { return span * CreaseSpeed(e, sigma, from + (to - from) * w); };
  const T w = CompositeAtLength(speed, T(0), T(1), CreasePieces(from, to), std::min(length, total));
  return from + (to - from) * w;
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
      // False position with the Illinois halving (the side of Σ is smooth along the curve).
      const T tolerance = T(sizeof(T) >= 8 ? 1e-15 : 1e-7) * (v.self.L + v.self.r);
      T x = lo;
      int kept = 0;
      for (int it = 0; it < 100; ++it) {
        x = (lo * fhi - hi * flo) / (fhi - flo);
        if (!(x > lo && x < hi)) x = T(0.5) * (lo + hi);
        const T fx = f(x);
        if (std::fabs(fx) <= tolerance || hi - lo <= T(1e-15)) break;
        if ((fx < T(0)) == (flo < T(0))) {
          lo = x;
          flo = fx;
          if (kept == 1) fhi *= T(0.5);
          kept = 1;
        } else {
          hi = x;
          fhi = fx;
          if (kept == -1) flo *= T(0.5);
          kept = -1;
        }
      }
      p.cut = x;
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
    // A crease whose generatrices turn parallel to Σ on the way is held near the bone (CreaseAt):
    // a degenerate fold.
    p.length = CreaseLength(v.self, p.sigma, p.crease_from, p.crease_to, &p.degenerate);
    return p;
  }
  p.kind = EndKind::kArc;
  p.arc = ArcAt(v.self, p.target, v.other, pair.psi, joint.plane, p.sigma);
  p.degenerate = p.degenerate || p.arc.anchor_missed;
  p.length = p.arc.circle.r * p.arc.anchor;
  return p;
}

// The joint solve at a joint end of a section (§3.7.2), with this bone's target in psi1.
template <class T>
SINEW_BL_HD JointSolve<T> SolveEnd(const EndView<T>& v) {
  JointSolve<T> out;
  // Both ends already in one sheaf plane (the rest pose, or a joint that did not bend): no
  // correction — and the rest pose reproduced exactly.
  const Plane<T> pa = SheafPlane(v.self, v.psi, v.other);
  const T off = Side(pa, v.other.Tangent(v.psi_other));
  if (std::fabs(off) <= T(1e-12) * v.self.r) {
    out.plane = pa;
    out.psi1 = v.psi;
    out.psi2 = v.psi_other;
  } else if (v.first) {
    out = SolveJoint(v.self, v.psi, v.other, v.psi_other);
  } else {
    out = SolveJoint(v.other, v.psi_other, v.self, v.psi);
    const T mine = out.psi2;
    out.psi2 = out.psi1;
    out.psi1 = mine;
  }
  return out;
}

// Builds the section: the joint solves at both ends (§3.7.2), the bend and twist profile, the end
// pieces and the lengths. `twist`: the bone's twist about its axis (the end sphere's azimuths
// are ends[1].psi, which already include it).
template <class T>
SINEW_BL_HD void BuildSection(Section<T>& s) {
  JointSolve<T> joints[2];
  T targets[2];
  s.degenerate = false;  // a section is built anew (deformers reuse one per thread)
  for (int side = 0; side < 2; ++side) {
    const EndView<T>& v = s.ends[side];
    targets[side] = v.psi;
    if (!v.joint) continue;
    if (v.given) {
      joints[side] = v.solved;
      targets[side] = v.solved.psi1;
      s.degenerate = s.degenerate || v.solved.degenerate;
      continue;
    }
    joints[side] = SolveEnd(v);
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
    // On the crease the direction is from J's centre, not the cone's normal there (§3.5).
    out.cos_beta = Dot(out.d, v.self.n(psi));
    return out;
  }
  out.cos_beta = 1;  // arcs and caps: d is the sphere's normal
  return out;
}

// The frame that carries a point's residual (PointCode::side): the bone's generatrix frame at the
// base point's azimuth — the radial direction e(ψ), its turn u × e(ψ) and the bone's axis u —
// with ψ the base point's azimuth on the curve, or the curve's end azimuth for a base point on an
// end piece. It turns with the bone, its twist and its bend; no differences, so it is as well
// defined on a section a hair long as on any.
template <class T>
SINEW_BL_HD void SectionFrame(const Section<T>& s, const SectionPoint<T>& at, V3<T>& e, V3<T>& turn, V3<T>& axis) {
  const End<T>& bone = s.ends[0].self;
  const T psi = at.piece == Piece::kCurve ? at.psi : (at.piece == Piece::kStartArc ? s.phi0 : s.phi1);
  const T c = std::cos(psi), sn = std::sin(psi);
  e = c * bone.e0 + sn * bone.e1;
  turn = c * bone.e1 - sn * bone.e0;
  axis = bone.u;
}

}  // namespace sinew::baseline
