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
// Sessions with jiggle carry time (a step per frame, gravity, damping), can pose without it
// (quasi_static), project by PBD or XPBD, change their parameters live (those outside PbsKey:
// Deformer::SetParams) and save and restore their state bit for bit (Deformer::SaveState).
//
// Data layout (per rig, shared): particles' rest positions and CSR weights; constraints sorted by
// colour (struct arrays); the render vertices' tet and β. Per session: PbsState (positions,
// velocities, XPBD multipliers) and the frame's skinning matrices; a frame allocates nothing.
#pragma once

#include <array>

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/deformer/deformer.h"
#include "core/pbs/constraints.h"
#include "core/pbs/tet_mesh.h"
#include "core/rig/rig.h"
#include "core/rig/transform.h"

namespace sinew {

struct PbsParams : MethodParams {
  // Where the tetrahedra come from (tet_mesh.h): kAuto — the rig's own tet mesh when it has one,
  // else voxels (on the Arm's clip they keep the volume better than the mesher's tets at the same
  // particle count: docs/pbs.md); kMesher — CGAL Mesh_3 on the mesh's inside (mesher.h), cells of
  // at most `cell_size` circumradius, following the surface; kVoxels — the spec's voxel
  // tetrahedralizer at `voxel_size`; kRig — the rig's tet mesh.
  enum class Tets { kAuto, kMesher, kVoxels, kRig } tets = Tets::kAuto;
  double cell_size = 0;            // mesher; 0: the mesh's longest side / 24
  double voxel_size = 0;           // voxels; 0: the mesh's longest side / 32
  uint32_t iterations = 12;        // Gauss–Seidel sweeps per frame (the paper's 12)
  // After the sweeps: passes that project only the tets still inverted (a mirror-image tet keeps
  // its edge lengths, so the sweeps can leave it so); stops after a pass that finds none. 0: off.
  uint32_t recovery_passes = 8;
  double stretch_stiffness = 0.9;  // k_s (the paper: 0.6–0.9 per model)
  double volume_stiffness = 1.0;   // k_v (not given in the paper)
  double bind_stiffness = 1.0;     // k_b (not given in the paper)
  // The particles' LBS weights: the rig's own (the nearest render vertex's, top 3), or the
  // paper's Eq. 2 heuristic (rigid in the middle two thirds of the nearest bone, shared equally
  // by the bones at the nearer end otherwise; discontinuous at 1/6 and 5/6).
  enum class Weights { kTransfer, kPaper } weights = Weights::kTransfer;
  // Cut the tets that bridge two parts the voxels merged (fingers, an arm and the torso) or that
  // touch in the bind pose (hands resting on the hips): those with two particles skinned to joints
  // more than 4 parent–child steps apart, or to no common joint with the centroid outside the mesh.
  bool cut_bridges = true;
  // Jiggle (secondary motion, §4 of the paper, as the spec's painted-map generalization): the
  // rig's per-vertex attribute "pbs_jiggle" (α in [0, 1], carried to each particle from its
  // nearest render vertex) blends a particle's prediction from LBS (α = 0) to inertia (α = 1):
  // p = (1 − α) LBS + α (x + dt v + dt² g), v its velocity after the previous step. Constraints
  // touching a particle with α > 0 use `jiggle_stiffness` (XPBD: `jiggle_compliance`). Makes the
  // session stateful.
  bool jiggle = false;
  double jiggle_stiffness = 0.2;
  // Which particles jiggle: kPainted — α as painted (above); kPaper — the paper's rule (§4): the
  // particles nearest the painted vertices and those between them and the bone are selected, and
  // of those the ones farther from their bone than the selection's mean are free (α 1), the others
  // skinned (α 0). Part of the preparation (PbsKey).
  enum class JiggleSelection { kPainted, kPaper } jiggle_selection = JiggleSelection::kPainted;
  // Dynamics of the jiggling particles (the only ones with inertia). The step of a frame that
  // carries none (FrameInput::time_step 0) — the paper's 10 ms; gravity in rig units/s² along
  // `gravity_direction` (a unit vector in the rig's frame; −y unless said: a DCC whose up axis is
  // z sends its down, (0, 0, −1) in a rig uploaded unturned); damping per second:
  // v ← v·exp(−damping·dt) before each prediction.
  double time_step = 0.01;
  double gravity = 0;
  std::array<double, 3> gravity_direction = {0, -1, 0};
  double damping = 0;
  // Posing without time: every particle is predicted by LBS (no inertia, no gravity), so a frame
  // depends on its pose only, and the session's velocities are zeroed (a dynamic frame after it
  // starts from rest where this one left the particles).
  bool quasi_static = false;
  // PBD projects with the stiffnesses above (their effect depends on the iteration count); XPBD
  // with compliances (inverse stiffnesses, 0 rigid, in rig units per unit of force for unit
  // masses; α̃ = compliance / dt²), which converge to the same softness whatever the count.
  enum class Solver { kPbd, kXpbd } solver = Solver::kPbd;
  double stretch_compliance = 0, volume_compliance = 0, bind_compliance = 0;
  double jiggle_compliance = 1e-4;  // of the constraints touching a jiggling particle
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
  // "tets from voxels: 3251 particles, 12984 tets (264 cut as bridging parts, 0 degenerate); constraints: 18138
  // stretch in 16 colours, 12984 volume in 31, 3251 bind; 0 render vertices outside their tet".
  std::string Summary() const override;
};

// A session's simulation state (per particle; floats as the solver uses them).
struct PbsState {
  std::vector<float> x;       // 3 per particle: positions after the last frame
  std::vector<float> v;       // 3 per particle, with jiggle: velocities after it (rig units per second)
  std::vector<float> lambda;  // XPBD: the step's multipliers, stretch then volume then bind (scratch)
  bool fresh = true;          // the next frame starts from rest (x := LBS, v := 0)
  std::vector<size_t> pass_sizes, pass_scratch;  // a sweep's passes on the pool (scratch)
  size_t Bytes() const {
    return (x.capacity() + v.capacity() + lambda.capacity()) * sizeof(float) +
           (pass_sizes.capacity() + pass_scratch.capacity()) * sizeof(size_t);
  }
};

// One frame of `dt` seconds (used by the dynamics only) on `state`: the prediction (LBS, blended
// towards inertia by α with jiggle), then `params.iterations` sweeps (0: the prediction only).
// Sizes the state's arrays on the first frame (and when jiggle or the solver changes); allocates
// nothing otherwise. Deterministic for any pool size. A sweep is one ThreadPool::ParallelPasses
// run: each colour, then the binds, split among the pool's threads in chunks of at most `grain`,
// the threads meeting between colours without sleeping (about 600 such barriers a frame); the
// recovery passes hand a colour to the pool only above `grain` constraints. `stop` (FrameInput::
// stop; null: never) is asked before every sweep and recovery pass: once it says yes the frame
// ends there, `state` part way (the caller puts back what it kept), and the return value is the
// sweep (counting the recovery passes after the sweeps) it stopped before; nullopt when it ran to
// its end. A frame is 1 000 sweeps at most, over up to kPbsMaxParticles: about a minute.
inline constexpr size_t kPbsColourGrain = 8192;
// The most particles a pbs preparation takes, from the mesher, the voxels or an uploaded tet mesh
// (RESOURCE_EXHAUSTED beyond; a frame's cost is the particles', and the paper's characters have
// 1–3k).
inline constexpr size_t kPbsMaxParticles = 400'000;
// The range of tet sizes (each tet's longest edge, rig units) the float solver takes: a volume
// constraint's gradient norm grows as the edge's fourth power, past float's range beyond about
// 7e9 (the constraints then did nothing, silently, and past 7e12 every particle became NaN,
// blamed on the pose) and below float's normal numbers under about 6e-10. Preparation refuses
// tets outside it (FAILED_PRECONDITION naming the tet and what to change).
inline constexpr double kPbsMaxTetEdge = 1e9, kPbsMinTetEdge = 1e-8;
// The step a frame's dynamics advance by: its time_step (or the session's), clamped to
// [0.1, 100] ms as the spec asks. A long pause (a DCC idle for seconds, a clip sampled at 1 frame
// a second) then does not fling the jiggling parts with seconds of gravity and of the pose's
// motion, nor a step of microseconds turn a frame's motion into velocities of kilometres a
// second that the next step carries.
inline constexpr double kPbsMinStep = 1e-4, kPbsMaxStep = 0.1;
std::optional<uint32_t> SolvePbsFrame(const PbsModel& model, const PbsParams& params,
                                      std::span<const Affine34f> skinning, double dt, PbsState& state,
                                      ThreadPool* pool, size_t grain = kPbsColourGrain,
                                      const StopFn* stop = nullptr);
bool PbsStateful(const DeformerConfig& config);  // jiggle

// MethodInfo::check: skinning weights, and the "pbs_jiggle" attribute where jiggle is asked for
// (FAILED_PRECONDITION, as the deformer's creation and SetParams).
absl::Status CheckPbsConfig(const Rig& rig, const DeformerConfig& config);
absl::StatusOr<std::shared_ptr<const Prepared>> PreparePbs(const Rig& rig, const DeformerConfig& config,
                                                           ThreadPool* pool, const ProgressFn& progress);
std::string PbsKey(const DeformerConfig& config);
absl::StatusOr<std::unique_ptr<Deformer>> CreatePbsDeformer(std::shared_ptr<const Rig> rig,
                                                            std::shared_ptr<const Prepared> prepared,
                                                            const DeformerConfig& config);

}  // namespace sinew
