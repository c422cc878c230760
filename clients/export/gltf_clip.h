// A baked clip as a glTF 2.0 binary (.glb) that standard viewers play (three.js, Blender,
// the Khronos sample viewer, clients/web/): one mesh, its frames as morph targets.
//
// Layout (one buffer, the GLB's BIN chunk):
//   - the rest mesh: POSITION (the rig's rest positions), NORMAL (area-weighted normals of the
//     rest mesh, core/normals), indices (uint32), one double-sided grey material;
//   - frame k as morph target k: POSITION displacements (frame k − rest, float32, with the
//     accessor min/max the spec requires); the target's NORMAL is not written, so a viewer that
//     takes the file's normals shades every frame with the rest pose's (the viewer here and
//     Blender compute normals from the positions instead);
//   - an animation "clip" on the mesh's node: a `weights` channel with STEP interpolation,
//     keys at k / fps, key k weighting target k by 1 and every other by 0, and a last key at
//     frames / fps holding the last frame: playing it shows frame k from k / fps until
//     (k + 1) / fps, exactly the frames of the bake, no blending, and the clip lasts
//     frames / fps (a looping player shows the last frame as long as the others);
//   - the mesh's default weights show frame 0; `mesh.extras.targetNames` names the targets
//     "frame 0" … (three.js and Blender read it);
//   - `scenes[0].extras.sinew`: what was baked (method, clip, source file, frames per second,
//     frame and vertex counts) and, when measured, each frame's quality report
//     (core/geometry/mesh_quality.h) — clients/web/ shows it beside the playing frame.
//
// Size: 12 bytes per vertex per frame for the targets, plus the rest mesh (24 bytes per vertex,
// 12 per triangle) and the weights animation (4·frames² bytes): BCN_Epileptic (15 378 vertices,
// 5 126 triangles) at 30 frames/s, 100 frames, is 18.95 MB. The weights animation grows with
// the square of the frame count, so clips are limited to kMaxGltfFrames frames.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sinew::client {

// More frames than this is refused: the one-hot weights grow as frames², and viewers hold a
// morph target per frame (WebGL 2 guarantees 256 texture-array layers, desktop GPUs 2048).
inline constexpr size_t kMaxGltfFrames = 2048;

// The binary chunk of a .glb is at most 4 GiB (its length is 32 bits); this leaves 16 MiB of it
// for the JSON chunk and headers. The bytes a clip needs are GltfClipBinaryBytes.
inline constexpr uint64_t kMaxGlbBinaryBytes = (uint64_t{1} << 32) - (uint64_t{1} << 24);
// The binary chunk's bytes for `vertices`, `indices` (3 per triangle) and `frames` (at most:
// a point set has no normals): rest and normals (24 per vertex), indices (4 each), the targets (12 per vertex per frame), the times
// and the weights (4·(frames + 1) and 4·(frames + 1)·frames).
inline uint64_t GltfClipBinaryBytes(uint64_t vertices, uint64_t indices, uint64_t frames) {
  return 24 * vertices + 4 * indices + 12 * vertices * frames + 4 * (frames + 1) + 4 * (frames + 1) * frames;
}

// One frame's geometric quality (v1::QualityReport's fields, core/geometry/mesh_quality.h).
struct GltfFrameQuality {
  uint32_t inside_vertices = 0, touching_vertices = 0;
  double max_depth = 0, volume_ratio = 1, edge_stretch_min = 1, edge_stretch_max = 1;
  uint32_t rest_inside_vertices = 0, new_inside_vertices = 0;
  double new_max_depth = 0;
  int64_t new_deepest_vertex = -1;  // −1: no vertex newly inside
  std::string new_deepest_joint;    // the heaviest joint there; empty: none
  uint32_t exposed_vertices = 0;    // inside or touching at rest, neither now (skin a pose brought out)
};

struct GltfClip {
  // Strings may be any bytes: each is written as UTF-8 (ValidUtf8), as glTF's JSON must be.
  std::string name;                      // the mesh's and node's name (e.g. the asset's stem)
  std::string method;                    // what deformed it, e.g. "lbs" or "dqs+implicit"
  std::string clip_name;                 // the animation clip's name in the source asset
  std::string source;                    // the source asset's file name
  double frames_per_second = 30;         // > 0: frame k is at k / fps
  std::span<const float> rest;           // x,y,z per vertex
  std::span<const uint32_t> triangles;   // 3 per triangle, < vertex count; may be empty (points)
  std::vector<std::span<const float>> frames;  // 1..kMaxGltfFrames frames, x,y,z per vertex
  std::vector<GltfFrameQuality> quality;  // empty, or one per frame
};

// Writes `clip` as a .glb at `path` atomically (path.tmp, then rename). INVALID_ARGUMENT names
// the field and index of bad input (sizes, an index out of range, a non-finite coordinate, no
// frames, too many); errno-derived codes with the path for I/O.
absl::Status WriteGltfClip(const std::string& path, const GltfClip& clip);

// What ReadGltfClip gives back: the rest mesh, and each frame's positions as the morph target
// added to the rest positions (what a viewer shows at k / fps).
struct GltfClipData {
  std::vector<float> rest, normals;
  std::vector<uint32_t> triangles;
  std::vector<std::vector<float>> frames;
  std::vector<double> key_times;  // the weights animation's input: frames + 1 keys (the last holds the last frame)
  std::string interpolation;      // its sampler's
  std::string extras_json;        // scenes[0].extras as JSON text ("" when none)
};

// Reads a .glb this module wrote (one mesh primitive with morph targets and a weights
// animation), with tinygltf; FAILED_PRECONDITION names what is missing or inconsistent. For
// tests and tools.
absl::StatusOr<GltfClipData> ReadGltfClip(const std::string& path);

}  // namespace sinew::client
