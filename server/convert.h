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

// The most entries of a Rig's repeated message fields an upload may hold. Each parses into an
// object of about 100 bytes, and an empty one takes 2 bytes on the wire: unchecked, 10 MB of
// empty `precomputed` entries took 1.2 GB to parse (issue 17).
inline constexpr size_t kMaxRigJoints = 65535, kMaxRigCages = 256, kMaxRigAttributes = 256,
                        kMaxRigPrecomputed = 64;
// Fields of a rig (anywhere in it) that this server's sinew.v1 does not know: a newer client's
// few are kept by the parse, as protobuf keeps them; many cost the parse 8-30 times their bytes.
inline constexpr size_t kMaxRigUnknownFields = 4096;
// Counts those entries, and the unknown fields, in a serialized Rig without parsing it (a
// wire-format scan that allocates nothing): RESOURCE_EXHAUSTED naming the field and its cap when
// one is over, so that parsing it costs memory in proportion to its bytes. Malformed bytes pass
// here and fail the parse.
absl::Status CheckRigEntryCounts(std::string_view serialized);

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

// The upload path's parse of a rig: CheckRigEntryCounts, then the protobuf parse, RigFromProto
// and BuildRig under `limits` (what UploadRig and --state-dir's reload run on untrusted bytes).
absl::StatusOr<Rig> RigFromUpload(const std::string& bytes, const RigLimits& limits);

inline constexpr double kMaxTimeStep = 60;  // seconds: DeformRequest.time_step, DeformClipRequest.time_step
// The shortest step (besides 0, the method's own): 1 / the highest clip rate. Until 2026-12-02 a
// step of 1e-40 was taken: a jiggle session's velocities (x − x₀) / h overflowed to inf, that
// frame answered OK and every later one failed until a reset.
inline constexpr double kMinTimeStep = 1e-6;

// A frame's inputs decoded from a DeformRequest into the session's reusable storage (pose,
// cages, posed cage, sphere-mesh), `input` pointing at those the request gives; time_step is
// checked. The rest of the request (outputs, frame number, reset) is the caller's.
// A frame's or a pose list's time_step: 0 (the method's own) or [kMinTimeStep, kMaxTimeStep];
// INVALID_ARGUMENT naming time_step otherwise.
absl::Status CheckTimeStep(double seconds);
absl::Status FrameInputFromProto(const v1::DeformRequest& req, Pose& pose, std::vector<CageFrame>& cages,
                                 CageFrame& posed_cage, SphereFrame& spheres, FrameInput& input);

// A pose's arrays are copied into a session's pose buffer, which keeps its size: arrays longer
// than `joints` joints take are refused (INVALID_ARGUMENT naming `field`.rotations etc.) before
// that. Shorter ones are the methods' to name.
absl::Status PoseWithinJoints(const v1::Pose& pose, size_t joints, absl::string_view field);

// What a DeformClip request asks for: its clip (validated against `joint_count` joints) or pose
// count, the time between frames, and the frames [first, end) of `total` to send, at most
// `max_frames_sent` of them (RESOURCE_EXHAUSTED naming max_frames beyond that).
struct ClipBatch {
  Clip clip;             // when the request gives a clip
  double fps = 0;        // the clip's sampling rate
  double time_step = 0;  // seconds per frame: 1 / fps, or the request's for pose lists
  uint64_t total = 0;    // frames in the whole clip or pose list
  uint64_t first = 0, end = 0;
};
absl::StatusOr<ClipBatch> ClipBatchFromProto(const v1::DeformClipRequest& req, size_t joint_count,
                                             uint64_t max_frames_sent);

}  // namespace sinew::server
