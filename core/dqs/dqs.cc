#include "core/dqs/dqs.h"

#include <algorithm>
#include <cmath>
#include <cstring>


#include "core/util/simd.h"

#if SINEW_HAVE_AVX2_KERNELS
#include <immintrin.h>
#endif

namespace sinew {

namespace {
constexpr size_t kGrain = 8192;

// Skeletons up to this many joints get a table of hemisphere signs per frame (J² dot products,
// 16 KiB on the stack at 64): one influence is then one xor, one broadcast and one 8-wide
// multiply-add. Larger ones take the dot product per influence.
constexpr size_t kSignTableJoints = 64;

#if SINEW_HAVE_AVX2_KERNELS

// sign(dot(real(a), real(b))) as a float's sign bit, from the same float sum the portable loop
// uses.
inline uint32_t SignBit(const DualQuat& a, const DualQuat& b) {
  const float dot = a.v[0] * b.v[0] + a.v[1] * b.v[1] + a.v[2] * b.v[2] + a.v[3] * b.v[3];
  uint32_t bits;
  std::memcpy(&bits, &dot, 4);
  return bits & 0x80000000u;
}

// AVX2 + FMA: a dual quaternion is 8 floats, so one influence's blend is one 8-wide multiply-add
// into a register per vertex. Eight vertices' blends are transposed (8 x 8, in registers) into
// structure-of-arrays, then normalised and applied eight lanes at a time.
__attribute__((target("avx2,fma"))) void Avx2Range(const float* __restrict p, const uint32_t* __restrict offsets,
                                                   const uint16_t* __restrict jidx, const float* __restrict w,
                                                   const DualQuat* __restrict dq, const uint32_t* __restrict signs,
                                                   size_t joints, float* __restrict o, size_t begin, size_t end) {
  alignas(32) float rows[8][8];
  alignas(32) float S[8], H[3][8], P[3][8], R[3][8];
  const __m256 identity = _mm256_setr_ps(0, 0, 0, 1, 0, 0, 0, 0);
  const __m128 sign = _mm_set1_ps(-0.0f);
  for (size_t v0 = begin; v0 < end; v0 += 8) {
    const int n = static_cast<int>(std::min<size_t>(8, end - v0));
    for (int l = 0; l < 8; ++l) {
      if (l >= n) {  // identity for unused lanes
        _mm256_store_ps(rows[l], identity);
        S[l] = 1;
        P[0][l] = P[1][l] = P[2][l] = 0;
        H[0][l] = H[1][l] = H[2][l] = 0;
        continue;
      }
      const size_t v = v0 + l;
      const uint32_t e0 = offsets[v], e1 = offsets[v + 1];
      const uint16_t pivot = jidx[e0];
      // Two accumulators (even and odd influences): half the multiply-add chain's latency.
      __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
      __m128 s0 = _mm_setzero_ps(), s1 = _mm_setzero_ps();  // scale and shift, blended with w[e]
      if (signs) {
        const uint32_t* row = signs + size_t{pivot} * joints;
        auto weight = [&](uint32_t e, uint16_t j) {  // w[e], negated where j is in the other hemisphere
          uint32_t bits;
          std::memcpy(&bits, w + e, 4);
          bits ^= row[j];
          float wj;
          std::memcpy(&wj, &bits, 4);
          return wj;
        };
        uint32_t e = e0;
        for (; e + 1 < e1; e += 2) {
          const uint16_t j0 = jidx[e], j1 = jidx[e + 1];
          b0 = _mm256_fmadd_ps(_mm256_set1_ps(weight(e, j0)), _mm256_load_ps(dq[j0].v), b0);
          b1 = _mm256_fmadd_ps(_mm256_set1_ps(weight(e + 1, j1)), _mm256_load_ps(dq[j1].v), b1);
          s0 = _mm_fmadd_ps(_mm_set1_ps(w[e]), _mm_load_ps(&dq[j0].scale), s0);
          s1 = _mm_fmadd_ps(_mm_set1_ps(w[e + 1]), _mm_load_ps(&dq[j1].scale), s1);
        }
        if (e < e1) {
          const uint16_t j = jidx[e];
          b0 = _mm256_fmadd_ps(_mm256_set1_ps(weight(e, j)), _mm256_load_ps(dq[j].v), b0);
          s0 = _mm_fmadd_ps(_mm_set1_ps(w[e]), _mm_load_ps(&dq[j].scale), s0);
        }
      } else {
        const __m128 pr = _mm_load_ps(dq[pivot].v);
        for (uint32_t e = e0; e < e1; ++e) {
          const uint16_t j = jidx[e];
          const __m256 q = _mm256_load_ps(dq[j].v);
          __m128 d = _mm_mul_ps(_mm256_castps256_ps128(q), pr);  // the real parts' dot product
          d = _mm_add_ps(d, _mm_movehl_ps(d, d));
          d = _mm_add_ss(d, _mm_movehdup_ps(d));
          const __m128 wj = _mm_xor_ps(_mm_set_ss(w[e]), _mm_and_ps(d, sign));
          b0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(wj), q, b0);
          s0 = _mm_fmadd_ps(_mm_set1_ps(w[e]), _mm_load_ps(&dq[j].scale), s0);
        }
      }
      const __m256 b = _mm256_add_ps(b0, b1);
      alignas(16) float sh[4];
      _mm_store_ps(sh, _mm_add_ps(s0, s1));
      _mm256_store_ps(rows[l], b);
      S[l] = sh[0];
      H[0][l] = sh[1], H[1][l] = sh[2], H[2][l] = sh[3];
      if (n < 8) {
        for (int c = 0; c < 3; ++c) P[c][l] = p[3 * v + c];
      }
    }
    // 8 x 8 transpose: c[k] = component k of the eight blends.
    __m256 r0 = _mm256_load_ps(rows[0]), r1 = _mm256_load_ps(rows[1]), r2 = _mm256_load_ps(rows[2]),
           r3 = _mm256_load_ps(rows[3]), r4 = _mm256_load_ps(rows[4]), r5 = _mm256_load_ps(rows[5]),
           r6 = _mm256_load_ps(rows[6]), r7 = _mm256_load_ps(rows[7]);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
                 t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
                 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
                 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
                 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
                 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    __m256 rx = _mm256_permute2f128_ps(u0, u4, 0x20), ry = _mm256_permute2f128_ps(u1, u5, 0x20),
           rz = _mm256_permute2f128_ps(u2, u6, 0x20), rw = _mm256_permute2f128_ps(u3, u7, 0x20),
           dx = _mm256_permute2f128_ps(u0, u4, 0x31), dy = _mm256_permute2f128_ps(u1, u5, 0x31),
           dz = _mm256_permute2f128_ps(u2, u6, 0x31), dw = _mm256_permute2f128_ps(u3, u7, 0x31);
    const __m256 norm2 =
        _mm256_fmadd_ps(rx, rx, _mm256_fmadd_ps(ry, ry, _mm256_fmadd_ps(rz, rz, _mm256_mul_ps(rw, rw))));
    const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1), _mm256_sqrt_ps(norm2));
    rx = _mm256_mul_ps(rx, inv), ry = _mm256_mul_ps(ry, inv), rz = _mm256_mul_ps(rz, inv), rw = _mm256_mul_ps(rw, inv);
    dx = _mm256_mul_ps(dx, inv), dy = _mm256_mul_ps(dy, inv), dz = _mm256_mul_ps(dz, inv), dw = _mm256_mul_ps(dw, inv);
    const __m256 two = _mm256_set1_ps(2);
    // Translation t = 2 (rw d.xyz - dw r.xyz + r.xyz × d.xyz).
    const __m256 tx = _mm256_mul_ps(two, _mm256_fmsub_ps(rw, dx, _mm256_fmsub_ps(dw, rx, _mm256_fmsub_ps(ry, dz, _mm256_mul_ps(rz, dy)))));
    const __m256 ty = _mm256_mul_ps(two, _mm256_fmsub_ps(rw, dy, _mm256_fmsub_ps(dw, ry, _mm256_fmsub_ps(rz, dx, _mm256_mul_ps(rx, dz)))));
    const __m256 tz = _mm256_mul_ps(two, _mm256_fmsub_ps(rw, dz, _mm256_fmsub_ps(dw, rz, _mm256_fmsub_ps(rx, dy, _mm256_mul_ps(ry, dx)))));
    const __m256 sc = _mm256_load_ps(S);
    __m256 px, py, pz;
    if (n == 8) {  // eight x,y,z in three loads, split into x, y and z with shuffles
      const float* q = p + 3 * v0;
      const __m256 m03 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(q)), _mm_loadu_ps(q + 12), 1);
      const __m256 m14 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(q + 4)), _mm_loadu_ps(q + 16), 1);
      const __m256 m25 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(q + 8)), _mm_loadu_ps(q + 20), 1);
      const __m256 xy = _mm256_shuffle_ps(m14, m25, _MM_SHUFFLE(2, 1, 3, 2));
      const __m256 yz = _mm256_shuffle_ps(m03, m14, _MM_SHUFFLE(1, 0, 2, 1));
      px = _mm256_shuffle_ps(m03, xy, _MM_SHUFFLE(2, 0, 3, 0));
      py = _mm256_shuffle_ps(yz, xy, _MM_SHUFFLE(3, 1, 2, 0));
      pz = _mm256_shuffle_ps(yz, m25, _MM_SHUFFLE(3, 0, 3, 1));
    } else {
      px = _mm256_load_ps(P[0]), py = _mm256_load_ps(P[1]), pz = _mm256_load_ps(P[2]);
    }
    const __m256 x = _mm256_fmadd_ps(sc, px, _mm256_load_ps(H[0])), y = _mm256_fmadd_ps(sc, py, _mm256_load_ps(H[1])),
                 z = _mm256_fmadd_ps(sc, pz, _mm256_load_ps(H[2]));
    // Rotate: x' = x + 2 rw (r × x) + 2 r × (r × x).
    const __m256 cx = _mm256_fmsub_ps(ry, z, _mm256_mul_ps(rz, y)), cy = _mm256_fmsub_ps(rz, x, _mm256_mul_ps(rx, z)),
                 cz = _mm256_fmsub_ps(rx, y, _mm256_mul_ps(ry, x));
    const __m256 ccx = _mm256_fmsub_ps(ry, cz, _mm256_mul_ps(rz, cy)), ccy = _mm256_fmsub_ps(rz, cx, _mm256_mul_ps(rx, cz)),
                 ccz = _mm256_fmsub_ps(rx, cy, _mm256_mul_ps(ry, cx));
    const __m256 ox = _mm256_add_ps(_mm256_fmadd_ps(two, _mm256_fmadd_ps(rw, cx, ccx), x), tx);
    const __m256 oy = _mm256_add_ps(_mm256_fmadd_ps(two, _mm256_fmadd_ps(rw, cy, ccy), y), ty);
    const __m256 oz = _mm256_add_ps(_mm256_fmadd_ps(two, _mm256_fmadd_ps(rw, cz, ccz), z), tz);
    if (n == 8) {  // x, y and z interleaved back into three stores
      const __m256 rxy = _mm256_shuffle_ps(ox, oy, _MM_SHUFFLE(2, 0, 2, 0));
      const __m256 ryz = _mm256_shuffle_ps(oy, oz, _MM_SHUFFLE(3, 1, 3, 1));
      const __m256 rzx = _mm256_shuffle_ps(oz, ox, _MM_SHUFFLE(3, 1, 2, 0));
      const __m256 r03 = _mm256_shuffle_ps(rxy, rzx, _MM_SHUFFLE(2, 0, 2, 0));
      const __m256 r14 = _mm256_shuffle_ps(ryz, rxy, _MM_SHUFFLE(3, 1, 2, 0));
      const __m256 r25 = _mm256_shuffle_ps(rzx, ryz, _MM_SHUFFLE(3, 1, 3, 1));
      float* q = o + 3 * v0;
      _mm256_storeu_ps(q, _mm256_permute2f128_ps(r03, r14, 0x20));
      _mm256_storeu_ps(q + 8, _mm256_permute2f128_ps(r25, r03, 0x30));
      _mm256_storeu_ps(q + 16, _mm256_permute2f128_ps(r14, r25, 0x31));
    } else {
      _mm256_store_ps(R[0], ox);
      _mm256_store_ps(R[1], oy);
      _mm256_store_ps(R[2], oz);
      for (int l = 0; l < n; ++l) {
        for (int c = 0; c < 3; ++c) o[3 * (v0 + l) + c] = R[c][l];
      }
    }
  }
}
#endif
}  // namespace

