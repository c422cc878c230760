#include "core/dqs/dqs.h"

#include <cmath>

#include <Eigen/SVD>

namespace sinew {

namespace {
constexpr size_t kGrain = 8192;
}

void ToDualQuats(std::span<const Affine34d> transforms, std::span<DualQuat> out) {
  for (size_t j = 0; j < transforms.size(); ++j) {
    const Eigen::Matrix3d a = transforms[j].leftCols<3>();
    const double det = a.determinant();
    const double s = std::cbrt(det);
    Eigen::Matrix3d r = a / s;
    if (!(r.transpose() * r).isApprox(Eigen::Matrix3d::Identity(), 1e-6)) {
      // Not a similarity: take the nearest rotation (polar decomposition).
      Eigen::JacobiSVD<Eigen::Matrix3d> svd(a, Eigen::ComputeFullU | Eigen::ComputeFullV);
      Eigen::Matrix3d d = Eigen::Matrix3d::Identity();
      d(2, 2) = (svd.matrixU() * svd.matrixV().transpose()).determinant() < 0 ? -1 : 1;
      r = svd.matrixU() * d * svd.matrixV().transpose();
    }
    const Eigen::Quaterniond q = Eigen::Quaterniond(r).normalized();
    const Eigen::Vector3d t = transforms[j].col(3);
    // dual = 0.5 * (t, 0) * q
    const Eigen::Quaterniond tq(0, t.x(), t.y(), t.z());
    const Eigen::Quaterniond d = tq * q;
    DualQuat& o = out[j];
    o.real[0] = float(q.x()), o.real[1] = float(q.y()), o.real[2] = float(q.z()),
    o.real[3] = float(q.w());
    o.dual[0] = float(0.5 * d.x()), o.dual[1] = float(0.5 * d.y()), o.dual[2] = float(0.5 * d.z()),
    o.dual[3] = float(0.5 * d.w());
    o.scale = float(s);
  }
}

void DualQuaternionSkinningRange(std::span<const float> rest, const SkinWeights& weights,
                                 std::span<const DualQuat> joints, std::span<float> out,
                                 size_t begin, size_t end) {
  const uint32_t* offsets = weights.offsets.data();
  const uint16_t* jidx = weights.joints.data();
  const float* w = weights.weights.data();
  const DualQuat* dq = joints.data();
  const float* p = rest.data();
  float* o = out.data();
  for (size_t v = begin; v < end; ++v) {
    const uint32_t e0 = offsets[v], e1 = offsets[v + 1];
    const float* pivot = dq[jidx[e0]].real;
    float b0[4] = {}, be[4] = {}, s = 0;
    for (uint32_t e = e0; e < e1; ++e) {
      const DualQuat& q = dq[jidx[e]];
      const float dot = q.real[0] * pivot[0] + q.real[1] * pivot[1] + q.real[2] * pivot[2] +
                        q.real[3] * pivot[3];
      const float wj = dot < 0 ? -w[e] : w[e];
      for (int k = 0; k < 4; ++k) {
        b0[k] += wj * q.real[k];
        be[k] += wj * q.dual[k];
      }
      s += w[e] * q.scale;
    }
    const float inv = 1.0f / std::sqrt(b0[0] * b0[0] + b0[1] * b0[1] + b0[2] * b0[2] + b0[3] * b0[3]);
    const float rx = b0[0] * inv, ry = b0[1] * inv, rz = b0[2] * inv, rw = b0[3] * inv;
    const float dx = be[0] * inv, dy = be[1] * inv, dz = be[2] * inv, dw = be[3] * inv;
    // Translation t = 2 (rw d.xyz - dw r.xyz + r.xyz × d.xyz).
    const float tx = 2 * (rw * dx - dw * rx + (ry * dz - rz * dy));
    const float ty = 2 * (rw * dy - dw * ry + (rz * dx - rx * dz));
    const float tz = 2 * (rw * dz - dw * rz + (rx * dy - ry * dx));
    const float x = s * p[3 * v], y = s * p[3 * v + 1], z = s * p[3 * v + 2];
    // Rotate: x' = x + 2 rw (r × x) + 2 r × (r × x).
    const float cx = ry * z - rz * y, cy = rz * x - rx * z, cz = rx * y - ry * x;
    const float ccx = ry * cz - rz * cy, ccy = rz * cx - rx * cz, ccz = rx * cy - ry * cx;
    o[3 * v] = x + 2 * (rw * cx + ccx) + tx;
    o[3 * v + 1] = y + 2 * (rw * cy + ccy) + ty;
    o[3 * v + 2] = z + 2 * (rw * cz + ccz) + tz;
  }
}

void DualQuaternionSkinning(std::span<const float> rest, const SkinWeights& weights,
                            std::span<const DualQuat> joints, std::span<float> out,
                            ThreadPool* pool) {
  ParallelFor(pool, rest.size() / 3, kGrain, [&](size_t b, size_t e) {
    DualQuaternionSkinningRange(rest, weights, joints, out, b, e);
  });
}

}  // namespace sinew
