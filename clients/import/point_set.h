// A point set with a sphere-mesh skeleton made from a skinned character, for baseline skinning
// (seed 003) where no scanned point set with a sphere-mesh is at hand: the paper's statues are
// scans of 0.46–0.54 M points; assimp's test characters are triangle meshes with skeletons.
// Client side (like asset_import.h): the server only ever sees the resulting rig.
//
// How (docs/baseline.md):
// * Points: `points` samples uniform by area over the triangles (fixed seed), each with the
//   normal interpolated from area-weighted vertex normals and the skin weights interpolated from
//   its triangle's corners; its dominant joint is the largest of those.
// * Spheres: one at each "body joint" — a joint dominating at least `min_share` of the samples —
//   at its bind-pose position; a body joint nearer its nearest body-joint ancestor than
//   `merge_distance` (× the bounding diagonal) or than 3/4 of their thickness (below, from each
//   one's own samples) is merged into it: its spheres would nearly hold each other. Body joints
//   with no body-joint descendant get one more sphere at the tip of their samples along their
//   parent's direction.
// * Bones: from each body joint to each of its nearest body-joint descendants (and to its tip).
//   A bone turns with (SphereMesh::bone_joints) the skeleton parent of the joint it reaches, which
//   carries that joint's position: the bone from the elbow to the wrist turns with the elbow,
//   and with a clavicle merged into the chest the upper arm's bone still turns with the clavicle.
//   Bones leave a junction sphere where a joint has several (pelvis, chest).
// * Radii: the local thickness — `radius_scale` × the 10th percentile of the distances from the
//   joint to the samples of its own, its parent's and its children's parts (about the largest
//   ball inside the body there), at least 1 % of the diagonal; a child's radius is clamped so
//   that every bone keeps its cone (|r_a − r_b| < 0.9 × its length).
// * Each sample follows (SphereMesh::point_bones) the nearest bone leaving the sphere of its
//   dominant joint (or of the body joint that joint was merged into).
// * Skin weights for comparisons (LBS, DQS on the same points): the paper's comparison uses
//   the Gaussian weights of Fu et al. 2020a, which it does not spell out; here a bone weighs a
//   sample exp(−(d/σ)²), d the sample's distance to the bone's axis segment, σ = `weight_width` ×
//   the bone's mean radius; the four largest bones' weights go to their carrying joints,
//   normalized. (Distances to the bones' solids, 0 inside, tie inside junctions and the top four
//   then jump between neighbouring points: LBS tore 1 % of neighbour pairs apart with them.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/rig/rig.h"

namespace sinew {

struct PointSetOptions {
  size_t points = 500000;
  uint64_t seed = 2021;
  double min_share = 0.002;       // of the samples, for a joint to get a sphere
  double merge_distance = 0.01;   // × the bounding diagonal
  double radius_scale = 0.8;
  double weight_width = 1.0;
};

struct PointSetReport {
  size_t spheres = 0, bones = 0, tips = 0, merged = 0, junctions = 0;
  std::vector<std::string> notes;  // what was clamped or left out, by joint name
  std::vector<uint32_t> triangle;  // per point: the character's triangle it was sampled on
};

// `character` must have triangles, a skeleton and weights. INVALID_ARGUMENT naming what is
// missing; FAILED_PRECONDITION when fewer than two joints dominate any samples.
absl::StatusOr<RigInput> PointSetFromCharacter(const RigInput& character, const PointSetOptions& options,
                                               PointSetReport* report = nullptr);

}  // namespace sinew
