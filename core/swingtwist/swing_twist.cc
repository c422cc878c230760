#include "core/swingtwist/swing_twist.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace sinew {

SwingTwistSplit SplitSwingTwist(const Eigen::Quaterniond& q) {
  SwingTwistSplit r;
  const double w = q.w(), x = q.x(), y = q.y(), z = q.z();
  const double n2 = w * w + z * z;
  if (n2 < 1e-12) {  // a swing of 180°: every twist fits, take none
    r.swing = q;
    r.singular = true;
    return r;
  }
  const double n = std::sqrt(n2);
  // q · conj(q_twist) with q_twist = (w, 0, 0, z) / n: the z part cancels exactly.
  r.swing = Eigen::Quaterniond(n2 / n, (w * x - y * z) / n, (w * y + x * z) / n, 0.0);
  double theta = 2 * std::atan2(z, w);  // (−2π, 2π]: wrap, so that q and −q agree
  if (theta > std::numbers::pi) theta -= 2 * std::numbers::pi;
  if (theta <= -std::numbers::pi) theta += 2 * std::numbers::pi;
  r.theta = theta;
  return r;
}

absl::StatusOr<CanonicalFrames> ComputeCanonicalFrames(const Rig& rig) {
  const Skeleton& sk = rig.skeleton;
  const size_t n = rig.joint_count();
  if (n == 0) return absl::FailedPreconditionError("swing/twist deformers need a skeleton");
  CanonicalFrames f;
  f.rest.resize(n);
  for (size_t j = 0; j < n; ++j) f.rest[j] = Inverse(sk.inverse_bind[j]).col(3);
  Eigen::Vector3d lo = f.rest[0], hi = f.rest[0];
  for (const auto& p : f.rest) {
    lo = lo.cwiseMin(p);
    hi = hi.cwiseMax(p);
  }
  double size = (hi - lo).norm();
  if (size <= 0) size = std::max<double>(rig.bbox_diagonal(), 1e-12);
  const double coincident = 1e-6 * size;

  std::vector<std::vector<int32_t>> children(n);
  for (size_t j = 0; j < n; ++j) {
    if (sk.parents[j] >= 0) children[sk.parents[j]].push_back(int32_t(j));
  }
  // The joint that gives j its axis: a long child, else the first non-coincident descendant.
  auto axis_joint = [&](size_t j) -> int32_t {
    for (int32_t c : children[j]) {
      if ((f.rest[c] - f.rest[j]).norm() > coincident) return c;
    }
    std::vector<int32_t> stack(children[j].rbegin(), children[j].rend());
    while (!stack.empty()) {
      const int32_t d = stack.back();
      stack.pop_back();
      if ((f.rest[d] - f.rest[j]).norm() > coincident) return d;
      stack.insert(stack.end(), children[d].rbegin(), children[d].rend());
    }
    return -1;
  };

  f.frame.assign(n, IdentityAffine());
  f.inverse.assign(n, IdentityAffine());
  f.bone_length.assign(n, 0.0);
  std::vector<Eigen::Vector3d> axis(n, Eigen::Vector3d::UnitZ());
  for (int32_t j : sk.order) {  // parents first: a leaf takes its parent's axis
    const int32_t a = axis_joint(size_t(j));
    if (a >= 0) {
      axis[j] = (f.rest[a] - f.rest[j]).normalized();
      f.bone_length[j] = (f.rest[a] - f.rest[j]).norm();
    } else if (sk.parents[j] >= 0) {
      axis[j] = axis[sk.parents[j]];
    }
    const Eigen::Vector3d z = axis[j];
    const Eigen::Vector3d ref = std::abs(z.x()) < 0.9 ? Eigen::Vector3d::UnitX() : Eigen::Vector3d::UnitY();
    const Eigen::Vector3d x = (ref - ref.dot(z) * z).normalized();
    const Eigen::Vector3d y = z.cross(x);
    Affine34d r;
    r.col(0) = x;
    r.col(1) = y;
    r.col(2) = z;
    r.col(3) = f.rest[j];
    f.frame[j] = r;
    f.inverse[j] = Inverse(r);
  }
  return f;
}

