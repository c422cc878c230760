// Dual quaternion skinning (Kavan et al. 2008) with uniform joint scale.
//
// Each skinning transform M_j = [s_j R_j | t_j] is split into its rigid part (R_j, t_j), blended
// as a unit dual quaternion, and its uniform scale s_j, blended linearly and applied first in
// rest space: v' = DQ(Σ w_j q̂_j)( (Σ w_j s_j) v ). For one influence this equals M_j v exactly;
// for several, scale is blended separately as in the two-phase scheme of Kavan et al., so a
// scaled joint does not shear its neighbours. Antipodal quaternions are handled per vertex:
// every influence's real part is flipped into the hemisphere of the vertex's dominant
// (largest-weight) influence before blending, so q and -q give the same result.
#pragma once

#include <span>

#include "core/parallel/thread_pool.h"
#include "core/rig/rig.h"

namespace sinew {

// One joint's rigid motion and scale, laid out so that blending it is one 8-wide multiply-add.
struct alignas(32) DualQuat {
  float v[8];   // v[0..3] real part x,y,z,w (rotation); v[4..7] dual part 0.5 * (t, 0) * real
  float scale;  // uniform scale applied before the rigid motion
};

// Decomposes similarity transforms into dual quaternions and scales. A transform that is not a
// similarity (shear, non-uniform scale, reflection) yields its nearest rotation.
void ToDualQuats(std::span<const Affine34d> transforms, std::span<DualQuat> out);

void DualQuaternionSkinning(std::span<const float> rest, const SkinWeights& weights,
                            std::span<const DualQuat> joints, std::span<float> out,
                            ThreadPool* pool);

// The same over vertices [begin, end) only, on the calling thread. On x86-64 CPUs with AVX2 and
// FMA a hand-written kernel runs (one 8-wide multiply-add per influence, eight vertices
// normalised and applied at a time; hemisphere signs from a per-call table for skeletons of at
// most 64 joints); elsewhere the portable loop below. They differ only by float rounding.
void DualQuaternionSkinningRange(std::span<const float> rest, const SkinWeights& weights,
                                 std::span<const DualQuat> joints, std::span<float> out,
                                 size_t begin, size_t end);

// The portable loop, any CPU: the reference the kernel is tested against.
void DualQuaternionSkinningPortableRange(std::span<const float> rest, const SkinWeights& weights,
                                         std::span<const DualQuat> joints, std::span<float> out,
                                         size_t begin, size_t end);

}  // namespace sinew
