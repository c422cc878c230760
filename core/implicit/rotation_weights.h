// The elastic method's rotation weights (seed 000 §2.8, spec §2.8.2): the thesis blends each
// node's target rotation R_i from the bone transforms with harmonic "bone heat" weights [BP07]
// rather than the skinning weights. For each bone j, w_j solves
//   (L + A H) w_j = A H p_j
// on the welded rest mesh: L the cotangent Laplacian (the relaxation's own clamped weights), A the
// nodes' barycentric areas, H_ii = 1 / d_i² with d_i the distance from node i to its nearest
// visible bone (the segment to the bone's closest point crosses no triangle but the node's own;
// the nearest bone where none is), p_j(i) = 1 where bone j is that bone (BP07 with c = 1). The
// weights of a node sum to 1; each node keeps its kMaxRotationWeights largest, renormalised.
//
// Bones: the joints that carry skinning weight somewhere, each the segments from its rest
// position to its children's; a leaf extends along its parent's direction as far as its piece
// (Segmentation) reaches, as the bone fields' leaves do. One factorisation (Eigen's simplicial
// LDLᵀ), one solve per bone that is nearest to some node. Deterministic.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <functional>

#include "absl/status/statusor.h"
#include "core/rig/rig.h"

namespace sinew {

inline constexpr int kMaxRotationWeights = 4;

// The most node × weighted-bone pairs BoneHeatWeights takes (a million nodes and 500 bones):
// each node weighs every bone and each bone may be a solve over every node.
inline constexpr uint64_t kMaxBoneHeatPairs = 500'000'000;

// Per node: joints[offsets[i] .. offsets[i + 1]) with their weights, the largest first.
struct NodeWeights {
  std::vector<uint32_t> offsets;
  std::vector<uint16_t> joints;
  std::vector<float> weights;
};

// `rest`: x,y,z per node; `node_of_vertex`: the rig vertex -> node map; `ring_offsets`, `ring`,
// `cot`: the nodes' one-rings and their (symmetric) cotangent weights; `mean_edge` floors the
// bone distances (a thousandth of it). FAILED_PRECONDITION when the rig has no skinning weights,
// INVALID_ARGUMENT for a bad segmentation attribute, RESOURCE_EXHAUSTED past kMaxBoneHeatPairs
// (before any work), INTERNAL when the factorisation fails. `progress` (may be empty) hears the
// fraction done every 1 024 nodes and after each bone's solve; once it returns false the work
// stops there: CANCELLED.
absl::StatusOr<NodeWeights> BoneHeatWeights(const Rig& rig, std::span<const float> rest,
                                            std::span<const uint32_t> node_of_vertex,
                                            std::span<const uint32_t> ring_offsets, std::span<const uint32_t> ring,
                                            std::span<const float> cot, double mean_edge,
                                            const std::function<bool(double)>& progress = {});

}  // namespace sinew
