// SuperCages (Corda et al. 2020; seed 004, chapters 3–4): a skeleton and a cage coupled on one
// character.
//
//   rest cage C ──Φ──▶ rest mesh M = M0 + Φ (C − C0)           (cage coordinates, MVC)
//        │                                    │
//        └──Ψ──▶ rest joints A = A0 + Ψ (C − C0)   (skeleton updater, SKELUP)
//                                             ▼
//   pose (rotations, root motion) + A ──▶ skinning transforms 𝒯 ──LBS/DQS──▶ posed mesh M'
//                                             ▼
//   posed cage C' = Φ̃⁻¹ M̃'   (cage updater, CAGEUP: MaxVol rows of Φ, square and exact)
//
// and the reverse cage deformer (CAGEREV) turns an edit ∂C' of the posed cage into the rest-cage
// edit ∂C that produces it, by solving (R̃ Φ̃ + Ω̃ D Ψ) ∂C = Φ̃ ∂C' (thesis eq. 3.12, exact for
// LBS, the LBS approximation for DQS). A frame applies, in the thesis' order: the skeleton pose,
// then the rest cage (absolute or offsets from C0), then the posed-cage edit; the session keeps
// its rest cage and last pose.
//
// Skinning transforms keep the pose's rotations (and the root's motion); translations are
// recomputed top-down from the updated rest joints so that bones keep the updated rest lengths
// (thesis §3.2): T_j^r = rotation part, p_root = a_root + root motion,
// p_j = p_parent + T_parent^r (a_j − a_parent), T_j^t = p_j − T_j^r a_j. Children's pose
// translations are therefore not used.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <Eigen/LU>

#include "core/cage/cage_deformer.h"
#include "core/supercages/maxvol.h"

namespace sinew {

struct SuperCagesPrepared final : Prepared {
  uint32_t cage = 0;
  CageGeometry rest_cage;        // C0, 3 x c
  RowMatrixXd phi;               // m x c: MVC of the rest mesh w.r.t. C0
  RowMatrixXd psi;               // s x c: skeleton-updater weights (empty: updater off)
  MaxVolResult maxvol;           // c rows of Φ for the cage updater
  Eigen::MatrixXd phi_selected;  // Φ̃, c x c
  Eigen::PartialPivLU<Eigen::MatrixXd> phi_selected_lu;
  Eigen::Matrix3Xd rest_joints;  // A0, 3 x s: joint positions of the bind pose
  // Skeleton updater diagnostics: worst linear-precision error of a Ψ row (model units) and how
  // many joints fell back from localised maximum entropy coordinates to plain MVC of the cage.
  double psi_max_error = 0;
  int psi_fallbacks = 0;
  // The cage updater's error at rest: |Φ̃⁻¹ M̃0 − C0| over the cage's diagonal (largest entry).
  // Past kCageUpdaterTolerance Φ̃ is too ill-conditioned to give the posed cage back (a flat mesh
  // in a box, whose mirror cage vertices have equal columns of Φ): deforming works, while frames
  // that ask for the posed cage or edit it are refused (FAILED_PRECONDITION, with this number).
  double cage_updater_error = 0;
  static constexpr double kCageUpdaterTolerance = 1e-6;
  bool cage_updater_usable() const { return cage_updater_error <= kCageUpdaterTolerance; }

  size_t Bytes() const override;
};

// Parameters of "supercages".
struct SuperCagesParams : MethodParams {
  uint32_t cage = 0;                   // index into Rig::cages
  bool dqs = false;                    // DQS poses the cage-deformed rest mesh; else LBS
  bool skeleton_updater = true;
  double localisation_exponent = 0.1;  // s in L = -1 + w^s + (1 - w)^s (thesis eq. 3.3)
};
std::span<const ParamSpec> SuperCagesParamSpecs();
absl::StatusOr<std::shared_ptr<const MethodParams>> ParseSuperCagesParams(const ParamSet& set, std::string_view field);

// Key: cage index, updater on/off and its localisation exponent.
std::string SuperCagesKey(const DeformerConfig& config);
// MethodInfo::check: skinning weights, the cage the parameters name.
absl::Status CheckSuperCagesConfig(const Rig& rig, const DeformerConfig& config);

// Φ, Ψ (when the updater is on), the MaxVol selection and its factorisation.
absl::StatusOr<std::shared_ptr<const Prepared>> PrepareSuperCages(const Rig& rig,
                                                                  const DeformerConfig& config,
                                                                  ThreadPool* pool,
                                                                  const ProgressFn& progress);

absl::StatusOr<std::unique_ptr<Deformer>> CreateSuperCagesDeformer(
    std::shared_ptr<const Rig> rig, std::shared_ptr<const Prepared> prepared,
    const DeformerConfig& config);

// The cage vertices a supercages preparation takes: a frame with a posed cage factors a dense
// (3c)² system, 75 MB and about 2e10 operations at this size (until 2026-12-02 any cage within the
// coordinates' 4 GiB: at 5 000 vertices 1.8 GB and 2e12 a frame).
inline constexpr Eigen::Index kSuperCagesMaxCageVertices = 1024;

// What the skeleton updater may keep per session: a posed-cage frame builds G = D (Ψ ⊗ I), a 3×3
// block of doubles for every joint and cage vertex (72 bytes a pair; Ψ itself, shared, 8). Past
// it the preparation is refused naming both counts (until 2026-12-03 65 535 joints on a cage of
// 1 024 vertices kept 4.8 GB in every session, uncounted).
inline constexpr uint64_t kSuperCagesMaxUpdaterBytes = uint64_t{1} << 30;

// Copies of the coordinates Φ (m × c doubles) a preparation holds at its peak: Φ, and while the
// cage updater's rows are chosen (MaxVol) a QR of Φᵀ, B = Φ S⁻¹ and its transposes. Their sum
// is held to the cage methods' kMaxCoordinateBytes.
inline constexpr uint64_t kSuperCagesPhiCopies = 5;

// Skeleton-updater weights Ψ (s x c) for `rig` and cage geometry with coordinates Φ of the rest
// mesh: localised MVC of each rest joint w.r.t. the skin, transferred to the cage and projected
// to maximum entropy coordinates (thesis eqs. 3.3–3.5). Exposed for tests. The joints run on
// `pool` (null: the calling thread), with the same result; `progress` gets the fraction of joints
// done, and when it returns false the rest are skipped and *cancelled is set.
RowMatrixXd SkeletonUpdaterWeights(const Rig& rig, const CageGeometry& cage, const RowMatrixXd& phi,
                                   const Eigen::Matrix3Xd& rest_joints, double exponent,
                                   double* max_error, int* fallbacks, ThreadPool* pool = nullptr,
                                   const ProgressFn& progress = {}, bool* cancelled = nullptr);

}  // namespace sinew
