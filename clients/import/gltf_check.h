// Checks of glTF skin data that assimp does not make: it silently drops non-finite and negative
// weights and clamps joint indices, which would import a malformed file as a different rig.
// Reads the file with tinygltf (a second, independent parser).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace sinew {

// OK for a .gltf/.glb whose skinned primitives have finite positions, finite weights >= 0,
// joint indices inside their skin and finite inverse bind matrices; INVALID_ARGUMENT naming
// the file, mesh, primitive, attribute and element otherwise.
absl::Status CheckGltfSkins(const std::string& path);

}  // namespace sinew
