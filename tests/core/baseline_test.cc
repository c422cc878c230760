// Baseline skinning of point sets (core/baseline/, seed 003; spec §5). The fixture is the paper's
// synthetic bar: a ridged tube of points round a chain of sphere-mesh bones, with a skeleton whose
// joints sit at the spheres' centres so that LBS and DQS (with the paper's Gaussian weights) can
// deform the same points for comparison. Geometric checks only: distances to the posed
// sphere-mesh, cross-section radii, the separation of paired points.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <cstring>
#include <functional>
#include <random>

#include "core/baseline/baseline.h"
#include "core/baseline/encode.h"
#include "core/baseline/geometry.h"
#include "core/baseline/section.h"
#include "core/baseline/sphere_mesh.h"
#include "core/deformer/deformer.h"
#include "core/procedural/point_bar.h"
#include "core/rig/pose.h"
#include "tests/core/test_util.h"

namespace sinew {
namespace {

using baseline::End;
using baseline::V3;
using V = V3<double>;
using E3 = Eigen::Vector3d;

// The paper's synthetic bar (core/procedural/point_bar.h) with the fields the tests set.
struct Bar {
  std::vector<double> xs{0, 2, 4}, rs{0.6, 0.6, 0.6};
  int rings = 60, around = 48;
  PointBarOptions Options() const {
    PointBarOptions o;
    o.xs = xs;
    o.radii = rs;
    o.rings = uint32_t(rings);
    o.around = uint32_t(around);
    return o;
  }
  RigInput Make() const { return MakePointBar(Options()); }
  void Weigh(RigInput& in) const { PointBarWeights(Options(), in); }
};

struct Prepared {
  std::shared_ptr<const Rig> rig;
  std::shared_ptr<const BaselineModel> model;
  explicit Prepared(const RigInput& in) {
    rig = std::make_shared<const Rig>(testing::BuildOrDie(in));
    auto p = PrepareBaseline(*rig, DeformerConfig("baseline"), nullptr, {});
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) model = std::dynamic_pointer_cast<const BaselineModel>(*p);
  }
  std::unique_ptr<Deformer> Make(const BaselineParams& params = {}) const {
    auto d = CreateBaselineDeformer(rig, model, DeformerConfig("baseline", std::make_shared<BaselineParams>(params)));
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? std::move(*d) : nullptr;
  }
};

Pose Bent(const Rig& rig, double degrees, const E3& axis = E3::UnitZ(), size_t joint = 1) {
  Pose pose = RestPose(rig.skeleton);
  pose.set_rotation(joint, Eigen::Quaterniond(Eigen::AngleAxisd(degrees * std::numbers::pi / 180, axis.normalized())));
  return pose;
}

std::vector<float> Play(Deformer& d, const Pose& pose, size_t n) {
  std::vector<float> out(3 * n);
  const auto st = d.Deform({&pose, {}}, out, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// The encoding reproduces every point (p = b + h d, |d| = 1) and the rest pose returns the
// points; the counters say where base points lie.
TEST(BaselineSkinning, RestPoseReturnsThePoints) {
  const Prepared f(Bar().Make());
  ASSERT_TRUE(f.model);
  std::printf("%s\n", f.model->Summary().c_str());
  auto d = f.Make();
  const auto out = Play(*d, RestPose(f.rig->skeleton), f.rig->vertex_count());
  const double worst = testing::MaxAbsDiff(out, f.rig->positions);
  std::printf("rest pose: worst %.2e\n", worst);
  EXPECT_LE(worst, 1e-5);
}

// The element of a sphere-mesh nearest x — sphere i (i ≥ 0) or the cone of bone k (−1 − k) — and
// the signed distance to it.
std::pair<int, double> NearestElement(const std::vector<E3>& centres, const std::vector<double>& radii,
                                      const std::vector<std::array<uint32_t, 2>>& bones, const E3& x) {
  std::pair<int, double> best{0, 1e30};
  for (size_t k = 0; k < bones.size(); ++k) {
    const auto [a, b] = bones[k];
    const E3 ca = centres[a], cb = centres[b];
    const double ra = radii[a], rb = radii[b];
    const double l = (cb - ca).norm();
    const E3 axis = (cb - ca) / l;
    const double s = (ra - rb) / l, c = std::sqrt(1 - s * s);
    const E3 w = x - ca;
    const double along = w.dot(axis), radial = (w - along * axis).norm();
    // In the meridian half-plane: the generatrix from (s·ra, c·ra) to (l + s·rb, c·rb).
    const double ta = (along - ra * s) * c + (radial - ra * c) * (-s);  // along the generatrix
    std::pair<int, double> here;
    if (ta < 0) {
      here = {int(a), w.norm() - ra};
    } else if (ta > l * c) {
      here = {int(b), (x - cb).norm() - rb};
    } else {
      here = {-1 - int(k), (along - ra * s) * s + (radial - ra * c) * c};  // along the normal
    }
    if (here.second < best.second) best = here;
  }
  return best;
}

// Signed distance from x to a sphere-mesh (the union of its bones: cones with their spheres).
double SphereMeshDistance(const std::vector<E3>& centres, const std::vector<double>& radii,
                          const std::vector<std::array<uint32_t, 2>>& bones, const E3& x) {
  return NearestElement(centres, radii, bones, x).second;
}

// The frame's sphere-mesh (centres and radii) from a skeleton pose, through the method's own
// posing (checked against the rest geometry moved by the joints in RigidMotionMovesThePointsRigidly).
struct PosedMesh {
  std::vector<E3> centres;
  std::vector<double> radii;
  std::vector<std::array<uint32_t, 2>> bones;
  PosedMesh(const Prepared& f, const FrameInput& frame) {
    baseline::PoseScratch scratch;
    baseline::PosedSpheres posed;
    EXPECT_TRUE(baseline::PoseSpheres(f.model->skeleton, *f.rig, frame, scratch, posed).ok());
    centres = posed.centres;
    radii = posed.radii;
    bones = f.model->skeleton.bones;
  }
  double Distance(const float* p) const { return SphereMeshDistance(centres, radii, bones, E3(p[0], p[1], p[2])); }
};

// Twist (spec §5 test 4): the far bone twisted 180° about its axis. On two equal cylinders every
// detail direction is radial, so every point whose base point stays on the cylinder keeps its
// distance from the axis, and every point its distance from the sphere-mesh; LBS with the
// paper's Gaussian weights collapses the joint's cross-section (the candy wrapper).
TEST(BaselineSkinning, TwistKeepsCrossSectionsWhereLbsCollapses) {
  Bar bar;
  const Prepared f(bar.Make());
  auto d = f.Make();
  const Pose pose = Bent(*f.rig, 180, E3::UnitX());
  const auto out = Play(*d, pose, f.rig->vertex_count());
  auto lbs = CreateDeformer(f.rig, DeformerConfig("lbs"));
  ASSERT_TRUE(lbs.ok());
  const auto by_lbs = Play(**lbs, pose, f.rig->vertex_count());
  const PosedMesh posed(f, {&pose, {}});
  const Pose still = RestPose(f.rig->skeleton);
  const PosedMesh rest(f, {&still, {}});
  double worst_axis = 0, worst_surface = 0, lbs_min = 1e30, ours_min = 1e30;
  for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
    const float* p = &f.rig->positions[3 * v];
    const double r0 = std::hypot(p[1], p[2]);
    const double x = p[0];
    if (x > 0.3 && x < 3.7) {  // base points on the cylinders, away from the end caps
      worst_axis = std::max(worst_axis, std::abs(std::hypot(out[3 * v + 1], out[3 * v + 2]) - r0));
    }
    worst_surface = std::max(worst_surface, std::abs(posed.Distance(&out[3 * v]) - rest.Distance(p)));
    if (std::abs(x - 2) < 0.05) {
      lbs_min = std::min(lbs_min, std::hypot(by_lbs[3 * v + 1], by_lbs[3 * v + 2]) / r0);
      ours_min = std::min(ours_min, std::hypot(out[3 * v + 1], out[3 * v + 2]) / r0);
    }
  }
  std::printf("180° twist: distance to the axis kept within %.1e, to the sphere-mesh within %.1e; joint ring at "
              "%.3f of its radius (LBS %.3f)\n", worst_axis, worst_surface, ours_min, lbs_min);
  EXPECT_LE(worst_axis, 1e-5);
  EXPECT_LE(worst_surface, 1e-5);
  EXPECT_GT(ours_min, 0.999);
  EXPECT_LT(lbs_min, 0.2);
}

// The twist's spread along the bone (spec §3.7.1, test 4): twisted by τ at its joint, the child
// bone's points turn about its axis by θ(u) = τ(3u² − 2u³), u their fraction along it from the
// joint, measured where they are after the twist (base points slide along the longer twisted
// curve: the ratio is kept, not u); the parent bone's points do not move. The linear profile
// turns them by τu, and each profile's points are off the other's curve (the control: a reversed
// ramp, a linear one or a twist at the wrong end would not pass).
TEST(BaselineSkinning, TwistSpreadsAlongTheChildBoneByItsProfile) {
  Bar bar;
  const Prepared f(bar.Make());
  const double tau = std::numbers::pi / 2;
  const Pose pose = Bent(*f.rig, 90, E3::UnitX());
  for (const auto profile : {baseline::Profile::kCubic, baseline::Profile::kLinear}) {
    BaselineParams params;
    params.profile = profile;
    auto d = f.Make(params);
    const auto out = Play(*d, pose, f.rig->vertex_count());
    const auto cubic = [](double u) { return u * u * (3 - 2 * u); };
    double worst = 0, other = 0, parent = 0;
    size_t seen = 0;
    for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
      const float* p = &f.rig->positions[3 * v];
      const float* q = &out[3 * v];
      if (p[0] < 1.9) parent = std::max(parent, double((E3(q[0], q[1], q[2]) - E3(p[0], p[1], p[2])).norm()));
      if (p[0] < 2.1 || p[0] > 3.9 || std::hypot(p[1], p[2]) < 0.1) continue;  // the child's cylinder, off the axis
      ++seen;
      const double u = (double(q[0]) - 2) / 2;
      double turned = std::atan2(q[2], q[1]) - std::atan2(p[2], p[1]);
      turned = std::remainder(turned, 2 * std::numbers::pi);
      const double by_cubic = tau * cubic(u), by_linear = tau * u;
      const bool is_cubic = profile == baseline::Profile::kCubic;
      worst = std::max(worst, std::abs(turned - (is_cubic ? by_cubic : by_linear)));
      other = std::max(other, std::abs(turned - (is_cubic ? by_linear : by_cubic)));
    }
    std::printf("%s profile, 90° twist: %zu points of the child off their curve by at most %.1e rad (%.3f from the "
                "other profile's); parent's points moved %.1e\n",
                profile == baseline::Profile::kCubic ? "cubic" : "linear", seen, worst, other, parent);
    ASSERT_GT(seen, 100u);
    EXPECT_LE(worst, 1e-5);
    EXPECT_GE(other, 0.1);
    EXPECT_LE(parent, 1e-5);
  }
}

// Bend (the paper's Fig. 20): the far bone bent 90°. Points keep their height over the posed
// sphere-mesh on the convex side; DQS with the Gaussian weights bulges the elbow out and LBS
// collapses it in.
TEST(BaselineSkinning, BendDoesNotBulgeWhereDqsDoes) {
  const Prepared f(Bar().Make());
  auto d = f.Make();
  for (const double degrees : {45.0, 90.0, 120.0}) {
    const Pose pose = Bent(*f.rig, degrees);
    const auto out = Play(*d, pose, f.rig->vertex_count());
    auto dqs = CreateDeformer(f.rig, DeformerConfig("dqs"));
    auto lbs = CreateDeformer(f.rig, DeformerConfig("lbs"));
    const auto by_dqs = Play(**dqs, pose, f.rig->vertex_count()), by_lbs = Play(**lbs, pose, f.rig->vertex_count());
    const PosedMesh posed(f, {&pose, {}});
    const Pose still = RestPose(f.rig->skeleton);
    const PosedMesh rest(f, {&still, {}});
    double ours[2] = {0, 0}, dq[2] = {0, 0}, lb[2] = {0, 0};  // most out, most in (relative to the rest height)
    for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
      const double h = rest.Distance(&f.rig->positions[3 * v]);
      auto track = [&](double* m, const std::vector<float>& o) {
        const double change = posed.Distance(&o[3 * v]) - h;
        m[0] = std::max(m[0], change);
        m[1] = std::min(m[1], change);
      };
      track(ours, out);
      track(dq, by_dqs);
      track(lb, by_lbs);
    }
    std::printf("%3.0f° bend, height over the sphere-mesh changed by at most +%.3f / %.3f (DQS +%.3f / %.3f, LBS "
                "+%.3f / %.3f)\n", degrees, ours[0], ours[1], dq[0], dq[1], lb[0], lb[1]);
    // Measured: no point rises (+0.000), the deepest sinks 0.026 / 0.102 / 0.176 at 45° / 90° /
    // 120°, where DQS bulges 0.084 / 0.133 / 0.156 and sinks 0.143 / 0.364 / 0.554 (until
    // 2026-12-03 this test only printed them).
    EXPECT_LE(ours[0], 1e-3) << degrees << "°: a bulge";
    EXPECT_GE(dq[0], 0.05) << degrees << "°: the control, DQS's bulge, is gone";
    EXPECT_LE(-ours[1], 0.5 * -dq[1]) << degrees << "°";
    EXPECT_LE(-ours[1], 0.5 * -lb[1]) << degrees << "°";
  }
}