namespace {
// `centre(j, c)` sets joint j's rest centre and says whether it has one.
template <typename Centre>
void ToDualQuatsAbout(std::span<const Affine34d> transforms, std::span<DualQuat> out, const Centre& centre) {
  for (size_t j = 0; j < transforms.size(); ++j) {
    const Eigen::Matrix3d a = transforms[j].leftCols<3>();
    const double det = a.determinant();
    const double s = std::cbrt(det);
    Eigen::Matrix3d r = a / s;
    if (!(r.transpose() * r).isApprox(Eigen::Matrix3d::Identity(), 1e-6)) {
      r = NearestSimilarity(transforms[j]).rotation.toRotationMatrix();  // not a similarity
    }
    const Eigen::Quaterniond q = Eigen::Quaterniond(r).normalized();
    // The scale about the joint's rest centre c: h = (1 − s) c is added after scaling and the
    // rigid translation is t − R h, so that M v = R (s v + h) + t − R h. An unscaled joint
    // (within rounding) has none, and its data are as without a centre, bit for bit.
    Eigen::Vector3d h = Eigen::Vector3d::Zero(), c;
    if (std::abs(s - 1) > 1e-12 && centre(j, c) && c.allFinite()) h = (1 - s) * c;
    const Eigen::Vector3d t = transforms[j].col(3) - r * h;
    // dual = 0.5 * (t, 0) * q
    const Eigen::Quaterniond tq(0, t.x(), t.y(), t.z());
    const Eigen::Quaterniond d = tq * q;
    DualQuat& o = out[j];
    const double v[8] = {q.x(), q.y(), q.z(), q.w(), 0.5 * d.x(), 0.5 * d.y(), 0.5 * d.z(), 0.5 * d.w()};
    for (int k = 0; k < 8; ++k) o.v[k] = float(v[k]);
    o.scale = float(s);
    for (int k = 0; k < 3; ++k) o.shift[k] = float(h[k]);
  }
}
}  // namespace

