#include "core/supercages/supercages.h"

#include <optional>
#include <atomic>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/cage/cage_check.h"
#include "core/cage/cage_deformer.h"
#include "core/cage/mec.h"
#include "core/deformer/skeletal.h"
#include "core/dqs/dqs.h"
#include "core/lbs/lbs.h"
#include "core/util/state_bytes.h"

namespace sinew {

size_t SuperCagesPrepared::Bytes() const {
  return sizeof(*this) + sizeof(double) * (phi.size() + psi.size() + 2 * phi_selected.size() +
                                           rest_cage.vertices.size() + rest_joints.size());
}

std::string SuperCagesKey(const DeformerConfig& config) {
  const SuperCagesParams& p = ParamsOf<SuperCagesParams>(config);
  return absl::StrCat("cage=", p.cage, ";skelup=", p.skeleton_updater ? 1 : 0, ";s=", KeyNumber(p.localisation_exponent));
}

namespace {
constexpr std::string_view kSkinningWords[] = {"lbs", "dqs"};
constexpr ParamSpec kSuperCagesSpecs[] = {
    {"cage", ParamSpec::Type::kInteger, "0", "index into the rig's cages"},
    {"skinning", ParamSpec::Type::kChoice, "lbs", "the skinning that poses the cage-deformed rest mesh", kSkinningWords},
    {"no_skeleton_updater", ParamSpec::Type::kFlag, "false", "keep rest joints where they are when the cage moves"},
    {"localisation_exponent", ParamSpec::Type::kNumber, "0.1",
     "s of the skeleton updater's localisation L = -1 + w^s + (1 - w)^s (thesis eq. 3.3), (0, 1]"},
};
}  // namespace

std::span<const ParamSpec> SuperCagesParamSpecs() { return kSuperCagesSpecs; }

absl::StatusOr<std::shared_ptr<const MethodParams>> ParseSuperCagesParams(const ParamSet& set, std::string_view field) {
  auto p = std::make_shared<SuperCagesParams>();
  int skinning = 0;
  bool no_updater = false;
  ParamReader r(set, field);
  r.Count("cage", p->cage, 0, 1u << 20)
      .Choice("skinning", kSkinningWords, skinning)
      .Flag("no_skeleton_updater", no_updater)
      .Number("localisation_exponent", p->localisation_exponent, 0, 1, /*open_lo=*/true);
  if (!r.status().ok()) return r.status();
  p->dqs = skinning == 1;
  p->skeleton_updater = !no_updater;
  return std::shared_ptr<const MethodParams>(std::move(p));
}

RowMatrixXd SkeletonUpdaterWeights(const Rig& rig, const CageGeometry& cage, const RowMatrixXd& phi,
                                   const Eigen::Matrix3Xd& rest_joints, double exponent,
                                   double* max_error, int* fallbacks, ThreadPool* pool,
                                   const ProgressFn& progress, bool* cancelled) {
  const size_t m = rig.vertex_count(), s = rig.joint_count();
  const Eigen::Index c = cage.vertices.cols();
  // The skin as an MVC "cage" for the joints (it need not be closed: the maximum entropy
  // projection restores linear precision on the cage).
  CageGeometry skin;
  skin.vertices = ToPoints(rig.positions);
  skin.triangles.resize(3, static_cast<Eigen::Index>(rig.triangle_count()));
  for (size_t t = 0; t < rig.triangle_count(); ++t) {
    for (int k = 0; k < 3; ++k) skin.triangles(k, static_cast<Eigen::Index>(t)) = rig.triangles[3 * t + k];
  }
  // Each joint's weights ω_ij as (vertex, weight) lists: the rig's rows transposed. (Until
  // 2026-12-02 a dense joints x vertices matrix: 84 GB for 65 535 joints on 200 000 vertices.)
  std::vector<std::vector<std::pair<uint32_t, float>>> omega(s);
  for (size_t v = 0; v < m; ++v) {
    for (uint32_t e = rig.weights.offsets[v]; e < rig.weights.offsets[v + 1]; ++e) {
      omega[rig.weights.joints[e]].emplace_back(uint32_t(v), rig.weights.weights[e]);
    }
  }
  const double tolerance = 1e-6 * cage.diagonal();
  RowMatrixXd psi(static_cast<Eigen::Index>(s), c);
  std::vector<double> errors(s, 0.0);
  std::vector<uint8_t> fell_back(s, 0);
  std::atomic<size_t> done{0};
  std::atomic<bool> stop{false};
  // Joints in parallel (each an MVC over the skin's triangles and an entropy projection), every
  // one computed exactly as alone: the result does not depend on the pool.
  ParallelFor(pool, s, 1, [&](size_t b, size_t e) {
    std::vector<double> mvc(m), cage_mvc(static_cast<size_t>(c)), w(m, 0.0);
    Eigen::RowVectorXd localised(static_cast<Eigen::Index>(m)), plain(static_cast<Eigen::Index>(m));
    for (size_t j = b; j < e && !stop; ++j) {
      const Eigen::Vector3d a = rest_joints.col(static_cast<Eigen::Index>(j));
      MeanValueCoordinates(skin, a, mvc);
      for (const auto& [v, weight] : omega[j]) w[v] = weight;
      // Joint localisation L = −1 + ω^s + (Σ_{k≠j} ω_k)^s = −1 + ω^s + (1 − ω)^s (eq. 3.3): 0
      // where the vertex is rigidly bound, largest where the weights blend (the articulation).
      bool blended = false;  // some vertex blends around this joint (L > 0 somewhere)
      for (size_t i = 0; i < m; ++i) {
        const double wi = std::clamp(w[i], 0.0, 1.0);
        const double l = std::max(0.0, -1 + std::pow(wi, exponent) + std::pow(1 - wi, exponent));
        blended = blended || l > 0;
        localised(static_cast<Eigen::Index>(i)) = mvc[i] * l;
        plain(static_cast<Eigen::Index>(i)) = mvc[i];
      }
      for (const auto& [v, weight] : omega[j]) w[v] = 0;
      // Masses on the cage vertices (eq. 3.4), projected to valid coordinates (eq. 3.5).
      MecResult best;
      bool ok = false;
      for (const Eigen::RowVectorXd* masses : {&localised, &plain}) {
        // A joint no vertex blends around (unweighted, or every vertex bound rigidly) has no
        // localisation: all its masses are 0, which the projection reads as uniform ones (the
        // whole cage: a hand's edit moved such a joint at the shoulder, until 2026-12-03). It
        // takes the plain masses, as the authors' code flooring L at ε comes to.
        if (masses == &localised && !blended) continue;
        const Eigen::VectorXd mu = (*masses * phi).transpose();
        MecResult r = MaximumEntropyCoordinates(cage.vertices, mu, a);
        if (r.converged && r.linear_precision_error <= tolerance) {
          best = std::move(r);
          ok = true;
          break;
        }
        if (masses == &plain) fell_back[j] = 1;
      }
      if (ok) {
        psi.row(static_cast<Eigen::Index>(j)) = best.weights.transpose();
        errors[j] = best.linear_precision_error;
      } else {
        // Last resort: MVC of the joint w.r.t. the cage (linear precision, not local; it degrades
        // far outside the cage, so its error counts: until 2026-12-07 it was taken as 0, and the
        // reported maximum left out exactly the joints that failed MEC).
        MeanValueCoordinates(cage, a, cage_mvc);
        Eigen::Vector3d reproduced = Eigen::Vector3d::Zero();
        for (Eigen::Index k = 0; k < c; ++k) {
          psi(static_cast<Eigen::Index>(j), k) = cage_mvc[k];
          reproduced += cage_mvc[k] * cage.vertices.col(k);
        }
        errors[j] = (reproduced - a).norm();
      }
      const size_t d = done.fetch_add(1) + 1;
      if (progress && !progress(double(d) / double(std::max<size_t>(s, 1)))) stop = true;
    }
  });
  if (cancelled != nullptr) *cancelled = stop;
  *max_error = 0;
  *fallbacks = 0;
  for (size_t j = 0; j < s; ++j) {
    *max_error = std::max(*max_error, errors[j]);
    *fallbacks += fell_back[j];
  }
  return psi;
}

absl::Status CheckSuperCagesConfig(const Rig& rig, const DeformerConfig& config) {
  if (auto st = SkeletalDeformer::CheckRig(rig, "supercages"); !st.ok()) return st;
  const SuperCagesParams& params = ParamsOf<SuperCagesParams>(config);
  if (params.cage >= rig.cages.size()) {
    return absl::FailedPreconditionError(absl::StrCat("deformer.supercages.cage: method supercages uses cage ",
                                                      params.cage, " but the rig has ",
                                                      rig.cages.size(), " cages"));
  }
  // A cage vertex on no face (uploads refuse it since 2026-12-07; a rig kept in --state-dir
  // before may hold one) has coordinate 0 at every mesh vertex: Φ has a zero column, the
  // cage updater's MaxVol has no invertible submatrix (until 2026-12-03 it swapped rows of NaN
  // for hours, uncancellable), and moving that vertex moves nothing.
  if (auto st = CheckCageVerticesOnFaces(rig.cages[params.cage], absl::StrCat("rig.cages[", params.cage, "]"));
      !st.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "method supercages: ", st.message(), " (its coordinates are 0 everywhere, and the cage updater cannot "
        "invert them)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Prepared>> PrepareSuperCages(const Rig& rig,
                                                                  const DeformerConfig& config,
                                                                  ThreadPool* pool,
                                                                  const ProgressFn& progress) {
  if (auto st = CheckSuperCagesConfig(rig, config); !st.ok()) return st;
  const SuperCagesParams& params = ParamsOf<SuperCagesParams>(config);
  if (!(params.localisation_exponent > 0 && params.localisation_exponent <= 1)) {
    return absl::InvalidArgumentError("deformer.supercages.localisation_exponent: must be in (0, 1]");
  }
  auto p = std::make_shared<SuperCagesPrepared>();
  p->cage = params.cage;
  p->rest_cage = ToCageGeometry(rig.cages[params.cage]);
  const size_t m = rig.vertex_count();
  const Eigen::Index c = p->rest_cage.vertices.cols();
  if (auto st = CheckCoordinateBytes(m, static_cast<uint64_t>(c), params.cage, "supercages"); !st.ok()) return st;
  // Choosing Φ's rows (MaxVol) holds about four more copies of it at once (a QR of Φᵀ, B and its
  // transposes): the coordinates' budget covers all five (until 2026-12-03 Φ alone, so a
  // preparation within it peaked near 20 GB).
  if (const uint64_t peak = kSuperCagesPhiCopies * sizeof(double) * uint64_t(m) * uint64_t(c);
      peak > kMaxCoordinateBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "method supercages: the coordinates of ", m, " vertices in cage ", params.cage, "'s ", c,
        " vertices, with the copies choosing the cage updater's rows takes, need ", peak / 1'000'000,
        " MB at once; at most ", kMaxCoordinateBytes >> 20, " MiB (a smaller mesh or cage)"));
  }
  if (c > kSuperCagesMaxCageVertices) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "deformer.supercages.cage: cage ", params.cage, " has ", c, " vertices; method supercages takes at most ",
        kSuperCagesMaxCageVertices, " (a posed-cage frame solves a dense system of 3 rows per cage vertex)"));
  }
  if (m < static_cast<size_t>(c)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "method supercages: the cage has ", c, " vertices, more than the mesh's ", m,
        "; the cage updater needs at least as many mesh vertices"));
  }
  if (const uint64_t g = 72 * uint64_t(rig.joint_count()) * uint64_t(c);
      params.skeleton_updater && g > kSuperCagesMaxUpdaterBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "deformer.supercages.skeleton_updater: ", rig.joint_count(), " joints x ", c, " cage vertices: each session "
        "keeps a 3x3 block of doubles per pair (", g / 1'000'000, " MB); at most ", kSuperCagesMaxUpdaterBytes >> 20,
        " MiB (fewer joints, a smaller cage, or skeleton_updater false)"));
  }
  // 1. Φ (the bulk of the work: 80 % of the progress).
  p->phi.resize(static_cast<Eigen::Index>(m), c);
  std::atomic<size_t> done{0};
  std::atomic<bool> stop{false};  // progress said to stop: the chunks not started are skipped
  ParallelFor(pool, m, 256, [&](size_t b, size_t e) {
    if (stop) return;
    for (size_t i = b; i < e; ++i) {
      const Eigen::Vector3d x(rig.positions[3 * i], rig.positions[3 * i + 1], rig.positions[3 * i + 2]);
      MeanValueCoordinates(p->rest_cage, x, std::span<double>(p->phi.row(static_cast<Eigen::Index>(i)).data(), static_cast<size_t>(c)));
    }
    const size_t d = done.fetch_add(e - b) + (e - b);
    if (progress && !progress(0.8 * double(d) / double(m))) stop = true;
  });
  if (stop) return absl::CancelledError("supercages: preparation cancelled");
  // 2. Rest joints (bind pose) and the skeleton updater.
  const size_t s = rig.joint_count();
  p->rest_joints.resize(3, static_cast<Eigen::Index>(s));
  for (size_t j = 0; j < s; ++j) p->rest_joints.col(static_cast<Eigen::Index>(j)) = Inverse(rig.skeleton.inverse_bind[j]).col(3);
  if (params.skeleton_updater) {
    bool cancelled = false;
    p->psi = SkeletonUpdaterWeights(rig, p->rest_cage, p->phi, p->rest_joints, params.localisation_exponent,
                                    &p->psi_max_error, &p->psi_fallbacks, pool,
                                    [&](double f) { return !progress || progress(0.8 + 0.1 * f); }, &cancelled);
    if (cancelled) return absl::CancelledError("supercages: preparation cancelled");
  }
  if (progress && !progress(0.9)) return absl::CancelledError("supercages: preparation cancelled");
  // 3. Cage updater: MaxVol rows of Φ and their factorisation.
  p->maxvol = MaxVol(p->phi, 1e-2, 100000, [&] { return progress && !progress(0.9); });
  if (p->maxvol.stopped) return absl::CancelledError("supercages: preparation cancelled");
  p->phi_selected.resize(c, c);
  for (Eigen::Index k = 0; k < c; ++k) p->phi_selected.row(k) = p->phi.row(p->maxvol.rows[k]);
  p->phi_selected_lu.compute(p->phi_selected);
  if (!std::isfinite(p->maxvol.log_abs_det)) {
    return absl::FailedPreconditionError(
        "method supercages: the cage coordinates of the mesh are rank-deficient (no invertible "
        "MaxVol submatrix); is the mesh degenerate relative to the cage?");
  }
  // Whether the MaxVol rows give the rest cage back from the rest mesh: a finite determinant is
  // not enough (until 2026-12-07 a flat mesh in a box gave a posed cage 0.97 of the box off at rest).
  {
    Eigen::MatrixXd rest_rows(c, 3);
    for (Eigen::Index k = 0; k < c; ++k) {
      const size_t v = static_cast<size_t>(p->maxvol.rows[k]);
      for (int d = 0; d < 3; ++d) rest_rows(k, d) = rig.positions[3 * v + d];
    }
    const Eigen::MatrixXd back = p->phi_selected_lu.solve(rest_rows);
    const double diagonal = std::max(p->rest_cage.diagonal(), 1e-300);
    const double error = (back - p->rest_cage.vertices.transpose()).cwiseAbs().maxCoeff() / diagonal;
    p->cage_updater_error = std::isfinite(error) ? error : std::numeric_limits<double>::infinity();
  }
  if (progress) progress(1.0);
  return std::shared_ptr<const Prepared>(std::move(p));
}

