// The rig model: rest mesh, skeleton, sparse skinning weights and the optional parts later
// deformers use (cages, sphere-mesh skeletons, attribute maps, precomputed data).
//
// A caller fills a RigInput (unchecked, as it came off the wire or a file) and calls BuildRig,
// which validates every number and index and returns an immutable Rig ready for deformation:
// weights compacted (zero weights dropped, joint indices as uint16, influences sorted by
// decreasing weight), skeleton ordered parents-first, inverse bind matrices filled in.
//
// Error messages name the offending element with the field paths of the wire format
// (proto/sinew/v1/sinew.proto), e.g. "rig.weights.weights[17] (vertex 5): ...", so that the
// server can pass them through unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/rig/transform.h"

namespace sinew {

struct Skeleton {
  std::vector<std::string> names;
  std::vector<int32_t> parents;        // -1 for roots
  std::vector<Similarity> rest_local;  // bind pose relative to the parent
  // Model space at bind time -> joint frame. One per joint after BuildRig.
  std::vector<Affine34d> inverse_bind;
  // Joint indices, every parent before its children. Filled by BuildRig.
  std::vector<int32_t> order;
  // True when every inverse bind matrix is a similarity (rotation, uniform scale,
  // translation), which dual quaternion skinning needs. Filled by BuildRig.
  bool inverse_bind_is_similarity = true;

  size_t size() const { return parents.size(); }
};

// Which inverse bind matrix is not a similarity and why, for refusals that name it:
// "inverse_bind_matrices[3] has shear or non-uniform scale", "... is a reflection (negative
// determinant)"; empty when every one is a similarity.
std::string NotSimilarity(const Skeleton& skeleton);

// Influences below this fraction of their vertex's weight sum are dropped when a rig is built
// (BuildRig): one moves a vertex by less than 1e-12 of where its joint would take it, below
// float32's resolution, while such weights (denormal ones, or tiny ones whose products with
// small matrix entries are denormal) cost x86 skinning kernels a microcode assist (~100 cycles)
// per multiply-add: a 1M-vertex limb's LBS ran 2.7x slower with them.
inline constexpr double kNegligibleWeight = 1e-12;

// Compressed sparse rows: vertex v's influences are entries offsets[v] .. offsets[v+1]-1,
// sorted by decreasing weight, weights > 0 summing to 1 (those below kNegligibleWeight dropped).
struct SkinWeights {
  std::vector<uint32_t> offsets;  // vertex_count + 1
  std::vector<uint16_t> joints;
  std::vector<float> weights;
};

// The joint with the largest weight at vertex v (the first of equals), or −1 where v has none (a
// rig without skinning weights, or v past them): how a vertex is named to a person, by the part
// of the character it belongs to (quality reports, benches).
int32_t HeaviestJoint(const SkinWeights& w, size_t v);

struct Cage {
  std::string name;
  std::vector<float> positions;     // 3 per vertex
  std::vector<uint32_t> triangles;  // 3 per face
  size_t vertex_count() const { return positions.size() / 3; }
};

// A sphere-mesh skeleton (baseline skinning of point sets): spheres joined by bones, each bone
// the union of the spheres between its two with linearly varying radius (a truncated cone with
// spherical caps). Bones run outwards from the root: a bone's first sphere is on the root side
// (its twist spreads from there), and a sphere ends at most one bone, so the bones form a forest.
struct SphereMesh {
  std::vector<float> centers;  // 3 per sphere
  std::vector<float> radii;
  std::vector<uint32_t> bones;        // 2 per bone: its root-side sphere, its far sphere
  std::vector<uint32_t> triangles;    // 3 per triangle: not supported (must be empty)
  std::vector<uint32_t> bone_joints;  // empty or 1 per bone: the skeleton joint that carries it
  std::vector<float> bone_frames;     // empty or 3 per bone: its zero-azimuth direction (not along it)
  std::vector<uint32_t> point_bones;  // empty or 1 per mesh vertex: the bone it follows
  size_t sphere_count() const { return radii.size(); }
  size_t bone_count() const { return bones.size() / 2; }
  bool empty() const { return bones.empty(); }
};

// A volume mesh around the render mesh for methods that simulate its inside (pbs): particles and
// tetrahedra, either orientation (checked: indices in range, four distinct per tet).
struct TetMeshData {
  std::vector<float> positions;  // 3 per particle
  std::vector<uint32_t> tets;    // 4 per tetrahedron
  size_t particle_count() const { return positions.size() / 3; }
  size_t tet_count() const { return tets.size() / 4; }
  bool empty() const { return tets.empty(); }
};

struct AttributeMap {
  std::string name;
  uint32_t components = 1;
  std::vector<float> values;  // vertex_count * components
};

// The attributes a method reads, checked in one place (by BuildRig, so at upload, and by the
// methods for rigs made without it): "segmentation" (implicit skinning: a joint index per
// vertex), "dqs_blend" (blend: 0 = LBS ... 1 = DQS) and "pbs_jiggle" (pbs: 0 ... 1), each one
// value per vertex. Any other name passes. INVALID_ARGUMENT names `field`, e.g.
// "rig.attributes[0] (segmentation).values[7]: 99 is not a joint index".
absl::Status CheckKnownAttribute(const AttributeMap& a, size_t vertex_count, size_t joint_count,
                                 const std::string& field);

struct PrecomputedData {
  std::string deformer;
  std::string version;
  std::string data;
};

struct Rig {
  std::string name;
  std::vector<float> positions;     // rest positions, 3 per vertex
  std::vector<uint32_t> triangles;  // 3 per triangle
  std::vector<float> normals;       // empty or 3 per vertex
  Skeleton skeleton;
  SkinWeights weights;
  std::vector<Cage> cages;
  SphereMesh sphere_mesh;
  TetMeshData tet_mesh;
  std::vector<AttributeMap> attributes;
  std::vector<PrecomputedData> precomputed;

