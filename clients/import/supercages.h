// Reader for the SuperCages reference tool's rig files (Corda's thesis, seed 004): a mesh and a
// cage as Wavefront OBJ, a skeleton (.skt), sparse skinning weights (.skw), a skeleton animation
// ("# V3" skelAnim .txt) and a cage animation (cageAnim .txt). The "Arm" example rig in
// shared/data/supercages-arm is the fixture; docs/supercages-formats.md describes the formats and
// the interpretation decisions (Euler order, global-to-local conversion, cage offsets).
//
// Every reader reports malformed input as INVALID_ARGUMENT naming file and line, e.g.
// "arm.skw:123: vertex index 99999 out of range (2089 vertices)"; a file that cannot be opened
// is NOT_FOUND naming the path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Geometry>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/clip/clip.h"
#include "core/rig/rig.h"

namespace sinew {

// Paths of one rig's files. `mesh`, `skeleton` and `weights` are required; the others may be
// empty (not read).
struct SuperCagesFiles {
  std::string mesh;           // OBJ
  std::string skeleton;       // .skt
  std::string weights;        // .skw
  std::string cage;           // OBJ
  std::string skeleton_clip;  // skelAnim .txt (V3)
  std::string cage_clip;      // cageAnim .txt
};

// The reference tool's naming in `dir`: <name>.obj, <name>.skt, <name>.skw, and, where they
// exist on disk, <name>_cage.obj, <name>_skelAnim.txt, <name>_cageAnim.txt.
SuperCagesFiles SuperCagesFilesIn(const std::string& dir, const std::string& name);

// Cage animation (CageClip, core/clip/clip.h): offsets from the rest (deformation) cage, see
// docs/supercages-formats.md.

struct SuperCagesRig {
  // Mesh, skeleton (names, parents, rest_local; inverse binds left to BuildRig), weights
  // (compressed rows, normalize = true) and, when a cage file was given, rig.cages[0].
  RigInput rig;
  // Local-space keys (one track per joint, rotation and translation keys at the file's keyframe
  // times, duration = last time): SampleClip + SkinningTransforms reproduce the file's global
  // rotations, with joint positions rebuilt by forward kinematics from the .skt bone offsets.
  Clip skeleton_clip;
  CageClip cage_clip;
  // Whatever was approximated, dropped or interpreted, human readable.
  std::vector<std::string> notes;
};

// Reads all files of `files`, checks them against one another (weights against the mesh and the
// skeleton, clips against the skeleton and the cage) and returns the rig input, unbuilt.
absl::StatusOr<SuperCagesRig> ReadSuperCages(const SuperCagesFiles& files);

// --- The individual readers ---------------------------------------------------------------------

// Wavefront OBJ: `v x y z [...]` lines and `f` lines (1-based indices, "a", "a/b", "a//c",
// "a/b/c", negative = relative to the last vertex read; polygons are fan-triangulated). Other
// records (vt, vn, g, o, s, usemtl, ...) are ignored. Replaces the vectors' contents.
absl::Status ReadObj(const std::string& path, std::vector<float>* positions,
                     std::vector<uint32_t>* triangles);

// .skt: `j <index> <name> <parent> <x y z>` (global rest position, parent -1 = root) or
// `j <index> <name> <parent> <rx ry rz> <x y z>` (with global rest Euler angles, degrees). Returns
// names, parents and rest_local (parent^-1 * global rest frame); inverse_bind and order empty.
absl::StatusOr<Skeleton> ReadSkt(const std::string& path);

// .skw: `<jointIndex> <vertexIndex> <weight>` lines, any order. Returns compressed rows (file
// order within a vertex) with normalize = true. Every vertex needs at least one line.
absl::StatusOr<WeightsInput> ReadSkw(const std::string& path, size_t vertex_count,
                                     size_t joint_count);

// Skeleton animation, "# V3": `k <time>` lines, then per keyframe and per joint in index order
// `s <key> <rx ry rz> <tx ty tz>` (global rotation as Euler angles in degrees, R = Rz*Ry*Rx;
// global joint position). `skeleton` as returned by ReadSkt. The clip keeps the file's global
// rotations and the skeleton's bone offsets; root translations are taken relative to the first
// key (the file's first-key root position is mapped to the rest root position). Notes on what
// was dropped are appended to `notes` (may be null).
absl::StatusOr<Clip> ReadSkeletonClip(const std::string& path, const Skeleton& skeleton,
                                      std::vector<std::string>* notes);

// Cage animation: `k <time>` lines, then per keyframe `c <key> <dx dy dz>` per cage vertex.
// `cage_vertex_count` 0: taken from the file (every key must have the same count).
absl::StatusOr<CageClip> ReadCageClip(const std::string& path, size_t cage_vertex_count);

// The files' Euler convention: angles in degrees, R = Rz(rz) * Ry(ry) * Rx(rx) (x applied
// first; extrinsic XYZ = intrinsic ZYX).
Eigen::Quaterniond SuperCagesEuler(double rx_deg, double ry_deg, double rz_deg);

}  // namespace sinew