namespace {

class SuperCagesDeformer final : public Deformer {
 public:
  SuperCagesDeformer(std::shared_ptr<const Rig> rig, std::shared_ptr<const Prepared> prepared,
                     const DeformerConfig& config)
      : rig_(std::move(rig)),
        prep_(std::static_pointer_cast<const SuperCagesPrepared>(prepared)),
        dqs_(ParamsOf<SuperCagesParams>(config).dqs),
        pose_(RestPose(rig_->skeleton)),
        cage_(prep_->rest_cage.vertices),
        delta_(Eigen::Matrix3Xd::Zero(3, prep_->rest_cage.vertices.cols())),
        world_(rig_->joint_count()),
        transforms_(rig_->joint_count()),
        matrices_(rig_->joint_count()),
        dual_quats_(rig_->joint_count()),
        joints_(3, static_cast<Eigen::Index>(rig_->joint_count())),
        rest_mesh_(rig_->positions.size()) {
    if (pose_.scales.empty()) pose_.scales.assign(rig_->joint_count(), 1.0f);
  }

  // Back to the uploaded cage and the rest pose.
  void Reset() override {
    pose_ = RestPose(rig_->skeleton);
    if (pose_.scales.empty()) pose_.scales.assign(rig_->joint_count(), 1.0f);
    cage_ = prep_->rest_cage.vertices;
    delta_.setZero();
  }

