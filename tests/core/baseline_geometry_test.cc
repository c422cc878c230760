// The geometry of baseline skinning (core/baseline/geometry.h, section.h; spec §5 tests 5, 9, 12,
// 14, 15, 16): separator planes, the pairing of generatrices across tight joints, the profile's end
// tangents, the detail field's focus, degenerate points, and both sections of a baseline meeting at
// one anchor after a bend. Random joints from a fixed seed; ground truth by signed distance to the
// union of the bones' balls, computed here independently of the method.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>

#include "core/baseline/baseline.h"
#include "core/baseline/geometry.h"
#include "core/baseline/section.h"
#include "tests/core/test_util.h"

namespace sinew::baseline {
namespace {

using V = V3<double>;

// Signed distance to one bone (the union of the balls between its two spheres).
double BoneDistance(V ca, double ra, V cb, double rb, V x) {
  const double l = Norm(cb - ca);
  const V axis = (1.0 / l) * (cb - ca);
  const double s = (ra - rb) / l, c = std::sqrt(1 - s * s);
  const V w = x - ca;
  const double along = Dot(w, axis), radial = Norm(w - along * axis);
  const double t = (along - ra * s) * c - (radial - ra * c) * s;  // along the generatrix
  if (t < 0) return Norm(w) - ra;
  if (t > l * c) return Norm(x - cb) - rb;
  return (along - ra * s) * s + (radial - ra * c) * c;
}

// A section end: the bone, its azimuth, whether a neighbour continues it there (which, at what
// azimuth) and whether the joint solve runs with this bone first.
EndView<double> View(const End<double>& self, double psi, bool joint, const End<double>& other, double psi_other,
                     bool first) {
  EndView<double> v;
  v.self = self;
  v.psi = psi;
  v.joint = joint;
  v.other = other;
  v.psi_other = psi_other;
  v.first = first;
  return v;
}

// A joint: sphere J at the origin, bone A's far sphere along ua, bone B's along ub, `bend` degrees
// between the bones' continuations (0: straight).
// Bone A runs from its far sphere to J (J ends it), bone B from J to its far sphere: a chain.
struct Joint {
  double r, ra, rb, la, lb;
  V ua, ub;
  End<double> a, b;                // both seen from J
  End<double> a_first, b_far;      // A from its first sphere, B from its far one (the same frames)
  Joint(std::mt19937& rng, double bend) {
    std::uniform_real_distribution<double> u(0, 1);
    r = 0.5 + 0.3 * u(rng);
    la = 1.5 + u(rng);
    lb = 1.5 + u(rng);
    ra = r * (0.6 + 0.6 * u(rng));
    rb = r * (0.6 + 0.6 * u(rng));
    const double theta = bend * std::numbers::pi / 180;
    ua = {1, 0, 0};
    ub = {-std::cos(theta), std::sin(theta), 0};
    Build(V{0, 1, 0}, V{0, 0, 1});
  }
  void Build(V helper_a, V helper_b) {
    // A: first sphere at la·ua (radius ra), axis towards J; B: first sphere J, axis ub.
    a_first = Make(la * ua, ra, -1.0 * ua, la, r, helper_a, -1.0 * ua);
    a = Make(V{0, 0, 0}, r, ua, la, ra, helper_a, -1.0 * ua);
    b = Make(V{0, 0, 0}, r, ub, lb, rb, helper_b, ub);
    b_far = Make(lb * ub, rb, -1.0 * ub, lb, r, helper_b, ub);
  }
  // A bone's cone from the sphere at c (radius rc) towards its other one along u, its azimuths
  // turning right-handed about `axis` (first sphere → far sphere).
  static End<double> Make(V c, double rc, V u, double l, double r_far, V helper, V axis) {
    End<double> e;
    e.c = c;
    e.u = u;
    e.r = rc;
    e.s = (rc - r_far) / l;
    e.k = std::sqrt(1 - e.s * e.s);
    e.L = l * e.k;
    e.e0 = Normalized(helper - Dot(helper, axis) * axis);
    e.e1 = Cross(axis, e.e0);
    return e;
  }
  double Distance(V x) const {
    return std::min(BoneDistance({0, 0, 0}, r, la * ua, ra, x), BoneDistance({0, 0, 0}, r, lb * ub, rb, x));
  }
};

// Separator plane (test 9): where the two cones meet — points of each cone's generatrices at equal
// γ, found by bisection on γ_a − γ_b along them — lies on Σ, on both cones; for two equal cylinders
// Σ is the bisector plane through J's centre.
TEST(BaselineGeometry, TheConesMeetOnTheirSeparatorPlane) {
  std::mt19937 rng(5);
  double worst_plane = 0, worst_cone = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Joint j(rng, 20 + 120 * (trial % 7) / 6.0);
    const Plane<double> sigma = SeparatorPlane(j.a, j.b);
    for (double psi = 0; psi < 2 * kPi; psi += 0.3) {
      // Along a's generatrix, γ_a − γ_b changes sign where it enters b's cone.
      auto f = [&](double t) {
        const V x = j.a.Tangent(psi) + t * j.a.g(psi);
        return Gamma(j.a, x) - Gamma(j.b, x);
      };
      double lo = 0, hi = 3;
      if ((f(lo) < 0) == (f(hi) < 0)) continue;
      for (int it = 0; it < 200; ++it) {
        const double mid = 0.5 * (lo + hi);
        ((f(mid) < 0) == (f(lo) < 0) ? lo : hi) = mid;
      }
      const V x = j.a.Tangent(psi) + 0.5 * (lo + hi) * j.a.g(psi);
      worst_plane = std::max(worst_plane, std::abs(Side(sigma, x)));
      // On both (infinite) cones: |x − c|² − r² = γ² for each.
      for (const End<double>* e : {&j.a, &j.b}) {
        worst_cone = std::max(worst_cone, std::abs(Dot(x - e->c, x - e->c) - e->r * e->r - std::pow(Gamma(*e, x), 2)));
      }
    }
  }
  std::printf("crease points off Σ by at most %.1e, off the cones' equations by %.1e\n", worst_plane, worst_cone);
  EXPECT_LE(worst_plane, 1e-9);
  EXPECT_LE(worst_cone, 1e-9);
  // Two equal cylinders: the bisector plane through J's centre.
  std::mt19937 rng2(1);
  Joint j(rng2, 70);
  j.ra = j.rb = j.r;
  j.Build(V{0, 1, 0}, V{0, 0, 1});
  const Plane<double> sigma = SeparatorPlane(j.a, j.b);
  const V bisector = Normalized(j.ua - j.ub);
  EXPECT_NEAR(std::abs(Dot(sigma.m, bisector)), 1.0, 1e-12);
  EXPECT_NEAR(sigma.d, 0.0, 1e-12);
}

// Pairing at tight joints (test 16): for random two-cone joints bent 0–150°, the baseline piece
// built in the sheaf plane of a generatrix — its segment on each bone, with the arc round J in the
// convex case or from the crease point in the concave one — lies on the surface of the union of
// the balls (to 1e-9). Pairing the tangency point nearest the first instead fails beyond ~90°
// (the spec's review: 233 of 596 joints); this one must not.
TEST(BaselineGeometry, PairedGeneratricesMakeABaselineOnTheSurface) {
  std::mt19937 rng(11);
  double worst = 0;
  size_t pieces = 0, concave = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const Joint j(rng, 150.0 * (trial % 16) / 15.0);
    for (double psi = 0.05; psi < 2 * kPi; psi += 0.37) {
      const Plane<double> p = SheafPlane(j.a, psi, j.b);
      const Pairing<double> pair = Pair(j.a, psi, j.b, p);
      if (pair.missed) continue;
      ++pieces;
      concave += pair.concave;
      const double start = pair.concave ? pair.param : 0.0;
      if (start > j.a.L || (pair.concave && pair.param > j.b.L)) continue;  // a crease past a far end (degenerate)
      for (int k = 0; k <= 20; ++k) {
        worst = std::max(worst, std::abs(j.Distance(j.a.Tangent(psi) + (start + (j.a.L - start) * k / 20) * j.a.g(psi))));
        worst = std::max(worst, std::abs(j.Distance(j.b.Tangent(pair.psi) + (start + (j.b.L - start) * k / 20) * j.b.g(pair.psi))));
      }
      if (!pair.concave) {
        const Arc<double> arc = ArcAt(j.a, psi, j.b, pair.psi, p, SeparatorPlane(j.a, j.b));
        for (int k = 0; k <= 20; ++k) worst = std::max(worst, std::abs(j.Distance(At(arc.circle, arc.sweep * k / 20))));
      }
    }
  }
  std::printf("%zu baseline pieces (%zu with a crease): off the union's surface by at most %.1e\n", pieces, concave,
              worst);
  EXPECT_GT(concave, pieces / 10);
  EXPECT_LE(worst, 1e-9);
}