// The rest sections in double, as the encoder built them.
struct RestSections {
  std::vector<End<double>> ends;
  std::vector<double> twist;
  explicit RestSections(const baseline::SphereSkeleton& sk) {
    baseline::PosedSpheres rest;
    baseline::RestSpheres(sk, rest);
    for (uint32_t k = 0; k < sk.bone_count(); ++k) {
      ends.push_back(baseline::EndOf(sk, rest, k, 0));
      ends.push_back(baseline::EndOf(sk, rest, k, 1));
    }
    twist.assign(sk.bone_count(), 0.0);
  }
  baseline::SectionPoint<double> Base(const baseline::PointCode& code, baseline::Section<double>* out = nullptr) const {
    baseline::Section<double> s;
    baseline::SectionEnds(code, ends, twist, s);
    baseline::BuildSection(s);
    if (out) *out = s;
    return baseline::PointAt(s, code.ratio * s.length);
  }
};

// |b + h d − p|: how far the encoding's base point and detail miss the rest point.
template <class At>
double DecodeResidual(const baseline::PointCode& code, const At& at, const float* p) {
  return std::hypot(at.b.x + code.height * at.d.x - p[0], at.b.y + code.height * at.d.y - p[1],
                    at.b.z + code.height * at.d.z - p[2]);
}

