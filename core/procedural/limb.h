// A procedural character for demos, tests and benchmarks whose size must scale: a tessellated
// tube (a limb) along +x, driven by a chain of bones, with smooth weights, and a clip that
// bends the middle joint and twists the last one: the poses where LBS collapses (candy
// wrapper) and DQS bulges.
#pragma once

#include <cstdint>
#include <span>

#include "core/rig/pose.h"
#include "core/rig/rig.h"

namespace sinew {

struct LimbOptions {
  uint32_t rings = 200;     // cross-sections along the limb
  uint32_t segments = 100;  // vertices per cross-section: vertex count = rings * segments
  uint32_t bones = 3;       // chain of joints 0..bones-1, joint j starts at x = j * length/bones
  float length = 3.0f;
  float radius = 0.25f;
  // > 0: the tube narrows (or widens) linearly from `radius` at the middle of its length to this
  // at its end, like a forearm from the elbow to the wrist; 0: one radius throughout.
  float end_radius = 0.f;
  // Weight falloff: each bone's weight is exp(-(d/σ)²) with d the distance along x from the
  // vertex to the bone's segment and σ = blend * length / bones; the largest `max_influences`
  // are kept and normalized.
  float blend = 0.25f;
  uint32_t max_influences = 2;
};

// The implicit skinning suites' limb (tests, benchmarks, pictures): two bones of 1.5, radius
// 0.25, 90 rings of 32, blended narrowly enough (σ = 0.12 of a bone) that LBS and DQS
// interpenetrate at 130°.
inline LimbOptions TwoBoneLimbOptions() {
  LimbOptions o;
  o.rings = 90;
  o.segments = 32;
  o.bones = 2;
  o.length = 3;
  o.radius = 0.25f;
  o.max_influences = 2;
  o.blend = 0.12f;
  return o;
}

// Builds the (unvalidated) rig input; BuildRig accepts it.
RigInput MakeLimb(const LimbOptions& options = {});

struct LimbMotion {
  double bend_degrees = 120;  // about z, at joint bones/2 (the "elbow")
  double twist_degrees = 180; // about the bone axis x, at the last joint (the "wrist")
};

// Local-space pose of the limb's clip at phase t in [0, 1]: the motion ramps in with
// sin²(πt), so t = 0 and t = 1 are the rest pose and t = 0.5 is the full bend and twist.
Pose LimbPose(const Skeleton& skeleton, double t, const LimbMotion& motion = {});

}  // namespace sinew

namespace sinew {
// Mean distance of the limb's cross-section ring nearest rest position x from that ring's
// centroid, measured on deformed `positions` (same layout as MakeLimb's mesh). At rest it is
// the limb's radius; a candy-wrapper collapse drives it towards 0.
double LimbRingRadius(const LimbOptions& options, std::span<const float> positions, double x);
}  // namespace sinew

namespace sinew {
// A closed, outward-oriented box cage around the limb: `segments` + 1 square rings along x
// (half-width 2 × radius, 0.1 × length beyond each end), quads split into triangles, capped.
Cage MakeLimbCage(const LimbOptions& options, uint32_t segments = 6);
}  // namespace sinew
