#include "core/baseline/sphere_mesh.h"

#include <cmath>
#include <deque>

#include <Eigen/SVD>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sinew::baseline {
namespace {

Eigen::Vector3d Perpendicular(const Eigen::Vector3d& axis) {
  const Eigen::Vector3d helper = std::abs(axis.y()) < 0.9 ? Eigen::Vector3d::UnitY() : Eigen::Vector3d::UnitX();
  return (helper - helper.dot(axis) * axis).normalized();
}

// The rotation part of a linear map (polar decomposition), and its uniform scale.
Eigen::Quaterniond RotationOf(const Eigen::Matrix3d& a, double* scale) {
  Eigen::JacobiSVD<Eigen::Matrix3d> svd(a, Eigen::ComputeFullU | Eigen::ComputeFullV);
  Eigen::Matrix3d r = svd.matrixU() * svd.matrixV().transpose();
  if (r.determinant() < 0) {
    Eigen::Matrix3d u = svd.matrixU();
    u.col(2) *= -1;
    r = u * svd.matrixV().transpose();
  }
  *scale = std::cbrt(std::abs(a.determinant()));
  return Eigen::Quaterniond(r).normalized();
}

}  // namespace

absl::StatusOr<SphereSkeleton> MakeSphereSkeleton(const Rig& rig) {
  const SphereMesh& sm = rig.sphere_mesh;
  if (sm.empty()) return absl::FailedPreconditionError("method baseline needs the rig's sphere_mesh; the rig has none");
  SphereSkeleton sk;
  const size_t spheres = sm.sphere_count(), bones = sm.bone_count();
  for (size_t i = 0; i < spheres; ++i) {
    sk.centres.emplace_back(sm.centers[3 * i], sm.centers[3 * i + 1], sm.centers[3 * i + 2]);
    sk.radii.push_back(sm.radii[i]);
  }
  sk.at.resize(spheres);
  std::vector<int32_t> ended_by(spheres, -1);
  for (size_t k = 0; k < bones; ++k) {
    sk.bones.push_back({sm.bones[2 * k], sm.bones[2 * k + 1]});
    sk.at[sm.bones[2 * k]].push_back(uint32_t(k));
    sk.at[sm.bones[2 * k + 1]].push_back(uint32_t(k));
    ended_by[sm.bones[2 * k + 1]] = int32_t(k);
  }
  sk.parent.resize(bones);
  for (size_t k = 0; k < bones; ++k) sk.parent[k] = ended_by[sk.bones[k][0]];
  // Parents first: from the roots outwards.
  std::vector<std::vector<uint32_t>> children(bones);
  std::deque<uint32_t> queue;
  for (size_t k = 0; k < bones; ++k) {
    if (sk.parent[k] < 0) queue.push_back(uint32_t(k));
    else children[sk.parent[k]].push_back(uint32_t(k));
  }
  while (!queue.empty()) {
    const uint32_t k = queue.front();
    queue.pop_front();
    sk.order.push_back(k);
    for (uint32_t c : children[k]) queue.push_back(c);
  }
  if (sk.order.size() != bones) return absl::InternalError("baseline: the sphere-mesh's bones are not a forest");
  // Azimuth frames: given, or carried from the root by minimal rotations (parallel transport).
  sk.e0.resize(bones);
  for (uint32_t k : sk.order) {
    const Eigen::Vector3d axis = sk.Axis(k);
    Eigen::Vector3d e;
    if (!sm.bone_frames.empty()) {
      e = Eigen::Vector3d(sm.bone_frames[3 * k], sm.bone_frames[3 * k + 1], sm.bone_frames[3 * k + 2]);
    } else if (sk.parent[k] >= 0) {
      const uint32_t p = uint32_t(sk.parent[k]);
      e = Eigen::Quaterniond::FromTwoVectors(sk.Axis(p), axis) * sk.e0[p];
    } else {
      e = Perpendicular(axis);
    }
    e -= e.dot(axis) * axis;
    sk.e0[k] = e.norm() > 1e-12 ? e.normalized() : Perpendicular(axis);
  }
  sk.joint.assign(bones, -1);
  for (size_t k = 0; k < sm.bone_joints.size(); ++k) sk.joint[k] = int32_t(sm.bone_joints[k]);
  sk.carrier.assign(spheres, -1);
  for (size_t i = 0; i < spheres; ++i) {
    sk.carrier[i] = ended_by[i];
    if (sk.carrier[i] < 0) {
      for (uint32_t k : sk.at[i]) {
        if (sk.bones[k][0] == i) {
          sk.carrier[i] = int32_t(k);
          break;
        }
      }
    }
  }
  return sk;
}

void RestSpheres(const SphereSkeleton& sk, PosedSpheres& out) {
  out.centres = sk.centres;
  out.radii = sk.radii;
  out.rigid.assign(sk.bone_count(), Eigen::Quaterniond::Identity());
  out.twist.assign(sk.bone_count(), 0.0);
}