// Profile ends (test 5): with the cubic profile the deformed curve leaves each end along the rest
// generatrix turned with that end (θ'(0) = θ'(1) = 0), whatever the twist; linear does not.
TEST(BaselineGeometry, TheCubicProfileKeepsTheCurvesEndTangents) {
  std::mt19937 rng(2);
  const Joint j(rng, 0);
  Section<double> s;
  s.ends[0].self = j.a;
  s.ends[1].self = j.a;  // only its far radius is read (Speed), and the frame
  s.ends[1].self.r = j.ra;
  s.phi0 = 0.3;
  s.phi1 = 0.3 + 2.5;  // a twist of 2.5 rad
  auto tangent_angle = [&](double u0, double u1, double psi) {
    const V d = Normalized(s.At(u1) - s.At(u0));
    return std::acos(std::min(1.0, Dot(d, j.a.g(psi))));
  };
  s.profile = Profile::kCubic;
  const double cubic = std::max(tangent_angle(0, 1e-6, s.phi0), tangent_angle(1 - 1e-6, 1, s.phi1));
  s.profile = Profile::kLinear;
  const double linear = std::max(tangent_angle(0, 1e-6, s.phi0), tangent_angle(1 - 1e-6, 1, s.phi1));
  std::printf("end tangents off the generatrix: cubic %.1e rad, linear %.3f rad\n", cubic, linear);
  EXPECT_LE(cubic, 1e-5);  // the finite difference's own error
  EXPECT_GT(linear, 0.1);
}

