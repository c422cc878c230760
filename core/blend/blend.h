// LBS/DQS blend ("weight blended" skinning, as in Maya's skinCluster): each vertex is the mix
//   v' = (1 − b_i) · LBS(v_i) + b_i · DQS(v_i)
// of linear blend and dual quaternion skinning under the same weights, with a per-vertex blend
// weight b_i ∈ [0, 1] (0: LBS, 1: DQS). The weights come from the rig's per-vertex attribute
// "dqs_blend" (1 component), or one value for the whole session (BlendParams::weight, which
// wins over the attribute). Useful where DQS bulges (a bent elbow's outside) and LBS collapses
// (a twisted forearm): paint DQS where the twist is.
//
// Data layout: the rig's rest positions and skinning weights as LBS/DQS read them, plus one float
// per vertex of blend weights (a copy of the attribute, whose values outside [0, 1] are refused;
// on a GPU, one device copy per rig and choice, named by the weight as a float). A frame
// computes the joints' matrices and dual quaternions once, then both skins over blocks of 256
// vertices (the block's DQS result waits in a stack buffer, in L1, while LBS runs) and mixes
// them; it allocates nothing.
#pragma once

#include <optional>

#include "core/deformer/deformer.h"

namespace sinew {

struct BlendParams : MethodParams {
  // One blend weight for every vertex, in [0, 1]; unset: the rig's "dqs_blend" attribute.
  std::optional<double> weight;
};

inline constexpr std::string_view kBlendAttribute = "dqs_blend";

std::span<const ParamSpec> BlendParamSpecs();
absl::StatusOr<std::shared_ptr<const MethodParams>> ParseBlendParams(const ParamSet& set, std::string_view field);

// FAILED_PRECONDITION when the rig has no skeleton or weights, or neither a "dqs_blend"
// attribute nor a session weight; INVALID_ARGUMENT for an attribute that is not one finite
// value per vertex in [0, 1] (naming the vertex).
absl::StatusOr<std::unique_ptr<Deformer>> CreateBlendDeformer(std::shared_ptr<const Rig> rig,
                                                              std::shared_ptr<const Prepared> prepared,
                                                              const DeformerConfig& config);

// The skinning itself, over vertices [begin, end) on the calling thread: `blend` one weight per
// vertex; `matrices` and `dual_quats` one per joint.
struct DualQuat;
void BlendSkinningRange(std::span<const float> rest, const SkinWeights& weights, std::span<const float> blend,
                        std::span<const Affine34f> matrices, std::span<const DualQuat> dual_quats,
                        std::span<float> out, size_t begin, size_t end);

}  // namespace sinew
