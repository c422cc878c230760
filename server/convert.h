// Translation between sinew.v1 messages and core types. Packed little-endian `bytes` fields
// are checked for length and copied; every error names the wire field.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "core/clip/clip.h"
#include "core/deformer/deformer.h"
#include "core/rig/pose.h"
#include "core/rig/rig.h"
#include "sinew/v1/sinew.pb.h"

namespace sinew::server {

absl::StatusOr<RigInput> RigFromProto(const v1::Rig& rig);

// Decodes into `out`, reusing its storage (no allocation once sized for the rig).
absl::Status PoseFromProto(const v1::Pose& pose, Pose& out);
absl::Status CagePoseFromProto(const v1::CagePose& cage, CageFrame& out, absl::string_view field);
absl::Status SphereFrameFromProto(const v1::SphereMeshPose& spheres, SphereFrame& out);
absl::Status CageFramesFromProto(const google::protobuf::RepeatedPtrField<v1::CagePose>& cages,
                                 std::vector<CageFrame>& out);

// `field` prefixes error messages, e.g. "clip" -> "clip.tracks[2].rotations: ...".
absl::StatusOr<Clip> ClipFromProto(const v1::Clip& clip, size_t joint_count);

// One method, or a pipeline (config.stages); errors name the field under `field` ("deformer",
// "deformer.stages[1]").
absl::StatusOr<DeformerConfig> DeformerConfigFromProto(const v1::DeformerConfig& config,
                                                       const std::string& field = "deformer");

void FillRigInfo(const Rig& rig, v1::RigInfo& info);

}  // namespace sinew::server
