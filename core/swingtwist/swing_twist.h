// The swing/twist joint deformers of Kavan & Sorkine 2012, "Elasticity-Inspired Deformers for
// Character Articulation" (seed 001; notes in ../shared/specs/seed-001-elasticity-deformers.md),
// at run time: what a frame does once the per-vertex weights exist.
//
// Frames (spec §2.8). Every joint j has a canonical frame R_j (rigid, canonical → model space):
// origin at the rest joint, +z along its bone, x and y by Gram–Schmidt from a fixed world
// reference — built from rest joint positions, never from the client's joint axes. From the
// frame's skinning matrices S (S_j = G_j · inverse_bind_j):
//   A_j = S_parent(j) · R_j              (A_root = S_root · R_root)
//   M_j = R_j⁻¹ · S_parent(j)⁻¹ · S_j · R_j = [σ_j Q_j | τ_j]   (M_root = I)
// Q_j, the joint's rotation, splits as Q = Q_swing · Q_twist with the twist about +z applied
// first (§3.4, Baerlocher 2001). The paper's joints only rotate (σ = 1, τ = 0); animated rigs
// also translate and scale joints (the pelvis, stretchy limbs), so σ and τ — which the paper
// leaves out — are blended linearly with the swing weight, exact at s = 0 and s = 1.
//
// Deformation (Eq. 5–6), per vertex p̃ with influences (j, d_j, s_j, t_j):
//   x̃ = R_j⁻¹ p̃,   Γ_j = ((1 − s) I + s σ_j Q_swing,j) · R_z(t θ_j) · x̃ + s τ_j,   p = Σ_j d_j A_j Γ_j.
// With s = t = 1 an influence moves by S_j, with s = t = 0 by S_parent(j); the twist is
// interpolated as an angle about the bone (no candy wrapper), the swing linearly.
//
// Data layout: per rig the canonical frames; per vertex a CSR list of influences with d, s, t
// (three float arrays), and for the CPU kernel the same influences grouped by joint in blocks
// (SwingTwistBlocks); per frame one JointRecord per joint (38 floats, the device's layout too),
// composed in double and stored in float. The skinning loop allocates nothing.
#pragma once

#include <array>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/parallel/thread_pool.h"
#include "core/rig/rig.h"