// The encoding (spec §5 test 2): every point is b + h·d with |d| = 1, b on the sphere-mesh's
// surface, d the sphere's normal on arcs and caps, h ≥ 0 for every point outside the sphere-mesh
// (a reversed fan direction would give h < 0 there); on cones (0.7, 0.55, 0.4) as on cylinders.
TEST(BaselineSkinning, EveryPointIsItsBasePointPlusItsHeightAlongItsDetailDirection) {
  for (const bool cones : {false, true}) {
    Bar bar;
    if (cones) bar.rs = {0.7, 0.55, 0.4};
    const Prepared f(bar.Make());
    const RestSections rest(f.model->skeleton);
    const Pose still = RestPose(f.rig->skeleton);
    const PosedMesh mesh(f, {&still, {}});
    double identity = 0, unit = 0, surface = 0, radial = 0, negative = 0;
    for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
      const baseline::PointCode& code = f.model->codes[v];
      const auto at = rest.Base(code);
      const float* p = &f.rig->positions[3 * v];
      const V q = at.b + code.height * at.d;
      identity = std::max(identity, std::hypot(q.x - p[0], q.y - p[1], q.z - p[2]));
      unit = std::max(unit, std::abs(baseline::Norm(at.d) - 1));
      surface = std::max(surface, std::abs(SphereMeshDistance(mesh.centres, mesh.radii, mesh.bones, E3(at.b.x, at.b.y, at.b.z))));
      if (at.piece != baseline::Piece::kCurve) {
        const int side = at.piece == baseline::Piece::kStartArc ? 0 : 1;
        const E3 c = mesh.centres[f.model->skeleton.bones[code.bone][side]];
        const E3 b(at.b.x, at.b.y, at.b.z), d(at.d.x, at.d.y, at.d.z);
        radial = std::max(radial, (d - (b - c).normalized()).norm());
      }
      if (mesh.Distance(p) > 1e-9) negative = std::min(negative, code.height);
    }
    std::printf("%s: |b + h d - p| ≤ %.1e, ||d| - 1| ≤ %.1e, b off the surface ≤ %.1e, non-radial d on spheres ≤ "
                "%.1e, most negative h outside %.1e\n", cones ? "cones" : "cylinders", identity, unit, surface, radial,
                negative);
    EXPECT_LE(identity, 1e-6);  // the points are floats
    EXPECT_LE(unit, 1e-12);
    EXPECT_LE(surface, 1e-9);
    EXPECT_LE(radial, 1e-9);
    EXPECT_GE(negative, 0.0);
  }
}

// The base points a frame reports (FrameExtras::base_points) lie on the posed sphere-mesh's
// surface, and each point is its base point lifted by its height: |p − b| = |h| for points
// without a residual, at a 100° bend and twist on cones (0.7, 0.55, 0.4). After a device frame
// (no CPU sections) they are refused.
TEST(BaselineSkinning, BasePointsLieOnThePosedSphereMeshAndThePointsAtTheirHeights) {
  Bar bar;
  bar.rs = {0.7, 0.55, 0.4};
  const Prepared f(bar.Make());
  auto d = f.Make();
  Pose pose = RestPose(f.rig->skeleton);
  pose.set_rotation(1, Eigen::Quaterniond(Eigen::AngleAxisd(100 * std::numbers::pi / 180, E3(0, 0.6, 0.8))) *
                           Eigen::Quaterniond(Eigen::AngleAxisd(0.7, E3::UnitX())));
  const auto out = Play(*d, pose, f.rig->vertex_count());
  std::vector<float> base;
  FrameExtras extras;
  extras.base_points = &base;
  ASSERT_TRUE(d->Extras(extras).ok());
  ASSERT_EQ(base.size(), out.size());
  const PosedMesh mesh(f, {&pose, {}});
  double off = 0, lift = 0;
  size_t checked = 0;
  for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
    const baseline::PointCode& code = f.model->codes[v];
    if (code.flags & (baseline::kDegenerate | baseline::kResidual)) continue;
    ++checked;
    off = std::max(off, std::abs(mesh.Distance(&base[3 * v])));
    const double h = std::hypot(out[3 * v] - base[3 * v], out[3 * v + 1] - base[3 * v + 1], out[3 * v + 2] - base[3 * v + 2]);
    lift = std::max(lift, std::abs(h - std::abs(code.height)));
  }
  std::printf("%zu base points: off the posed sphere-mesh by at most %.1e; |p - b| - |h| at most %.1e\n", checked, off,
              lift);
  EXPECT_GT(checked, f.rig->vertex_count() * 9 / 10);
  EXPECT_LE(off, 1e-5);
  EXPECT_LE(lift, 1e-5);
  std::vector<float> params;
  ASSERT_TRUE(d->DeviceFrame({&pose, {}}, params).ok());
  EXPECT_EQ(d->Extras(extras).code(), absl::StatusCode::kFailedPrecondition);
}

// Round trip (spec §5 test 6): bend 0 → θ → 0 and twist 0 → τ → 0 come back to the points —
// the deformation is a function of the pose alone — and a pose played again gives the same frame
// whatever came between.
TEST(BaselineSkinning, FoldAndUnfoldReturnsToRest) {
  Bar bar;
  bar.rs = {0.7, 0.55, 0.4};
  const Prepared f(bar.Make());
  auto d = f.Make();
  const size_t n = f.rig->vertex_count();
  const Pose rest = RestPose(f.rig->skeleton);
  const Pose probe = Bent(*f.rig, 60, E3(0, 1, 1));
  const auto first = Play(*d, probe, n);
  for (double degrees = 0; degrees <= 150; degrees += 30) Play(*d, Bent(*f.rig, degrees, E3(0, 0.6, 0.8)), n);
  Pose twisted = RestPose(f.rig->skeleton);
  twisted.set_rotation(1, Eigen::Quaterniond(Eigen::AngleAxisd(2.5, E3::UnitX())));
  Play(*d, twisted, n);
  EXPECT_LE(testing::MaxAbsDiff(Play(*d, rest, n), f.rig->positions), 1e-5);
  EXPECT_EQ(Play(*d, probe, n), first);
}

// No crossing (spec §5 test 8): points on one ring of the second bone, in the order of their
// azimuths, keep that cyclic order in their base points (FrameExtras::base_points) after bends of
// 30° to 150° with a twist: the bundle of baselines does not fold over.
TEST(BaselineSkinning, BaselinesKeepTheirCyclicOrder) {
  Bar bar;
  bar.rs = {0.7, 0.55, 0.4};
  bar.rings = 40;
  bar.around = 64;
  const Prepared f(bar.Make());
  auto d = f.Make();
  const size_t n = f.rig->vertex_count();
  // A ring of the second bone, away from both of its ends: points with equal x, by azimuth.
  std::vector<size_t> ring;
  for (size_t v = 0; v < n; ++v) {
    if (std::abs(f.rig->positions[3 * v] - 3.0f) < 1e-6 && f.model->codes[v].piece == uint8_t(baseline::Piece::kCurve)) {
      ring.push_back(v);
    }
  }
  ASSERT_GE(ring.size(), 48u);
  std::sort(ring.begin(), ring.end(), [&](size_t a, size_t b) { return f.model->codes[a].phi < f.model->codes[b].phi; });
  size_t worst = 0;
  for (double degrees = 30; degrees <= 150; degrees += 30) {
    Pose pose = Bent(*f.rig, degrees, E3(0, 0.6, 0.8));
    pose.set_rotation(1, pose.joint(1).rotation * Eigen::Quaterniond(Eigen::AngleAxisd(0.8, E3::UnitX())));
    Play(*d, pose, n);
    std::vector<float> base;
    FrameExtras extras;
    extras.base_points = &base;
    ASSERT_TRUE(d->Extras(extras).ok());
    // The base points' azimuths about the second bone's posed axis, unwrapped along the ring:
    // each step turns the same way, and the whole ring once round.
    const PosedMesh mesh(f, {&pose, {}});
    const E3 c = mesh.centres[1], axis = (mesh.centres[2] - mesh.centres[1]).normalized();
    const E3 x0 = (E3::UnitY() - E3::UnitY().dot(axis) * axis).normalized(), y0 = axis.cross(x0);
    double total = 0;
    size_t backwards = 0;
    auto angle = [&](size_t v) {
      const E3 w = E3(base[3 * v], base[3 * v + 1], base[3 * v + 2]) - c;
      return std::atan2(w.dot(y0), w.dot(x0));
    };
    for (size_t i = 0; i < ring.size(); ++i) {
      const double step = std::remainder(angle(ring[(i + 1) % ring.size()]) - angle(ring[i]), 2 * std::numbers::pi);
      total += step;
      backwards += step <= 0;
    }
    std::printf("%.0f°: the ring's base points turn %.4f times round, %zu of %zu steps backwards\n", degrees,
                total / (2 * std::numbers::pi), backwards, ring.size());
    worst = std::max(worst, backwards);
    EXPECT_NEAR(std::abs(total), 2 * std::numbers::pi, 1e-6) << degrees << "°";
  }
  EXPECT_EQ(worst, 0u);
}