  // Snapshots (Deformer::SaveState): the history is the last pose received and the rest cage C
  // (frames may carry either alone, and posed-cage edits move C); the rest is remade from them.
  // On a device too (its stage is per vertex; the state stays here). Bytes: "supercages-state" 1,
  // joint and cage vertex counts (u64), the pose's space (u8), its rotations (x y z w), translations
  // and scales (float32 per joint: 4, 3, 1), C (3 doubles per cage vertex), then an FNV-1a 64
  // (core/util/state_bytes.h).
  absl::StatusOr<std::string> SaveState() const override {
    StateWriter out(kStateMagic);
    out.Put(uint64_t(rig_->joint_count()));
    out.Put(uint64_t(cage_.cols()));
    out.Put(uint8_t(pose_.space == PoseSpace::kWorld));
    out.PutArray(std::span<const float>(pose_.rotations));
    out.PutArray(std::span<const float>(pose_.translations));
    out.PutArray(std::span<const float>(pose_.scales));
    out.PutArray(std::span<const double>(cage_.data(), size_t(cage_.size())));
    return std::move(out).Finish();
  }

  absl::Status LoadState(std::string_view bytes) override {
    StateReader in(bytes, kStateMagic, "a supercages session state");
    const uint64_t joints = in.Get<uint64_t>(), corners = in.Get<uint64_t>();
    const bool world = in.Get<uint8_t>() != 0;
    if (!in.ok()) return in.status();
    if (joints != rig_->joint_count() || corners != uint64_t(cage_.cols())) {
      return absl::InvalidArgumentError(absl::StrCat("state: saved with ", joints, " joints and a cage of ", corners,
                                                     " vertices; this session's rig has ", rig_->joint_count(),
                                                     " and its cage ", cage_.cols()));
    }
    const size_t expect = joints * 8 * sizeof(float) + corners * 3 * sizeof(double);
    if (in.remaining() != expect) {
      return absl::DataLossError(
          absl::StrCat("state: ", in.remaining(), " bytes of pose and cage where ", joints, " joints and ", corners,
                       " cage vertices need ", expect));
    }
    Pose pose;
    pose.space = world ? PoseSpace::kWorld : PoseSpace::kLocal;
    pose.rotations.resize(4 * joints);
    pose.translations.resize(3 * joints);
    pose.scales.resize(joints);
    Eigen::Matrix3Xd cage(3, Eigen::Index(corners));
    in.GetArray(std::span<float>(pose.rotations));
    in.GetArray(std::span<float>(pose.translations));
    in.GetArray(std::span<float>(pose.scales));
    in.GetArray(std::span<double>(cage.data(), size_t(cage.size())));
    if (auto st = in.Done(); !st.ok()) return st;
    // The checksum is the client's to compute: a state it wrote may hold anything.
    if (auto st = ValidatePose(pose, joints); !st.ok()) return absl::InvalidArgumentError(absl::StrCat("state: ", st.message()));
    // Within float's range, as the cages frames send (until 2026-12-07 only finite: a vertex at
    // 1e300 was taken, and every later frame failed, blaming its pose and cages).
    for (Eigen::Index k = 0; k < cage.cols(); ++k) {
      if (!(cage.col(k).cwiseAbs().maxCoeff() <= double(std::numeric_limits<float>::max()))) {
        return absl::InvalidArgumentError(
            absl::StrCat("state: cage vertex ", k, " is not finite or beyond float's range (",
                         cage(0, k), ", ", cage(1, k), ", ", cage(2, k), ")"));
      }
    }
    pose_ = std::move(pose);
    cage_ = std::move(cage);
    delta_ = cage_ - prep_->rest_cage.vertices;
    UpdateTransforms();
    SelectedPosedMesh(selected_);
    posed_cage_valid_ = false;
    return absl::OkStatus();
  }

  absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) override {
    if (auto st = Update(frame); !st.ok()) return st;
    const Rig& rig = *rig_;
    // Rest mesh from the cage, then skinning.
    ApplyCageCoordinates(prep_->phi, rig.positions, delta_, rest_mesh_, pool);
    if (!dqs_) {
      for (size_t j = 0; j < matrices_.size(); ++j) matrices_[j] = transforms_[j].cast<float>();
      LinearBlendSkinning(rest_mesh_, rig.weights, matrices_, out, pool);
    } else {
      ToDualQuats(transforms_, dual_quats_, RestCentres());
      DualQuaternionSkinning(rest_mesh_, rig.weights, dual_quats_, out, pool);
    }
    return absl::OkStatus();
  }

  // Device stage: the cage product and the skinning run per vertex; the skeleton updater, the
  // reverse deformer and the cage updater (MaxVol rows, in double) stay here.
  DeviceStage device_stage() const override {
    DeviceStage s;
    s.kernel = dqs_ ? "cage+dqs" : "cage+lbs";
    s.device_data_key = absl::StrCat("supercages cage=", prep_->cage);
    return s;
  }
  size_t device_param_count() const override {
    return 3 * size_t(prep_->rest_cage.vertices.cols()) + 12 * rig_->joint_count();
  }
  void DeviceCoefficients(std::vector<float>& values, uint32_t& cols) const override {
    cols = static_cast<uint32_t>(prep_->phi.cols());
    values.assign(prep_->phi.data(), prep_->phi.data() + prep_->phi.size());
  }
  absl::Status DeviceFrame(const FrameInput& frame, std::vector<float>& params) override {
    params.resize(device_param_count());
    if (auto st = Update(frame); !st.ok()) return st;
    const Eigen::Index c = cage_.cols();
    size_t at = 0;
    for (Eigen::Index k = 0; k < c; ++k) {
      for (int d = 0; d < 3; ++d) params[at++] = float(delta_(d, k));
    }
    if (!dqs_) {
      for (const Affine34d& t : transforms_) {
        const Affine34f m = t.cast<float>();
        std::copy(m.data(), m.data() + 12, &params[at]);
        at += 12;
      }
    } else {
      ToDualQuats(transforms_, dual_quats_, RestCentres());
      for (const DualQuat& q : dual_quats_) {
        std::copy(q.v, q.v + 8, &params[at]);
        params[at + 8] = q.scale;
        std::copy(q.shift, q.shift + 3, &params[at + 9]);
        at += 12;
      }
    }
    return absl::OkStatus();
  }

