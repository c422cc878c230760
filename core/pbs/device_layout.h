// The contract between core's pbs deformer and its device twin (gpu/pbs/): the per-frame
// parameters the CPU computes and the device reads. Plain C++ with no Eigen, so nvcc compiles it.
//
// Per-frame parameters, floats:
//   header (kHeaderFloats), indices below: the frame's flags, time step and the method's live
//   parameters (PbsParams), so that a session's parameters travel with its frames;
//   then joints × 12: each joint's skinning transform, row-major 3x4.
// The device keeps each session's particles (and, with jiggle, velocities) between frames, in
// one allocation that starts with positions then velocities (3 floats per particle each): the
// floats a snapshot saves (Deformer::SaveDeviceState).
#pragma once

#include <cstddef>

namespace sinew::pbs_device {

inline constexpr size_t kFresh = 0;          // 1: start from rest (x := LBS, v := 0): first frame, reset
inline constexpr size_t kTimeStep = 1;       // seconds
inline constexpr size_t kJiggle = 2;         // 1: painted particles carry inertia
inline constexpr size_t kQuasiStatic = 3;    // 1: no inertia or gravity, velocities zeroed
inline constexpr size_t kXpbd = 4;           // 1: compliances, else stiffnesses
inline constexpr size_t kIterations = 5;
inline constexpr size_t kRecoveryPasses = 6;
inline constexpr size_t kStretchK = 7, kVolumeK = 8, kBindK = 9, kJiggleK = 10;          // PBD stiffnesses
inline constexpr size_t kStretchA = 11, kVolumeA = 12, kBindA = 13, kJiggleA = 14;       // XPBD compliances
inline constexpr size_t kGravity = 15;       // 3 floats: the acceleration (gravity × its direction), rig units/s²
inline constexpr size_t kDamping = 18;
inline constexpr size_t kStill = 19;         // 1: jiggle was just switched on: take the velocities as zero
inline constexpr size_t kHeaderFloats = 20;  // 16-float aligned joint blocks follow
inline constexpr size_t kJointFloats = 12;

inline constexpr size_t FrameFloats(size_t joints) { return kHeaderFloats + kJointFloats * joints; }

// Inverted tets are projected to this fraction of their rest volume by the recovery passes.
inline constexpr float kRecoveryTarget = 0.1f;

}  // namespace sinew::pbs_device
