// Implicit skinning (seed 000): the skin is tracked as the iso-surfaces of one implicit field
// composed from per-bone fields that move rigidly with their bones.
//
// Two methods share one precomputation (ImplicitModel, per rig and operator choice):
// - "implicit" (history-independent, [VBG+13]): dual quaternion skinning, then each vertex
//   marches back to its rest iso value with damped Newton steps, interleaved with tangential
//   mean-value relaxation; vertices stop at contacts (gradient jump > 55° or loss of
//   monotonicity), which are then smoothed (§2.7).
// - "elastic-implicit" (history-dependent, [VGB+14]): the previous result moved rigidly by each
//   vertex's bone, projected, then relaxed: one energy (ARAP with rotations fixed to the DQS
//   blend, a penalty holding each vertex on its iso surface and one on its own side of a
//   contact) descended by Gauss-Newton with conjugate gradient to convergence; large motions are
//   split into sub-steps (§2.8).
// The preparation is in implicit_skinning.cc, the deformers in tracking.cc, the moved-field
// evaluation they share in field_eval.h. Design notes: docs/implicit-skinning.md.
//
// Layout: every per-vertex loop works on "nodes", the mesh's vertices with equal rest positions
// welded (UV seams), so that seams never tear; results are copied to every vertex, and a vertex
// of an open seam within core/geometry/weld.h's tolerance of an earlier node (a mirror seam a
// few ulps off: WeldSeams) takes that node's.
#pragma once

#include <memory>
#include <vector>

#include <Eigen/Core>

#include "core/deformer/deformer.h"
#include "core/implicit/bone_fields.h"
#include "core/implicit/field_grid.h"
#include "core/implicit/operators.h"
#include "core/implicit/rotation_weights.h"

namespace sinew {

// A binary composition tree over the bone fields (§2.5.5). Leaves are numbered in depth-first
// order, so every subtree covers a contiguous range of leaves.
struct CompositionTree {
  struct Node {
    int32_t left = -1, right = -1;  // children (inner nodes)
    int32_t leaf = -1;              // field index (leaves)
    JointOperator op = JointOperator::kUnion;
    uint16_t lo = 0, hi = 0;        // leaves [lo, hi) below this node
  };
  std::vector<Node> nodes;
  int32_t root = -1;
};

// Per-rig data of implicit skinning, shared read-only by the sessions of both methods.
class ImplicitModel : public Prepared {
 public:
  // The bone fields (ordered as the tree's leaves) and their grids.
  std::vector<BoneField> fields;
  std::vector<FieldGrid> grids;
  std::vector<Eigen::Vector3f> sphere_centers;  // rest space, bounding each grid box
  std::vector<float> sphere_radii;
  CompositionTree tree;
  std::shared_ptr<const CompositionOperators> operators;

  // Welded mesh.
  std::vector<uint32_t> node_of_vertex;    // vertex -> the node whose result it takes
  std::vector<uint32_t> vertex_of_node;    // node -> its first vertex
  std::vector<float> rest;                 // x,y,z per node
  std::vector<float> iso;                  // rest value of the composed field per node
  std::vector<uint8_t> in_field;           // 1 when the node is tracked (see PrepareImplicit)
  double min_field_radius = 0;             // ImplicitConfig::min_field_radius it was prepared with
  bool sample_triangles = false;           // ImplicitConfig::sample_triangles it was prepared with
  bool track_sampled_pieces = false;       // ImplicitConfig::track_sampled_pieces (and sample_triangles)
  std::vector<int32_t> own_leaf;           // field of the node's bone (below), or -1
  // Per field: its support radius over the mean one. Near its surface a field reads f ≈ ½ −
  // (15/16) d / r (d the signed distance, t_r's slope), so s (f − ½) is −(15/16) d / r̄ on every
  // field alike: a depth on one scale, whatever each piece's size.
  std::vector<float> depth_scale;
  // At rest, how much deeper the node is in another field than in its own, on that scale
  // (s_other (f_other − ½) − s_own (f_own − ½), where positive): the elastic method keeps each
  // node on its own side of a contact with that field relative to this. kRestPairs slots per
  // node (implicit_device), the largest excesses: the field (-1: none) and its excess.
  std::vector<int32_t> rest_pair_leaf;
  std::vector<float> rest_pair_excess;
  // Per field: the field of its joint's parent (-1: none). A bend folds a piece onto the pieces
  // either side of its joint; the elastic method's own-side terms hold a node against those.
  std::vector<int32_t> parent_field;
  std::vector<int32_t> bone;               // joint per node: Segmentation's, or a split-weight crease
                                           // vertex's other bone (see PrepareImplicit)
  std::vector<float> step_cap;             // longest Newton step per node (rest units)
  // One-rings (CSR over nodes). Ordered (counter-clockwise seen from outside) where the fan is
  // closed; `mvc` holds the tangent-plane mean value coordinates for closed fans, empty
  // (ring_closed = 0) elsewhere.
  std::vector<uint32_t> ring_offsets, ring;
  std::vector<uint8_t> ring_closed;
  std::vector<float> mvc;
  std::vector<float> cot;  // EIS: cotangent weights per ring entry (clamped positive)
  std::vector<float> cot_sum;  // EIS: per node, its ring's cotangent weights added in ring order
  // EIS: harmonic "bone heat" weights per node for the target rotations (rotation_weights.h),
  // computed and used when ImplicitConfig::rotation_weights is kHarmonic (else empty).
  NodeWeights heat;
  // EIS: the welded mesh's connected components (CSR: each component's nodes, ascending) and
  // each node's component. The relaxation minimises each component's energy on its own (its
  // sums, step fraction, trust and end are per component): the energy is a sum over components
  // with no term between them, so a piece that converges slowly (BCN_Epileptic's ponytail, in
  // its head's mesh) must not decide where another (its legs' mesh) stops.
  std::vector<uint32_t> component_offsets, component_nodes, component_of_node;
  uint32_t ComponentSize(uint32_t c) const { return component_offsets[c + 1] - component_offsets[c]; }
  double mean_edge = 0;
  // Squared gradient norm below which a vertex stops marching (null gradient): (10⁻³ × the
  // typical gradient 15 / (16 r̄))², r̄ the mean support radius.
  float gradient_floor2 = 0;
  // (15 / (16 r̄))², the typical field gradient squared: scales the elastic relaxation's
  // surface terms to distances.
  float typical_gradient2 = 0;

