#include "core/rig/pose.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sinew {

Similarity Pose::joint(size_t j) const {
  Similarity s;
  s.rotation = Eigen::Quaterniond(rotations[4 * j + 3], rotations[4 * j], rotations[4 * j + 1],
                                  rotations[4 * j + 2])
                   .normalized();
  s.translation = Eigen::Vector3d(translations[3 * j], translations[3 * j + 1],
                                  translations[3 * j + 2]);
  s.scale = scales.empty() ? 1.0 : scales[j];
  return s;
}

void Pose::set_rotation(size_t j, const Eigen::Quaterniond& q) {
  rotations[4 * j] = float(q.x());
  rotations[4 * j + 1] = float(q.y());
  rotations[4 * j + 2] = float(q.z());
  rotations[4 * j + 3] = float(q.w());
}

void Pose::set_joint(size_t j, const Similarity& s) {
  set_rotation(j, s.rotation);
  for (int k = 0; k < 3; ++k) translations[3 * j + k] = float(s.translation[k]);
  if (!scales.empty()) scales[j] = float(s.scale);
}

namespace {
// A pose of n joints in `space` with every array sized (scales included).
Pose SizedPose(PoseSpace space, size_t n) {
  Pose p;
  p.space = space;
  p.rotations.resize(4 * n);
  p.translations.resize(3 * n);
  p.scales.resize(n);
  return p;
}
}  // namespace

Pose RestPose(const Skeleton& skeleton) {
  const size_t n = skeleton.size();
  Pose p = SizedPose(PoseSpace::kLocal, n);
  bool all_one = true;
  for (size_t j = 0; j < n; ++j) {
    p.set_joint(j, skeleton.rest_local[j]);
    all_one = all_one && skeleton.rest_local[j].scale == 1.0;
  }
  if (all_one) p.scales.clear();
  return p;
}

Pose BindPose(const Skeleton& skeleton) {
  const size_t n = skeleton.size();
  Pose p = SizedPose(PoseSpace::kWorld, n);
  for (size_t j = 0; j < n; ++j) p.set_joint(j, NearestSimilarity(Inverse(skeleton.inverse_bind[j])));
  return p;
}

absl::Status ValidatePose(const Pose& pose, size_t joint_count) {
  auto invalid = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(parts...));
  };
  if (pose.rotations.size() != 4 * joint_count) {
    return invalid("pose.rotations: ", pose.rotations.size() / 4.0, " quaternions for ",
                   joint_count, " joints (16 bytes per joint)");
  }
  if (pose.translations.size() != 3 * joint_count) {
    return invalid("pose.translations: ", pose.translations.size() / 3.0, " vectors for ",
                   joint_count, " joints (12 bytes per joint)");
  }
  if (!pose.scales.empty() && pose.scales.size() != joint_count) {
    return invalid("pose.scales: ", pose.scales.size(), " scales for ", joint_count,
                   " joints (4 bytes per joint, or empty)");
  }
  for (size_t j = 0; j < joint_count; ++j) {
    const float* q = &pose.rotations[4 * j];
    const double n = std::sqrt(double(q[0]) * q[0] + double(q[1]) * q[1] + double(q[2]) * q[2] +
                               double(q[3]) * q[3]);
    if (!std::isfinite(n) || std::abs(n - 1.0) > 1e-3) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pose.rotations[%d]: quaternion (%g, %g, %g, %g) has norm %g, not 1", j, q[0], q[1],
          q[2], q[3], n));
    }
    const float* t = &pose.translations[3 * j];
    if (!std::isfinite(t[0]) || !std::isfinite(t[1]) || !std::isfinite(t[2])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pose.translations[%d]: (%g, %g, %g) is not finite", j, t[0], t[1], t[2]));
    }
    if (!pose.scales.empty() && !(std::isfinite(pose.scales[j]) && pose.scales[j] > 0)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("pose.scales[%d]: %g is not a positive finite scale", j, pose.scales[j]));
    }
  }
  return absl::OkStatus();
}

void SkinningTransforms(const Skeleton& skeleton, const Pose& pose, std::span<Similarity> world,
                        std::span<Affine34d> out) {
  for (int32_t j : skeleton.order) {
    const int32_t p = skeleton.parents[j];
    world[j] = (pose.space == PoseSpace::kWorld || p < 0) ? pose.joint(j)
                                                           : world[p] * pose.joint(j);
    out[j] = Compose(world[j].Matrix(), skeleton.inverse_bind[j]);
  }
}

