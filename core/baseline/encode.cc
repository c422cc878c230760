#include "core/baseline/encode.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace sinew::baseline {
namespace {

using V = V3<double>;



// The orthogonal projection of p on a bone (first-sphere end `a`, far end `b`): on its cone (at
// azimuth φ, generatrix parameter t from the first tangency circle) or on one of its caps; and
// the signed distance (negative inside).
struct Foot {
  int kind = 0;  // 0: cone, 1: the first sphere's cap, 2: the far sphere's cap
  double phi = 0, t = 0, sd = 0;
};
Foot Project(const End<double>& a, const End<double>& b, const V& p) {
  Foot f;
  const V w = p - a.c;
  const V radial = w - Dot(w, a.u) * a.u;
  f.phi = Norm(radial) > 1e-300 ? a.Azimuth(radial) : 0.0;
  f.t = Dot(p - a.Tangent(f.phi), a.g(f.phi));
  if (f.t >= 0 && f.t <= a.L) {
    f.sd = Dot(p - a.Tangent(f.phi), a.n(f.phi));
  } else if (f.t < 0) {
    f.kind = 1;
    f.sd = Norm(p - a.c) - a.r;
  } else {
    f.kind = 2;
    f.sd = Norm(p - b.c) - b.r;
  }
  return f;
}

struct Encoder {
  const SphereSkeleton& sk;
  const Rig& rig;
  std::span<const End<double>> ends;  // rest, 2 per bone
  std::vector<double> zero_twist;

  const End<double>& EndAt(uint32_t bone, int side) const { return ends[2 * size_t(bone) + side]; }

  // The neighbour across `bone`'s sphere at `side` for the baseline at azimuth φ: the only other
  // bone there, or, at a junction, the one whose Voronoi cell borders the bone's at the anchor.
  void Neighbour(uint32_t bone, int side, double phi, PointCode& code) const {
    const uint32_t sphere = sk.bones[bone][side];
    code.other[side] = kFree;
    double best = -std::numeric_limits<double>::infinity();
    const End<double>& self = EndAt(bone, side);
    for (uint32_t o : sk.at[sphere]) {
      if (o == bone) continue;
      const int oside = sk.SideAt(o, sphere);
      const End<double>& other = EndAt(o, oside);
      const Plane<double> plane = SheafPlane(self, phi, other);
      const Pairing<double> pair = Pair(self, phi, other, plane);
      double score = 0;
      if (sk.at[sphere].size() > 2) {
        V anchor;
        if (pair.concave) {
          anchor = self.Tangent(phi) + pair.param * self.g(phi);
        } else {
          const Arc<double> arc = ArcAt(self, phi, other, pair.psi, plane, SeparatorPlane(self, other));
          anchor = At(arc.circle, arc.anchor);
        }
        double rival = -std::numeric_limits<double>::infinity();
        for (uint32_t m : sk.at[sphere]) {
          if (m != bone && m != o) rival = std::max(rival, Gamma(EndAt(m, sk.SideAt(m, sphere)), anchor));
        }
        score = std::min(Gamma(self, anchor), Gamma(other, anchor)) - rival;
      }
      if (score > best) {
        best = score;
        code.other[side] = o;
        code.other_side[side] = uint8_t(oside);
        code.psi_other[side] = pair.psi;
      }
    }
  }

  // The code's rest section.
  void Build(PointCode& code, Section<double>& s) const {
    SectionEnds(code, ends, zero_twist, s);
    BuildSection(s);
    if (s.degenerate) code.flags |= kDegenerate;
  }

  // Ratio, height and the rest of the code from the base point's position σ in section s.
  void Finish(const V& p, double sigma, const Section<double>& s, PointCode& code) const {
    code.ratio = s.length > 0 ? std::min(std::max(sigma / s.length, 0.0), 1.0) : 0.0;
    const SectionPoint<double> at = PointAt(s, code.ratio * s.length);
    code.height = Dot(p - at.b, at.d);
    // Clamped as the decoder clamps the posed one, so that the rest pose gives the point back
    // (until 2026-12-07 a point with cos β < 0.1 at rest moved in by modulate_detail at rest).
    code.cos_beta = std::max(at.cos_beta, MinCosBeta());
    code.piece = uint8_t(at.piece);
    // What b + h d misses of p (nothing but rounding, unless b was clamped): kept in the frame.
    const V rest = p - at.b - code.height * at.d;
    if (Norm(rest) > 1e-7 * s.ends[0].self.r) {
      V f[3];
      SectionFrame(s, at, f[0], f[1], f[2]);
      for (int k = 0; k < 3; ++k) code.side[k] = float(Dot(rest, f[k]));
      code.flags |= kResidual;
    }
    if (at.piece == Piece::kCurve && code.height > 0 && code.height >= at.focus) code.flags |= kBeyondFocus;
  }

