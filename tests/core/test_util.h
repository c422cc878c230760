// Helpers shared by the core test suites.
#pragma once

#include <cmath>
#include <span>
#include <vector>

#include <gtest/gtest.h>

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

// The implicit skinning suites' limb: two bones, blended narrowly enough that LBS and DQS
// interpenetrate at 130°.
inline LimbOptions TwoBoneLimb() {
  LimbOptions o;
  o.rings = 90;
  o.segments = 32;
  o.bones = 2;
  o.length = 3;
  o.radius = 0.25f;
  o.max_influences = 2;
  o.blend = 0.12f;
  return o;
}

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
