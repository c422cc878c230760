// Imports rigged, animated assets (FBX, glTF 2.0, Collada, DirectX .x and every other format
// assimp reads) into Sinew's rig model and clips. Client side only: the server never parses
// asset files.
//
// Mapping:
// * Joints: every node that is a bone of some mesh, every node holding an imported mesh, and
//   all their ancestors up to the scene root (non-bone parents keep their transforms), in
//   parents-first order. Rest local transforms are the nodes' transforms (non-uniform scale or
//   shear is approximated by a similarity and reported).
// * Mesh: all triangle meshes concatenated, in model space at bind time (mesh vertices times
//   their node's global transform). Skinned meshes keep their bone weights (any number per
//   vertex); meshes without bones are bound rigidly to their node; vertices no bone weighs are
//   bound to their mesh's node.
// * Inverse bind matrices: bone offset matrix ∘ inverse(mesh node's global transform), so the
//   bind pose (core's BindPose) reproduces the file's mesh; other joints: inverse rest world.
// * Clips: one per animation, keys converted from ticks to seconds; channels of nodes that
//   move no vertex are ignored.
// Whatever is dropped or approximated (morph targets, non-uniform scale, unweighted vertices,
// mesh animations, ...) is listed in `notes`.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/clip/clip.h"
#include "core/rig/rig.h"

namespace sinew {

struct MeshRange {
  std::string name;
  uint32_t first_vertex = 0, vertex_count = 0;
  uint32_t first_triangle = 0, triangle_count = 0;
  bool skinned = false;
};

struct ImportedAsset {
  std::string path;
  RigInput rig;
  std::vector<Clip> clips;
  std::vector<CageClip> cage_clips;  // cage animations (SuperCages files; assimp has none)
  std::vector<MeshRange> meshes;
  size_t bones = 0;                // nodes used as bones by some mesh
  std::vector<std::string> notes;  // what was dropped or approximated
};

// INVALID_ARGUMENT naming the file and what is wrong when it cannot be read or holds no
// triangle mesh.
absl::StatusOr<ImportedAsset> ImportAsset(const std::string& path);

}  // namespace sinew
