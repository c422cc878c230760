#include "clients/import/point_set.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/rig/rig.h"

namespace sinew {
namespace {

using V = Eigen::Vector3d;

V At(const std::vector<float>& xyz, size_t i) { return V(xyz[3 * i], xyz[3 * i + 1], xyz[3 * i + 2]); }

// Distance from x to segment [a, b] and the parameter of its foot in [0, 1].
double SegmentDistance(const V& a, const V& b, const V& x, double* t_out) {
  const V ab = b - a;
  const double t = std::clamp((x - a).dot(ab) / std::max(ab.squaredNorm(), 1e-300), 0.0, 1.0);
  if (t_out) *t_out = t;
  return (a + t * ab - x).norm();
}

// The q-quantile (0..1) of `values` (reordered).
double Quantile(std::vector<double>& values, double q) {
  if (values.empty()) return 0;
  const size_t k = std::min(values.size() - 1, size_t(q * double(values.size())));
  std::nth_element(values.begin(), values.begin() + long(k), values.end());
  return values[k];
}

}  // namespace

absl::StatusOr<RigInput> PointSetFromCharacter(const RigInput& character, const PointSetOptions& o,
                                               PointSetReport* report) {
  if (character.rig.triangles.empty()) return absl::InvalidArgumentError("character: no triangles to sample points from");
  if (character.rig.skeleton.size() < 2) return absl::InvalidArgumentError("character: needs a skeleton of 2 joints or more");
  if (o.points == 0) return absl::InvalidArgumentError("points: must be at least 1");
  auto built = BuildRig(character);
  if (!built.ok()) return built.status();
  const Rig& rig = *built;
  if (rig.weights.offsets.empty()) return absl::InvalidArgumentError("character: has no skin weights");
  PointSetReport local;
  PointSetReport& rep = report != nullptr ? *report : local;
  rep = {};
  const size_t nv = rig.vertex_count(), nt = rig.triangle_count(), nj = rig.joint_count();
  const double diag = rig.bbox_diagonal();

  // Area-weighted vertex normals and the triangles' cumulative areas.
  std::vector<V> vn(nv, V::Zero());
  std::vector<double> cumulative(nt);
  double total = 0;
  for (size_t t = 0; t < nt; ++t) {
    const uint32_t* f = &rig.triangles[3 * t];
    const V a = At(rig.positions, f[0]), b = At(rig.positions, f[1]), c = At(rig.positions, f[2]);
    const V n = (b - a).cross(c - a);  // twice the area
    for (int k = 0; k < 3; ++k) vn[f[k]] += n;
    total += 0.5 * n.norm();
    cumulative[t] = total;
  }
  if (!(total > 0)) return absl::InvalidArgumentError("character: its triangles have no area");

  // Samples: positions, normals, dominant joints.
  RigInput out;
  Rig& pr = out.rig;
  pr.name = absl::StrCat(rig.name.empty() ? "character" : rig.name, " points");
  pr.skeleton = rig.skeleton;
  pr.positions.resize(3 * o.points);
  pr.normals.resize(3 * o.points);
  std::vector<int32_t> dominant(o.points, -1);
  rep.triangle.resize(o.points);
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<float> blend(nj, 0.f);
  for (size_t s = 0; s < o.points; ++s) {
    const double pick = uniform(rng) * total;
    const size_t t = std::min(nt - 1, size_t(std::upper_bound(cumulative.begin(), cumulative.end(), pick) - cumulative.begin()));
    const double r1 = std::sqrt(uniform(rng)), r2 = uniform(rng);
    const double w[3] = {1 - r1, r1 * (1 - r2), r1 * r2};
    const uint32_t* f = &rig.triangles[3 * t];
    rep.triangle[s] = uint32_t(t);
    V x = V::Zero(), n = V::Zero();
    for (int k = 0; k < 3; ++k) {
      x += w[k] * At(rig.positions, f[k]);
      n += w[k] * vn[f[k]].normalized();
    }
    if (!(n.norm() > 0)) n = (At(rig.positions, f[1]) - At(rig.positions, f[0])).cross(At(rig.positions, f[2]) - At(rig.positions, f[0]));
    n.normalize();
    for (int c = 0; c < 3; ++c) {
      pr.positions[3 * s + c] = float(x[c]);
      pr.normals[3 * s + c] = float(n[c]);
    }
    float best = 0;
    for (int k = 0; k < 3; ++k) {
      for (uint32_t i = rig.weights.offsets[f[k]]; i < rig.weights.offsets[f[k] + 1]; ++i) {
        const uint16_t j = rig.weights.joints[i];
        blend[j] += float(w[k]) * rig.weights.weights[i];
        if (blend[j] > best) {
          best = blend[j];
          dominant[s] = j;
        }
      }
    }
    for (int k = 0; k < 3; ++k) {
      for (uint32_t i = rig.weights.offsets[f[k]]; i < rig.weights.offsets[f[k] + 1]; ++i) blend[rig.weights.joints[i]] = 0;
    }
  }

  // Joint positions at bind (the inverse binds' origins) and the body joints.
  const Skeleton& sk = rig.skeleton;
  std::vector<V> jp(nj);
  for (size_t j = 0; j < nj; ++j) {
    const Affine34d& m = sk.inverse_bind[j];
    jp[j] = -(m.leftCols<3>().inverse() * m.col(3));
  }
  std::vector<size_t> share(nj, 0);
  for (int32_t d : dominant) {
    if (d >= 0) ++share[d];
  }
  // body[j]: the body joint that stands for j (itself, a merged ancestor, or its nearest body
  // ancestor when j has too few samples); -1 above every body joint.
  // A provisional thickness per joint (as the radii below, from its own samples only) decides
  // merges: a joint closer to its body parent than 3/4 of their thickness would make a bone
  // whose spheres nearly hold each other (a clavicle inside the chest).
  std::vector<std::vector<double>> own(nj);
  for (size_t s = 0; s < o.points; ++s) {
    if (dominant[s] >= 0) own[dominant[s]].push_back((At(pr.positions, s) - jp[dominant[s]]).norm());
  }
  std::vector<double> thick(nj, 0);
  for (size_t j = 0; j < nj; ++j) thick[j] = o.radius_scale * Quantile(own[j], 0.1);
  std::vector<int32_t> body(nj, -1);
  std::vector<bool> is_body(nj, false);
  for (int32_t j : sk.order) {
    const int32_t up = sk.parents[j] >= 0 ? body[sk.parents[j]] : -1;
    const bool enough = double(share[j]) >= o.min_share * double(o.points);
    if (enough && up >= 0 &&
        (jp[j] - jp[up]).norm() <= std::max(o.merge_distance * diag, 0.75 * std::max(thick[j], thick[up]))) {
      body[j] = up;
      ++rep.merged;
      rep.notes.push_back(absl::StrCat("joint ", sk.names[j], " merged into ", sk.names[up], " (",
                                       absl::StrFormat("%.3g", (jp[j] - jp[up]).norm()), " apart)"));
    } else if (enough) {
      body[j] = j;
      is_body[j] = true;
    } else {
      body[j] = up;
    }
  }
  std::vector<int32_t> sphere_of(nj, -1), up_body(nj, -1);
  std::vector<int32_t> bodies;
  for (int32_t j : sk.order) {
    if (!is_body[j]) continue;
    up_body[j] = sk.parents[j] >= 0 ? body[sk.parents[j]] : -1;
    sphere_of[j] = int32_t(bodies.size());
    bodies.push_back(j);
  }
  if (bodies.size() < 2) {
    return absl::FailedPreconditionError(absl::StrCat("character: only ", bodies.size(),
                                                      " joint(s) dominate enough points for a sphere-mesh"));
  }
  // Samples whose dominant joint has no body joint above it follow the nearest body joint.
  std::vector<int32_t> owner(o.points);
  for (size_t s = 0; s < o.points; ++s) {
    int32_t b = dominant[s] >= 0 ? body[dominant[s]] : -1;
    if (b < 0) {
      double best = 1e300;
      for (int32_t j : bodies) {
        const double d = (At(pr.positions, s) - jp[j]).norm();
        if (d < best) {
          best = d;
          b = j;
        }
      }
    }
    owner[s] = b;
  }
  std::vector<std::vector<int32_t>> children(nj);
  for (int32_t j : bodies) {
    if (up_body[j] >= 0) children[up_body[j]].push_back(j);
  }
  // Body joints with no body joint above them (a spine's front and back halves under one root
  // that weighs no points): each further tree hangs from the nearest sphere of those already
  // joined, by a bone its joint's skeleton parent carries (it moves that joint).
  {
    std::vector<int32_t> roots;
    for (int32_t j : bodies) {
      if (up_body[j] < 0) roots.push_back(j);
    }
    std::stable_sort(roots.begin(), roots.end(), [&](int32_t a, int32_t b) { return share[a] > share[b]; });
    std::vector<bool> joined(nj, false);
    auto join = [&](auto&& self, int32_t j) -> void {
      joined[j] = true;
      for (int32_t c : children[j]) self(self, c);
    };
    join(join, roots[0]);
    for (size_t i = 1; i < roots.size(); ++i) {
      const int32_t r = roots[i];
      int32_t best = -1;
      for (int32_t j : bodies) {
        if (joined[j] && (best < 0 || (jp[j] - jp[r]).norm() < (jp[best] - jp[r]).norm())) best = j;
      }
      up_body[r] = best;
      children[best].push_back(r);
      rep.notes.push_back(absl::StrCat("joint ", sk.names[r], " (a second root) hangs from ", sk.names[best]));
      join(join, r);
    }
  }
  std::vector<std::vector<size_t>> owned(nj);
  for (size_t s = 0; s < o.points; ++s) owned[owner[s]].push_back(s);

  // Spheres: body joints, then tips.
  std::vector<V> centre;
  std::vector<double> radius;
  for (int32_t j : bodies) {
    centre.push_back(jp[j]);
    std::vector<double> d;
    auto add = [&](int32_t k) {
      for (size_t s : owned[k]) d.push_back((At(pr.positions, s) - jp[j]).norm());
    };
    add(j);
    if (up_body[j] >= 0) add(up_body[j]);
    for (int32_t c : children[j]) add(c);
    radius.push_back(std::max(o.radius_scale * Quantile(d, 0.1), 0.01 * diag));
  }
  std::vector<std::array<uint32_t, 2>> bones;
  std::vector<uint32_t> carrier;
  // A bone to body joint c turns with c's skeleton parent, which carries c's position (a merged
  // clavicle still turns the upper arm's bone).
  for (int32_t j : bodies) {
    for (int32_t c : children[j]) {
      bones.push_back({uint32_t(sphere_of[j]), uint32_t(sphere_of[c])});
      carrier.push_back(uint32_t(sk.parents[c] >= 0 ? sk.parents[c] : c));
    }
  }
  for (int32_t j : bodies) {
    if (!children[j].empty() || owned[j].empty()) continue;
    // A tip along the direction from the parent's sphere (a root: the samples' spread).
    V dir = up_body[j] >= 0 ? V(jp[j] - jp[up_body[j]]) : V::Zero();
    if (!(dir.norm() > 0)) {
      V mean = V::Zero();
      for (size_t s : owned[j]) mean += At(pr.positions, s);
      dir = mean / double(owned[j].size()) - jp[j];
    }
    if (!(dir.norm() > 1e-9 * diag)) continue;
    dir.normalize();
    std::vector<double> along;
    for (size_t s : owned[j]) along.push_back((At(pr.positions, s) - jp[j]).dot(dir));
    const double extent = Quantile(along, 0.95);
    const double r_tip = std::max(0.6 * radius[sphere_of[j]], 0.01 * diag);
    const double length = extent - r_tip;
    if (!(length > 2 * o.merge_distance * diag)) {
      rep.notes.push_back(absl::StrCat("joint ", sk.names[j], ": its points reach too little beyond it for a tip bone"));
      continue;
    }
    centre.push_back(jp[j] + length * dir);
    radius.push_back(r_tip);
    bones.push_back({uint32_t(sphere_of[j]), uint32_t(centre.size() - 1)});
    carrier.push_back(uint32_t(j));
    ++rep.tips;
  }
  // Every bone keeps its cone: clamp the far sphere's radius, parents first (bones were made
  // from body joints in parents-first order, tips last).
  for (size_t k = 0; k < bones.size(); ++k) {
    const auto [a, b] = bones[k];
    const double length = (centre[b] - centre[a]).norm();
    const double lo = radius[a] - 0.9 * length, hi = radius[a] + 0.9 * length;
    if (radius[b] < lo || radius[b] > hi) {
      radius[b] = std::clamp(radius[b], std::max(lo, 1e-3 * diag), hi);
      rep.notes.push_back(absl::StrCat("sphere ", b, ": radius clamped to ", absl::StrFormat("%.3g", radius[b]),
                                       " to keep bone ", k, "'s cone"));
    }
  }
  SphereMesh& sm = pr.sphere_mesh;
  for (size_t i = 0; i < centre.size(); ++i) {
    for (int c = 0; c < 3; ++c) sm.centers.push_back(float(centre[i][c]));
    sm.radii.push_back(float(radius[i]));
  }
  for (size_t k = 0; k < bones.size(); ++k) {
    sm.bones.insert(sm.bones.end(), {bones[k][0], bones[k][1]});
    sm.bone_joints.push_back(carrier[k]);
  }
  std::vector<uint32_t> at_sphere(centre.size(), 0);
  for (const auto& b : bones) {
    ++at_sphere[b[0]];
    ++at_sphere[b[1]];
  }
  for (uint32_t count : at_sphere) rep.junctions += count > 2;
  rep.spheres = centre.size();
  rep.bones = bones.size();

  // The bones each sample follows, and the Gaussian weights.
  std::vector<double> mean_radius(bones.size()), distance(bones.size());
  for (size_t k = 0; k < bones.size(); ++k) mean_radius[k] = 0.5 * (radius[bones[k][0]] + radius[bones[k][1]]);
  sm.point_bones.resize(o.points);
  WeightsInput& wi = out.weights;
  wi.offsets.push_back(0);
  wi.normalize = true;
  std::vector<std::pair<double, uint32_t>> ranked(bones.size());
  for (size_t s = 0; s < o.points; ++s) {
    const V x = At(pr.positions, s);
    double best = 1e300, nearest = 1e300;
    uint32_t follow = 0, closest = 0;
    for (size_t k = 0; k < bones.size(); ++k) {
      double t;
      const V& a = centre[bones[k][0]];
      const V& b = centre[bones[k][1]];
      const double axis = SegmentDistance(a, b, x, &t);
      const double d = axis - ((1 - t) * radius[bones[k][0]] + t * radius[bones[k][1]]);
      distance[k] = axis;
      if (int32_t(bones[k][0]) == sphere_of[owner[s]] && d < best) {
        best = d;
        follow = uint32_t(k);
      }
      if (d < nearest) {
        nearest = d;
        closest = uint32_t(k);
      }
      ranked[k] = {std::exp(-std::pow(distance[k] / (o.weight_width * mean_radius[k]), 2)), uint32_t(k)};
    }
    if (best == 1e300) follow = closest;  // its joint carries no bone (a tip too short): the nearest
    sm.point_bones[s] = follow;
    std::partial_sort(ranked.begin(), ranked.begin() + long(std::min<size_t>(4, ranked.size())), ranked.end(),
                      [](const auto& p, const auto& q) { return p.first > q.first; });
    std::vector<std::pair<uint32_t, double>> per_joint;
    for (size_t i = 0; i < std::min<size_t>(4, ranked.size()); ++i) {
      if (!(ranked[i].first > 1e-12)) continue;
      const uint32_t j = carrier[ranked[i].second];
      auto it = std::find_if(per_joint.begin(), per_joint.end(), [&](const auto& p) { return p.first == j; });
      if (it == per_joint.end()) per_joint.push_back({j, ranked[i].first}); else it->second += ranked[i].first;
    }
    if (per_joint.empty()) per_joint.push_back({carrier[follow], 1.0});
    for (const auto& [j, w] : per_joint) {
      wi.joints.push_back(j);
      wi.weights.push_back(float(w));
    }
    wi.offsets.push_back(uint32_t(wi.joints.size()));
  }
  return out;
}

}  // namespace sinew
