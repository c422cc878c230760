#include "core/lbs/lbs.h"

#include "core/util/simd.h"

#if SINEW_HAVE_AVX2_KERNELS
#include <immintrin.h>
#endif

namespace sinew {

namespace {
constexpr size_t kGrain = 8192;  // vertices per parallel chunk

#if SINEW_HAVE_AVX2_KERNELS
// AVX2 + FMA: each joint's matrix is stored by columns, each padded to 4 floats (64 bytes, one
// cache line), so that one influence is two 8-wide multiply-adds and the blended matrix times
// (x, y, z, 1) is two more and one 4-wide add, with no horizontal sums. Columns are packed on the
// stack once per call (at most kStackJoints joints).
__attribute__((target("avx2,fma"))) void Avx2Range(const float* __restrict p, const uint32_t* __restrict offsets,
                                                   const uint16_t* __restrict joints, const float* __restrict w,
                                                   const float* __restrict cols, float* __restrict o, size_t begin,
                                                   size_t end) {
  // Few loads per vertex (the limit here): four weights and four joint indices in one load each,
  // spread with shuffles; the rest position in one load where the next vertex follows in range.
  const __m256i lane1 = _mm256_set1_epi32(1), lane2 = _mm256_set1_epi32(2), lane3 = _mm256_set1_epi32(3);
  const __m256i xxxxyyyy = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  const __m256 one_hi = _mm256_setr_ps(0, 0, 0, 0, 1, 1, 1, 1);
  uint32_t e0 = offsets[begin];
  for (size_t v = begin; v < end; ++v) {
    const uint32_t e1 = offsets[v + 1], n = e1 - e0;
    const uint16_t* jv = joints + e0;
    const float* wv = w + e0;
    __m256 c01, c23;
    if (n == 4) {  // the common case, unrolled into two independent chains
      uint64_t jj;
      __builtin_memcpy(&jj, jv, sizeof(jj));
      const float* a = cols + 16 * size_t(jj & 0xffff);
      const float* b = cols + 16 * size_t((jj >> 16) & 0xffff);
      const float* c = cols + 16 * size_t((jj >> 32) & 0xffff);
      const float* d = cols + 16 * size_t(jj >> 48);
      const __m256 w4 = _mm256_castps128_ps256(_mm_loadu_ps(wv));
      const __m256 wa = _mm256_broadcastss_ps(_mm256_castps256_ps128(w4));
      const __m256 wb = _mm256_permutevar8x32_ps(w4, lane1);
      const __m256 wc = _mm256_permutevar8x32_ps(w4, lane2);
      const __m256 wd = _mm256_permutevar8x32_ps(w4, lane3);
      c01 = _mm256_add_ps(_mm256_fmadd_ps(wb, _mm256_load_ps(b), _mm256_mul_ps(wa, _mm256_load_ps(a))),
                          _mm256_fmadd_ps(wd, _mm256_load_ps(d), _mm256_mul_ps(wc, _mm256_load_ps(c))));
      c23 = _mm256_add_ps(_mm256_fmadd_ps(wb, _mm256_load_ps(b + 8), _mm256_mul_ps(wa, _mm256_load_ps(a + 8))),
                          _mm256_fmadd_ps(wd, _mm256_load_ps(d + 8), _mm256_mul_ps(wc, _mm256_load_ps(c + 8))));
    } else {
      c01 = _mm256_setzero_ps();
      c23 = _mm256_setzero_ps();
      for (uint32_t e = 0; e < n; ++e) {
        const float* c = cols + 16 * size_t{jv[e]};
        const __m256 wj = _mm256_broadcast_ss(wv + e);
        c01 = _mm256_fmadd_ps(wj, _mm256_load_ps(c), c01);
        c23 = _mm256_fmadd_ps(wj, _mm256_load_ps(c + 8), c23);
      }
    }
    e0 = e1;
    __m256 xy, z1;
    const bool last = v + 1 == end;
    if (!last) {  // x, y, z and the next vertex's x
      const __m256 pv = _mm256_castps128_ps256(_mm_loadu_ps(p + 3 * v));
      xy = _mm256_permutevar8x32_ps(pv, xxxxyyyy);
      z1 = _mm256_blend_ps(_mm256_permutevar8x32_ps(pv, lane2), one_hi, 0xF0);
    } else {
      xy = _mm256_set_m128(_mm_broadcast_ss(p + 3 * v + 1), _mm_broadcast_ss(p + 3 * v));
      z1 = _mm256_set_m128(_mm_set1_ps(1.f), _mm_broadcast_ss(p + 3 * v + 2));
    }
    const __m256 r = _mm256_fmadd_ps(c23, z1, _mm256_mul_ps(c01, xy));
    const __m128 out = _mm_add_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
    if (!last) {
      _mm_storeu_ps(o + 3 * v, out);  // the 4th float is the next vertex's x, written next
    } else {                          // the range's last vertex: the next one may be another thread's
      _mm_storel_pi(reinterpret_cast<__m64*>(o + 3 * v), out);
      _mm_store_ss(o + 3 * v + 2, _mm_movehl_ps(out, out));
    }
  }
}

constexpr size_t kStackJoints = 256;
#endif

}  // namespace

SINEW_VERTEX_LOOP
void LinearBlendSkinningPortableRange(std::span<const float> rest, const SkinWeights& weights,
                                      std::span<const Affine34f> transforms, std::span<float> out, size_t begin,
                                      size_t end) {
  const uint32_t* __restrict offsets = weights.offsets.data();
  const uint16_t* __restrict joints = weights.joints.data();
  const float* __restrict w = weights.weights.data();
  const float* __restrict mats = transforms.data()->data();  // 12 floats per joint, row-major
  const float* __restrict p = rest.data();
  float* __restrict o = out.data();
  for (size_t v = begin; v < end; ++v) {
    float m[12] = {};
    for (uint32_t e = offsets[v]; e < offsets[v + 1]; ++e) {
      const float* mj = mats + 12 * size_t{joints[e]};
      const float wj = w[e];
      for (int k = 0; k < 12; ++k) m[k] += wj * mj[k];
    }
    const float x = p[3 * v], y = p[3 * v + 1], z = p[3 * v + 2];
    o[3 * v] = m[0] * x + m[1] * y + m[2] * z + m[3];
    o[3 * v + 1] = m[4] * x + m[5] * y + m[6] * z + m[7];
    o[3 * v + 2] = m[8] * x + m[9] * y + m[10] * z + m[11];
  }
}

void LinearBlendSkinningRange(std::span<const float> rest, const SkinWeights& weights,
                              std::span<const Affine34f> transforms, std::span<float> out,
                              size_t begin, size_t end) {
  const float* mats = transforms.data()->data();  // 12 floats per joint, row-major
#if SINEW_HAVE_AVX2_KERNELS
  // Packing costs 16 floats per joint: worth it unless the range is tiny next to the skeleton.
  if (CpuHasAvx2Fma() && transforms.size() <= kStackJoints && end - begin >= transforms.size() / 4) {
    alignas(64) float cols[16 * kStackJoints];
    for (size_t j = 0; j < transforms.size(); ++j) {
      const float* m = mats + 12 * j;
      float* c = cols + 16 * j;
      for (int col = 0; col < 4; ++col) {
        for (int row = 0; row < 3; ++row) c[4 * col + row] = m[4 * row + col];
        c[4 * col + 3] = 0;
      }
    }
    Avx2Range(rest.data(), weights.offsets.data(), weights.joints.data(), weights.weights.data(), cols, out.data(),
              begin, end);
    return;
  }
#endif
  LinearBlendSkinningPortableRange(rest, weights, transforms, out, begin, end);
}

void LinearBlendSkinning(std::span<const float> rest, const SkinWeights& weights,
                         std::span<const Affine34f> transforms, std::span<float> out,
                         ThreadPool* pool) {
  ParallelFor(pool, rest.size() / 3, kGrain, [&](size_t b, size_t e) {
    LinearBlendSkinningRange(rest, weights, transforms, out, b, e);
  });
}

}  // namespace sinew