// A bend's two sections of one baseline end at the same anchor (test 15): after bends of 45–120°
// of a random joint, for baselines all round, the section of bone A and the section of bone B
// computed from each side (each bone's own joint solve, in the same order) end at one point, on
// the separator plane, on the union's surface: no gap in the deformed baseline.
TEST(BaselineGeometry, BothBonesSectionsMeetAtOneAnchor) {
  std::mt19937 rng(7);
  double gap = 0, off_sigma = 0, off_surface = 0;
  size_t creases = 0, arcs = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const Joint rest(rng, 0);
    // Bone B turned about z through J's centre by 45–120° (its frame with it).
    const double turn = (45 + 75 * (trial % 6) / 5.0) * kPi / 180;
    auto rotate = [&](V x) { return V{std::cos(turn) * x.x - std::sin(turn) * x.y, std::sin(turn) * x.x + std::cos(turn) * x.y, x.z}; };
    Joint bent = rest;
    bent.ub = rotate(rest.ub);
    bent.Build(V{0, 1, 0}, rotate(V{0, 0, 1}));
    for (double psi = 0.1; psi < 2 * kPi; psi += 0.41) {
      const Plane<double> p = SheafPlane(rest.a, psi, rest.b);
      const Pairing<double> pair = Pair(rest.a, psi, rest.b, p);
      // A's section (the joint at its far end 1) and B's (at its first end 0); free other ends;
      // the joint solved with A first from both.
      Section<double> sa, sb;
      sa.ends[0] = View(bent.a_first, psi, false, {}, 0, true);
      sa.ends[1] = View(bent.a, psi, true, bent.b, pair.psi, true);
      sb.ends[0] = View(bent.b, pair.psi, true, bent.a, psi, false);
      sb.ends[1] = View(bent.b_far, pair.psi, false, {}, 0, true);
      BuildSection(sa);
      BuildSection(sb);
      const SectionPoint<double> end_a = PointAt(sa, sa.length), end_b = PointAt(sb, 0.0);
      gap = std::max(gap, Norm(end_a.b - end_b.b));
      off_sigma = std::max(off_sigma, std::abs(Side(SeparatorPlane(bent.a, bent.b), end_a.b)));
      off_surface = std::max(off_surface, std::abs(bent.Distance(end_a.b)));
      (sa.pieces[1].kind == EndKind::kCrease ? creases : arcs)++;
    }
  }
  std::printf("%zu creases, %zu arcs: the two sections' ends apart by at most %.1e, off Σ by %.1e, off the surface "
              "by %.1e\n", creases, arcs, gap, off_sigma, off_surface);
  EXPECT_GT(creases, 0u);
  EXPECT_GT(arcs, 0u);
  EXPECT_LE(gap, 1e-9);
  EXPECT_LE(off_sigma, 1e-9);
  EXPECT_LE(off_surface, 1e-6);
}