  // Derived by BuildRig.
  Eigen::Vector3f bbox_min = Eigen::Vector3f::Zero();
  Eigen::Vector3f bbox_max = Eigen::Vector3f::Zero();
  uint32_t max_influences = 0;

  size_t vertex_count() const { return positions.size() / 3; }
  size_t triangle_count() const { return triangles.size() / 3; }
  size_t joint_count() const { return skeleton.size(); }
  float bbox_diagonal() const { return (bbox_max - bbox_min).norm(); }
  // Bytes of memory held by this rig's arrays.
  size_t ResidentBytes() const;
};

// Skinning weights as supplied: compressed rows (offsets non-empty) or a fixed number of
// influences per vertex (offsets empty).
struct WeightsInput {
  std::vector<uint32_t> offsets;
  std::vector<uint32_t> joints;
  std::vector<float> weights;
  uint32_t influences_per_vertex = 0;
  bool normalize = false;  // scale each vertex's weights to sum to 1
};

struct RigInput {
  // Everything but `weights` and the derived fields; skeleton.inverse_bind may be empty
  // (computed) or one per joint.
  Rig rig;
  WeightsInput weights;
};

// The most bones that meet at one sphere of a sphere-mesh (BuildRig refuses more).
inline constexpr uint32_t kMaxBonesAtASphere = 64;

struct RigLimits {
  size_t max_vertices = 10'000'000;
  size_t max_joints = 65535;  // joint indices are stored as uint16
  // Weights must sum to 1 within this, unless normalization was requested.
  float weight_sum_tolerance = 1e-3f;
};

// Validates `input` and builds the rig. INVALID_ARGUMENT names field and index;
// RESOURCE_EXHAUSTED when a limit is exceeded.
absl::StatusOr<Rig> BuildRig(RigInput input, const RigLimits& limits = {});

}  // namespace sinew
