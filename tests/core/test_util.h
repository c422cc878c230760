// Helpers shared by the core test suites.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iterator>
#include <numbers>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <Eigen/Geometry>

#include "core/deformer/deformer.h"
#include "core/procedural/limb.h"
#include "core/rig/pose.h"
#include "core/rig/rig.h"
#include "tests/core/turned_pose.h"

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

// A limb of `rings` × `segments` vertices with a 4-sided cage around it (MakeLimbCage).
inline RigInput LimbWithCage(uint32_t rings = 10, uint32_t segments = 8) {
  LimbOptions o;
  o.rings = rings;
  o.segments = segments;
  RigInput in = MakeLimb(o);
  in.rig.cages.push_back(MakeLimbCage(o, 4));
  return in;
}

// `method` with its parameter struct P at its defaults but for what `set` changes.
template <class P, class Set>
DeformerConfig ConfigWith(const char* method, Set&& set) {
  auto p = std::make_shared<P>();
  set(*p);
  return DeformerConfig(method, std::move(p));
}

// A closed, outward lat-long sphere (a cage): 2 + (stacks − 1)·slices vertices,
// 2·slices·(stacks − 1) faces.
inline Cage LatLongSphere(int stacks, int slices, double radius = 1,
                          const Eigen::Vector3d& centre = Eigen::Vector3d::Zero()) {
  Cage c;
  auto add = [&](double x, double y, double z) {
    const Eigen::Vector3d p = centre + radius * Eigen::Vector3d(x, y, z);
    for (int k = 0; k < 3; ++k) c.positions.push_back(float(p[k]));
  };
  add(0, 0, 1);  // north pole 0
  for (int i = 1; i < stacks; ++i) {
    const double th = std::numbers::pi * i / stacks;
    for (int j = 0; j < slices; ++j) {
      const double ph = 2 * std::numbers::pi * j / slices;
      add(std::sin(th) * std::cos(ph), std::sin(th) * std::sin(ph), std::cos(th));
    }
  }
  add(0, 0, -1);  // south pole
  const uint32_t south = uint32_t(c.positions.size() / 3 - 1);
  auto ring = [&](int i, int j) { return uint32_t(1 + (i - 1) * slices + (j % slices)); };
  for (int j = 0; j < slices; ++j) {
    for (uint32_t v : {0u, ring(1, j), ring(1, j + 1)}) c.triangles.push_back(v);
    for (uint32_t v : {south, ring(stacks - 1, j + 1), ring(stacks - 1, j)}) c.triangles.push_back(v);
    for (int i = 1; i + 1 < stacks; ++i) {
      for (uint32_t v : {ring(i, j), ring(i + 1, j), ring(i + 1, j + 1)}) c.triangles.push_back(v);
      for (uint32_t v : {ring(i, j), ring(i + 1, j + 1), ring(i, j + 1)}) c.triangles.push_back(v);
    }
  }
  return c;
}

// The implicit skinning suites' limb (core/procedural/limb.h).
inline LimbOptions TwoBoneLimb() { return TwoBoneLimbOptions(); }

// Two copies of the limb in one rig, the second `offset` along z with its own two joints: two
// connected components of one mesh (the elastic relaxation treats each on its own).
inline Rig TwoLimbs(const Rig& limb, float offset) {
  RigInput in;
  Rig& r = in.rig;
  const size_t n = limb.vertex_count(), joints = limb.joint_count();
  r.positions = limb.positions;
  for (size_t v = 0; v < n; ++v) {
    r.positions.insert(r.positions.end(), {limb.positions[3 * v], limb.positions[3 * v + 1], limb.positions[3 * v + 2] + offset});
  }
  r.triangles = limb.triangles;
  for (uint32_t t : limb.triangles) r.triangles.push_back(t + uint32_t(n));
  r.skeleton.names = limb.skeleton.names;
  r.skeleton.parents = limb.skeleton.parents;
  r.skeleton.rest_local = limb.skeleton.rest_local;
  for (size_t j = 0; j < joints; ++j) {
    r.skeleton.names.push_back(limb.skeleton.names[j] + "_b");
    const int32_t p = limb.skeleton.parents[j];
    r.skeleton.parents.push_back(p < 0 ? -1 : p + int32_t(joints));
    Similarity s = limb.skeleton.rest_local[j];
    if (p < 0) s.translation.z() += offset;
    r.skeleton.rest_local.push_back(s);
  }
  WeightsInput& w = in.weights;
  w.offsets.assign(1, 0);
  for (int copy = 0; copy < 2; ++copy) {
    for (size_t v = 0; v < n; ++v) {
      for (uint32_t e = limb.weights.offsets[v]; e < limb.weights.offsets[v + 1]; ++e) {
        w.joints.push_back(limb.weights.joints[e] + uint32_t(copy * joints));
        w.weights.push_back(limb.weights.weights[e]);
      }
      w.offsets.push_back(uint32_t(w.joints.size()));
    }
  }
  return BuildOrDie(std::move(in));
}