namespace {

template <size_t N>
void Store(const Eigen::Matrix<double, 3, N>& m, std::array<float, 3 * N>& out) {
  for (int r = 0; r < 3; ++r) {
    for (size_t c = 0; c < N; ++c) out[r * N + c] = float(m(r, c));
  }
}

}  // namespace

absl::Status SwingTwistJoints(const Rig& rig, const CanonicalFrames& frames, std::span<const Affine34d> skinning,
                              std::span<JointRecord> out, std::span<const int32_t> parents) {
  const Skeleton& sk = rig.skeleton;
  const size_t n = rig.joint_count();
  if (skinning.size() != n || out.size() != n || frames.frame.size() != n || !(parents.empty() || parents.size() == n)) {
    return absl::InternalError("swing/twist: one skinning matrix, one record and one parent per joint");
  }
  for (size_t j = 0; j < n; ++j) {
    const int32_t p = parents.empty() ? sk.parents[j] : parents[j];
    const Affine34d& frame = frames.frame[j];
    Eigen::Quaterniond q = Eigen::Quaterniond::Identity();
    double scale = 1;
    Eigen::Vector3d translation = Eigen::Vector3d::Zero();
    Affine34d a;
    if (p < 0) {
      a = Compose(skinning[j], frame);
    } else {
      a = Compose(skinning[p], frame);
      const Affine34d m = Compose(frames.inverse[j], Compose(Inverse(skinning[p]), Compose(skinning[j], frame)));
      const Eigen::Matrix3d l = m.leftCols<3>();
      const double det = l.determinant();
      scale = det > 0 ? std::cbrt(det) : 0;
      const Eigen::Matrix3d rotation = scale > 0 ? Eigen::Matrix3d(l / scale) : Eigen::Matrix3d::Zero();
      const double orthogonality = (rotation.transpose() * rotation - Eigen::Matrix3d::Identity()).cwiseAbs().maxCoeff();
      if (!(scale > 0) || !(orthogonality <= 1e-3)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pose: joint ", j, " (", sk.names.empty() ? "" : sk.names[j],
            ") shears, mirrors or scales unevenly relative to its parent; swing/twist deformers take rotations, "
            "uniform scales and translations"));
      }
      q = Eigen::Quaterniond(rotation).normalized();
      translation = m.col(3);
    }
    const SwingTwistSplit split = SplitSwingTwist(q);
    JointRecord& r = out[j];
    Store<4>(a, r.a);
    Store<3>(scale * split.swing.toRotationMatrix() - Eigen::Matrix3d::Identity(), r.b);
    r.theta = float(split.theta);
    Store<4>(frames.inverse[j], r.inverse_frame);
    for (int k = 0; k < 3; ++k) r.translation[k] = float(translation[k]);
    r.unused = 0;
  }
  return absl::OkStatus();
}

absl::Status CheckSwingTwistWeights(const SwingTwistWeights& w, size_t vertex_count, size_t joint_count) {
  if (w.offsets.size() != vertex_count + 1 || w.offsets.front() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: ", w.offsets.size(),
                                                   " offsets for ", vertex_count, " vertices"));
  }
  const size_t e = w.offsets.back();
  if (w.joints.size() != e || w.d.size() != e || w.s.size() != e || w.t.size() != e) {
    return absl::InvalidArgumentError("swing/twist weights: joints, d, s and t need one entry per influence");
  }
  auto unit = [](float x) { return std::isfinite(x) && x >= 0 && x <= 1; };
  for (size_t v = 0; v < vertex_count; ++v) {
    if (w.offsets[v + 1] < w.offsets[v] || w.offsets[v + 1] > e) {
      return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: offsets decrease at vertex ", v));
    }
    double sum = 0;
    for (uint32_t k = w.offsets[v]; k < w.offsets[v + 1]; ++k) {
      if (w.joints[k] >= joint_count) {
        return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: vertex ", v, " names joint ",
                                                       w.joints[k], " of ", joint_count));
      }
      if (!unit(w.d[k]) || !unit(w.s[k]) || !unit(w.t[k])) {
        return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: vertex ", v,
                                                       " has a d, s or t outside [0, 1]"));
      }
      sum += w.d[k];
    }
    if (std::abs(sum - 1) > 1e-4) {
      return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: vertex ", v, "'s d sums to ", sum));
    }
  }
  if (!w.parents.empty() && w.parents.size() != joint_count) {
    return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: ", w.parents.size(), " deformer parents for ",
                                                   joint_count, " joints"));
  }
  for (size_t j = 0; j < w.parents.size(); ++j) {
    if (w.parents[j] < -1 || w.parents[j] >= int64_t(joint_count) || w.parents[j] == int64_t(j)) {
      return absl::InvalidArgumentError(absl::StrCat("swing/twist weights: joint ", j, "'s deformer parent ",
                                                     w.parents[j], " is not another joint or -1"));
    }
  }
  return absl::OkStatus();
}