  // The angle of b on the arc of the section's end `side`, and its position σ in the section.
  double SigmaOnArc(const Section<double>& s, int side, const V& b) const {
    const EndPiece<double>& piece = s.pieces[side];
    double along = 0;
    if (piece.kind == EndKind::kPole) {
      const End<double>& self = s.ends[side].self;
      const double cosine = Dot(self.n(piece.target), Normalized(b - self.c));
      const double from_curve = std::acos(std::min(std::max(cosine, -1.0), 1.0)) * self.r;
      along = piece.length - from_curve;
    } else if (piece.kind == EndKind::kArc && piece.arc.circle.r > 0) {
      const Circle<double>& k = piece.arc.circle;
      double t = std::atan2(Dot(b - k.c, k.v), Dot(b - k.c, k.u));
      if (t < 0) t += 2 * kPi;
      along = (piece.arc.anchor - std::min(t, piece.arc.anchor)) * k.r;
    }
    along = std::min(std::max(along, 0.0), piece.length);
    return side == 0 ? along : s.length - along;
  }

  // p over bone's sphere at `side` (its orthogonal foot on that cap, or its detail line leaving
  // the bone's generatrix there): its base point is p's radial projection on the sphere, on the
  // arc of the baseline through it (on this bone's side of the separator plane, else the
  // neighbour's) or on the meridian arc to the pole.
  PointCode OnSphere(const V& p, uint32_t bone, int side) const {
    const uint32_t sphere = sk.bones[bone][side];
    const End<double>& self = EndAt(bone, side);
    const V radial = p - self.c;
    const V b = Norm(radial) > 1e-300 ? self.c + self.r * Normalized(radial) : self.Tangent(0);
    PointCode code;
    code.bone = bone;
    Section<double> s;
    if (sk.at[sphere].size() == 1) {  // a free extremity: the meridian through b
      const V w = b - self.c;
      code.phi = self.Azimuth(w - Dot(w, self.u) * self.u);
      const int other = 1 - side;
      Neighbour(bone, other, code.phi, code);
      Build(code, s);
      Finish(p, SigmaOnArc(s, side, b), s, code);
      return code;
    }
    // The neighbour whose cone reaches furthest towards b (Voronoi, largest γ).
    uint32_t o = kFree;
    int oside = 0;
    double best = -std::numeric_limits<double>::infinity();
    for (uint32_t m : sk.at[sphere]) {
      if (m == bone) continue;
      const double g = Gamma(EndAt(m, sk.SideAt(m, sphere)), b);
      if (g > best) {
        best = g;
        o = m;
        oside = sk.SideAt(m, sphere);
      }
    }
    const End<double>& other = EndAt(o, oside);
    const Plane<double> meridian{Normalized(Cross(self.u, b - self.c)), 0};
    Plane<double> plane = SheafPlaneThrough(b, self, other, Plane<double>{meridian.m, Dot(meridian.m, b)});
    double roots[2];
    bool missed = false;
    const int n = CirclePlane(self.TangencyCircle(), plane, roots, &missed);
    const Plane<double> sigma = SeparatorPlane(self, other);
    for (int i = 0; i < n; ++i) {
      const Pairing<double> pair = Pair(self, roots[i], other, plane);
      if (pair.concave) continue;
      const Arc<double> arc = ArcAt(self, roots[i], other, pair.psi, plane, sigma);
      double t = std::atan2(Dot(b - arc.circle.c, arc.circle.v), Dot(b - arc.circle.c, arc.circle.u));
      if (t < 0) t += 2 * kPi;
      if (arc.circle.r <= 0 || t > arc.sweep + 1e-9) continue;
      // On this bone's side of Σ, or the neighbour's.
      const bool mine = t <= arc.anchor + 1e-12;
      PointCode c;
      c.bone = mine ? bone : o;
      const int s_side = mine ? side : oside;
      c.phi = mine ? roots[i] : pair.psi;
      c.other[s_side] = mine ? o : bone;
      c.other_side[s_side] = uint8_t(mine ? oside : side);
      c.psi_other[s_side] = mine ? pair.psi : roots[i];
      Neighbour(c.bone, 1 - s_side, c.phi, c);
      Build(c, s);
      Finish(p, SigmaOnArc(s, s_side, b), s, c);
      return c;
    }
    // No baseline arc holds b (it lies where the cones meet): the nearest generatrix's end.
    code.phi = self.Azimuth(b - self.c - Dot(b - self.c, self.u) * self.u);
    Neighbour(bone, 0, code.phi, code);
    Neighbour(bone, 1, code.phi, code);
    code.flags |= kClamped;
    Build(code, s);
    Finish(p, side == 0 ? s.pieces[0].length : s.pieces[0].length + s.curve, s, code);
    return code;
  }

