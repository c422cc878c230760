// Content address of a rig: lowercase hex SHA-256 of its serialized `sinew.v1.Rig` bytes, as
// uploaded. Same bytes -> same id; the client library serializes deterministically so that
// the same rig data gives the same id.
#pragma once

#include <string>
#include <string_view>

namespace sinew::v1 {
class Rig;

std::string Sha256Hex(std::string_view bytes);
// Serializes `rig` deterministically (map and unknown-field order fixed).
std::string SerializeRigDeterministic(const Rig& rig);
bool IsRigId(std::string_view id);  // 64 lowercase hex digits

}  // namespace sinew::v1
