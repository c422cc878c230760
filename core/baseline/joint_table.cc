#include "core/baseline/joint_table.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <tuple>

namespace sinew::baseline {
namespace {

constexpr uint32_t kMinSamples = 256, kMaxSamples = 4096, kPointsPerSample = 32;
constexpr double kMaxStep = 0.2, kMaxCurl = 0.02;  // radians: neighbouring samples, second differences
constexpr uint8_t kSampleDegenerate = 1, kIntervalUsable = 2;

// The sample index and fraction of azimuth φ on a table of n samples over [0, 2π).
void Locate(double phi, uint32_t n, uint32_t& i, double& t) {
  double x = phi / (2 * kPi);
  x -= std::floor(x);
  x *= n;
  i = std::min(uint32_t(x), n - 1);
  t = x - i;
}

}  // namespace

size_t JointTables::Bytes() const {
  return keys.capacity() * sizeof(JointKey) + offset.capacity() * sizeof(uint32_t) +
         rest_other.capacity() * sizeof(double) + of_code.capacity() * sizeof(of_code[0]);
}

JointTables PlanJointTables(std::span<const PointCode> codes, std::span<const End<double>> rest_ends,
                            uint32_t min_points) {
  JointTables out;
  std::map<std::tuple<uint32_t, int, uint32_t, int>, uint32_t> counts;
  for (const PointCode& c : codes) {
    for (int side = 0; side < 2; ++side) {
      if (c.other[side] != kFree) ++counts[{c.bone, side, c.other[side], c.other_side[side]}];
    }
  }
  std::map<std::tuple<uint32_t, int, uint32_t, int>, uint32_t> index;
  out.offset.push_back(0);
  for (const auto& [key, count] : counts) {
    if (count < min_points) continue;
    const auto [bone, side, other, other_side] = key;
    index[key] = uint32_t(out.keys.size());
    out.keys.push_back({bone, other, uint8_t(side), uint8_t(other_side)});
    const uint32_t n = std::clamp(std::bit_ceil(count / kPointsPerSample), kMinSamples, kMaxSamples);
    const End<double>& self = rest_ends[2 * size_t(bone) + side];
    const End<double>& nb = rest_ends[2 * size_t(other) + other_side];
    for (uint32_t i = 0; i < n; ++i) {
      const double phi = 2 * kPi * i / n;
      out.rest_other.push_back(Pair(self, phi, nb, SheafPlane(self, phi, nb)).psi);
    }
    out.offset.push_back(uint32_t(out.rest_other.size()));
  }
  out.of_code.assign(codes.size(), {kNoTable, kNoTable});
  for (size_t p = 0; p < codes.size(); ++p) {
    const PointCode& c = codes[p];
    for (int side = 0; side < 2; ++side) {
      if (c.other[side] == kFree) continue;
      const auto it = index.find({c.bone, side, c.other[side], c.other_side[side]});
      if (it != index.end()) out.of_code[p][side] = it->second;
    }
  }
  return out;
}

void BuildJointFrame(const JointTables& tables, std::span<const End<double>> ends, std::span<const double> twist,
                     ThreadPool* pool, JointFrame& frame) {
  const size_t samples = tables.rest_other.size();
  frame.d1.resize(samples);
  frame.d2.resize(samples);
  frame.flags.resize(samples);
  ParallelFor(pool, tables.keys.size(), 1, [&](size_t k0, size_t k1) {
    for (size_t k = k0; k < k1; ++k) {
      const JointKey& key = tables.keys[k];
      const uint32_t begin = tables.offset[k], n = tables.offset[k + 1] - begin;
      EndView<double> v;
      v.self = ends[2 * size_t(key.bone) + key.side];
      v.joint = true;
      v.other = ends[2 * size_t(key.other) + key.other_side];
      v.first = key.bone < key.other;
      for (uint32_t i = 0; i < n; ++i) {
        v.psi = 2 * kPi * i / n + (key.side == 1 ? twist[key.bone] : 0.0);
        v.psi_other = tables.rest_other[begin + i] + (key.other_side == 1 ? twist[key.other] : 0.0);
        const JointSolve<double> j = SolveEnd(v);
        frame.d1[begin + i] = WrapAngle(j.psi1 - v.psi);
        frame.d2[begin + i] = WrapAngle(j.psi2 - v.psi_other);
        frame.flags[begin + i] = j.degenerate ? kSampleDegenerate : 0;
      }
      // Usable intervals: a smooth stencil i − 1 .. i + 2.
      for (uint32_t i = 0; i < n; ++i) {
        bool ok = true;
        for (int j = -1; j <= 2 && ok; ++j) ok = !(frame.flags[begin + (i + n + j) % n] & kSampleDegenerate);
        for (const std::vector<double>* d : {&frame.d1, &frame.d2}) {
          if (!ok) break;
          double u[4];
          const double base = (*d)[begin + i];
          for (int j = -1; j <= 2; ++j) u[j + 1] = base + WrapAngle((*d)[begin + (i + n + j) % n] - base);
          for (int j = 0; j < 3 && ok; ++j) ok = std::fabs(u[j + 1] - u[j]) <= kMaxStep;
          ok = ok && std::fabs(u[2] - 2 * u[1] + u[0]) <= kMaxCurl && std::fabs(u[3] - 2 * u[2] + u[1]) <= kMaxCurl;
        }
        if (ok) frame.flags[begin + i] |= kIntervalUsable;
      }
    }
  });
}

void LookUpJoint(const JointTables& tables, const JointFrame& frame, uint32_t key, double phi, EndView<double>& v) {
  const uint32_t begin = tables.offset[key], n = tables.offset[key + 1] - begin;
  uint32_t i;
  double t;
  Locate(phi, n, i, t);
  if (!(frame.flags[begin + i] & kIntervalUsable)) return;
  // Cubic Lagrange interpolation through samples i − 1 .. i + 2 (at t = −1, 0, 1, 2).
  // The weights sum to 1, so relative to sample i its own weight drops out.
  const double w0 = -t * (t - 1) * (t - 2) / 6, w2 = -(t + 1) * t * (t - 2) / 2, w3 = (t + 1) * t * (t - 1) / 6;
  auto at = [&](const std::vector<double>& d) {
    const double base = d[begin + i];
    const double p0 = WrapAngle(d[begin + (i + n - 1) % n] - base), p2 = WrapAngle(d[begin + (i + 1) % n] - base);
    const double p3 = WrapAngle(d[begin + (i + 2) % n] - base);
    return base + w0 * p0 + w2 * p2 + w3 * p3;  // p1 = 0 relative to base
  };
  v.solved.psi1 = v.psi + at(frame.d1);
  v.solved.psi2 = v.psi_other + at(frame.d2);
  v.solved.plane = SheafPlane(v.self, v.solved.psi1, v.other);
  v.solved.degenerate = false;
  v.given = true;
}

}  // namespace sinew::baseline