void ToDualQuats(std::span<const Affine34d> transforms, std::span<DualQuat> out,
                 std::span<const Affine34d> inverse_bind) {
  ToDualQuatsAbout(transforms, out, [&](size_t j, Eigen::Vector3d& c) {
    if (j >= inverse_bind.size()) return false;
    c = Inverse(inverse_bind[j]).col(3);  // the bind position: where the joint's origin was at bind time
    return true;
  });
}

void ToDualQuats(std::span<const Affine34d> transforms, std::span<DualQuat> out, const Eigen::Matrix3Xd& centres) {
  ToDualQuatsAbout(transforms, out, [&](size_t j, Eigen::Vector3d& c) {
    if (Eigen::Index(j) >= centres.cols()) return false;
    c = centres.col(Eigen::Index(j));
    return true;
  });
}

namespace {

// The hemisphere sign table of `joints` into `signs` when it pays (J² dot products, so not for a
// range tiny next to that, nor past kSignTableJoints); false otherwise.
bool SignTable(std::span<const DualQuat> joints, size_t vertices, uint32_t* signs) {
#if SINEW_HAVE_AVX2_KERNELS
  const size_t J = joints.size();
  if (!CpuHasAvx2Fma() || J > kSignTableJoints || vertices * 4 < J * J) return false;
  for (size_t a = 0; a < J; ++a) {
    for (size_t b = 0; b < J; ++b) signs[a * J + b] = SignBit(joints[b], joints[a]);
  }
  return true;
#else
  (void)joints, (void)vertices, (void)signs;
  return false;
#endif
}

// A range with a sign table made for the whole frame (null: none).
void RangeWithSigns(std::span<const float> rest, const SkinWeights& weights, std::span<const DualQuat> joints,
                    std::span<float> out, size_t begin, size_t end, const uint32_t* signs) {
#if SINEW_HAVE_AVX2_KERNELS
  if (CpuHasAvx2Fma()) {
    Avx2Range(rest.data(), weights.offsets.data(), weights.joints.data(), weights.weights.data(), joints.data(), signs,
              joints.size(), out.data(), begin, end);
    return;
  }
#endif
  (void)signs;
  DualQuaternionSkinningPortableRange(rest, weights, joints, out, begin, end);
}

}  // namespace

