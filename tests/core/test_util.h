// Helpers shared by the core test suites.
#pragma once

#include <cmath>
#include <span>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <Eigen/Geometry>

#include "core/procedural/limb.h"
#include "core/rig/rig.h"

namespace sinew::testing {

inline Rig BuildOrDie(RigInput in) {
  auto r = BuildRig(std::move(in));
  EXPECT_TRUE(r.ok()) << r.status();
  return std::move(*r);
}

inline Rig SmallLimb(uint32_t influences = 2, uint32_t bones = 3) {
  LimbOptions o;
  o.rings = 60;
  o.segments = 24;
  o.bones = bones;
  o.max_influences = influences;
  return BuildOrDie(MakeLimb(o));
}

// The implicit skinning suites' limb (core/procedural/limb.h).
inline LimbOptions TwoBoneLimb() { return TwoBoneLimbOptions(); }

// The swing/twist suites' cylinder (seed 001 spec §4): length 6 along x, joints at x = 0 and 3,
// and an end joint at 6 so that both bones are segments; 61 rings of `segments` vertices.
inline RigInput ElbowCylinder(float radius = 1, uint32_t segments = 32) {
  LimbOptions o;
  o.rings = 61;
  o.segments = segments;
  o.bones = 2;
  o.length = 6;
  o.radius = radius;
  o.blend = 0.1f;
  RigInput in = MakeLimb(o);
  Skeleton& sk = in.rig.skeleton;
  sk.names.push_back("end");
  sk.parents.push_back(1);
  Similarity end;
  end.translation = Eigen::Vector3d(3, 0, 0);
  sk.rest_local.push_back(end);
  return in;
}

// The area of the mesh's cross-section by the plane through `c` with unit normal `n`, counting
// only the cut within `radius` of c: each triangle the plane crosses gives a segment, oriented by
// the triangle's winding (along n × its normal), and the closed curves they form enclose
// ½ Σ ((a − c) × (b − c))·n (the divergence theorem in the plane): no loop needs assembling.
inline double SliceArea(std::span<const float> x, std::span<const uint32_t> triangles, const Eigen::Vector3d& c,
                 const Eigen::Vector3d& n, double radius) {
  auto at = [&](uint32_t v) { return Eigen::Vector3d(x[3 * v], x[3 * v + 1], x[3 * v + 2]); };
  double area = 0;
  for (size_t t = 0; t + 2 < triangles.size(); t += 3) {
    const Eigen::Vector3d p[3] = {at(triangles[t]), at(triangles[t + 1]), at(triangles[t + 2])};
    double h[3];
    for (int k = 0; k < 3; ++k) h[k] = (p[k] - c).dot(n);
    std::vector<Eigen::Vector3d> cut;
    for (int k = 0; k < 3; ++k) {
      const int l = (k + 1) % 3;
      if ((h[k] < 0) != (h[l] < 0)) cut.push_back(p[k] + (p[l] - p[k]) * (h[k] / (h[k] - h[l])));
    }
    if (cut.size() != 2) continue;
    Eigen::Vector3d a = cut[0], b = cut[1];
    if ((a - c).norm() > radius || (b - c).norm() > radius) continue;
    const Eigen::Vector3d face = (p[1] - p[0]).cross(p[2] - p[0]);
    if ((b - a).dot(n.cross(face)) < 0) std::swap(a, b);
    area += 0.5 * (a - c).cross(b - c).dot(n);
  }
  return std::abs(area);
}

inline double MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

inline void SetRotation(Pose& p, size_t j, const Eigen::Quaterniond& q) { p.set_rotation(j, q); }

inline void SetTranslation(Pose& p, size_t j, const Eigen::Vector3d& t) {
  for (int k = 0; k < 3; ++k) p.translations[3 * j + k] = float(t[k]);
}

}  // namespace sinew::testing
