// Linear blend skinning: v'_i = (Σ_j w_ij M_j) v_i.
#pragma once

#include <span>

#include "core/parallel/thread_pool.h"
#include "core/rig/rig.h"

namespace sinew {

// rest: x,y,z per vertex; transforms: one skinning transform per joint (rest -> posed);
// out: x,y,z per vertex (same length as rest). Parallel over vertices when `pool` is given.
// Allocates nothing.
void LinearBlendSkinning(std::span<const float> rest, const SkinWeights& weights,
                         std::span<const Affine34f> transforms, std::span<float> out,
                         ThreadPool* pool);

// The same over vertices [begin, end) only, on the calling thread. On x86-64 CPUs with AVX2 and
// FMA, and skeletons of at most 256 joints, a hand-written kernel runs (joint matrices packed by
// columns on the stack, four influences unrolled); elsewhere the portable loop below. The two
// differ only by float rounding (the sums are associated differently).
void LinearBlendSkinningRange(std::span<const float> rest, const SkinWeights& weights,
                              std::span<const Affine34f> transforms, std::span<float> out,
                              size_t begin, size_t end);

// The portable loop, any CPU, any influence and joint count: the reference the kernel is
// tested against.
void LinearBlendSkinningPortableRange(std::span<const float> rest, const SkinWeights& weights,
                                      std::span<const Affine34f> transforms, std::span<float> out,
                                      size_t begin, size_t end);

}  // namespace sinew