absl::Status ValidateCageFrames(const Rig& rig, std::span<const CageFrame> frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const CageFrame& f = frames[i];
    if (f.cage >= rig.cages.size()) {
      return absl::InvalidArgumentError(absl::StrCat("cages[", i, "].cage: index ", f.cage,
                                                     " but the rig has ", rig.cages.size(),
                                                     " cages"));
    }
    for (size_t k = 0; k < i; ++k) {
      if (frames[k].cage == f.cage) {
        return absl::InvalidArgumentError(
            absl::StrCat("cages[", i, "].cage: cage ", f.cage, " already given by cages[", k, "]"));
      }
    }
    const size_t expected = rig.cages[f.cage].positions.size();
    if (f.positions.size() != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("cages[", i, "].positions: ", f.positions.size() / 3.0, " vertices, cage ",
                       f.cage, " has ", expected / 3, " (12 bytes per vertex)"));
    }
    for (size_t k = 0; k < f.positions.size(); ++k) {
      if (!std::isfinite(f.positions[k])) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "cages[%d].positions[%d]: coordinate %c is not finite", i, k / 3, "xyz"[k % 3]));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace sinew

namespace sinew {

absl::Status ValidateSphereFrame(const Rig& rig, const SphereFrame& f) {
  const SphereMesh& sm = rig.sphere_mesh;
  const size_t spheres = sm.sphere_count(), bones = sm.bone_count();
  if (bones == 0) return absl::FailedPreconditionError("spheres: the rig has no sphere-mesh");
  auto bad = [](const std::string& s) { return absl::InvalidArgumentError(s); };
  if (!f.centers.empty() && f.centers.size() != 3 * spheres) {
    return bad(absl::StrCat("spheres.centers: ", f.centers.size() / 3.0, " centres for ", spheres,
                            " spheres (12 bytes each)"));
  }
  if (!f.radii.empty() && f.radii.size() != spheres) {
    return bad(absl::StrCat("spheres.radii: ", f.radii.size(), " radii for ", spheres, " spheres"));
  }
  if (!f.twists.empty() && f.twists.size() != bones) {
    return bad(absl::StrCat("spheres.twists: ", f.twists.size(), " twists for ", bones, " bones"));
  }
  if (!f.twists.empty() && f.centers.empty()) {
    return bad("spheres.twists: twists come with centers (with a skeleton pose the joints' rotations twist the bones)");
  }
  for (size_t k = 0; k < f.centers.size(); ++k) {
    if (!std::isfinite(f.centers[k])) {
      return bad(absl::StrFormat("spheres.centers[%d]: coordinate %c is not finite", k / 3, "xyz"[k % 3]));
    }
  }
  for (size_t i = 0; i < f.radii.size(); ++i) {
    if (!(std::isfinite(f.radii[i]) && f.radii[i] > 0)) {
      return bad(absl::StrFormat("spheres.radii[%d]: %g is not a positive radius", i, f.radii[i]));
    }
  }
  for (size_t k = 0; k < f.twists.size(); ++k) {
    if (!std::isfinite(f.twists[k])) return bad(absl::StrFormat("spheres.twists[%d]: %g is not finite", k, f.twists[k]));
  }
  // Every bone keeps a cone: its radii differ by less than its length. Checked here where the
  // frame gives the centres; without them the skeleton's pose places them (a scaled joint
  // lengthens its bone), and the posing checks the posed bones (until 2026-12-03 radii without
  // centres were checked against the rest centres, and a valid frame was refused).
  auto centre = [&](uint32_t i) { return Eigen::Vector3d(f.centers[3 * i], f.centers[3 * i + 1], f.centers[3 * i + 2]); };
  auto radius = [&](uint32_t i) { return double(f.radii.empty() ? sm.radii[i] : f.radii[i]); };
  if (!f.centers.empty()) {
    for (size_t k = 0; k < bones; ++k) {
      const uint32_t a = sm.bones[2 * k], b = sm.bones[2 * k + 1];
      const double length = (centre(b) - centre(a)).norm();
      if (!(std::abs(radius(a) - radius(b)) < length)) {
        return bad(absl::StrFormat(
            "spheres: bone %d (spheres %d and %d) would have radii %g and %g %g apart: one sphere holds the other",
            k, a, b, radius(a), radius(b), length));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace sinew
