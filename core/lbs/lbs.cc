#include "core/lbs/lbs.h"

#include "core/util/simd.h"

namespace sinew {

namespace {
constexpr size_t kGrain = 8192;  // vertices per parallel chunk
}

SINEW_VERTEX_LOOP
void LinearBlendSkinningRange(std::span<const float> rest, const SkinWeights& weights,
                              std::span<const Affine34f> transforms, std::span<float> out,
                              size_t begin, size_t end) {
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

void LinearBlendSkinning(std::span<const float> rest, const SkinWeights& weights,
                         std::span<const Affine34f> transforms, std::span<float> out,
                         ThreadPool* pool) {
  ParallelFor(pool, rest.size() / 3, kGrain, [&](size_t b, size_t e) {
    LinearBlendSkinningRange(rest, weights, transforms, out, b, e);
  });
}

}  // namespace sinew