void SwingTwistDeviceRows(const SwingTwistWeights& weights, std::vector<float>& values, uint32_t& cols) {
  const size_t n = weights.offsets.empty() ? 0 : weights.offsets.size() - 1;
  uint32_t widest = 1;
  for (size_t v = 0; v < n; ++v) widest = std::max(widest, weights.offsets[v + 1] - weights.offsets[v]);
  cols = kSwingTwistInfluenceFloats * widest;
  values.assign(n * cols, 0.f);
  for (size_t v = 0; v < n; ++v) {
    float* row = &values[v * cols];
    for (uint32_t k = weights.offsets[v]; k < weights.offsets[v + 1]; ++k, row += kSwingTwistInfluenceFloats) {
      row[0] = float(weights.joints[k]);
      row[1] = weights.d[k];
      row[2] = weights.s[k];
      row[3] = weights.t[k];
    }
  }
}

void SwingTwistDeviceJoints(std::span<const JointRecord> joints, std::span<float> out) {
  static_assert(sizeof(JointRecord) <= kSwingTwistDeviceJointFloats * sizeof(float));
  for (size_t j = 0; j < joints.size(); ++j) {
    float* at = &out[j * kSwingTwistDeviceJointFloats];
    std::memcpy(at, &joints[j], sizeof(JointRecord));
    std::fill(at + sizeof(JointRecord) / sizeof(float), at + kSwingTwistDeviceJointFloats, 0.f);
  }
}

void SwingTwistSkinning(std::span<const float> rest, const SwingTwistWeights& weights,
                        std::span<const JointRecord> joints, std::span<float> out, ThreadPool* pool) {
  const size_t n = rest.size() / 3;
  ParallelFor(pool, n, 4096, [&](size_t begin, size_t end) {
    for (size_t v = begin; v < end; ++v) {
      const float px = rest[3 * v], py = rest[3 * v + 1], pz = rest[3 * v + 2];
      float ox = 0, oy = 0, oz = 0;
      for (uint32_t k = weights.offsets[v]; k < weights.offsets[v + 1]; ++k) {
        const JointRecord& r = joints[weights.joints[k]];
        const float* m = r.inverse_frame.data();
        // x̃ = R⁻¹ p̃, twisted about z by t·θ.
        const float x = m[0] * px + m[1] * py + m[2] * pz + m[3];
        const float y = m[4] * px + m[5] * py + m[6] * pz + m[7];
        const float z = m[8] * px + m[9] * py + m[10] * pz + m[11];
        const float phi = weights.t[k] * r.theta;
        const float c = std::cos(phi), sn = std::sin(phi);
        const float y0 = c * x - sn * y, y1 = sn * x + c * y, y2 = z;
        // g = y + s ((σ Q_swing − I) y + τ).
        const float s = weights.s[k];
        const float* b = r.b.data();
        const float* tau = r.translation.data();
        const float g0 = y0 + s * (b[0] * y0 + b[1] * y1 + b[2] * y2 + tau[0]);
        const float g1 = y1 + s * (b[3] * y0 + b[4] * y1 + b[5] * y2 + tau[1]);
        const float g2 = y2 + s * (b[6] * y0 + b[7] * y1 + b[8] * y2 + tau[2]);
        const float* a = r.a.data();
        const float d = weights.d[k];
        ox += d * (a[0] * g0 + a[1] * g1 + a[2] * g2 + a[3]);
        oy += d * (a[4] * g0 + a[5] * g1 + a[6] * g2 + a[7]);
        oz += d * (a[8] * g0 + a[9] * g1 + a[10] * g2 + a[11]);
      }
      out[3 * v] = ox;
      out[3 * v + 1] = oy;
      out[3 * v + 2] = oz;
    }
  });
}

}  // namespace sinew