// Offset surfaces with modulation (spec §5 test 10): points at a constant normal offset δ = 0.15
// above a two-cone sphere-mesh, bent 30° to 120° with a twist. With modulate_detail, every point
// whose nearest element (a cone or a sphere) is the same before and after the bend stays δ from
// the deformed sphere-mesh; without it, only those whose detail direction did not tilt do (the
// error elsewhere is printed, no bound: the paper gives none).
TEST(BaselineSkinning, ModulationKeepsAnOffsetSurfaceAnOffsetSurface) {
  Bar bar;
  bar.rs = {0.7, 0.55, 0.4};
  RigInput in = bar.Make();
  // Replace the bar's points by samples of the sphere-mesh's surface pushed out by δ.
  const double delta = 0.15;
  std::vector<E3> c = {E3(0, 0, 0), E3(2, 0, 0), E3(4, 0, 0)};
  std::vector<double> r = bar.rs;
  const std::vector<std::array<uint32_t, 2>> bones = {{0, 1}, {1, 2}};
  std::vector<float> points;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  while (points.size() < 3 * 4000) {
    const E3 x(2 + 2.6 * u(rng), 1.0 * u(rng), 1.0 * u(rng));
    const auto [element, distance] = NearestElement(c, r, bones, x);
    if (distance < 0.01) continue;
    // Push x along its offset direction to the offset δ: the nearest point of the surface moved out.
    E3 foot;
    if (element >= 0) {
      foot = c[element] + r[element] * (x - c[element]).normalized();
    } else {
      foot = x - distance * (x - c[0]).normalized();  // replaced below by the cone's normal
      const auto [a, b] = bones[-1 - element];
      const E3 axis = (c[b] - c[a]).normalized();
      const double s = (r[a] - r[b]) / (c[b] - c[a]).norm(), k = std::sqrt(1 - s * s);
      const E3 w = x - c[a];
      const E3 radial = (w - w.dot(axis) * axis).normalized();
      const E3 normal = s * axis + k * radial;
      foot = x - distance * normal;
      const E3 y = foot + delta * normal;
      points.insert(points.end(), {float(y.x()), float(y.y()), float(y.z())});
      continue;
    }
    const E3 y = foot + delta * (x - c[element]).normalized();
    points.insert(points.end(), {float(y.x()), float(y.y()), float(y.z())});
  }
  in.rig.positions = points;
  bar.Weigh(in);
  const Prepared f(in);
  ASSERT_TRUE(f.model);
  BaselineParams modulated;
  modulated.modulate_detail = true;
  auto plain = f.Make(), with = f.Make(modulated);
  const size_t n = f.rig->vertex_count();
  double worst_with = 0, rms_plain = 0;
  size_t kept = 0;
  for (double degrees = 0; degrees <= 120; degrees += 30) {
    Pose pose = Bent(*f.rig, degrees, E3(0, 0.6, 0.8));
    pose.set_rotation(1, pose.joint(1).rotation * Eigen::Quaterniond(Eigen::AngleAxisd(0.6, E3::UnitX())));
    const PosedMesh mesh(f, {&pose, {}});
    const auto b = Play(*plain, pose, n), a = Play(*with, pose, n);
    std::vector<float> base;
    FrameExtras extras;
    extras.base_points = &base;
    ASSERT_TRUE(with->Extras(extras).ok());
    for (size_t v = 0; v < n; ++v) {
      const baseline::PointCode& code = f.model->codes[v];
      if (code.flags & (baseline::kResidual | baseline::kDegenerate | baseline::kClamped)) continue;
      // The point's foot is on its base point's element, at rest and posed.
      const E3 before(points[3 * v], points[3 * v + 1], points[3 * v + 2]);
      const auto rest_element = NearestElement(c, r, bones, before);
      const auto after = NearestElement(mesh.centres, mesh.radii, mesh.bones, E3(a[3 * v], a[3 * v + 1], a[3 * v + 2]));
      const int base_after = NearestElement(mesh.centres, mesh.radii, mesh.bones, E3(base[3 * v], base[3 * v + 1], base[3 * v + 2])).first;
      if (after.first != rest_element.first || after.first != base_after) continue;
      ++kept;
      worst_with = std::max(worst_with, std::abs(after.second - delta));
      const double plain_distance = NearestElement(mesh.centres, mesh.radii, mesh.bones, E3(b[3 * v], b[3 * v + 1], b[3 * v + 2])).second;
      rms_plain += (plain_distance - delta) * (plain_distance - delta);
    }
  }
  std::printf("%zu point-frames on their own element: with modulation the offset is off by at most %.1e; without, "
              "RMS %.1e\n", kept, worst_with, std::sqrt(rms_plain / std::max<size_t>(kept, 1)));
  EXPECT_GT(kept, 4 * n / 2);
  EXPECT_LE(worst_with, 1e-5);
}

// Rigid motion (spec §5 test 3): the root turned and moved carries every point rigidly.
TEST(BaselineSkinning, RigidMotionMovesThePointsRigidly) {
  Bar bar;
  bar.rs = {0.7, 0.55, 0.4};
  const Prepared f(bar.Make());
  auto d = f.Make();
  Pose pose = RestPose(f.rig->skeleton);
  const Eigen::Quaterniond q(Eigen::AngleAxisd(1.1, E3(0.3, 1, -0.4).normalized()));
  Similarity root = pose.joint(0);
  root.rotation = q * root.rotation;
  root.translation = q * root.translation + E3(1.5, -2, 0.25);
  pose.set_joint(0, root);
  const auto out = Play(*d, pose, f.rig->vertex_count());
  double worst = 0;
  for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
    const E3 p(f.rig->positions[3 * v], f.rig->positions[3 * v + 1], f.rig->positions[3 * v + 2]);
    const E3 want = q * p + E3(1.5, -2, 0.25);
    worst = std::max(worst, (E3(out[3 * v], out[3 * v + 1], out[3 * v + 2]) - want).norm());
  }
  std::printf("rigid motion: within %.1e\n", worst);
  EXPECT_LE(worst, 1e-5);
}

// Multi-layer parts do not crack (the paper's dragon claws): a second layer over the bar, each
// point 0.05 further along the detail line of its partner, keeps exactly that distance to it in
// any pose (both share one base point); LBS and DQS pull the layers apart and together.
TEST(BaselineSkinning, LayersOverOneBasePointStayTogether) {
  Bar bar;
  bar.rs = {0.7, 0.55, 0.4};
  RigInput in = bar.Make();
  const Prepared single(in);
  const RestSections rest(single.model->skeleton);
  const size_t n = single.rig->vertex_count();
  constexpr double kGap = 0.05;
  for (size_t v = 0; v < n; ++v) {
    const auto at = rest.Base(single.model->codes[v]);
    const float* p = &single.rig->positions[3 * v];
    in.rig.positions.insert(in.rig.positions.end(), {float(p[0] + kGap * at.d.x), float(p[1] + kGap * at.d.y),
                                                     float(p[2] + kGap * at.d.z)});
  }
  bar.Weigh(in);  // each point weighted where it is (as the paper's comparison)
  const Prepared f(in);
  auto d = f.Make();
  auto dqs = CreateDeformer(f.rig, DeformerConfig("dqs"));
  auto lbs = CreateDeformer(f.rig, DeformerConfig("lbs"));
  for (const double degrees : {90.0, 150.0}) {
    const Pose pose = Bent(*f.rig, degrees, E3(0, 0.6, 0.8));
    const auto ours = Play(*d, pose, 2 * n), by_dqs = Play(**dqs, pose, 2 * n), by_lbs = Play(**lbs, pose, 2 * n);
    auto worst = [&](const std::vector<float>& o) {
      double w = 0;
      for (size_t v = 0; v < n; ++v) {
        const double gap = std::hypot(o[3 * (v + n)] - o[3 * v], o[3 * (v + n) + 1] - o[3 * v + 1],
                                      o[3 * (v + n) + 2] - o[3 * v + 2]);
        w = std::max(w, std::abs(gap - kGap));
      }
      return w;
    };
    std::printf("%3.0f° bend: layers 0.05 apart stay so within %.1e (DQS %.3f, LBS %.3f)\n", degrees, worst(ours),
                worst(by_dqs), worst(by_lbs));
    EXPECT_LE(worst(ours), 1e-5);
    EXPECT_GT(worst(by_dqs), 100 * worst(ours));
  }
}

