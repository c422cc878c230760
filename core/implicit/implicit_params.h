// Implicit skinning's parameters (both methods), its joint operators and its per-vertex states:
// the types a host or the device twin (gpu/implicit/) shares with core/implicit/.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/deformer/params.h"

namespace sinew {

// How implicit skinning composes the fields of the two bones that meet at a joint (seed 000
// §2.5): max, clean union, contact (g_dc) or bulge in contact (g_db).
enum class JointOperator : uint8_t { kUnion = 1, kCleanUnion = 2, kContact = 3, kBulge = 4 };

// What blends the elastic method's target rotation per node (spec §2.8.2): the rig's skinning
// weights, or harmonic bone heat weights computed on the rest mesh (the thesis' default, [BP07]).
enum class RotationWeights : uint8_t { kSkinning = 0, kHarmonic = 1 };

// Parameters of "implicit" and "elastic-implicit"; defaults are the thesis' values.
struct ImplicitConfig : MethodParams {
  // The operator of every joint not listed in joint_operators; contact is the thesis' default.
  JointOperator default_operator = JointOperator::kContact;
  std::vector<std::pair<uint32_t, JointOperator>> joint_operators;  // (child joint, operator)
  // Tracking (both variants).
  double sigma = 0.35;                 // Newton step damping
  uint32_t max_iterations = 40;        // projection steps per frame (IS) or per sub-step (EIS)
  double contact_angle_degrees = 55;   // gradient jump that stops a vertex at a contact
  uint32_t smoothing_iterations = 3;   // IS: β-weighted Laplacian steps at contacts
  // EIS.
  uint32_t relaxation_iterations = 40;  // conjugate-gradient iterations per relaxation round
  // Gauss-Newton rounds of the relaxation energy per sub-step, at most: they stop earlier once
  // no node moves by more than 1e-3 of the mean edge (the thesis iterates to convergence). With
  // 32 the limb's 120° frame moved by 1.8e-3 of its diagonal under 1e-6 rad turns (2.5e-5 with
  // 64): sub-steps that end at the limit end where rounding leaves them. The limit is a cliff,
  // not a dial: the limb's 120° frame reads 1.5e-5 with 64, 4.1e-4 with 96, 1.2e-3 with 128 and
  // 1.4e-5 with 256, and with 64 (until 2026-11-28) BCN_Epileptic's right leg ended sub-steps
  // at the limit and moved by 1.1e-2 at 2.36 s of its clip sampled at 8 poses (7.9e-5 with 256).
  // Lower it for speed (the limb's frame takes about half as long with 64).
  uint32_t relaxation_rounds = 256;
  // Elastic: a relaxation round whose step moves no node farther than this fraction of the mean
  // edge is its component's last, in [0, 0.1]; 0: every relaxation runs relaxation_rounds rounds
  // (or ends on a step that does not descend). Smaller ends each relaxation nearer its minimum,
  // at a cost: on BCN_Epileptic's clip a frame takes about 1.5 (1e-4), 2.5 (1e-5) and 13–15 (0)
  // times as long. With average_stalled_relaxations, 1e-5 or 0 lower the right knee's flares at
  // 1.4–1.7 s of that clip under 1e-6 rad turns (5 poses: 1.6e-3 → 1.1e-3 and 9.1e-4 of the
  // diagonal; 13 poses: 2.9e-3 → 2.1e-3) but do not remove them: not a cure for the method's
  // sensitivity (docs/implicit-skinning.md, "Not done").
  double relaxation_tolerance = 1e-3;
  // Pieces too thin to track (both variants): a bone whose field's support radius is below this
  // fraction of the rig's mean one keeps the initial skinning, as a bone without a field does;
  // 0 tracks every piece (the thesis). Such a field's gradient is (mean / r)² times steeper than
  // the typical one that scales the elastic relaxation's surface term, and on BCN_Epileptic (its
  // ponytail, 0.22–0.28, and lips, 0.24; the fingers are 0.36–0.57, the Arm's smallest piece
  // 0.36) those relaxations ended at the round limit and the ponytail, driven through the back
  // by the clip, moved by 1e-2 of the diagonal under a 1e-6 rad turn. Part of the preparation.
  double min_field_radius = 0.3;
  // Preparation: a bone whose piece offers fewer than 16 distinct vertices between its culling
  // planes (a low-poly mesh: Testwuson.X's short torso bones, 4–14) and whose skin goes round the
  // bone gets a field fitted on points drawn over the piece's triangles, as the thesis samples
  // "the sub-mesh surface"; off, such pieces have no field (nothing meets them). The field joins
  // the composition, so other pieces' skin stops at it: on Testwuson.X bent to 150° the paws that
  // meet the chest and rump side-on cross them by 0.024–0.042 R instead of 0.26–0.76 R. The
  // piece's own skin keeps the initial skinning unless track_sampled_pieces, or every field is
  // drawn (a mesh too coarse for any other). docs/implicit-skinning.md, step 2. A rig with no such
  // piece prepares as with it off.
  bool sample_triangles = true;
  // Preparation: the skin of the pieces sample_triangles gave fields is tracked too (marched to
  // its field, relaxed by the elastic method) instead of keeping the initial skinning; nothing
  // without sample_triangles. Testwuson.X: its clip's deepest new fold under the elastic method
  // 0.052 of a radius instead of 0.077. Not the default: on BCN_Epileptic it tracks the neck's
  // root, and at 2.4–2.8 s of its clip the head then moves by up to 1.5e-2 of the diagonal under
  // 1e-6 rad turns.
  bool track_sampled_pieces = false;
  // Elastic: the cosine between two fields' gradients below which a node's own-side term against
  // the other piece starts to act (its contact gate, implicit_device::ContactGateOfCosine; full
  // from a cosine of −0.2), in (−0.2, 1]. 0 (the default): only pieces whose gradients oppose, a
  // face-to-face contact. 0.5: also pieces that meet side-on, as a phalanx reaching the palm or a
  // forearm the upper arm's rounded end: on the SuperCages Arm at 150° the middle MCP's contact
  // crossing falls from 0.348 R to 0.013 R and the elbow's in one jump from 0.061 R to 0.007 R,
  // but the limb's 120° frame moves by 3e-4 of its diagonal under 1e-6 rad turns unless
  // `average_stalled_relaxations` is set too (then 1.6e-5), and BCN_Epileptic's clip by up to
  // 1.2e-3 (9.8e-4 with the defaults); docs/implicit-skinning.md.
  double contact_gate_open = 0.0;
  // Elastic: a relaxation that reaches relaxation_rounds without converging ends at the mean of
  // its last two iterates instead of its last one (at a crease the limit is met in a two-cycle,
  // and which phase the last round lands in is a rounding accident between runs).
  bool average_stalled_relaxations = false;
  double min_substep_radians = 0.1;     // floor of the sub-step rule (bend / 3)
  // Ceiling of the sub-step rule: a joint turns by at most this much per sub-step. The thesis'
  // bend / 3 alone lets a 150° jump through in 3 sub-steps of 50°, which leaves the fold behind
  // (crossing 1.2 R on the cylinder where 10° steps give 0.03 R).
  double max_substep_radians = 0.175;  // 10°
  uint32_t max_substeps = 32;
  RotationWeights rotation_weights = RotationWeights::kSkinning;
  // Not in the API: the device program (gpu/implicit/) ends its elastic loops once no session of
  // the batch needs another pass, which must equal running every pass to the batch's maxima bit
  // for bit. Set, a session's batches run every pass, so that tests can compare the two.
  bool device_every_pass = false;
  // Not in the API: where a batch's mesh components are small (gpu/implicit/program.cuh,
  // kChainMaxComponent) the device program runs the node-local steps that follow a reduction (the
  // CG's update and direction, a round's capped and full step) in that reduction's kernel, which
  // must equal running them as passes of their own bit for bit. Set, a session's batches run them
  // separately, so that tests and sinew-bench-implicit can compare the two.
  bool device_separate_passes = false;
};

// Per-vertex outcome of implicit skinning's tracking (FrameExtras::vertex_states).
enum class VertexState : uint8_t {
  kFree = 0,       // outside every field (follows the initial skinning)
  kConverged = 1,  // on its iso-surface
  kContact = 2,    // stopped at a contact (gradient jump or loss of monotonicity)
  kNullGradient = 3,
  kMaxIterations = 4,
  kReseeded = 5,   // left its own bone's field: restarted from (kept at) dual quaternion skinning
};

// The parameters as users see them (names as in sinew.v1.ImplicitParams) and their parser.
std::span<const ParamSpec> ImplicitParamSpecs();
absl::StatusOr<std::shared_ptr<const MethodParams>> ParseImplicitParams(const ParamSet& set, std::string_view field);

}  // namespace sinew
