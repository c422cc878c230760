// Dual quaternion skinning (Kavan et al. 2008) with uniform joint scale.
//
// Each skinning transform M_j = [s_j R_j | t_j] is split into its rigid part, blended as a unit
// dual quaternion, and its uniform scale s_j, blended linearly and applied first, about each
// joint's rest centre c_j (its bind position): v' = DQ(Σ w_j q̂_j)( (Σ w_j s_j) v + Σ w_j h_j ),
// with h_j = (1 − s_j) c_j and q̂_j the rigid motion v ↦ R_j v + t_j − R_j h_j. For one influence
// this equals M_j v exactly; for several, scale is blended separately as in the two-phase scheme
// of Kavan et al., so a scaled joint does not shear its neighbours, and moving the rig and its
// pose together moves the skin with them (until 2026-12-07 the scale was about the model's
// origin: a joint scaled 1.2 beside an unscaled one slid a vertex between them 2 cm sideways on a
// character in centimetres, by how far its wrist was from the origin). Antipodal quaternions are
// handled per vertex: every influence's real part is flipped into the hemisphere of the vertex's
// dominant (largest-weight) influence before blending, so q and -q give the same result.
#pragma once

#include <span>

#include "core/parallel/thread_pool.h"
#include "core/rig/rig.h"

namespace sinew {

// One joint's rigid motion and scale, laid out so that blending it is one 8-wide multiply-add.
struct alignas(32) DualQuat {
  float v[8];   // v[0..3] real part x,y,z,w (rotation); v[4..7] dual part 0.5 * (t, 0) * real
  float scale;     // uniform scale applied before the rigid motion ...
  float shift[3];  // ... then this added: (1 − scale) × the joint's rest centre (0 unscaled)
};

// Decomposes similarity transforms into dual quaternions and scales. A transform that is not a
// similarity (shear, non-uniform scale, reflection) yields its nearest rotation. `inverse_bind`
// (the skeleton's, one per transform) gives the rest centres the scales act about; without it
// (or past its end) they act about the origin, which is exact for one influence only.
void ToDualQuats(std::span<const Affine34d> transforms, std::span<DualQuat> out,
                 std::span<const Affine34d> inverse_bind = {});
// The same with the centres given (column j: joint j's), for transforms that map another rest
// shape than the bind's (SuperCages' updated skeleton).
void ToDualQuats(std::span<const Affine34d> transforms, std::span<DualQuat> out, const Eigen::Matrix3Xd& centres);

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