// Neighbouring points stay neighbours (no crack, no tear): over the bar's grid (cones) bent by
// 30–120° in four directions, the largest ratio of a neighbour distance after to before is not
// larger on a grid twice as fine (a tear would double it: the gap stays, the spacing halves) and is
// below DQS's (measured 2.15 and 2.15, DQS 2.75). Every coordinate is finite. This caught the joint
// solve taking the nearer of P*'s two points on the circle of tangency, which near the bend's sides
// is the other baseline's (a tear along the sides from 60° on). At 150° (a fold: the creases run
// past the bones' far ends) neighbours on the fold's sides do tear apart (measured 12 and 25:
// growing with the resolution): finite, reported, documented (docs/baseline.md), not asserted.
TEST(BaselineSkinning, BendsUpTo120DegreesTearNothing) {
  struct Stretch {
    double ours = 0, dqs = 0, folded = 0;
    size_t degenerate = 0;
  };
  auto measure = [](int rings, int around) {
    Bar bar;
    bar.rs = {0.7, 0.55, 0.4};
    bar.rings = rings;
    bar.around = around;
    const Prepared f(bar.Make());
    auto d = f.Make();
    auto dqs = CreateDeformer(f.rig, DeformerConfig("dqs"));
    EXPECT_TRUE(dqs.ok());
    auto stretch = [&](const std::vector<float>& out) {
      double worst = 0;
      for (int i = 0; i < bar.rings; ++i) {
        for (int k = 0; k < bar.around; ++k) {
          const size_t a = size_t(i) * bar.around + k, b = a + bar.around, c = size_t(i) * bar.around + (k + 1) % bar.around;
          for (size_t o : {b, c}) {
            const float* p = f.rig->positions.data();
            const double before = std::hypot(p[3 * a] - p[3 * o], p[3 * a + 1] - p[3 * o + 1], p[3 * a + 2] - p[3 * o + 2]);
            const double after = std::hypot(out[3 * a] - out[3 * o], out[3 * a + 1] - out[3 * o + 1],
                                             out[3 * a + 2] - out[3 * o + 2]);
            worst = std::max(worst, after / before);
          }
        }
      }
      return worst;
    };
    Stretch s;
    for (const double degrees : {30.0, 60.0, 90.0, 120.0, 150.0}) {
      for (const E3& axis : {E3(0, 0, 1), E3(0, 1, 0), E3(0, 1, 1), E3(0, -1, 0.3)}) {
        const Pose pose = Bent(*f.rig, degrees, axis);
        const auto out = Play(*d, pose, f.rig->vertex_count());
        EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }));
        std::vector<uint8_t> states;
        EXPECT_TRUE(d->Extras({.vertex_states = &states}).ok());
        for (uint8_t st : states) s.degenerate += (st & kBaselineStatusDegenerate) != 0;
        if (degrees > 120) {
          s.folded = std::max(s.folded, stretch(out));
          continue;
        }
        s.ours = std::max(s.ours, stretch(out));
        s.dqs = std::max(s.dqs, stretch(Play(**dqs, pose, f.rig->vertex_count())));
      }
    }
    return s;
  };
  const Stretch coarse = measure(60, 48), fine = measure(120, 96);
  std::printf("bends of 30–120°: neighbours at most %.2f times as far apart (DQS %.2f), %.2f on a grid twice as fine; "
              "at 150° %.2f and %.2f; %zu point-frames used a fallback\n", coarse.ours, coarse.dqs, fine.ours,
              coarse.folded, fine.folded, coarse.degenerate);
  EXPECT_LT(fine.ours, 1.25 * coarse.ours);
  EXPECT_LT(coarse.ours, coarse.dqs);
}

// The two ways to pose the sphere-mesh agree: explicit sphere centres with the bones' twists give
// what the skeleton pose that puts the spheres there gives.
TEST(BaselineSkinning, ExplicitSpheresEqualTheSkeletonPoseThatPutsThemThere) {
  Bar bar;
  bar.rs = {0.7, 0.55, 0.4};
  const Prepared f(bar.Make());
  auto d = f.Make();
  Pose pose = RestPose(f.rig->skeleton);
  pose.set_rotation(0, Eigen::Quaterniond(Eigen::AngleAxisd(0.4, E3(0, 1, 0))));
  // Bend 70° about z, then twist 50° about the bone's own axis.
  pose.set_rotation(1, Eigen::Quaterniond(Eigen::AngleAxisd(70 * std::numbers::pi / 180, E3::UnitZ())) *
                           Eigen::Quaterniond(Eigen::AngleAxisd(50 * std::numbers::pi / 180, E3::UnitX())));
  const auto by_pose = Play(*d, pose, f.rig->vertex_count());
  baseline::PoseScratch scratch;
  baseline::PosedSpheres posed;
  ASSERT_TRUE(baseline::PoseSpheres(f.model->skeleton, *f.rig, {&pose, {}}, scratch, posed).ok());
  EXPECT_NEAR(posed.twist[1], 50 * std::numbers::pi / 180, 1e-7);  // the pose's floats
  SphereFrame spheres;
  for (const E3& c : posed.centres) spheres.centers.insert(spheres.centers.end(), {float(c.x()), float(c.y()), float(c.z())});
  for (double t : posed.twist) spheres.twists.push_back(float(t));
  std::vector<float> by_spheres(by_pose.size());
  FrameInput frame;
  frame.spheres = &spheres;
  ASSERT_TRUE(d->Deform(frame, by_spheres, nullptr).ok());
  const double worst = testing::MaxAbsDiff(by_pose, by_spheres);
  std::printf("explicit spheres against the skeleton pose: within %.1e\n", worst);
  EXPECT_LE(worst, 2e-5);  // the centres and twists went through floats
}

// New radii with a skeleton pose are checked against the posed bones, not the rest ones: the far
// joint scaled 2x makes its bone 4 long, room for radii 0.6 and 2.7 (2 at rest would not be:
// refused until 2026-12-03); radii 0.6 and 5 are refused naming the frame's bone.
TEST(BaselineSkinning, RadiiWithAPoseAreCheckedOnThePosedBones) {
  const Prepared f(Bar().Make());
  auto d = f.Make();
  Pose pose = RestPose(f.rig->skeleton);
  pose.scales.assign(pose.joint_count(), 1.f);
  Similarity scaled = pose.joint(1);
  scaled.scale = 2;
  pose.set_joint(1, scaled);
  SphereFrame spheres;
  spheres.radii = {0.6f, 0.6f, 2.7f};
  FrameInput frame;
  frame.pose = &pose;
  frame.spheres = &spheres;
  std::vector<float> out(f.rig->positions.size());
  const absl::Status fits = d->Deform(frame, out, nullptr);
  EXPECT_TRUE(fits.ok()) << fits;
  spheres.radii[2] = 5;
  const absl::Status holds = d->Deform(frame, out, nullptr);
  EXPECT_EQ(holds.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(holds.message()).find("in this frame bone 1 (spheres 1 and 2)"), std::string::npos) << holds;
  // The refused frame left no base points or states behind (until 2026-12-07 Extras gave the
  // refused frame's twists on the frame before's bone ends).
  std::vector<float> base;
  std::vector<uint8_t> states;
  FrameExtras extras;
  extras.base_points = &base;
  const absl::Status after = d->Extras(extras);
  EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
  EXPECT_NE(std::string(after.message()).find("the last frame failed"), std::string::npos) << after;
  extras.base_points = nullptr;
  extras.vertex_states = &states;
  EXPECT_EQ(d->Extras(extras).code(), absl::StatusCode::kFailedPrecondition);
  // A good frame brings them back.
  spheres.radii[2] = 2.7f;
  ASSERT_TRUE(d->Deform(frame, out, nullptr).ok());
  extras.base_points = &base;
  EXPECT_TRUE(d->Extras(extras).ok());
  EXPECT_EQ(base.size(), out.size());
}