  // What the preparation made, for its Summary: pieces of 8 vertices or more (by largest weight)
  // that got no field (too few points between their culling planes, or a patch), and fields too
  // thin to track (composed only).
  size_t pieces_without_field = 0;
  size_t thin_fields = 0;
  size_t hidden_nodes = 0;  // nodes in a field left untracked for lying inside the rest skin (PrepareImplicit)
  // Skin inside the rest skin (PrepareImplicit) is not tracked; it is carried by the skin around
  // it, so that it stays inside (FollowPosition). CSR over nodes (an empty row: a node outside
  // the rest skin): the hidden node's kHiddenSources nearest nodes outside the rest skin, at
  // rest, and their weights (inverse squared distance, summing to 1).
  std::vector<uint32_t> follow_offsets, follow_source;
  std::vector<float> follow_weight;
  std::vector<uint32_t> follow_sources;  // the sources, each once, ascending

  size_t Bytes() const override;
  // "34 bone fields (…); …": what a user reading `sinew play` or RigInfo.preparations needs to
  // tell why skin stays untracked.
  std::string Summary() const override;
  size_t node_count() const { return iso.size(); }
};

// How many of the nearest nodes outside the rest skin carry a node inside it.
inline constexpr size_t kHiddenSources = 12;

// Where the skin around hidden node i carries it (ImplicitModel::follow_offsets): the weighted
// sum, in source order, of each source j's position `at(j)` plus its rest offset to i turned by
// the rotation `rotation(j)` (each source carries the node as a rigid body; a rig moved rigidly
// moves it rigidly).
template <class At, class Rotation>
Eigen::Vector3f FollowPosition(const ImplicitModel& m, uint32_t i, const At& at, const Rotation& rotation) {
  Eigen::Vector3f p = Eigen::Vector3f::Zero();
  const Eigen::Vector3f rest_i(m.rest[3 * i], m.rest[3 * i + 1], m.rest[3 * i + 2]);
  for (uint32_t k = m.follow_offsets[i]; k < m.follow_offsets[i + 1]; ++k) {
    const uint32_t j = m.follow_source[k];
    const Eigen::Vector3f rest_j(m.rest[3 * j], m.rest[3 * j + 1], m.rest[3 * j + 2]);
    const Eigen::Matrix3f r = rotation(j);
    p += m.follow_weight[k] * (at(j) + r * (rest_i - rest_j));
  }
  return p;
}

// Builds the model: fits the fields (progress to 30 %), bakes them (to 80 %), gets the shared
// operators (to 90 %), composes the tree and computes the iso values and the mesh data. Needs a
// skeleton, skinning weights and triangles.
absl::StatusOr<std::shared_ptr<const Prepared>> PrepareImplicit(const Rig& rig, const DeformerConfig& config,
                                                                ThreadPool* pool, const ProgressFn& progress);
std::string ImplicitKey(const DeformerConfig& config);

absl::StatusOr<std::unique_ptr<Deformer>> CreateImplicitDeformer(std::shared_ptr<const Rig> rig,
                                                                 std::shared_ptr<const Prepared> prepared,
                                                                 const DeformerConfig& config);

// The operator of every joint of `rig` under `config` (INVALID_ARGUMENT for a joint index out of
// range or listed twice).
absl::StatusOr<std::vector<JointOperator>> JointOperators(const Rig& rig, const ImplicitConfig& config);
// MethodInfo::check: skinning weights, triangles, the joints of `joints` within the rig.
absl::Status CheckImplicitConfig(const Rig& rig, const DeformerConfig& config);

// Builds the composition tree bottom-up over the skeleton: at each joint its own field, then
// the subtrees of its children joined by bulge joints, then the others (§2.5.5). `leaf_joint`
// gives the joint of every field; returns the order of the fields as leaves.
std::vector<int32_t> BuildCompositionTree(const Skeleton& skeleton, const std::vector<int32_t>& leaf_joint,
                                          const std::vector<JointOperator>& ops, CompositionTree* tree);

// Evaluates the composed field at points in the rest pose (fields not moved). For tests and
// tools; the deformers evaluate moved fields.
float EvaluateRestField(const ImplicitModel& model, const Eigen::Vector3f& x, Eigen::Vector3f* gradient);

}  // namespace sinew
