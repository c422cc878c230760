// Animation clips: keyframes per joint (translation, rotation, uniform scale), sampled at any
// time or frame rate into local-space poses. Used by clients (importers, batch jobs) and by the
// server (DeformClip samples clips it receives).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/rig/pose.h"
#include "core/rig/rig.h"

namespace sinew {

// Keys of one joint's local transform. Each channel has strictly increasing times (seconds)
// and one value per time; an empty channel leaves that part at the joint's rest transform.
// Between keys: linear for translation and scale, spherical linear (shortest arc) for
// rotation; before the first and after the last key the end value holds.
struct JointTrack {
  std::vector<double> translation_times;
  std::vector<Eigen::Vector3d> translations;
  std::vector<double> rotation_times;
  std::vector<Eigen::Quaterniond> rotations;  // unit
  std::vector<double> scale_times;
  std::vector<double> scales;  // uniform, > 0

  bool empty() const {
    return translation_times.empty() && rotation_times.empty() && scale_times.empty();
  }
};

struct Clip {
  std::string name;
  double duration = 0;             // seconds, >= 0
  std::vector<JointTrack> tracks;  // one per joint of the rig it animates (may be fewer: rest)
};

// Checks key counts, ordering, finiteness, unit quaternions and positive scales against a rig
// of `joint_count` joints. INVALID_ARGUMENT names the field, e.g.
// "clip.tracks[3].rotations[5]" (tracks are indexed by joint here).
absl::Status ValidateClip(const Clip& clip, size_t joint_count);
// The same checks for one track, its fields named under `field` (e.g. "clip.tracks[0]" for the
// first track of a file or message, whichever joint it drives).
absl::Status ValidateJointTrack(const JointTrack& track, const std::string& field);

// Local-space pose at time `t` seconds (clamped to [0, duration]; NaN reads as 0) into `out`,
// reusing its storage. `clip` must have passed ValidateClip for this skeleton.
void SampleClip(const Clip& clip, const Skeleton& skeleton, double t, Pose& out);

// Cage animation: per keyframe, an offset of every cage vertex from the rest cage; linear
// between keys, the end values outside.
struct CageClip {
  std::vector<double> times;                // seconds, strictly increasing
  std::vector<std::vector<float>> offsets;  // per key: x,y,z per cage vertex
  double duration() const { return times.empty() ? 0 : times.back(); }
};

// Offsets at time t into `out` (3 per cage vertex; NaN is the first key), reusing its storage.
void SampleCageClip(const CageClip& clip, double t, std::vector<float>& out);

// Frames of the clip sampled at `fps`: frame i is at time i / fps, for i = 0 .. count - 1,
// with count = floor(duration * fps) + 1 (the last frame may fall short of the end).
size_t ClipFrameCount(const Clip& clip, double fps);

}  // namespace sinew