// Anatomy (spec §5 test 11): the far bone lengthened by 50 % (its radii kept): every point keeps
// its height over the sphere-mesh, and on the bone's cylinder part the points' spacing along it
// stretches by the section's factor — details spread evenly, none left behind.
TEST(BaselineSkinning, ALongerBoneSpreadsItsDetailsEvenly) {
  const Prepared f(Bar().Make());
  auto d = f.Make();
  SphereFrame spheres;
  spheres.centers = {0, 0, 0, 2, 0, 0, 5, 0, 0};
  FrameInput frame;
  frame.spheres = &spheres;
  std::vector<float> out(f.rig->positions.size());
  ASSERT_TRUE(d->Deform(frame, out, nullptr).ok());
  const Pose still = RestPose(f.rig->skeleton);
  const PosedMesh rest(f, {&still, {}}), longer(f, frame);
  double height = 0, spread = 0;
  for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
    const float* p = &f.rig->positions[3 * v];
    height = std::max(height, std::abs(longer.Distance(&out[3 * v]) - rest.Distance(p)));
    if (p[0] > 2.2 && p[0] < 3.8) {
      // The section runs from the joint's anchor (x = 2) to the pole (x = 4 + 0.6 at rest, 5.6
      // after): its part along the cylinder scales by (1 + 3 + π/2·0.6) / (... 2 ...).
      const double rest_len = 2 + std::numbers::pi / 2 * 0.6, new_len = 3 + std::numbers::pi / 2 * 0.6;
      spread = std::max(spread, std::abs((out[3 * v] - 2) - (p[0] - 2) * new_len / rest_len));
    }
  }
  std::printf("bone 1.5 times as long: heights kept within %.1e, even spread within %.1e\n", height, spread);
  EXPECT_LE(height, 1e-5);
  EXPECT_LE(spread, 1e-5);
}

// A junction (spec §3.2, §3.7.4): three bones from one sphere (a torso and two legs, a Y). The
// rest pose returns the points; every rest anchor at the junction lies on the separator plane of
// its two bones, in both their Voronoi cells (γ of the pair at least every other γ there, to 0.05:
// measured 0.023 at most, where three cells meet and no pair's baseline fits exactly); one leg
// swung 60° outwards keeps every point finite and within 0.2 of the posed sphere-mesh (rest 0.1;
// measured 0.153: points of the crotch's crease stretched as it opens — the paper's "unfolding").
// This caught the joint solve perturbing both bones' azimuths the same way: two bones leaving
// the hub back to back pair opposite ways round (the crotch's points then went to the hub's top).
TEST(BaselineSkinning, JunctionsPairEachBaselineWithItsVoronoiNeighbour) {
  // Spheres: 0 the hub, 1 up (torso), 2 and 3 the legs' ends; bones from the hub.
  auto make = [](int samples) {
    RigInput in;
    Rig& r = in.rig;
    const std::vector<E3> c = {E3(0, 0, 0), E3(0, 2.5, 0), E3(-1.2, -2.2, 0), E3(1.2, -2.2, 0)};
    const std::vector<float> rad = {0.9f, 0.7f, 0.45f, 0.45f};
    for (size_t i = 0; i < c.size(); ++i) {
      r.sphere_mesh.centers.insert(r.sphere_mesh.centers.end(), {float(c[i].x()), float(c[i].y()), float(c[i].z())});
      r.sphere_mesh.radii.push_back(rad[i]);
    }
    r.sphere_mesh.bones = {0, 1, 0, 2, 0, 3};
    // Points: the union's surface lifted by 0.1 (sampled on each bone's capsule, kept where no
    // other bone covers it).
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> uni(0, 1);
    const std::vector<std::array<uint32_t, 2>> bones = {{0, 1}, {0, 2}, {0, 3}};
    std::vector<double> radii(rad.begin(), rad.end());
    for (int i = 0; i < samples; ++i) {
      const auto [a, b] = bones[i % 3];
      const double t = uni(rng) * 1.2 - 0.1, ang = uni(rng) * 2 * std::numbers::pi;
      const E3 axis = (c[b] - c[a]).normalized(), e0 = axis.cross(E3::UnitZ()).normalized(), e1 = axis.cross(e0);
      const E3 on = c[a] + t * (c[b] - c[a]);
      const double rr = radii[a] + std::clamp(t, 0.0, 1.0) * (radii[b] - radii[a]);
      E3 p = on + (rr + 0.1) * (std::cos(ang) * e0 + std::sin(ang) * e1);
      if (SphereMeshDistance(c, radii, bones, p) < 0.05) continue;
      r.positions.insert(r.positions.end(), {float(p.x()), float(p.y()), float(p.z())});
    }
    return in;
  };
  const Prepared f(make(6000));
  ASSERT_TRUE(f.model);
  std::printf("%s\n", f.model->Summary().c_str());
  const RestSections rest(f.model->skeleton);
  double worst_sigma = 0, worst_cell = 0, identity = 0;
  for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
    const baseline::PointCode& code = f.model->codes[v];
    baseline::Section<double> s;
    const auto at = rest.Base(code, &s);
    const float* p = &f.rig->positions[3 * v];
    identity = std::max(identity, DecodeResidual(code, at, p));
    const int side = f.model->skeleton.bones[code.bone][0] == 0 ? 0 : 1;  // the hub end
    if (code.other[side] == baseline::kFree) continue;
    const auto& piece = s.pieces[side];
    const auto& v_end = s.ends[side];
    const V anchor = piece.kind == baseline::EndKind::kArc ? At(piece.arc.circle, piece.arc.anchor)
                                                             : baseline::CreaseAt(v_end.self, piece.sigma, piece.crease_from);
    worst_sigma = std::max(worst_sigma, std::abs(baseline::Side(piece.sigma, anchor)));
    const double mine = std::min(baseline::Gamma(v_end.self, anchor), baseline::Gamma(v_end.other, anchor));
    for (uint32_t m = 0; m < 3; ++m) {
      if (m == code.bone || m == code.other[side]) continue;
      const auto e = rest.ends[2 * m + f.model->skeleton.SideAt(m, 0)];
      worst_cell = std::max(worst_cell, baseline::Gamma(e, anchor) - mine);
    }
  }
  std::printf("junction: identity %.1e, anchors off their separator plane ≤ %.1e, a third cone past the pair ≤ %.1e\n",
              identity, worst_sigma, worst_cell);
  EXPECT_LE(identity, 1e-6);
  EXPECT_LE(worst_sigma, 1e-9);
  EXPECT_LE(worst_cell, 0.05);
  // One leg bent 60° (explicit spheres: the leg's end moved round the hub): finite everywhere.
  auto d = f.Make();
  SphereFrame spheres;
  spheres.centers = {0, 0, 0, 0, 2.5f, 0, -1.2f, -2.2f, 0, 2.5f, -0.35f, 0};
  FrameInput frame;
  frame.spheres = &spheres;
  std::vector<float> out(f.rig->positions.size());
  ASSERT_TRUE(d->Deform(frame, out, nullptr).ok());
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }));
  const PosedMesh bent(f, frame);
  double worst = 0;
  for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
    worst = std::max(worst, std::abs(bent.Distance(&out[3 * v])));
  }
  std::printf("leg swung: every point within %.3f of the posed sphere-mesh (rest: 0.1)\n", worst);
  EXPECT_LT(worst, 0.2);
}