 private:
  // Steps 1–5 of the frame (pose, rest cage, skeleton updater, reverse cage deformer) and the
  // cage updater's rows; everything but the per-vertex mesh.
  absl::Status Update(const FrameInput& frame) {
    const Rig& rig = *rig_;
    if (frame.spheres != nullptr) {
      return absl::InvalidArgumentError("spheres: method supercages takes no sphere-mesh input");
    }
    if (frame.pose) {
      if (auto st = ValidatePose(*frame.pose, rig.joint_count()); !st.ok()) return st;
    }
    if (auto st = ValidateCageFrames(rig, frame.cages); !st.ok()) return st;
    for (size_t i = 0; i < frame.cages.size(); ++i) {
      if (frame.cages[i].cage != prep_->cage) {
        return absl::InvalidArgumentError(absl::StrCat("cages[", i, "].cage: this session's rest cage is cage ", prep_->cage));
      }
    }
    if (frame.posed_cage) {
      if (auto st = CageUpdaterUsable("posed_cage"); !st.ok()) return st;
      const CageFrame& pc = *frame.posed_cage;
      if (pc.cage != prep_->cage) {
        return absl::InvalidArgumentError(absl::StrCat("posed_cage.cage: this session's cage is cage ", prep_->cage));
      }
      const std::span<const CageFrame> one(&pc, 1);
      if (auto st = ValidateCageFrames(rig, one); !st.ok()) {
        return absl::InvalidArgumentError(absl::StrReplaceAll(st.message(), {{"cages[0]", "posed_cage"}}));
      }
    }
    // A posed-cage edit can meet a reverse cage deformer that is singular in the frame's pose: the
    // frame is then refused and the session keeps the pose and cage it had (until 2026-12-03 the
    // solve's NaN went into the rest cage, and every later frame failed until a reset).
    std::optional<std::pair<Pose, Eigen::Matrix3Xd>> before;
    if (frame.posed_cage) before.emplace(pose_, cage_);
    // 1. Skeleton pose (kept for frames without one).
    if (frame.pose) {
      pose_.space = frame.pose->space;
      pose_.rotations = frame.pose->rotations;
      pose_.translations = frame.pose->translations;
      if (frame.pose->scales.empty()) pose_.scales.assign(rig.joint_count(), 1.0f);
      else pose_.scales = frame.pose->scales;
    }
    // 2. Rest cage.
    if (!frame.cages.empty()) ResolveCage(rig.cages[prep_->cage], frame.cages[0], cage_);
    delta_ = cage_ - prep_->rest_cage.vertices;
    UpdateTransforms();
    // 3. Posed-cage edit → rest-cage edit (reverse cage deformer).
    if (frame.posed_cage) {
      SelectedPosedMesh(selected_);
      posed_cage_ = prep_->phi_selected_lu.solve(selected_);  // current C' (c x 3)
      Eigen::MatrixXd target(posed_cage_.rows(), 3);
      const CageFrame& pc = *frame.posed_cage;
      for (Eigen::Index k = 0; k < target.rows(); ++k) {
        for (int d = 0; d < 3; ++d) {
          const double v = pc.positions[3 * k + d];
          target(k, d) = pc.mode == CageInputMode::kOffsets ? posed_cage_(k, d) + v : v;
        }
      }
      if (auto st = ReverseCage(target - posed_cage_); !st.ok()) {
        pose_ = std::move(before->first);
        cage_ = std::move(before->second);
        delta_ = cage_ - prep_->rest_cage.vertices;
        UpdateTransforms();
        SelectedPosedMesh(selected_);
        posed_cage_valid_ = false;
        return st;
      }
      delta_ = cage_ - prep_->rest_cage.vertices;
      UpdateTransforms();
    }
    // The posed cage is fitted to the MaxVol rows of the skin, evaluated in double precision so
    // that the loop C' -> C -> M' -> C' is exact up to rounding.
    SelectedPosedMesh(selected_);
    posed_cage_valid_ = false;
    return absl::OkStatus();
  }


