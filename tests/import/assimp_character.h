// A rigged character from assimp-testmodels (/usr/share/assimp/models, installed by
// scripts/install-deps.sh) for the import tests: its path, and the asset read with its rig built
// once. Tests skip when the file is missing: `if (!CharacterAvailable(kBcn)) GTEST_SKIP() <<
// kAssimpMissing;`.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "clients/import/asset_import.h"
#include "core/rig/rig.h"

namespace sinew::testing {

inline const std::string kBcn = "X/BCN_Epileptic.X";  // 15k vertices, 58 joints, an animated clip
inline const std::string kTestwuson = "X/Testwuson.X";  // 11k vertices, 40 joints, mirror seams, a run clip
inline constexpr const char* kAssimpMissing = "assimp-testmodels not installed (scripts/install-deps.sh installs it)";

// (Appended, not `std::string(…) + "/" + relative`: GCC 12 at -O2 warns, wrongly, that the
// temporary's copy runs past its small-string buffer.)
inline std::string AssimpModel(const std::string& relative) {
  std::string path = SINEW_ASSIMP_MODELS;
  path.append("/").append(relative);
  return path;
}
inline bool CharacterAvailable(const std::string& relative) { return std::filesystem::exists(AssimpModel(relative)); }

struct Character {
  ImportedAsset asset;             // as read (its clips)
  std::shared_ptr<const Rig> rig;  // built (BuildRig)
};

inline absl::StatusOr<Character> LoadCharacter(const std::string& relative) {
  auto asset = ImportAsset(AssimpModel(relative));
  if (!asset.ok()) return asset.status();
  auto built = BuildRig(asset->rig);
  if (!built.ok()) return built.status();
  Character c;
  c.asset = std::move(*asset);
  c.rig = std::make_shared<const Rig>(std::move(*built));
  return c;
}

}  // namespace sinew::testing
