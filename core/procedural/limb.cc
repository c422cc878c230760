#include "core/procedural/limb.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace sinew {

RigInput MakeLimb(const LimbOptions& o) {
  RigInput in;
  Rig& rig = in.rig;
  rig.name = absl::StrCat("limb-", o.rings * o.segments, "v-", o.bones, "b");
  const uint32_t bones = std::max<uint32_t>(o.bones, 1);
  const uint32_t rings = std::max<uint32_t>(o.rings, 2), segs = std::max<uint32_t>(o.segments, 3);
  const double bone_len = o.length / bones;

  rig.positions.reserve(size_t{3} * rings * segs);
  rig.normals.reserve(size_t{3} * rings * segs);
  const double half = 0.5 * o.length;
  const double slope = o.end_radius > 0 && half > 0 ? (double(o.end_radius) - o.radius) / half : 0.0;  // dr/dx
  for (uint32_t r = 0; r < rings; ++r) {
    const double x = o.length * r / (rings - 1);
    const bool tapered = slope != 0 && x > half;
    const double radius = tapered ? o.radius + slope * (x - half) : o.radius;
    const double tilt = tapered ? slope : 0.0;  // the normal leans by -dr/dx along x
    const double scale = 1 / std::sqrt(1 + tilt * tilt);
    for (uint32_t s = 0; s < segs; ++s) {
      const double a = 2 * std::numbers::pi * s / segs;
      rig.positions.insert(rig.positions.end(), {float(x), float(radius * std::cos(a)), float(radius * std::sin(a))});
      rig.normals.insert(rig.normals.end(),
                         {tapered ? float(-tilt * scale) : 0.f, float(scale * std::cos(a)), float(scale * std::sin(a))});
    }
  }
  for (uint32_t r = 0; r + 1 < rings; ++r) {
    for (uint32_t s = 0; s < segs; ++s) {
      const uint32_t a = r * segs + s, b = r * segs + (s + 1) % segs;
      const uint32_t c = a + segs, d = b + segs;
      rig.triangles.insert(rig.triangles.end(), {a, b, d, a, d, c});
    }
  }

  Skeleton& sk = rig.skeleton;
  for (uint32_t j = 0; j < bones; ++j) {
    sk.names.push_back(absl::StrCat("bone", j));
    sk.parents.push_back(static_cast<int32_t>(j) - 1);
    Similarity rest;
    rest.translation = Eigen::Vector3d(j == 0 ? 0.0 : bone_len, 0, 0);
    sk.rest_local.push_back(rest);
  }

  const uint32_t k = std::clamp<uint32_t>(o.max_influences, 1, bones);
  const double sigma = std::max(1e-6, double(o.blend) * bone_len);
  std::vector<std::pair<double, uint32_t>> cand(bones);
  in.weights.offsets.push_back(0);
  for (uint32_t r = 0; r < rings; ++r) {
    const double x = o.length * r / (rings - 1);
    for (uint32_t j = 0; j < bones; ++j) {
      const double lo = j * bone_len, hi = (j + 1 == bones) ? 1e30 : (j + 1) * bone_len;
      const double lo2 = j == 0 ? -1e30 : lo;
      const double d = x < lo2 ? lo2 - x : (x > hi ? x - hi : 0.0);
      cand[j] = {std::exp(-(d / sigma) * (d / sigma)), j};
    }
    std::partial_sort(cand.begin(), cand.begin() + k, cand.end(),
                      [](auto& a, auto& b) { return a.first > b.first; });
    double sum = 0;
    for (uint32_t i = 0; i < k; ++i) sum += cand[i].first;
    for (uint32_t s = 0; s < segs; ++s) {
      for (uint32_t i = 0; i < k; ++i) {
        in.weights.joints.push_back(cand[i].second);
        in.weights.weights.push_back(float(cand[i].first / sum));
      }
      in.weights.offsets.push_back(static_cast<uint32_t>(in.weights.joints.size()));
    }
  }
  in.weights.normalize = true;  // float rounding of the quotients above
  return in;
}

Pose LimbPose(const Skeleton& skeleton, double t, const LimbMotion& motion) {
  Pose pose = RestPose(skeleton);
  const size_t n = skeleton.size();
  const double ramp = std::pow(std::sin(std::numbers::pi * t), 2);
  const double deg = std::numbers::pi / 180;
  if (n >= 2) {
    const size_t elbow = std::max<size_t>(1, n / 2);
    const size_t wrist = n - 1;
    const Eigen::Quaterniond bend(Eigen::AngleAxisd(ramp * motion.bend_degrees * deg, Eigen::Vector3d::UnitZ()));
    const Eigen::Quaterniond twist(Eigen::AngleAxisd(ramp * motion.twist_degrees * deg, Eigen::Vector3d::UnitX()));
    if (elbow == wrist) {
      pose.set_rotation(elbow, bend * twist);
    } else {
      pose.set_rotation(elbow, bend);
      pose.set_rotation(wrist, twist);
    }
  }
  return pose;
}

}  // namespace sinew

namespace sinew {
double LimbRingRadius(const LimbOptions& o, std::span<const float> positions, double x) {
  const uint32_t rings = std::max<uint32_t>(o.rings, 2), segs = std::max<uint32_t>(o.segments, 3);
  const double u = std::clamp(x / o.length, 0.0, 1.0);
  const size_t ring = static_cast<size_t>(std::lround(u * (rings - 1)));
  Eigen::Vector3d c = Eigen::Vector3d::Zero();
  for (uint32_t s = 0; s < segs; ++s) {
    const float* p = &positions[3 * (ring * segs + s)];
    c += Eigen::Vector3d(p[0], p[1], p[2]);
  }
  c /= segs;
  double r = 0;
  for (uint32_t s = 0; s < segs; ++s) {
    const float* p = &positions[3 * (ring * segs + s)];
    r += (Eigen::Vector3d(p[0], p[1], p[2]) - c).norm();
  }
  return r / segs;
}
}  // namespace sinew

namespace sinew {
Cage MakeLimbCage(const LimbOptions& o, uint32_t segments) {
  Cage cage;
  cage.name = "limb-cage";
  segments = std::max<uint32_t>(segments, 1);
  const double h = 2.0 * o.radius, margin = 0.1 * o.length;
  // Ring k, corner q (counter-clockwise seen from +x): (y, z) = (±h, ±h).
  const double corners[4][2] = {{-h, -h}, {h, -h}, {h, h}, {-h, h}};
  for (uint32_t k = 0; k <= segments; ++k) {
    const double x = -margin + (o.length + 2 * margin) * k / segments;
    for (const auto& q : corners) cage.positions.insert(cage.positions.end(), {float(x), float(q[0]), float(q[1])});
  }
  auto id = [](uint32_t k, uint32_t q) { return 4 * k + q % 4; };
  for (uint32_t k = 0; k < segments; ++k) {
    for (uint32_t q = 0; q < 4; ++q) {
      const uint32_t a = id(k, q), b = id(k, q + 1), c = id(k + 1, q + 1), d = id(k + 1, q);
      cage.triangles.insert(cage.triangles.end(), {a, b, c, a, c, d});
    }
  }
  // Caps: the x = min end faces -x, the x = max end faces +x.
  cage.triangles.insert(cage.triangles.end(), {id(0, 0), id(0, 2), id(0, 1), id(0, 0), id(0, 3), id(0, 2)});
  const uint32_t s = segments;
  cage.triangles.insert(cage.triangles.end(), {id(s, 0), id(s, 1), id(s, 2), id(s, 0), id(s, 2), id(s, 3)});
  return cage;
}
}  // namespace sinew
