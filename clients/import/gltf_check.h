// Checks of glTF data that assimp does not make: it silently drops non-finite and negative
// weights, clamps joint indices, reads weights of any type as floats, drops triangles whose
// indices are out of range and weights whose count is not the vertices', and recurses once per
// level of the node tree, which would import a malformed file as a different rig (or crash).
// Reads the file with tinygltf (a second, independent parser).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace sinew {

// The deepest node tree CheckGltfSkins takes: a chain of more nodes from a scene root is refused
// (assimp 5.2 recurses once per level; 20,000 levels overflowed the CLI's stack). A real
// skeleton is under 100 nodes deep (a human with fingers about 30, a long tail a few dozen more).
inline constexpr int kMaxGltfNodeDepth = 1000;

// OK for a glTF file (JSON, or binary by its "glTF" magic whatever its name) whose
// * node tree is a forest (one parent per node at most, no cycle) at most kMaxGltfNodeDepth deep;
// * skins have a finite MAT4 float inverse bind matrix per joint;
// * mesh primitives (those nodes show) have finite positions, every attribute one element per
//   vertex (POSITION's count), indices that are vertices, whole triangles, WEIGHTS_n of VEC4
//   floats >= 0 each with its JOINTS_n, JOINTS_n of VEC4 unsigned bytes or shorts (one type for
//   all sets) inside the skins of the nodes that show them
// (sparse accessors applied; accessors without a buffer view only as sparse ones, each accessor
// read once); INVALID_ARGUMENT naming the file, node, skin or mesh, primitive, attribute,
// accessor and element otherwise. What the file holds that the importer plays otherwise (STEP and
// CUBICSPLINE samplers, played as linear) is added to `notes`, if given.
absl::Status CheckGltfSkins(const std::string& path, std::vector<std::string>* notes = nullptr);

}  // namespace sinew
