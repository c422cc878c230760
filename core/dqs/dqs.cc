#include "core/dqs/dqs.h"

#include <algorithm>
#include <cmath>


#include "core/util/simd.h"

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
      r = NearestSimilarity(transforms[j]).rotation.toRotationMatrix();  // not a similarity
    }
    const Eigen::Quaterniond q = Eigen::Quaterniond(r).normalized();
    const Eigen::Vector3d t = transforms[j].col(3);
    // dual = 0.5 * (t, 0) * q
    const Eigen::Quaterniond tq(0, t.x(), t.y(), t.z());
    const Eigen::Quaterniond d = tq * q;
    DualQuat& o = out[j];
    const double v[8] = {q.x(), q.y(), q.z(), q.w(), 0.5 * d.x(), 0.5 * d.y(), 0.5 * d.z(), 0.5 * d.w()};
    for (int k = 0; k < 8; ++k) o.v[k] = float(v[k]);
    o.scale = float(s);
  }
}

SINEW_VERTEX_LOOP
void DualQuaternionSkinningRange(std::span<const float> rest, const SkinWeights& weights,
                                 std::span<const DualQuat> joints, std::span<float> out,
                                 size_t begin, size_t end) {
  const uint32_t* __restrict offsets = weights.offsets.data();
  const uint16_t* __restrict jidx = weights.joints.data();
  const float* __restrict w = weights.weights.data();
  const DualQuat* __restrict dq = joints.data();
  const float* __restrict p = rest.data();
  float* __restrict o = out.data();
  // Blocks of kLanes vertices: the blend (variable influence count) runs per vertex into
  // structure-of-arrays scratch, then normalisation and the rigid transform, the costly part,
  // run branch-free across the block's lanes, which the compiler vectorises.
  constexpr int kLanes = 8;
  alignas(32) float B[8][kLanes], S[kLanes], P[3][kLanes], R[3][kLanes];
  for (size_t v0 = begin; v0 < end; v0 += kLanes) {
    const int n = static_cast<int>(std::min<size_t>(kLanes, end - v0));
    for (int l = 0; l < kLanes; ++l) {
      float b[8] = {0, 0, 0, 1, 0, 0, 0, 0}, s = 1;  // identity for unused lanes
      if (l < n) {
        const size_t v = v0 + l;
        const uint32_t e0 = offsets[v], e1 = offsets[v + 1];
        const float* pivot = dq[jidx[e0]].v;
        b[3] = 0;
        s = 0;
        for (uint32_t e = e0; e < e1; ++e) {
          const DualQuat& q = dq[jidx[e]];
          const float dot =
              q.v[0] * pivot[0] + q.v[1] * pivot[1] + q.v[2] * pivot[2] + q.v[3] * pivot[3];
          const float wj = std::copysign(w[e], dot);  // branch-free hemisphere flip
          for (int k = 0; k < 8; ++k) b[k] += wj * q.v[k];
          s += w[e] * q.scale;
        }
        for (int c = 0; c < 3; ++c) P[c][l] = p[3 * v + c];
      } else {
        for (int c = 0; c < 3; ++c) P[c][l] = 0;
      }
      for (int k = 0; k < 8; ++k) B[k][l] = b[k];
      S[l] = s;
    }
    for (int l = 0; l < kLanes; ++l) {
      const float inv = 1.0f / std::sqrt(B[0][l] * B[0][l] + B[1][l] * B[1][l] +
                                         B[2][l] * B[2][l] + B[3][l] * B[3][l]);
      const float rx = B[0][l] * inv, ry = B[1][l] * inv, rz = B[2][l] * inv, rw = B[3][l] * inv;
      const float dx = B[4][l] * inv, dy = B[5][l] * inv, dz = B[6][l] * inv, dw = B[7][l] * inv;
      // Translation t = 2 (rw d.xyz - dw r.xyz + r.xyz × d.xyz).
      const float tx = 2 * (rw * dx - dw * rx + (ry * dz - rz * dy));
      const float ty = 2 * (rw * dy - dw * ry + (rz * dx - rx * dz));
      const float tz = 2 * (rw * dz - dw * rz + (rx * dy - ry * dx));
      const float x = S[l] * P[0][l], y = S[l] * P[1][l], z = S[l] * P[2][l];
      // Rotate: x' = x + 2 rw (r × x) + 2 r × (r × x).
      const float cx = ry * z - rz * y, cy = rz * x - rx * z, cz = rx * y - ry * x;
      const float ccx = ry * cz - rz * cy, ccy = rz * cx - rx * cz, ccz = rx * cy - ry * cx;
      R[0][l] = x + 2 * (rw * cx + ccx) + tx;
      R[1][l] = y + 2 * (rw * cy + ccy) + ty;
      R[2][l] = z + 2 * (rw * cz + ccz) + tz;
    }
    for (int l = 0; l < n; ++l) {
      for (int c = 0; c < 3; ++c) o[3 * (v0 + l) + c] = R[c][l];
    }
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