absl::Status PoseSpheres(const SphereSkeleton& sk, const Rig& rig, const FrameInput& frame, PoseScratch& scratch,
                         PosedSpheres& out) {
  const size_t bones = sk.bone_count(), spheres = sk.centres.size();
  const SphereFrame* given = frame.spheres;
  out.centres.resize(spheres);
  out.radii.resize(spheres);
  out.rigid.resize(bones);
  out.twist.resize(bones);
  scratch.full.resize(bones);
  if (given != nullptr && !given->centers.empty()) {
    for (size_t i = 0; i < spheres; ++i) {
      out.centres[i] = Eigen::Vector3d(given->centers[3 * i], given->centers[3 * i + 1], given->centers[3 * i + 2]);
      out.radii[i] = given->radii.empty() ? sk.radii[i] : double(given->radii[i]);
    }
    // Each bone's frame carried from its parent's (with the parent's twist) by the minimal
    // rotation onto its new axis; then its own twist.
    for (uint32_t k : sk.order) {
      const Eigen::Quaterniond parent =
          sk.parent[k] >= 0 ? scratch.full[sk.parent[k]] : Eigen::Quaterniond::Identity();
      const Eigen::Vector3d axis = sk.Axis(k);
      const Eigen::Vector3d posed = (out.centres[sk.bones[k][1]] - out.centres[sk.bones[k][0]]).normalized();
      out.rigid[k] = (Eigen::Quaterniond::FromTwoVectors(parent * axis, posed) * parent).normalized();
      out.twist[k] = given->twists.empty() ? 0.0 : double(given->twists[k]);
      scratch.full[k] = out.rigid[k] * Eigen::Quaterniond(Eigen::AngleAxisd(out.twist[k], axis));
    }
  } else {
    if (frame.pose == nullptr) {
      return absl::InvalidArgumentError(
          "pose: method baseline needs a pose (with the rig's sphere_mesh.bone_joints) or spheres.centers");
    }
    if (sk.joint.empty() || sk.joint[0] < 0) {
      return absl::FailedPreconditionError(
          "pose: the rig's sphere-mesh has no bone_joints, so a skeleton pose cannot move it; send spheres.centers");
    }
    const Skeleton& skeleton = rig.skeleton;
    scratch.world.resize(skeleton.size());
    scratch.skinning.resize(skeleton.size());
    SkinningTransforms(skeleton, *frame.pose, scratch.world, scratch.skinning);
    for (size_t i = 0; i < spheres; ++i) {
      const Affine34d& m = scratch.skinning[sk.joint[sk.carrier[i]]];
      out.centres[i] = m.leftCols<3>() * sk.centres[i] + m.col(3);
      double scale = 1;
      RotationOf(m.leftCols<3>(), &scale);
      out.radii[i] = given != nullptr && !given->radii.empty() ? double(given->radii[i]) : sk.radii[i] * scale;
    }
    for (uint32_t k : sk.order) {
      double scale = 1;
      scratch.full[k] = RotationOf(scratch.skinning[sk.joint[k]].leftCols<3>(), &scale);
      if (sk.parent[k] < 0) {
        out.rigid[k] = scratch.full[k];
        out.twist[k] = 0;
        continue;
      }
      // Relative to the parent: swing then twist about the rest axis (twist applied first).
      const Eigen::Quaterniond q = scratch.full[sk.parent[k]].conjugate() * scratch.full[k];
      const Eigen::Vector3d axis = sk.Axis(k);
      out.twist[k] = WrapAngle(2 * std::atan2(q.vec().dot(axis), q.w()));
      out.rigid[k] = (scratch.full[k] * Eigen::Quaterniond(Eigen::AngleAxisd(-out.twist[k], axis))).normalized();
    }
  }
  for (size_t k = 0; k < bones; ++k) {
    const uint32_t a = sk.bones[k][0], b = sk.bones[k][1];
    const double length = (out.centres[b] - out.centres[a]).norm();
    if (!(std::abs(out.radii[a] - out.radii[b]) < length)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "spheres: in this frame bone %d (spheres %d and %d) has radii %g and %g %g apart: one sphere holds the other",
          k, a, b, out.radii[a], out.radii[b], length));
    }
  }
  return absl::OkStatus();
}

End<double> EndOf(const SphereSkeleton& sk, const PosedSpheres& posed, uint32_t bone, int side) {
  const uint32_t j = sk.bones[bone][side], f = sk.bones[bone][1 - side];
  const Eigen::Vector3d c = posed.centres[j], far = posed.centres[f];
  const double length = (far - c).norm();
  const Eigen::Vector3d u = (far - c) / length;
  const Eigen::Vector3d axis = side == 0 ? u : Eigen::Vector3d(-u);  // first sphere → far sphere
  Eigen::Vector3d e0 = posed.rigid[bone] * sk.e0[bone];
  e0 = (e0 - e0.dot(axis) * axis).normalized();
  const Eigen::Vector3d e1 = axis.cross(e0);
  End<double> e;
  e.c = {c.x(), c.y(), c.z()};
  e.u = {u.x(), u.y(), u.z()};
  e.e0 = {e0.x(), e0.y(), e0.z()};
  e.e1 = {e1.x(), e1.y(), e1.z()};
  e.r = posed.radii[j];
  e.s = (posed.radii[j] - posed.radii[f]) / length;
  e.k = std::sqrt(std::max(0.0, 1 - e.s * e.s));
  e.L = length * e.k;
  return e;
}

}  // namespace sinew::baseline
