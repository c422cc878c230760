#include "core/procedural/point_bar.h"

#include <cmath>
#include <numbers>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"

namespace sinew {

RigInput MakePointBar(const PointBarOptions& o) {
  RigInput in;
  Rig& r = in.rig;
  r.name = "point-bar";
  const double x0 = o.xs.front(), x1 = o.xs.back();
  auto radius = [&](double x, double a) {
    return o.tube * (o.ridges ? 1 + 0.04 * std::sin(6 * a) + 0.03 * std::cos(3 * x) : 1.0);
  };
  std::mt19937_64 rng(2021);
  std::uniform_real_distribution<double> jitter(-0.5, 0.5);
  for (uint32_t i = 0; i <= o.rings; ++i) {
    for (uint32_t k = 0; k < o.around; ++k) {
      double x = x0 + (x1 - x0) * i / o.rings;
      double a = 2 * std::numbers::pi * k / o.around;
      if (o.scattered) {
        a += 2 * std::numbers::pi * jitter(rng) / o.around;
        if (i > 0 && i < o.rings) x += (x1 - x0) * jitter(rng) / o.rings;
      }
      r.positions.insert(r.positions.end(), {float(x), float(radius(x, a) * std::cos(a)), float(radius(x, a) * std::sin(a))});
    }
  }
  for (int end = 0; end < 2; ++end) {  // hemispherical caps, 6 latitude rings each
    const double xc = end == 0 ? x0 : x1, dir = end == 0 ? -1 : 1;
    for (int i = 1; i <= 6; ++i) {
      const double polar = (std::numbers::pi / 2) * i / 6;
      const uint32_t count = i == 6 ? 1 : o.around;
      for (uint32_t k = 0; k < count; ++k) {
        const double a = 2 * std::numbers::pi * k / o.around;
        const double rr = radius(xc, a);
        r.positions.insert(r.positions.end(), {float(xc + dir * rr * std::sin(polar)), float(rr * std::cos(polar) * std::cos(a)),
                                               float(rr * std::cos(polar) * std::sin(a))});
      }
    }
  }
  SphereMesh& sm = r.sphere_mesh;
  for (size_t i = 0; i < o.xs.size(); ++i) {
    sm.centers.insert(sm.centers.end(), {float(o.xs[i]), 0.f, 0.f});
    sm.radii.push_back(float(o.radii[i]));
  }
  Skeleton& sk = r.skeleton;
  for (size_t j = 0; j + 1 < o.xs.size(); ++j) {
    sm.bones.insert(sm.bones.end(), {uint32_t(j), uint32_t(j + 1)});
    sm.bone_joints.push_back(uint32_t(j));
    sk.names.push_back(absl::StrCat("j", j));  // (not "j" + std::to_string: a GCC 12 false -Wstringop-overflow)
    sk.parents.push_back(int32_t(j) - 1);
    Similarity rest;
    rest.translation = Eigen::Vector3d(j == 0 ? o.xs[0] : o.xs[j] - o.xs[j - 1], 0, 0);
    sk.rest_local.push_back(rest);
  }
  PointBarWeights(o, in);
  return in;
}

void PointBarWeights(const PointBarOptions& o, RigInput& in) {
  const Rig& r = in.rig;
  const size_t n = r.positions.size() / 3, bones = o.xs.size() - 1;
  in.weights = {};
  in.weights.offsets.push_back(0);
  std::vector<double> w(bones);
  for (size_t v = 0; v < n; ++v) {
    const double x = r.positions[3 * v];
    double sum = 0;
    for (size_t b = 0; b < bones; ++b) {
      const double along = x < o.xs[b] ? o.xs[b] - x : (x > o.xs[b + 1] ? x - o.xs[b + 1] : 0.0);
      w[b] = std::exp(-std::pow(along / o.weight_width, 2));
      sum += w[b];
    }
    for (size_t b = 0; b < bones; ++b) {
      in.weights.joints.push_back(uint32_t(b));
      in.weights.weights.push_back(float(w[b] / sum));
    }
    in.weights.offsets.push_back(uint32_t(in.weights.joints.size()));
  }
  in.weights.normalize = true;
}

}  // namespace sinew
