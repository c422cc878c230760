// Issue 15's rounding perturbation, shared by the sensitivity tests and
// bench/implicit_stability.cc (which does not link the tests, hence no gtest here).
#pragma once

#include <cstddef>

#include <Eigen/Geometry>

#include "core/rig/pose.h"

namespace sinew::testing {

// The pose with every joint turned by `radians` more about `axis` (a client whose poses went
// through other arithmetic sends them turned by about 1e-6 rad).
inline Pose TurnedPose(const Pose& pose, double radians, const Eigen::Vector3d& axis) {
  Pose p = pose;
  const Eigen::Quaterniond turn(Eigen::AngleAxisd(radians, axis.normalized()));
  for (size_t j = 0; j < p.joint_count(); ++j) {
    Similarity s = p.joint(j);
    s.rotation = (s.rotation * turn).normalized();
    p.set_joint(j, s);
  }
  return p;
}
// The four axes the sensitivity tests and the bench turn about.
inline const Eigen::Vector3d kTurnAxes[] = {{1, 2, 3}, {-1, -2, -3}, {3, -1, 2}, {-3, 1, -2}};

}  // namespace sinew::testing