 public:
  absl::Status Offers(const FrameExtras& wanted) const override {
    // Before the frame runs, as Extras would refuse it after: a refused frame changes nothing.
    if (wanted.posed_cage) {
      if (auto st = CageUpdaterUsable("outputs.posed_cage"); !st.ok()) return st;
    }
    return wanted.vertex_states ? Deformer::Offers({.vertex_states = wanted.vertex_states}) : absl::OkStatus();
  }
  absl::Status Extras(const FrameExtras& extras) const override {
    if (extras.vertex_states) return Deformer::Extras({.vertex_states = extras.vertex_states});
    auto put = [](const auto& m, std::vector<float>* out, bool columns_are_points) {
      out->clear();
      if (columns_are_points) {
        for (Eigen::Index i = 0; i < m.cols(); ++i) {
          for (int d = 0; d < 3; ++d) out->push_back(float(m(d, i)));
        }
      } else {
        for (Eigen::Index i = 0; i < m.rows(); ++i) {
          for (int d = 0; d < 3; ++d) out->push_back(float(m(i, d)));
        }
      }
    };
    if (extras.posed_cage) {
      if (auto st = CageUpdaterUsable("outputs.posed_cage"); !st.ok()) return st;
      if (!posed_cage_valid_) {
        posed_cage_ = prep_->phi_selected_lu.solve(selected_);
        posed_cage_valid_ = true;
      }
      put(posed_cage_, extras.posed_cage, false);
    }
    if (extras.rest_cage) put(cage_, extras.rest_cage, true);
    if (extras.joints) put(joints_, extras.joints, true);
    return absl::OkStatus();
  }

  size_t StateBytes() const override {
    // G (ReverseCage) at the size its first posed-cage frame gives it: 9 doubles a joint and cage
    // vertex with the skeleton updater on.
    const size_t g = prep_->psi.size() > 0 ? 9 * size_t(prep_->psi.size()) : 0;
    // The system's factorisation beside it, once a posed-cage frame has made them.
    return sizeof(*this) + sizeof(double) * (cage_.size() + delta_.size() + selected_.size() +
                                             posed_cage_.size() + 2 * system_.size() + joints_.size() + g) +
           sizeof(int) * size_t(lu_.permutationP().size()) + sizeof(Eigen::Matrix3d) * factored_linear_.capacity() +
           sizeof(float) * rest_mesh_.size() +
           transforms_.size() * (sizeof(Affine34d) + sizeof(Affine34f) + sizeof(DualQuat) + sizeof(Similarity));
  }

 private:
  // The joints' rest centres the skinning transforms scale about (DQS): the bind's, or, with the
  // skeleton updater, the updated rest skeleton's (transforms_ map that one).
  const Eigen::Matrix3Xd& RestCentres() const { return prep_->psi.size() == 0 ? prep_->rest_joints : rest_joints_; }

  // Skinning transforms from the current pose and rest cage (see the header).
  void UpdateTransforms() {
    const Skeleton& sk = rig_->skeleton;
    SkinningTransforms(sk, pose_, world_, transforms_);
    const Eigen::Matrix3Xd& a0 = prep_->rest_joints;
    if (prep_->psi.size() == 0) {
      for (size_t j = 0; j < sk.size(); ++j) joints_.col(static_cast<Eigen::Index>(j)) = world_[j].translation;
      return;
    }
    // A = A0 + (C − C0) Ψᵀ, exact at C = C0.
    rest_joints_.noalias() = delta_ * prep_->psi.transpose();
    rest_joints_ += a0;
    for (int32_t j : sk.order) {
      const Eigen::Index ji = j;
      const Eigen::Matrix3d rj = transforms_[j].leftCols<3>();
      const int32_t f = sk.parents[j];
      Eigen::Vector3d p;
      if (f < 0) {
        const Eigen::Vector3d motion = rj * a0.col(ji) + transforms_[j].col(3) - a0.col(ji);
        p = rest_joints_.col(ji) + motion;
      } else {
        p = joints_.col(f) + transforms_[f].leftCols<3>() * (rest_joints_.col(ji) - rest_joints_.col(f));
      }
      joints_.col(ji) = p;
      transforms_[j].col(3) = p - rj * rest_joints_.col(ji);
    }
  }

