// The SuperCages Arm (../shared/data/supercages-arm) for the import tests that play or bend it:
// its directory, and its files read with the rig built once.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "clients/import/supercages.h"
#include "core/rig/rig.h"

namespace sinew::testing {

inline const std::string kArmDir = std::string(SINEW_SHARED_DATA) + "/supercages-arm";

inline bool ArmAvailable() { return std::filesystem::exists(kArmDir + "/arm.obj"); }

struct Arm {
  SuperCagesRig files;  // the rig as read, its clips and cage
  std::shared_ptr<const Rig> rig;  // built (BuildRig)
};

inline absl::StatusOr<Arm> LoadArm() {
  auto sc = ReadSuperCages(SuperCagesFilesIn(kArmDir, "arm"));
  if (!sc.ok()) return sc.status();
  auto built = BuildRig(sc->rig);
  if (!built.ok()) return built.status();
  Arm arm;
  arm.files = std::move(*sc);
  arm.rig = std::make_shared<const Rig>(std::move(*built));
  return arm;
}

}  // namespace sinew::testing