// The detail field's focus (spec §5 test 14): on a chain folded 140° at rest (the far bone turned
// back towards the first), every generatrix with a crease end has its focus X in front of the
// surface (outside the sphere-mesh) — a reversed fan would put it inside — and the points at or
// beyond their focus along their detail line are exactly those flagged kBeyondFocus. (There are
// none here, nor when points are placed past the nearest foci: X sits above the fan's far end, so
// such points project onto that end's cap and are encoded radially; measured nearest focus 0.21.)
TEST(BaselineSkinning, TheFocusOfEveryFanIsOutsideAndPointsBeyondItAreFlagged) {
  RigInput in;
  Rig& r = in.rig;
  const double fold = 140 * std::numbers::pi / 180;
  const std::vector<E3> c = {E3(0, 0, 0), E3(2, 0, 0), E3(2 + 2 * std::cos(fold), 2 * std::sin(fold), 0)};
  const std::vector<double> rad = {0.6, 0.55, 0.45};
  for (size_t i = 0; i < 3; ++i) {
    r.sphere_mesh.centers.insert(r.sphere_mesh.centers.end(), {float(c[i].x()), float(c[i].y()), float(c[i].z())});
    r.sphere_mesh.radii.push_back(float(rad[i]));
  }
  r.sphere_mesh.bones = {0, 1, 1, 2};
  const std::vector<std::array<uint32_t, 2>> bones = {{0, 1}, {1, 2}};
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> uni(0, 1);
  for (int i = 0; i < 8000; ++i) {
    const auto [a, b] = bones[i % 2];
    const E3 axis = (c[b] - c[a]).normalized(), e0 = axis.cross(E3::UnitZ()).normalized(), e1 = axis.cross(e0);
    const double t = uni(rng), ang = uni(rng) * 2 * std::numbers::pi;
    const E3 p = c[a] + t * (c[b] - c[a]) + (rad[a] + t * (rad[b] - rad[a]) + 1.2 * uni(rng)) *
                                               (std::cos(ang) * e0 + std::sin(ang) * e1);
    if (SphereMeshDistance(c, std::vector<double>(rad), bones, p) < 0.01) continue;
    r.positions.insert(r.positions.end(), {float(p.x()), float(p.y()), float(p.z())});
  }
  const Prepared f(in);
  std::printf("%s\n", f.model->Summary().c_str());
  const RestSections rest(f.model->skeleton);
  size_t fans = 0, inside = 0, flagged = 0, beyond = 0, mismatched = 0;
  double identity = 0, nearest_focus = 1e30;
  for (size_t v = 0; v < f.rig->vertex_count(); ++v) {
    const baseline::PointCode& code = f.model->codes[v];
    baseline::Section<double> s;
    const auto at = rest.Base(code, &s);
    const float* p = &f.rig->positions[3 * v];
    identity = std::max(identity, DecodeResidual(code, at, p));
    if (at.piece != baseline::Piece::kCurve) continue;
    V x;
    if (!baseline::Focus(s.ends, at.psi, x)) continue;
    ++fans;
    inside += SphereMeshDistance(c, std::vector<double>(rad), bones, E3(x.x, x.y, x.z)) <= 0;
    const bool past = code.height >= baseline::Norm(x - at.b);
    nearest_focus = std::min(nearest_focus, baseline::Norm(x - at.b));
    beyond += past;
    flagged += (code.flags & baseline::kBeyondFocus) != 0;
    mismatched += past != ((code.flags & baseline::kBeyondFocus) != 0);
  }
  std::printf("140° rest fold: %zu points on fanned generatrices, %zu foci inside the sphere-mesh; %zu beyond their "
              "focus, %zu flagged; identity %.1e; nearest focus %.3f\n", fans, inside, beyond, flagged, identity, nearest_focus);
  EXPECT_GT(fans, 100u);
  EXPECT_EQ(inside, 0u);
  EXPECT_EQ(mismatched, 0u);
  EXPECT_LE(identity, 1e-6);
  auto d = f.Make();
  SphereFrame spheres;
  for (const E3& x : c) spheres.centers.insert(spheres.centers.end(), {float(x.x()), float(x.y()), float(x.z())});
  FrameInput frame;
  frame.spheres = &spheres;
  std::vector<float> out(f.rig->positions.size());
  ASSERT_TRUE(d->Deform(frame, out, nullptr).ok());
  EXPECT_LE(testing::MaxAbsDiff(out, f.rig->positions), 1e-5);
}

// Deterministic: two preparations give the same encoding, and a frame the same points on one
// thread and on a pool of two, to the bit.
TEST(BaselineSkinning, IsDeterministic) {
  Bar bar;
  bar.rs = {0.7, 0.55, 0.4};
  const Prepared a(bar.Make()), b(bar.Make());
  ASSERT_EQ(a.model->codes.size(), b.model->codes.size());
  EXPECT_EQ(0, std::memcmp(a.model->codes.data(), b.model->codes.data(), a.model->codes.size() * sizeof(baseline::PointCode)));
  auto d = a.Make();
  ThreadPool pool(2);
  // A 75° bend, and a 165° fold where some sections need fallbacks: each point's status byte says
  // whether its own section did (a section reused from the point before once kept the flag).
  for (const double degrees : {75.0, 165.0}) {
    const Pose pose = Bent(*a.rig, degrees, E3(0, 1, 1));
    std::vector<float> one(a.rig->positions.size()), two(one.size());
    std::vector<uint8_t> states_one, states_two;
    FrameExtras extras;
    ASSERT_TRUE(d->Deform({&pose, {}}, one, nullptr).ok());
    extras.vertex_states = &states_one;
    ASSERT_TRUE(d->Extras(extras).ok());
    ASSERT_TRUE(d->Deform({&pose, {}}, two, &pool).ok());
    extras.vertex_states = &states_two;
    ASSERT_TRUE(d->Extras(extras).ok());
    EXPECT_EQ(one, two);
    EXPECT_EQ(states_one, states_two);
    size_t fallbacks = 0;
    for (uint8_t st : states_one) fallbacks += (st & kBaselineStatusDegenerate) != 0;
    std::printf("%.0f°: %zu of %zu points with a fallback section\n", degrees, fallbacks, states_one.size());
    if (degrees > 90) {
      EXPECT_GT(fallbacks, 0u);
      EXPECT_LT(fallbacks, states_one.size() / 2);
    }
  }
}

// The frame's joint tables (joint_table.h) give what every point's own joint solve gives, to
// interpolation error: a scattered bar (every point on its own baseline, as in a scan) of 30k
// points bent and twisted at its joint, 30° to 150°, with and without tables (measured: 1.2e-7,
// float rounding; a baseline at an arc–crease switch may differ by up to 1e-5, see joint_table.h);
// and the rest pose stays exact with them.
TEST(BaselineSkinning, JointTablesEqualEveryPointsOwnSolve) {
  PointBarOptions o;
  o.xs = {0, 2, 4};
  o.radii = {0.6, 0.45, 0.55};  // unequal cones: equal ones at a joint need no solve (their pairing survives a swing)
  o.rings = 240;
  o.around = 128;
  o.scattered = true;
  const Prepared f(MakePointBar(o));
  ASSERT_TRUE(f.model);
  ASSERT_FALSE(f.model->tables.keys.empty());
  std::printf("%s\n", f.model->Summary().c_str());
  auto tabled = f.Make();
  BaselineParams exact_params;
  exact_params.exact_joints = true;
  auto exact = f.Make(exact_params);
  const size_t n = f.rig->vertex_count();
  EXPECT_LE(testing::MaxAbsDiff(Play(*tabled, RestPose(f.rig->skeleton), n), f.rig->positions), 1e-5);
  double worst = 0;
  size_t worst_point = 0;
  for (double degrees : {30.0, 60.0, 90.0, 120.0, 150.0}) {
    Pose pose = RestPose(f.rig->skeleton);
    const double a = degrees * std::numbers::pi / 180;
    pose.set_rotation(1, Eigen::Quaterniond(Eigen::AngleAxisd(a, E3(0, 0.6, 0.8))) *
                             Eigen::Quaterniond(Eigen::AngleAxisd(a / 3, E3::UnitX())));
    const auto x = Play(*tabled, pose, n), y = Play(*exact, pose, n);
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::abs(x[i] - y[i]) > worst) {
        worst = std::abs(x[i] - y[i]);
        worst_point = i / 3;
      }
    }
  }
  std::printf("tables vs exact: largest difference %.2e (point %zu, phi %.4f)\n", worst, worst_point,
              f.model->codes[worst_point].phi);
  EXPECT_LE(worst, 2e-5);
}