namespace sinew {

// q = q_swing · q_twist about +z. theta in (−π, π]; q and −q give the same split. Within 1e-6
// of a 180° swing (w² + z² < 1e-12) the twist is undefined: theta = 0 and swing = q.
struct SwingTwistSplit {
  Eigen::Quaterniond swing;
  double theta = 0;
  bool singular = false;
};
SwingTwistSplit SplitSwingTwist(const Eigen::Quaterniond& q);

// The rig's canonical joint frames. The bone axis of joint j: the first child whose bone is
// longer than 1e-6 of the skeleton's size; else the first descendant (depth first, children in
// index order) that does not coincide with j; else the parent's axis (a root alone: world +z).
struct CanonicalFrames {
  std::vector<Affine34d> frame;          // R_j
  std::vector<Affine34d> inverse;        // R_j⁻¹
  std::vector<Eigen::Vector3d> rest;     // rest joint positions (model space)
  std::vector<double> bone_length;       // distance to the axis joint (0 when none)
};
// FAILED_PRECONDITION when the rig has no skeleton.
absl::StatusOr<CanonicalFrames> ComputeCanonicalFrames(const Rig& rig);

// One joint of one frame: A_j (row-major 3x4), B_j = σ_j Q_swing − I (row-major 3x3), θ_j, R_j⁻¹
// (row-major 3x4), τ_j, one float of padding: 38 floats.
struct JointRecord {
  std::array<float, 12> a;
  std::array<float, 9> b;
  float theta;
  std::array<float, 12> inverse_frame;
  std::array<float, 3> translation;
  float unused;
};
static_assert(sizeof(JointRecord) == 38 * sizeof(float));

// The records of a frame from its skinning matrices. "parent" above is `parents[j]` where given
// (SwingTwistWeights::parents: a deformer among joints that share a handle blends from the first
// joint above the group), else the skeleton's. INVALID_ARGUMENT naming the joint when a joint's motion relative
// to that parent is not a similarity (shear or non-uniform scale beyond 1e-3, or a reflection).
// `out`: one per joint.
absl::Status SwingTwistJoints(const Rig& rig, const CanonicalFrames& frames, std::span<const Affine34d> skinning,
                              std::span<JointRecord> out, std::span<const int32_t> parents = {});

// Per-vertex influences: vertex v has entries offsets[v] .. offsets[v+1]-1.
struct SwingTwistWeights {
  std::vector<uint32_t> offsets;  // vertex_count + 1
  std::vector<uint16_t> joints;
  std::vector<float> d, s, t;     // deformer blend weight (Σ d = 1 per vertex), swing, twist
  // Per joint, the joint whose transform its deformer blends from at s = 0 (−1: none, the
  // joint's own motion only): the skeleton's parent, except for a deformer among joints that
  // share a handle (joints about a voxel apart or closer), which spans from the first joint above
  // the group, or from the group's joint with a child outside it, or from the root (weights.h).
  // Empty: the skeleton's parents.
  std::vector<int32_t> parents;
};
// OK when the weights fit `vertex_count` vertices and `joint_count` joints, every d, s, t is
// finite and in [0, 1], every vertex's d sums to 1 within 1e-4, and `parents` is empty or names
// one joint or −1 per joint; INVALID_ARGUMENT naming the vertex or joint otherwise.
absl::Status CheckSwingTwistWeights(const SwingTwistWeights& w, size_t vertex_count, size_t joint_count);

// The device layout (gpu/swingtwist/): the influences as a fixed-width per-vertex row of
// kSwingTwistInfluenceFloats floats each — joint (as a float, exact below 2^24), d, s, t — padded
// with d = 0 to the widest vertex's count (`cols` = 4 × that count); a frame's joints as one
// record each, padded to kSwingTwistDeviceJointFloats floats.
inline constexpr uint32_t kSwingTwistInfluenceFloats = 4;
inline constexpr uint32_t kSwingTwistDeviceJointFloats = 48;
void SwingTwistDeviceRows(const SwingTwistWeights& weights, std::vector<float>& values, uint32_t& cols);
void SwingTwistDeviceJoints(std::span<const JointRecord> joints, std::span<float> out);

// The CPU kernel's layout (x86-64 CPUs with AVX2 and FMA), made once per rig. Vertices ordered
// by their set of joints (stably), in blocks of kSwingTwistBlockVertices; a block's influences
// grouped by joint into runs, each padded with d = 0 to a multiple of 8 lanes, so that eight
// influences of one joint share its record (broadcast, never gathered). Per lane, as structure of
// arrays: the rest position in the joint's canonical frame x̃ = R_j⁻¹ p̃ (it does not change with
// the pose: nine multiply-adds a frame saved), t, s, d, and the vertex's place in its block
// (kSwingTwistPaddingSlot for padding, whose sums are dropped); eight lanes that are eight
// vertices in a row are summed as one vector, others one by one. 26 bytes a lane, 4 a vertex
// where the order changed. Made with the weights (also for sessions that run on a GPU).
inline constexpr uint32_t kSwingTwistBlockVertices = 1024;
inline constexpr uint16_t kSwingTwistPaddingSlot = 0xffff;  // a padding lane's slot
struct SwingTwistBlocks {
  std::vector<uint32_t> vertex;      // the vertex at each place (empty: the rig's order)
  std::vector<uint32_t> block_runs;  // block b's runs: block_runs[b] .. block_runs[b + 1] − 1
  std::vector<uint32_t> run_lanes;   // run r's lanes: run_lanes[r] .. run_lanes[r + 1] − 1
  std::vector<uint16_t> run_joint;
  std::vector<float> x, y, z, t, s, d;
  std::vector<uint16_t> slot;
  std::vector<uint8_t> dense;  // per eight lanes: 1 where their slots are eight vertices in a row
  bool empty() const { return block_runs.empty(); }
  size_t Bytes() const;
};
// Empty where the kernel cannot run (another CPU, SINEW_BASELINE_ISA); `rest`, `weights` and
// `frames` are the rig's and the model's.
SwingTwistBlocks SwingTwistCpuBlocks(std::span<const float> rest, const SwingTwistWeights& weights,
                                     const CanonicalFrames& frames);

// Eq. 5–6 over every vertex (rest: x,y,z per vertex; out: the same size). With `blocks` (made
// from the same rest, weights and frames; blocks for another vertex count are ignored) on a CPU
// with AVX2 and FMA, the kernel: eight
// influences at a time, sin and cos by Cephes' polynomials after a three-part reduction by π/2;
// else the portable loop, one influence at a time with libm. They differ by float rounding
// (tested: 4.8e-7 apart on a limb of diagonal 3 with twists up to five turns, each within
// 3.6e-7 of a double evaluation). Allocates nothing.
void SwingTwistSkinning(std::span<const float> rest, const SwingTwistWeights& weights,
                        std::span<const JointRecord> joints, std::span<float> out, ThreadPool* pool,
                        const SwingTwistBlocks* blocks = nullptr);
// The portable loop over vertices [begin, end) on the calling thread: the kernel's reference.
void SwingTwistSkinningPortableRange(std::span<const float> rest, const SwingTwistWeights& weights,
                                     std::span<const JointRecord> joints, std::span<float> out, size_t begin,
                                     size_t end);

}  // namespace sinew
