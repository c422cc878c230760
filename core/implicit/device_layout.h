// The contract between core's implicit skinning deformers and their device twin (gpu/implicit/):
// the per-frame parameters the CPU computes (forward kinematics, dual quaternions, moved fields)
// and the tracking constants both sides use. Plain C++ with no Eigen, so nvcc compiles it.
//
// Per-frame parameters, floats:
//   header (kHeaderFloats): [0] sub-steps S (1 for the history-independent method),
//                           [1] 1 when the session restarts from the rest state (elastic), else 0,
//                           [2], [3] unused
//   then S sub-step blocks (one for "implicit"), each:
//     joints × 12  dual quaternion skinning data of the (sub)frame: real x,y,z,w, dual x,y,z,w,
//                  scale, shift x,y,z (as SkeletalJointData for DQS)
//     elastic only:
//     joints × 12  the rigid change of each joint since the previous (sub)frame, row-major 3x4
//     joints × 12  the skinning transform of the (sub)frame, row-major 3x4
//     fields × kLeafFloats  each bone field moved by its joint (see WriteLeafFrame)
#pragma once

#include <cstddef>
#include <cstdint>

namespace sinew::implicit_device {

inline constexpr size_t kHeaderFloats = 4;
inline constexpr size_t kJointFloats = 12;
// One moved field: inverse linear part (3x3 row-major), inverse translation (3), gradient map
// A⁻ᵀ (3x3 row-major), posed bounding-sphere centre (3), squared posed radius (1), 3 unused.
inline constexpr size_t kLeafFloats = 28;
inline constexpr size_t kLeafInvLinear = 0, kLeafInvTranslation = 9, kLeafGradient = 12, kLeafCenter = 21,
                        kLeafRadius2 = 24;

inline constexpr size_t StepFloats(size_t joints, size_t fields, bool elastic) {
  return (elastic ? 3 : 1) * kJointFloats * joints + kLeafFloats * fields;
}
inline constexpr size_t FrameFloats(size_t joints, size_t fields, bool elastic, size_t substeps) {
  return kHeaderFloats + substeps * StepFloats(joints, fields, elastic);
}

// An elastic session's snapshot on a device (Deformer::SaveDeviceState reads it, LoadDeviceState
// writes it): the first SnapshotFloats(nodes) floats of the session's state memory hold each
// node's position (3 floats), then, from float SnapshotStateOffset(nodes) (16-byte aligned), each
// node's VertexState (1 byte). Nothing else on the device outlives a frame.
inline constexpr size_t SnapshotStateOffset(size_t nodes) { return (3 * nodes + 3) / 4 * 4; }
inline constexpr size_t SnapshotFloats(size_t nodes) { return SnapshotStateOffset(nodes) + (nodes + 3) / 4; }

// Tracking constants (seed 000 §2.7–2.8; [S] marks Sinew's choices, see docs/implicit-skinning.md).
inline constexpr int kMaxCandidates = 8;          // fields evaluated per vertex (nearest bounding spheres)
inline constexpr float kConvergence = 1e-4f;      // |f − iso| that counts as on the surface
inline constexpr int kBisections = 12;            // overshoot bisection steps
inline constexpr float kLeftOwnField = 0.01f;     // f_own below this: the vertex left its bone's field [S]
inline constexpr int kBetaDiffusion = 6;          // β diffusion iterations before contact smoothing
inline constexpr float kBetaMin = 1e-3f;          // smoothing moves nodes with β above this
// Sums over nodes (the CG's dot products): lane t of kReduceLanes accumulates nodes t,
// t + kReduceLanes, ...; then the lanes are added pairwise, halving — on the CPU and the device.
inline constexpr uint32_t kReduceLanes = 256;
inline constexpr double kCgStop = 1e-6;            // elastic: CG stops when r·z falls below this × r₀·z₀
// Elastic relaxation energy (ElasticImplicitDeformer::Relax) [S]:
inline constexpr float kSurfaceStiffness = 30;     // k_i = this × cotangent row sum / typical gradient²
inline constexpr float kOwnSideSlack = 0.01f;      // depth in the other field beyond its rest excess tolerated
// A spring from each free node towards its DQS position, this × its cotangent row sum: the
// surface term holds a node along its field's gradient and ARAP (fixed rotations) does not see a
// translation, so without it a long, nearly cylindrical piece of skin could slide along itself
// (a near-null direction of the energy) and a relaxation to convergence ends anywhere along it.
// 1/30 000 of the surface term's stiffness: a node whose DQS position lies 1 R away (a 150° fold)
// moves by about 3e-5 R.
inline constexpr float kDqsSpring = 1e-3f;
// The relaxation block's diagonal at a node: its cotangent row sum (ARAP) plus the spring's.
inline constexpr float RelaxDiagonal(float cot_sum) { return cot_sum + kDqsSpring * cot_sum; }
// How much deeper a point is in its own field (value f_own, depth scale s_own) than in another:
// near its surface a field reads ½ − (15/16) d / r, and s = r / r̄ (ImplicitModel::depth_scale),
// so s (f − ½) is the same multiple of the depth on every field. Negative: deeper in the other.
inline constexpr float OwnSideDepth(float s_own, float f_own, float s_other, float f_other) {
  return s_own * (f_own - 0.5f) - s_other * (f_other - 0.5f);
}
inline constexpr float kContactGateCos = 0.2f;     // gradients opposed by this cosine: a full contact
// The contact gate of an own-side term from the cosine between the two fields' gradients at the
// node: 1 where they oppose by kContactGateCos or more, 0 from `open` up
// (ImplicitConfig::contact_gate_open; 0 by default: face-to-face contacts only), a ramp between.
inline constexpr float ContactGateOfCosine(float cosine, float open) {
  const float g = (open - cosine) / (open + kContactGateCos);
  return g < 0.f ? 0.f : g > 1.f ? 1.f : g;
}
// Rest excesses kept per node (ImplicitModel::rest_pair_leaf/excess), the largest; on the rigs
// here at most 3 other fields reach deeper than the own one at any node at rest.
inline constexpr int kRestPairs = 4;
// Whether fields a and b are the pieces either side of a joint (ImplicitModel::parent_field).
inline constexpr bool AdjacentFields(const int32_t* parent_field, int32_t a, int32_t b) {
  return parent_field[a] == b || parent_field[b] == a;
}
// The rest excess a node may keep against field `leaf` (0 where it had none).
inline constexpr float RestExcess(const int32_t* pair_leaf, const float* pair_excess, int32_t leaf) {
  for (int k = 0; k < kRestPairs; ++k) {
    if (pair_leaf[k] == leaf) return pair_excess[k];
  }
  return 0.f;
}
// The relaxation's preconditioner (the inverse of its matrix's 3x3 block at a node) applied to
// y: z solves (d I + k (g gᵀ + C)) z = y, C symmetric as xx, xy, xz, yy, yz, zz (the own-side
// terms' Σ γ ∇h ∇hᵀ). Symmetric positive definite (d > 0): cofactors. In two halves, so that the CG
// applies one inverse in all its iterations: the block's cofactors c00, c01, c02, c11, c12, c22
// and its inverse determinant (7 floats), made once per energy evaluation; then their product
// with y. The CPU and the device call these functions, so that their CG scalars agree.
inline constexpr int kRelaxBlockFloats = 7;
inline constexpr void RelaxBlockInverse(float d, float k, const float* g, const float* c, float* out) {
  const float a00 = d + k * (g[0] * g[0] + c[0]), a01 = k * (g[0] * g[1] + c[1]), a02 = k * (g[0] * g[2] + c[2]);
  const float a11 = d + k * (g[1] * g[1] + c[3]), a12 = k * (g[1] * g[2] + c[4]), a22 = d + k * (g[2] * g[2] + c[5]);
  out[0] = a11 * a22 - a12 * a12;
  out[1] = a02 * a12 - a01 * a22;
  out[2] = a01 * a12 - a02 * a11;
  out[3] = a00 * a22 - a02 * a02;
  out[4] = a01 * a02 - a00 * a12;
  out[5] = a00 * a11 - a01 * a01;
  out[6] = 1.f / (a00 * out[0] + a01 * out[1] + a02 * out[2]);
}
inline constexpr void ApplyRelaxBlock(const float* b, const float* y, float* z) {
  z[0] = (b[0] * y[0] + b[1] * y[1] + b[2] * y[2]) * b[6];
  z[1] = (b[1] * y[0] + b[3] * y[1] + b[4] * y[2]) * b[6];
  z[2] = (b[2] * y[0] + b[4] * y[1] + b[5] * y[2]) * b[6];
}
// The relaxation's step along a round's capped Gauss-Newton step δ: the minimum of the parabola
// through E at the start (e0), its slope ∇E·δ there (< 0) and E at the full step (e1), within
// [kMinStepFraction, 1] (1 where E is not convex along δ). A continuous function of the three:
// no trial is accepted or rejected, so the result has no jump where such a test would flip
// (with an Armijo line search, BCN_Epileptic's clip moved by 3.3e-2 of its diagonal under
// 1e-6 rad turns; where the search failed, the relaxation stopped short of its minimum).
inline constexpr float kMinStepFraction = 0.0625f;
inline constexpr float RelaxStepFraction(double e0, double slope, double e1) {
  const double q = e1 - e0 - slope;
  if (!(e1 == e1)) return kMinStepFraction;  // NaN: the shortest step
  if (!(q > 0)) return 1.f;
  const double a = -slope / (2 * q);
  return a < kMinStepFraction ? kMinStepFraction : a > 1 ? 1.f : float(a);
}
// The scale of the step caps in the next round: ×2 after a full step, ×½ as the step fraction
// a goes to 0, continuous in a, within [1, kMaxTrust]. Nodes that must travel far (a knee's
// crease reorganised in one sub-step) converge in fewer rounds; more than 2 let BCN's elbow at
// 150° fold 0.11 R deep in its crease.
inline constexpr float kMaxTrust = 2.f;
inline constexpr float NextTrust(float trust, float a) {
  const float t = trust * (0.5f + 1.5f * a);
  return t < 1.f ? 1.f : t > kMaxTrust ? kMaxTrust : t;
}
// Per-node step caps for a relaxation still running after kNodeTrustRound rounds (issue 15,
// 2026-12-06): BCN_Epileptic's legs stalled at the round limit at the leg's highest raise, two
// crease nodes whose own-side hinge switched on within each full step (the Gauss-Newton model
// does not see a hinge that is off at the round's start), so that E rose by 12-25 % at the full
// step and the one step fraction of the whole component (RelaxStepFraction) stayed short for
// every node. From that round on, each free node's cap also scales by its own trust t, which
// falls where its field terms rose beyond their model along its step and grows back where they
// did not (NextNodeTrust). Relaxations that converge sooner are untouched; from round 16 the
// two-bone limb's 120° frame moved by 1.2e-4 of its diagonal under 1e-6 rad turns (1.4e-5).
// It does not make the stalls converge (at 12 samples of BCN's clip 15 of 1 860 relaxations of
// large components still end at the round limit, as without it; in the legs 90-230 of 573 nodes
// end below trust 1): it changes where they end, and there BCN's clip moves less under 1e-6 rad
// turns (at 12 samples 1.79e-3 of the diagonal against 4.44e-3 without it).
inline constexpr uint32_t kNodeTrustRound = 48;
inline constexpr float kNodeTrustFloor = 0.25f;
inline constexpr double kNodeTrustGain = 0.5;
// The Gauss-Newton model of one node's field terms ½ k ((f − iso)² + Σ γ min(0, h)²) along its
// capped step d: `predicted`, the model's change, and `size`, its linear part's magnitude plus its
// quadratic part (the scale NextNodeTrust measures the model's error against). k, c = f − iso,
// g = ∇f, gh = Σ γ h ∇h and cm = Σ γ ∇h ∇hᵀ (xx, xy, xz, yy, yz, zz) at the round's start.
inline constexpr void NodeStepModel(float k, float c, const float* g, const float* gh, const float* cm,
                                    const float* d, double* predicted, double* size) {
  const float gd_f = g[0] * d[0] + g[1] * d[1] + g[2] * d[2];
  const float ghd = gh[0] * d[0] + gh[1] * d[1] + gh[2] * d[2];
  const double gd = gd_f;
  const double lin = double(k) * (double(c) * gd + double(ghd));
  const double quad = 0.5 * double(k) * (gd * gd + cm[0] * d[0] * d[0] + cm[3] * d[1] * d[1] + cm[5] * d[2] * d[2] +
                                         2 * (cm[1] * d[0] * d[1] + cm[2] * d[0] * d[2] + cm[4] * d[1] * d[2]));
  *predicted = lin + quad;
  *size = (lin < 0 ? -lin : lin) + quad;
}
// A node's trust after a round's full step: ×1.5 where its field terms changed as modelled, less
// by kNodeTrustGain × the model's error relative to its size where they rose beyond it, within
// [kNodeTrustFloor, 1]; continuous in everything it reads.
inline constexpr float NextNodeTrust(float trust, double before, double after, double predicted, double size) {
  const double excess = (after - before) - predicted;
  const double rel = excess > 0 ? excess / (size + 1e-12) : 0.0;
  const double t = double(trust) * (1.5 - kNodeTrustGain * rel);
  return t < kNodeTrustFloor ? kNodeTrustFloor : t > 1 ? 1.f : float(t);
}
// Third pieces' contact gates are read at the node's DQS position too (RelaxSetup), except
// against a piece whose field at the node's rest position exceeds this: pieces that touch at
// rest (fingers side by side), where the DQS reading would hold the skin apart that the rig
// keeps together.
inline constexpr float kThirdPieceRestField = 0.05f;
inline constexpr float kStateTolerance = 10 * kConvergence;  // elastic: residual reported as converged

// Per-vertex states (VertexState in core/deformer/deformer.h). kMarching is a node still
// marching; one that ends a frame in it hit the iteration limit (VertexState::kMaxIterations).
inline constexpr uint8_t kFree = 0, kConverged = 1, kContact = 2, kNullGradient = 3, kMarching = 4, kReseeded = 5;

}  // namespace sinew::implicit_device