void DualQuaternionSkinningRange(std::span<const float> rest, const SkinWeights& weights,
                                 std::span<const DualQuat> joints, std::span<float> out,
                                 size_t begin, size_t end) {
  alignas(64) uint32_t signs[kSignTableJoints * kSignTableJoints];  // 16 KiB
  RangeWithSigns(rest, weights, joints, out, begin, end, SignTable(joints, end - begin, signs) ? signs : nullptr);
}

SINEW_VERTEX_LOOP
void DualQuaternionSkinningPortableRange(std::span<const float> rest, const SkinWeights& weights,
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
  alignas(32) float B[8][kLanes], S[kLanes], H[3][kLanes], P[3][kLanes], R[3][kLanes];
  for (size_t v0 = begin; v0 < end; v0 += kLanes) {
    const int n = static_cast<int>(std::min<size_t>(kLanes, end - v0));
    for (int l = 0; l < kLanes; ++l) {
      float b[8] = {0, 0, 0, 1, 0, 0, 0, 0}, s = 1, h[3] = {0, 0, 0};  // identity for unused lanes
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
          for (int c = 0; c < 3; ++c) h[c] += w[e] * q.shift[c];
        }
        for (int c = 0; c < 3; ++c) P[c][l] = p[3 * v + c];
      } else {
        for (int c = 0; c < 3; ++c) P[c][l] = 0;
      }
      for (int k = 0; k < 8; ++k) B[k][l] = b[k];
      S[l] = s;
      for (int c = 0; c < 3; ++c) H[c][l] = h[c];
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
      const float x = S[l] * P[0][l] + H[0][l], y = S[l] * P[1][l] + H[1][l], z = S[l] * P[2][l] + H[2][l];
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
  // One sign table for the frame, read by every chunk (not one per chunk: at 64 joints that was
  // 4 096 dot products for each 8 192 vertices).
  alignas(64) uint32_t signs[kSignTableJoints * kSignTableJoints];
  const uint32_t* table = SignTable(joints, rest.size() / 3, signs) ? signs : nullptr;
  ParallelFor(pool, rest.size() / 3, kGrain, [&](size_t b, size_t e) {
    RangeWithSigns(rest, weights, joints, out, b, e, table);
  });
}

}  // namespace sinew