// Points at the awkward places (spec §5 test 12): on a bone's axis, beyond a free end's pole, on
// the joint's separator plane, on the sphere-mesh's surface (h = 0) — finite outputs, and a point
// nudged by 1e-7 moves by at most 1e-5 in a bent pose (continuity) — except on the axis inside a
// bone: there every azimuth is the point's baseline (it is r below each generatrix), the encoding
// takes azimuth 0, and a nudge picks another whose bend differs (measured: up to 0.17 at 110°; the
// method's own discontinuity, pinned here, documented).
TEST(BaselineSkinning, PointsOnTheAxisThePoleAndTheCreaseAreContinuous) {
  Bar bar;
  bar.rs = {0.7, 0.55, 0.4};
  RigInput in = bar.Make();
  const std::vector<E3> awkward = {E3(1.0, 0, 0), E3(2.0, 0, 0), E3(-0.9, 0, 0), E3(4.6, 0, 0), E3(2.0, 0.7, 0.3),
                                   E3(2.0, 0, 0.55), E3(1.0, 0.625, 0), E3(0.0, 0.7, 0)};
  const size_t first = in.rig.positions.size() / 3;
  for (const E3& p : awkward) {
    for (const E3& nudge : {E3(0, 0, 0), E3(1e-7, 1e-7, -1e-7)}) {
      const E3 q = p + nudge;
      in.rig.positions.insert(in.rig.positions.end(), {float(q.x()), float(q.y()), float(q.z())});
    }
  }
  bar.Weigh(in);
  const Prepared f(in);
  auto d = f.Make();
  for (const double degrees : {0.0, 60.0, 110.0}) {
    const Pose pose = Bent(*f.rig, degrees, E3(0, 0.3, 1));
    const auto out = Play(*d, pose, f.rig->vertex_count());
    for (size_t k = 0; k < awkward.size(); ++k) {
      const size_t v = first + 2 * k;
      for (int c = 0; c < 3; ++c) ASSERT_TRUE(std::isfinite(out[3 * v + c])) << "point " << k;
      const double moved = std::hypot(out[3 * v] - out[3 * v + 3], out[3 * v + 1] - out[3 * v + 4], out[3 * v + 2] - out[3 * v + 5]);
      if (k >= 2) {
        EXPECT_LE(moved, 1e-5) << "point " << k << " at " << degrees << "°";
      } else if (degrees == 0) {
        EXPECT_LE(moved, 1e-5) << "point " << k << " at rest";
      }
    }
  }
}

// Sphere-meshes are checked at upload, naming the bone or sphere (BuildRig).
TEST(BaselineSkinning, MalformedSphereMeshesAreRefusedNamingTheirPart) {
  auto with = [](const std::function<void(SphereMesh&)>& edit) {
    RigInput in = Bar().Make();
    edit(in.rig.sphere_mesh);
    return BuildRig(std::move(in)).status();
  };
  auto expect = [](const absl::Status& st, const std::string& needle) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(std::string(st.message()).find(needle), std::string::npos) << st;
  };
  expect(with([](SphereMesh& s) { s.radii[1] = 5; }), "rig.sphere_mesh.bones[0]");                // a sphere holds another
  expect(with([](SphereMesh& s) { s.bones[3] = 1; }), "rig.sphere_mesh.bones[1]: both ends");      // a bone from 1 to 1
  expect(with([](SphereMesh& s) { s.bones = {0, 1, 2, 1}; }), "sphere 1 already ends bone 0");     // two bones end at 1
  expect(with([](SphereMesh& s) { s.bones = {0, 1, 1, 0}; }), "the bones form a cycle");          // a cycle
  expect(with([](SphereMesh& s) { s.bones.push_back(7); s.bones.push_back(0); }), "rig.sphere_mesh.bones[2]");
  expect(with([](SphereMesh& s) { s.triangles = {0, 1, 2}; }), "rig.sphere_mesh.triangles");
  expect(with([](SphereMesh& s) { s.bone_joints = {0}; }), "rig.sphere_mesh.bone_joints");
  expect(with([](SphereMesh& s) { s.bone_frames = {1, 0, 0, 0, 1, 0}; }), "rig.sphere_mesh.bone_frames[0]");
  expect(with([](SphereMesh& s) { s.point_bones = {0, 1}; }), "rig.sphere_mesh.point_bones");
  expect(with([](SphereMesh& s) {
           s.centers.insert(s.centers.end(), {9, 9, 9});
           s.radii.push_back(1);
         }),
         "sphere 3 is in no bone");
  // A chain of a million bones is checked bone by bone (walking each to the root was 5e11 steps,
  // past this test's time limit, until 2026-12-03); its cycle is found as in a short one.
  auto chain = [](bool closed) {
    return [closed](SphereMesh& s) {
      constexpr uint32_t kSpheres = 1'000'000;
      s = SphereMesh{};
      for (uint32_t i = 0; i < kSpheres; ++i) {
        s.centers.insert(s.centers.end(), {float(i % 1000), float(i / 1000), 0});
        s.radii.push_back(0.1f);
        if (i > 0) s.bones.insert(s.bones.end(), {i - 1, i});
      }
      if (closed) s.bones.insert(s.bones.end(), {kSpheres - 1, 0});
    };
  };
  EXPECT_TRUE(with(chain(false)).ok()) << with(chain(false));
  expect(with(chain(true)), "the bones form a cycle");
  // A star of bones at one sphere: 64 are taken, 65 refused (each point near a junction compares
  // its bones pairwise).
  auto star = [](uint32_t arms) {
    return [arms](SphereMesh& s) {
      s = SphereMesh{};
      s.centers = {0, 0, 0};
      s.radii = {0.2f};
      for (uint32_t i = 1; i <= arms; ++i) {
        const double a = 2 * std::numbers::pi * i / arms;
        s.centers.insert(s.centers.end(), {float(std::cos(a)), float(std::sin(a)), 0});
        s.radii.push_back(0.1f);
        s.bones.insert(s.bones.end(), {0, i});
      }
    };
  };
  EXPECT_TRUE(with(star(kMaxBonesAtASphere)).ok()) << with(star(kMaxBonesAtASphere));
  expect(with(star(kMaxBonesAtASphere + 1)), "sphere 0 joins more than 64 bones");
  // A frame whose spheres would swallow one another is refused too, naming the bone.
  const Prepared f(Bar().Make());
  auto d = f.Make();
  SphereFrame spheres;
  spheres.centers = {0, 0, 0, 2, 0, 0, 2.1f, 0, 0};
  spheres.radii = {0.6f, 0.6f, 0.3f};
  FrameInput frame;
  frame.spheres = &spheres;
  std::vector<float> out(f.rig->positions.size());
  const auto st = d->Deform(frame, out, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("bone 1"), std::string::npos) << st;
}

}  // namespace
}  // namespace sinew
