// Checks of glTF skin data that assimp does not make: it silently drops non-finite and negative
// weights and clamps joint indices, which would import a malformed file as a different rig.
// Reads the file with tinygltf (a second, independent parser).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace sinew {

// OK for a glTF file (JSON, or binary by its "glTF" magic whatever its name) whose skinned
// primitives have finite positions, finite weights >= 0, joint indices inside their skin, and
// whose skins have a finite MAT4 float inverse bind matrix per joint (sparse accessors applied);
// INVALID_ARGUMENT naming the file, skin or mesh, primitive, attribute and element otherwise.
absl::Status CheckGltfSkins(const std::string& path);

}  // namespace sinew
