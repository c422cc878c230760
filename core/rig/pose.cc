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