// The arc lengths (spec §3.7.1): the twisted curve's adaptive composite rule stays within 1e-11 of
// a 512-piece reference for twists to 2π and radii to the bone's length, and the crease's (Σ ∩
// cone between two azimuths, folds of 30° to 170°) within 1e-11 of its own; the crease's tangent
// (closed form) matches central differences of its points; the inverse of each length returns
// the parameter.
TEST(BaselineGeometry, ArcLengthsMeetTheirTolerance) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<double> u(0, 1);
  double curve_err = 0, crease_err = 0, tangent_err = 0, inverse_err = 0;
  size_t creases = 0;
  for (int trial = 0; trial < 200; ++trial) {
    Joint j(rng, 30 + 140 * u(rng));
    // A twisted curve on B: azimuths φ0 → φ1 over its length.
    Section<double> s;
    s.ends[0] = View(j.b, 0.0, false, {}, 0, true);
    s.ends[1] = View(j.b_far, 0.0, false, {}, 0, true);
    s.phi0 = 2 * kPi * u(rng);
    s.phi1 = s.phi0 + (u(rng) - 0.5) * 4 * kPi;
    s.profile = trial % 2 ? Profile::kLinear : Profile::kCubic;
    const double a = 0.3 * u(rng), b = 1 - 0.3 * u(rng);
    const double len = CurveLength(s, a, b);
    const double ref = CompositeLength([&s](double x) { return s.Speed(x); }, a, b, 512);
    curve_err = std::max(curve_err, std::abs(len - ref) / ref);
    const double want = u(rng) * len;
    const double at = CurveAtLength(s, a, b, want);
    inverse_err = std::max(inverse_err, std::abs(CurveLength(s, a, at) - want) / len);
    // A crease of B's cone on the separator plane, between the target of a concave pairing and a
    // second azimuth up to a quarter turn away.
    const Plane<double> sigma = SeparatorPlane(j.b, j.a);
    for (double psi = 0.05; psi < 2 * kPi; psi += 0.5) {
      const Pairing<double> pair = Pair(j.b, psi, j.a, SheafPlane(j.b, psi, j.a));
      if (!pair.concave) continue;
      const double to = psi + (u(rng) - 0.5) * kPi / 2;
      if (std::abs(Dot(sigma.m, j.b.g(psi))) < 0.05 || std::abs(Dot(sigma.m, j.b.g(to))) < 0.05) continue;
      bool held = false;  // the crease runs off towards infinity on the way (CreaseAt holds it)
      for (int k = 0; k <= 64; ++k) CreaseAt(j.b, sigma, psi + (to - psi) * k / 64, static_cast<V*>(nullptr), &held);
      if (held) continue;
      ++creases;
      const double c = CreaseLength(j.b, sigma, psi, to);
      const double cref = CompositeLength([&](double x) { return CreaseSpeed(j.b, sigma, x); }, std::min(psi, to),
                                          std::max(psi, to), 512);
      crease_err = std::max(crease_err, std::abs(c - cref) / std::max(cref, 1e-12));
      V tangent;
      const double mid = 0.5 * (psi + to), h = 1e-6;
      CreaseAt(j.b, sigma, mid, &tangent);
      const V fd = (0.5 / h) * (CreaseAt(j.b, sigma, mid + h) - CreaseAt(j.b, sigma, mid - h));
      tangent_err = std::max(tangent_err, Norm(tangent - fd) / std::max(Norm(fd), 1e-9));
      const double part = u(rng) * c;
      const double w = CreaseAtLength(j.b, sigma, psi, to, part, c);
      inverse_err = std::max(inverse_err, std::abs(CreaseLength(j.b, sigma, psi, w) - part) / std::max(c, 1e-12));
    }
  }
  std::printf("relative errors: curve %.1e, crease %.1e (%zu creases), crease tangent vs differences %.1e, "
              "inverse %.1e\n", curve_err, crease_err, creases, tangent_err, inverse_err);
  EXPECT_GT(creases, 100u);
  EXPECT_LE(curve_err, 1e-11);
  EXPECT_LE(crease_err, 1e-11);
  EXPECT_LE(tangent_err, 1e-6);
  EXPECT_LE(inverse_err, 1e-11);
}

}  // namespace
}  // namespace sinew::baseline