  // Posed positions of the MaxVol rows (c x 3), in double, with the session's skinning.
  void SelectedPosedMesh(Eigen::MatrixXd& out) {
    const Rig& rig = *rig_;
    const auto& rows = prep_->maxvol.rows;
    out.resize(static_cast<Eigen::Index>(rows.size()), 3);
    if (dqs_) ToDualQuats(transforms_, dual_quats_, RestCentres());
    for (size_t r = 0; r < rows.size(); ++r) {
      const size_t v = rows[r];
      const Eigen::Vector3d rest =
          Eigen::Vector3d(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]) +
          delta_ * prep_->phi.row(static_cast<Eigen::Index>(v)).transpose();
      Eigen::Vector3d posed = Eigen::Vector3d::Zero();
      if (!dqs_) {
        for (uint32_t e = rig.weights.offsets[v]; e < rig.weights.offsets[v + 1]; ++e) {
          const Affine34d& t = transforms_[rig.weights.joints[e]];
          posed += rig.weights.weights[e] * (t.leftCols<3>() * rest + t.col(3));
        }
      } else {
        posed = DqsPoint(v, rest);
      }
      out.row(static_cast<Eigen::Index>(r)) = posed.transpose();
    }
  }

  // Dual quaternion skinning of one vertex in double precision (as DualQuaternionSkinning).
  Eigen::Vector3d DqsPoint(size_t v, const Eigen::Vector3d& p) const {
    const Rig& rig = *rig_;
    const uint32_t e0 = rig.weights.offsets[v], e1 = rig.weights.offsets[v + 1];
    const float* pivot = dual_quats_[rig.weights.joints[e0]].v;
    double b[8] = {}, s = 0;
    Eigen::Vector3d h = Eigen::Vector3d::Zero();
    for (uint32_t e = e0; e < e1; ++e) {
      const DualQuat& q = dual_quats_[rig.weights.joints[e]];
      const double dot = double(q.v[0]) * pivot[0] + double(q.v[1]) * pivot[1] + double(q.v[2]) * pivot[2] + double(q.v[3]) * pivot[3];
      const double w = dot < 0 ? -rig.weights.weights[e] : rig.weights.weights[e];
      for (int k = 0; k < 8; ++k) b[k] += w * q.v[k];
      s += rig.weights.weights[e] * q.scale;
      h += double(rig.weights.weights[e]) * Eigen::Vector3d(q.shift[0], q.shift[1], q.shift[2]);
    }
    const double n = std::sqrt(b[0] * b[0] + b[1] * b[1] + b[2] * b[2] + b[3] * b[3]);
    const Eigen::Quaterniond r(b[3] / n, b[0] / n, b[1] / n, b[2] / n);
    const Eigen::Quaterniond d(b[7] / n, b[4] / n, b[5] / n, b[6] / n);
    const Eigen::Vector3d t = 2 * (d * r.conjugate()).vec();
    return r * (s * p + h) + t;
  }

  // Solves (R̃ Φ̃ + Ω̃ D Ψ) ∂C = Φ̃ ∂C' and adds ∂C to the rest cage. The system depends on the
  // skinning transforms' linear parts alone (the pose's rotations and scales: the cage moves only
  // their translations), so its factorisation is kept while they stay (seed note §5.3: factorise
  // lazily). Until 2026-12-07 every posed-cage frame rebuilt and refactorised it: O((3c)³), about
  // 2e10 flops at c = 1024, under the session's lock, for a drag that keeps the pose.
  absl::Status ReverseCage(const Eigen::MatrixXd& posed_delta /* c x 3 */) {
    const Rig& rig = *rig_;
    const Skeleton& sk = rig.skeleton;
    const auto& rows = prep_->maxvol.rows;
    const Eigen::Index c = static_cast<Eigen::Index>(rows.size());
    bool same = factored_linear_.size() == sk.size();
    for (size_t j = 0; same && j < sk.size(); ++j) same = factored_linear_[j] == transforms_[j].leftCols<3>();
    if (!same) Factorise();
    Eigen::VectorXd rhs(3 * c);
    const Eigen::MatrixXd mapped = prep_->phi_selected * posed_delta;  // c x 3
    for (Eigen::Index r = 0; r < c; ++r) rhs.segment<3>(3 * r) = mapped.row(r).transpose();
    const Eigen::VectorXd dc = lu_.solve(rhs);
    // Singular in this pose (the blended rotations of the cage's rows fold a direction away): no
    // rest-cage edit gives the posed one asked for, and the solve's answer is non-finite or does
    // not solve the system. (Partial pivoting's condition estimate does not see this reliably.)
    const double residual = (system_ * dc - rhs).norm(), scale = rhs.norm() + system_.norm() * dc.norm();
    if (!dc.allFinite() || !(residual <= 1e-9 * scale)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "posed_cage: the reverse cage deformer is singular in this pose (no rest-cage edit gives this posed "
          "cage: residual %.3g of %.3g; the skin at the cage's rows folds a direction flat, e.g. a joint turned "
          "180 degrees against its neighbour with even weights); the frame is refused and the session keeps its "
          "pose and rest cage",
          residual, scale));
    }
    for (Eigen::Index k = 0; k < c; ++k) cage_.col(k) += dc.segment<3>(3 * k);
    return absl::OkStatus();
  }

  // Builds the reverse cage system for the current transforms and factorises it.
  void Factorise() {
    const Rig& rig = *rig_;
    const Skeleton& sk = rig.skeleton;
    const auto& rows = prep_->maxvol.rows;
    const Eigen::Index c = static_cast<Eigen::Index>(rows.size());
    const Eigen::Index s = static_cast<Eigen::Index>(sk.size());
    system_.setZero(3 * c, 3 * c);
    // G = D (Ψ ⊗ I): ∂T (3s) as a function of ∂C (3c), top-down (root: (I − T_r^r) ∂a_r;
    // child: ∂T_f + (T_f^r − T_j^r) ∂a_j).
    const bool updater = prep_->psi.size() > 0;
    if (updater) {
      g_.setZero(3 * s, 3 * c);
      for (int32_t j : sk.order) {
        const int32_t f = sk.parents[j];
        const Eigen::Matrix3d rj = transforms_[j].leftCols<3>();
        const Eigen::Matrix3d m = f < 0 ? Eigen::Matrix3d(Eigen::Matrix3d::Identity() - rj)
                                        : Eigen::Matrix3d(transforms_[f].leftCols<3>() - rj);
        if (f >= 0) g_.middleRows(3 * j, 3) = g_.middleRows(3 * f, 3);
        for (Eigen::Index k = 0; k < c; ++k) g_.block(3 * j, 3 * k, 3, 3) += prep_->psi(j, k) * m;
      }
    }
    for (Eigen::Index r = 0; r < c; ++r) {
      const size_t v = rows[r];
      Eigen::Matrix3d rv = Eigen::Matrix3d::Zero();
      for (uint32_t e = rig.weights.offsets[v]; e < rig.weights.offsets[v + 1]; ++e) {
        const double w = rig.weights.weights[e];
        rv += w * transforms_[rig.weights.joints[e]].leftCols<3>();
        if (updater) system_.middleRows(3 * r, 3) += w * g_.middleRows(3 * rig.weights.joints[e], 3);
      }
      for (Eigen::Index k = 0; k < c; ++k) system_.block(3 * r, 3 * k, 3, 3) += prep_->phi_selected(r, k) * rv;
    }
    lu_.compute(system_);
    factored_linear_.resize(sk.size());
    for (size_t j = 0; j < sk.size(); ++j) factored_linear_[j] = transforms_[j].leftCols<3>();
  }

  static constexpr std::string_view kStateMagic{"supercages-state\x01", 17};

  std::shared_ptr<const Rig> rig_;
  std::shared_ptr<const SuperCagesPrepared> prep_;
  bool dqs_;  // DQS poses the rest mesh; else LBS
  Pose pose_;                // the last pose received (rest pose at first)
  Eigen::Matrix3Xd cage_;    // the session's rest cage C
  Eigen::Matrix3Xd delta_;   // C − C0, refreshed whenever C changes
  std::vector<Similarity> world_;
  std::vector<Affine34d> transforms_;
  std::vector<Affine34f> matrices_;
  mutable std::vector<DualQuat> dual_quats_;
  Eigen::Matrix3Xd rest_joints_;  // A
  Eigen::Matrix3Xd joints_;       // current joint positions p
  std::vector<float> rest_mesh_;  // M = M0 + Φ (C − C0)
  Eigen::MatrixXd selected_;      // posed positions of the MaxVol rows (c x 3)
  // OK, or why the posed cage cannot be had on this rig (SuperCagesPrepared::cage_updater_error).
  absl::Status CageUpdaterUsable(const char* field) const {
    if (prep_->cage_updater_usable()) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        field, ": this rig's mesh does not determine its cage (the cage updater gives the rest cage back ",
        absl::SixDigits(prep_->cage_updater_error), " of its diagonal off; at most ",
        SuperCagesPrepared::kCageUpdaterTolerance,
        "): a flat or thin mesh leaves cage vertices that no mesh point tells apart. Deforming by pose and rest "
        "cage works; the posed cage and its edits need a mesh that fills the cage"));
  }
  mutable Eigen::MatrixXd posed_cage_;
  mutable bool posed_cage_valid_ = false;
  Eigen::MatrixXd system_, g_;
  Eigen::PartialPivLU<Eigen::MatrixXd> lu_;      // system_'s, for the transforms' linear parts below
  std::vector<Eigen::Matrix3d> factored_linear_;  // empty: not factorised yet
};

}  // namespace

absl::StatusOr<std::unique_ptr<Deformer>> CreateSuperCagesDeformer(
    std::shared_ptr<const Rig> rig, std::shared_ptr<const Prepared> prepared,
    const DeformerConfig& config) {
  if (auto st = SkeletalDeformer::CheckRig(*rig, "supercages"); !st.ok()) return st;
  if (!prepared) return absl::InternalError("supercages deformer created without its precomputation");
  if (ParamsOf<SuperCagesParams>(config).dqs && !rig->skeleton.inverse_bind_is_similarity) {
    return absl::FailedPreconditionError(absl::StrCat("method supercages with DQS needs similarity inverse binds; this rig's ",
                                                      NotSimilarity(rig->skeleton), ": use LBS"));
  }
  return std::make_unique<SuperCagesDeformer>(std::move(rig), std::move(prepared), config);
}

}  // namespace sinew