  PointCode OnBone(const V& p, uint32_t bone, int depth) const {
    const End<double>& a = EndAt(bone, 0);
    const Foot foot = Project(a, EndAt(bone, 1), p);
    if (foot.kind != 0) return OnSphere(p, bone, foot.kind - 1);
    PointCode code;
    code.bone = bone;
    code.phi = foot.phi;
    Neighbour(bone, 0, code.phi, code);
    Neighbour(bone, 1, code.phi, code);
    Section<double> s;
    Build(code, s);
    // The base point: where the line from the focus X through p meets the generatrix.
    double t = foot.t;
    V x;
    if (Focus(s.ends, code.phi, x)) {
      const V t0 = a.Tangent(code.phi), g = a.g(code.phi), w = p - x;
      // t0 + t g = x + λ w
      const double c = Dot(g, w) / std::max(Dot(w, w), 1e-300);
      const double det = 1 - c * Dot(g, w);
      if (std::fabs(det) > 1e-14) {
        const V delta = x - t0;
        t = (Dot(g, delta) - c * Dot(w, delta)) / det;
      }
    }
    const double u = t / a.L;
    for (int side = 0; side < 2; ++side) {
      const bool past = side == 0 ? u < s.u0 - 1e-12 : u > s.u1 + 1e-12;
      if (!past) continue;
      if (s.pieces[side].kind != EndKind::kCrease) return OnSphere(p, bone, side);
      if (depth == 0 && code.other[side] != kFree) {  // over the neighbour's fan
        PointCode retried = OnBone(p, code.other[side], 1);
        if (!(retried.flags & kClamped)) {
          retried.flags |= kRetried;
          return retried;
        }
      }
      code.flags |= kClamped;
      Finish(p, side == 0 ? s.pieces[0].length : s.pieces[0].length + s.curve, s, code);
      return code;
    }
    Finish(p, s.pieces[0].length + a.L * (u - s.u0), s, code);
    return code;
  }
};

}  // namespace

void SectionEnds(const PointCode& code, std::span<const End<double>> ends, std::span<const double> twist,
                 Section<double>& s) {
  SectionEndsOf(
      code, [&](uint32_t bone, int side) -> const End<double>& { return ends[2 * size_t(bone) + side]; },
      [&](uint32_t bone) { return twist[bone]; }, s);
}

uint32_t NearestBone(std::span<const End<double>> rest_ends, const V3<double>& p) {
  uint32_t best = 0;
  double nearest = std::numeric_limits<double>::infinity();
  for (size_t k = 0; 2 * k < rest_ends.size(); ++k) {
    const double sd = Project(rest_ends[2 * k], rest_ends[2 * k + 1], p).sd;
    if (sd < nearest) {
      nearest = sd;
      best = uint32_t(k);
    }
  }
  return best;
}

absl::StatusOr<std::vector<PointCode>> EncodePoints(const SphereSkeleton& sk, const Rig& rig, ThreadPool* pool,
                                                    const ProgressFn& progress, EncodeCounts* counts) {
  PosedSpheres rest;
  RestSpheres(sk, rest);
  std::vector<End<double>> ends;
  for (uint32_t k = 0; k < sk.bone_count(); ++k) {
    ends.push_back(EndOf(sk, rest, k, 0));
    ends.push_back(EndOf(sk, rest, k, 1));
  }
  const Encoder encoder{sk, rig, ends, std::vector<double>(sk.bone_count(), 0.0)};
  const size_t n = rig.vertex_count();
  std::vector<PointCode> codes(n);
  const std::vector<uint32_t>& given = rig.sphere_mesh.point_bones;
  // Progress (and a cancel) is asked about every 4 million point-bone tests, not every 32 768
  // points whatever the bones: with 200 000 bones that was minutes between asks (until 2026-12-07).
  const size_t tests_per_point = given.empty() ? std::max<size_t>(1, sk.bone_count()) : 1;
  const size_t kBlock = std::clamp<size_t>((size_t{1} << 22) / tests_per_point, 64, size_t{1} << 15);
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t end = std::min(n, begin + kBlock);
    ParallelFor(pool, end - begin, 512, [&](size_t b, size_t e) {
      for (size_t i = begin + b; i < begin + e; ++i) {
        const V p{rig.positions[3 * i], rig.positions[3 * i + 1], rig.positions[3 * i + 2]};
        const uint32_t bone = given.empty() ? NearestBone(ends, p) : given[i];
        PointCode& code = codes[i];
        code = encoder.OnBone(p, bone, 0);
        if (code.flags & kDegenerate) {  // rigid with its bone
          const End<double>& first = ends[2 * size_t(code.bone)];
          const V w = p - first.c;
          code.side[0] = float(Dot(w, first.e0));
          code.side[1] = float(Dot(w, first.e1));
          code.side[2] = float(Dot(w, first.u));
          code.flags = uint8_t(code.flags & ~kResidual);
        }
      }
    });
    if (progress && !progress(double(end) / double(n))) return absl::CancelledError("baseline: encoding cancelled");
  }
  if (counts != nullptr) {
    *counts = {};
    for (const PointCode& c : codes) {
      counts->cone += c.piece == uint8_t(Piece::kCurve);
      const bool on_sphere = c.piece != uint8_t(Piece::kCurve);
      const bool pole = on_sphere && c.other[c.piece == uint8_t(Piece::kStartArc) ? 0 : 1] == kFree;
      counts->pole += pole;
      counts->arc += on_sphere && !pole;
      counts->retried += (c.flags & kRetried) != 0;
      counts->clamped += (c.flags & kClamped) != 0;
      counts->beyond_focus += (c.flags & kBeyondFocus) != 0;
      counts->degenerate += (c.flags & kDegenerate) != 0;
    }
  }
  return codes;
}

}  // namespace sinew::baseline