// A pose of TwoLimbs' rig: limb A (joints 0, 1) as `a`, limb B (joints 2, 3) as `b`, both poses
// of the one limb's skeleton; B's root keeps its rest translation.
inline Pose TwoLimbsPose(const Skeleton& two, const Pose& a, const Pose& b) {
  Pose p = RestPose(two);
  const size_t joints = a.joint_count();
  for (size_t j = 0; j < joints; ++j) {
    p.set_joint(j, a.joint(j));
    Similarity s = b.joint(j);
    s.translation = p.joint(j + joints).translation;
    p.set_joint(j + joints, s);
  }
  return p;
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

// A limb of three bones (joints at x = 0, 1, 2; 121 rings of 32) whose middle joint owns no
// vertex (a "segmentation" attribute gives x < 2 to joint 0, the rest to joint 2): a helper bone,
// or one the weights skip, as in assimp-testmodels' animation_with_skeleton.fbx.
inline Rig ChainWithAWeightlessMiddleJoint() {
  LimbOptions o;
  o.rings = 121;
  o.segments = 32;
  o.bones = 3;
  Rig rig = BuildOrDie(MakeLimb(o));
  AttributeMap seg{"segmentation", 1, {}};
  for (size_t v = 0; v < rig.vertex_count(); ++v) seg.values.push_back(rig.positions[3 * v] < 2.0f ? 0.f : 2.f);
  rig.attributes.push_back(seg);
  return rig;
}

// `in` as exporters write a flat-shaded mesh: every triangle corner its own vertex (same weights),
// each copy moved by up to `jitter` (relative, per coordinate: a few float ulps at 2e-7, as on a
// mirror seam) in a fixed pattern, and given its triangle's normal when `face_normals`. The
// triangles keep their order; vertex 3t + k is corner k of triangle t.
inline RigInput SplitPerCorner(const RigInput& in, double jitter, bool face_normals) {
  RigInput out = in;
  const Rig& r = in.rig;
  const WeightsInput& w = in.weights;
  out.rig.positions.clear();
  out.rig.normals.clear();
  out.rig.triangles.clear();
  out.weights.offsets.assign(1, 0);
  out.weights.joints.clear();
  out.weights.weights.clear();
  for (size_t t = 0; t + 2 < r.triangles.size(); t += 3) {
    const uint32_t* f = &r.triangles[t];
    auto at = [&](int k) {
      return Eigen::Vector3d(r.positions[3 * f[k]], r.positions[3 * f[k] + 1], r.positions[3 * f[k] + 2]);
    };
    const Eigen::Vector3d n = (at(1) - at(0)).cross(at(2) - at(0)).normalized();
    for (int k = 0; k < 3; ++k) {
      const uint32_t v = f[k];
      for (int c = 0; c < 3; ++c) {
        const double x = r.positions[3 * v + c];
        const int pattern = int((t + 3 * k + 5 * c) % 5) - 2;  // -2 .. 2
        out.rig.positions.push_back(float(x + pattern * 0.5 * jitter * std::max(std::abs(x), 1.0)));
        if (face_normals) out.rig.normals.push_back(float(n[c]));
      }
      out.rig.triangles.push_back(uint32_t(out.rig.triangles.size()));
      const uint32_t b = w.offsets.empty() ? v * w.influences_per_vertex : w.offsets[v];
      const uint32_t e = w.offsets.empty() ? b + w.influences_per_vertex : w.offsets[v + 1];
      for (uint32_t i = b; i < e; ++i) {
        out.weights.joints.push_back(w.joints[i]);
        out.weights.weights.push_back(w.weights[i]);
      }
      out.weights.offsets.push_back(uint32_t(out.weights.joints.size()));
    }
  }
  out.weights.influences_per_vertex = 0;
  out.rig.attributes.clear();
  return out;
}

inline double MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

inline void SetRotation(Pose& p, size_t j, const Eigen::Quaterniond& q) { p.set_rotation(j, q); }


// Runs fn(0) … fn(n − 1), each once, on up to as many threads as the machine has cores, and
// returns when all have: for a test's independent sessions or cases (each with its own
// deformer, run on one thread), so that its wall time falls with the cores while every result
// stays what one thread gives. fn(k) must touch only its own state; gtest's EXPECT_* may be
// called from it (an ASSERT_* ends only that call).
template <typename Fn>
void ForEachInParallel(size_t n, Fn fn) {
  const size_t threads = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k = next++; k < n; k = next++) fn(k);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

// Plays `poses` in five sessions side by side (ForEachInParallel): run 0 as given, run t + 1
// with every pose turned by `radians` about kTurnAxes[t]. play(poses) plays one run in a
// session of its own and returns its frames; the result holds each run's.
template <typename Play>
std::vector<std::vector<std::vector<float>>> PlayTurned(const std::vector<Pose>& poses, double radians, Play play) {
  std::vector<std::vector<std::vector<float>>> runs(1 + std::size(kTurnAxes));
  ForEachInParallel(runs.size(), [&](size_t r) {
    std::vector<Pose> run = poses;
    if (r > 0) {
      for (Pose& p : run) p = TurnedPose(p, radians, kTurnAxes[r - 1]);
    }
    runs[r] = play(run);
  });
  return runs;
}

inline void SetTranslation(Pose& p, size_t j, const Eigen::Vector3d& t) {
  for (int k = 0; k < 3; ++k) p.translations[3 * j + k] = float(t[k]);
}

}  // namespace sinew::testing
