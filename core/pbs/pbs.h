// The "pbs" method: position-based skinning (Abu Rumman & Fratarcangeli 2015, seed 002; notes in
// ../shared/specs/seed-002-position-based-skinning.md). Per frame the particles of a tetrahedral
// mesh around the character are skinned by LBS, then corrected by position-based dynamics —
// stretch (tet edges), volume (tets, corrected gradients) and bind (each particle's rest distance
// from its nearest bone) constraints, projected by Gauss–Seidel colour by colour (parallel within
// a colour) — and the render mesh follows its tets. Registered in core/deformer/registry.cc.
//
// Without jiggle every particle is skinned: each frame starts from the LBS prediction, so a frame
// depends on its pose only and the session is stateless. With jiggle (PbsParams::jiggle and the
// rig's "pbs_jiggle" attribute) painted particles carry position and velocity from frame to
// frame. Particle weights are transferred from the rig's weights by default, or the paper's Eq. 2
// heuristic (PbsParams::weights).
//
// Data layout (per rig, shared): particles' rest positions and CSR weights; constraints sorted by
// colour (struct arrays); the render vertices' tet and β. Per session: the particles' positions
// (3 floats each) and the frame's skinning matrices; a frame allocates nothing.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/deformer/deformer.h"
#include "core/pbs/constraints.h"
#include "core/pbs/tet_mesh.h"
#include "core/rig/rig.h"
#include "core/rig/transform.h"

namespace sinew {

struct PbsParams : MethodParams {
  double voxel_size = 0;           // tet mesh resolution; 0: the mesh's longest side / 32
  uint32_t iterations = 12;        // Gauss–Seidel sweeps per frame (the paper's 12)
  double stretch_stiffness = 0.9;  // k_s (the paper: 0.6–0.9 per model)
  double volume_stiffness = 1.0;   // k_v (not given in the paper)
  double bind_stiffness = 1.0;     // k_b (not given in the paper)
  // The particles' LBS weights: the rig's own (the nearest render vertex's, top 3), or the
  // paper's Eq. 2 heuristic (rigid in the middle two thirds of the nearest bone, shared equally
  // by the bones at the nearer end otherwise; discontinuous at 1/6 and 5/6).
  enum class Weights { kTransfer, kPaper } weights = Weights::kTransfer;
  // Jiggle (secondary motion, §4 of the paper, as the spec's painted-map generalization): the
  // rig's per-vertex attribute "pbs_jiggle" (α in [0, 1], carried to each particle from its
  // nearest render vertex) blends a particle's prediction from LBS (α = 0) to inertia (α = 1):
  // p = (1 − α) LBS + α (x + Δx), Δx its motion over the previous frame (Verlet without forces:
  // dt·v with v = Δx/dt, so the time step cancels until gravity, damping or compliance enter).
  // Constraints touching a particle with α > 0 use `jiggle_stiffness`. Makes the session stateful.
  bool jiggle = false;
  double jiggle_stiffness = 0.2;
};

std::span<const ParamSpec> PbsParamSpecs();
absl::StatusOr<std::shared_ptr<const MethodParams>> ParsePbsParams(const ParamSet& set, std::string_view field);

// A particle's bind: the bone (from joint `from` to joint `to`, moving with `from`, a joint the
// particle is skinned to) nearest to it at rest, and its distance from that segment; rest < 0:
// no such bone, no bind.
struct BindConstraint {
  uint32_t from, to;
  float rest;
};

struct PbsModel : Prepared {
  TetMesh mesh;
  TetEmbedding embedding;
  SkinWeights weights;                 // per particle, at most 3
  std::vector<StretchConstraint> stretch;
  std::vector<VolumeConstraint> volume;
  std::vector<BindConstraint> bind;    // per particle
  std::vector<uint32_t> stretch_colours, volume_colours;  // Colouring::offsets into the sorted arrays
  std::vector<Eigen::Vector3d> joints;  // rest joint positions (model space)
  std::vector<float> alpha;             // per particle, from "pbs_jiggle" (empty: the rig has none)
  // Per constraint (in colour order): whether it touches a particle with α > 0.
  std::vector<uint8_t> stretch_jiggles, volume_jiggles;
  size_t Bytes() const override;
};

// One frame on the particles `x` (3 floats each): the LBS prediction from the frame's skinning
// matrices, then `params.iterations` sweeps (0: LBS only). Deterministic for any pool size.
// With jiggle: `v` (3 floats per particle) carries each particle's motion over the last frame
// and `x` enters as the last frame's positions; `fresh` starts from rest (x := LBS, v := 0). A colour goes to
// the pool in chunks of `grain` constraints, and only when it holds more (kPbsColourGrain: each
// colour is a barrier, about 600 a frame, and a small one costs more to hand over than to do).
inline constexpr size_t kPbsColourGrain = 8192;
void SolvePbsFrame(const PbsModel& model, const PbsParams& params, std::span<const Affine34f> skinning, std::span<float> x,
                   ThreadPool* pool, std::span<float> v = {}, bool fresh = true, size_t grain = kPbsColourGrain);
bool PbsStateful(const DeformerConfig& config);  // jiggle

absl::StatusOr<std::shared_ptr<const Prepared>> PreparePbs(const Rig& rig, const DeformerConfig& config,
                                                           ThreadPool* pool, const ProgressFn& progress);
std::string PbsKey(const DeformerConfig& config);
absl::StatusOr<std::unique_ptr<Deformer>> CreatePbsDeformer(std::shared_ptr<const Rig> rig,
                                                            std::shared_ptr<const Prepared> prepared,
                                                            const DeformerConfig& config);

}  // namespace sinew
