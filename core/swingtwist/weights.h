// The per-vertex weights of the swing/twist deformers, precomputed once per rig (Algorithm 1 of
// Kavan & Sorkine 2012; spec §2.1–2.6): voxelize the rest mesh, and per joint solve the
// energy-minimizing swing and twist weights on the grid (emw.h), blend the joints' deformers by
// smooth weights d_j, and carry all of them to the mesh vertices by trilinear interpolation.
//
// Deformer blend weights d_j: the paper uses point-based bounded biharmonic weights (solved with
// MOSEK). Here: biharmonic weights (min ½ dᵀ L M⁻¹ L d with d = 1 at the joint's handle and 0 at
// the others; L the grid's Laplacian, M its lumped voxel volumes), one factorization for all
// handles, clamped to [0, 1] and normalised per vertex — the spec's second choice, recorded in
// the result. Joints whose nearest grid vertex is the same (coincident joints, e.g. a root and its
// first child; joints about a voxel apart or closer) share one handle. Its deformers are the
// group's joints with no child in the group: the deepest joint of a chain, each of several
// siblings; each has its own swing and twist weights. A deformer spans from the first joint above
// it outside the group to its own transform (SwingTwistWeights::parents), so that the turns of the
// group's joints above it are its own; the span starts earlier at a joint of the group with a
// child outside it, and at the root. Siblings split the handle's d among those that carry
// geometry by the vertex's weight on each one's joint and its children, eased towards an even
// split where those weights are small (continuous in them).
//
// Root and leaves: the root's deformer has Q = I. A leaf joint that carries geometry beyond
// itself (the vertices its skinning weights hold most reach more than a voxel along its axis)
// gets a virtual child bone that far, and with it its own swing and twist solves (ours: the
// paper pairs each joint deformer with a parent and a child bone); another leaf moves rigidly
// with its transform (s = t = 1).
//
// Each handle's d at a vertex is scaled by the vertex's skinning weight on the bones that meet at
// the handle (its joint's bone and its parent's: a weight on joint j counts once for j's handle
// and once for each other handle of j's children), then the `influences` largest are kept and
// renormalised — ours, not the paper's: on real characters the grid bridges parts that touch in
// the rest pose, and the smooth d would otherwise make a hip follow a thumb; the unbounded
// biharmonic d also rises again past the next joints towards an open end. The scale is
// continuous in the rig's weights.
#pragma once

#include <string>
#include <vector>

#include <algorithm>
#include <cstdint>

#include "absl/status/statusor.h"
#include "core/deformer/deformer.h"
#include "core/swingtwist/emw.h"
#include "core/swingtwist/swing_twist.h"

namespace sinew {

// The most joints x grid vertices ComputeElasticWeights takes (RESOURCE_EXHAUSTED past it, naming
// the voxel size): its solve keeps three dense handles x grid-vertices matrices of doubles, so
// about 1.6 GB here.
inline constexpr double kElasticWeightsMaxEntries = double(1 << 26);
// The most cells the bones' boundary conditions walk over all deformers (each walks every bone's
// bounding box of cells): RESOURCE_EXHAUSTED past it, naming the voxel size.
inline constexpr double kElasticWeightsMaxBoneCells = 2e10;
// The most bytes ComputeElasticWeights' solves may hold at once, estimated from the grid before
// they start (RESOURCE_EXHAUSTED past it, naming the voxel size and the samples): per voxel, the
// energy's and Laplacian's triplets (1.5 kB) and a rotation per sample (72 B), per grid vertex
// its sparse rows and factor (about 2 kB) and a vector per sample, for each solve the pool runs
// at once; the blend weights' q before them.
inline constexpr double kElasticWeightsMaxBytes = 8.0 * (uint64_t{1} << 30);
// That estimate, for `voxels` voxels, `grid_vertices` grid vertices, `samples` rotation samples
// and `concurrent` solves at once.
inline double ElasticWeightsBytes(double voxels, double grid_vertices, double samples, double concurrent) {
  const double blend = 768 * voxels + 2000 * grid_vertices;
  const double solve = (1536 + 72 * samples) * voxels + (2000 + 24 * samples) * grid_vertices;
  return std::max(blend, concurrent * solve);
}

struct ElasticWeightsOptions {
  double voxel_size = 0;  // 0: the rest mesh's longest bounding-box side / 64
  EmwOptions emw;
  int swing_samples = 1, twist_samples = 1;  // n of SwingSamples/TwistSamples
  uint32_t influences = 4;
  size_t max_cells = size_t{1} << 24;
};

struct ElasticWeightsStats {
  double voxel_size = 0;
  size_t voxels = 0, grid_vertices = 0;
  size_t handles = 0;        // after merging joints that share one
  size_t solved_joints = 0;  // joints with an EMW solve (two each: swing, twist)
  size_t leaf_bones = 0;     // virtual child bones given to leaf joints that carry geometry
  int max_iterations = 0;    // of any solve
  std::string blend_solver;  // how the d_j were computed
};

// FAILED_PRECONDITION when the rig has no skeleton or no triangles, or a part of the voxel
// grid holds no bone (see SolveEmw); RESOURCE_EXHAUSTED when the voxel size makes the grid too
// large. `progress` (may be empty) is called with the fraction of joints done, from the pool's
// threads, before and after the blend weights, after each joint and inside each joint's solves;
// once it returns false the computation ends with CANCELLED within one sparse factorization.
absl::StatusOr<SwingTwistWeights> ComputeElasticWeights(const Rig& rig, const CanonicalFrames& frames,
                                                        const ElasticWeightsOptions& options, ThreadPool* pool,
                                                        const ProgressFn& progress,
                                                        ElasticWeightsStats* stats = nullptr);

}  // namespace sinew
