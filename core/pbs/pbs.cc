#include "core/pbs/pbs.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>

#include <Eigen/Geometry>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/deformer/skeletal.h"
#include "core/geometry/nearest_point.h"
#include "core/geometry/winding_number.h"
#include "core/pbs/device_layout.h"
#include "core/pbs/mesher.h"
#include "core/rig/pose.h"
#include "core/rig/transform.h"
#include "core/util/state_bytes.h"

namespace sinew {
namespace {

constexpr std::string_view kTetWords[] = {"auto", "mesher", "voxels", "rig"};
constexpr std::string_view kWeightWords[] = {"transfer", "paper"};
constexpr std::string_view kSolverWords[] = {"pbd", "xpbd"};
constexpr ParamSpec kDirectionSpecs[] = {
    {"x", ParamSpec::Type::kNumber, "0", "x component"},
    {"y", ParamSpec::Type::kNumber, "0", "y component"},
    {"z", ParamSpec::Type::kNumber, "0", "z component"},
};
constexpr std::string_view kSelectionWords[] = {"painted", "paper"};
constexpr ParamSpec kPbsSpecs[] = {
    {"tets", ParamSpec::Type::kChoice, "auto",
     "where the tetrahedra come from: auto (the rig's tet_mesh, else voxels), mesher (CGAL Mesh_3 on the mesh's "
     "inside: follows the surface), voxels (6 per voxel of voxel_size), rig (the rig's tet_mesh)",
     kTetWords},
    {"cell_size", ParamSpec::Type::kNumber, "0",
     "tets mesher: the largest tet and surface facet circumradius, in rig units; 0: the mesh's longest side / 24"},
    {"voxel_size", ParamSpec::Type::kNumber, "0",
     "tets voxels: edge of the voxels the tetrahedral mesh is made of, in rig units; 0: the mesh's longest side / 32"},
    {"iterations", ParamSpec::Type::kInteger, "12", "Gauss–Seidel sweeps over the constraints per frame, [1, 1000]"},
    {"recovery_passes", ParamSpec::Type::kInteger, "8",
     "after the sweeps, passes projecting only the tets still inverted (until one finds none), [0, 100]"},
    {"stretch_stiffness", ParamSpec::Type::kNumber, "0.9", "k_s of the tet-edge constraints, (0, 1]"},
    {"volume_stiffness", ParamSpec::Type::kNumber, "1", "k_v of the tet-volume constraints, [0, 1]"},
    {"bind_stiffness", ParamSpec::Type::kNumber, "1", "k_b of the particle-to-bone constraints, [0, 1]"},
    {"weights", ParamSpec::Type::kChoice, "transfer",
     "the particles' LBS weights: transfer (the nearest render vertex's) or paper (Eq. 2: rigid in the middle of the "
     "nearest bone, shared by the bones at its nearer end)",
     kWeightWords},
    {"cut_bridges", ParamSpec::Type::kFlag, "true",
     "cut the tets bridging parts: two particles skinned to joints more than 4 parent-child steps apart, or to no "
     "common joint with the centroid outside the mesh"},
    {"jiggle", ParamSpec::Type::kFlag, "false",
     "secondary motion where the rig's per-vertex \"pbs_jiggle\" attribute (0 skinned … 1 free) says; makes the "
     "session stateful"},
    {"jiggle_selection", ParamSpec::Type::kChoice, "painted",
     "which particles jiggle: painted (each takes the \"pbs_jiggle\" value of its nearest render vertex, 0 skinned "
     "... 1 free) or paper (the painted region's particles and those between it and the bone; the ones farther from "
     "the bone than their mean are free, the rest skinned)",
     kSelectionWords},
    {"jiggle_stiffness", ParamSpec::Type::kNumber, "0.2",
     "PBD stiffness of the constraints that touch a jiggling particle, (0, 1]; lower jiggles more"},
    {"time_step", ParamSpec::Type::kNumber, "0.01",
     "seconds per frame for frames that carry no time_step (DeformClip: 1 / frames_per_second), [1e-6, 1]; "
     "the dynamics advance by a frame's step clamped to [1e-4, 0.1]"},
    {"gravity", ParamSpec::Type::kNumber, "0",
     "acceleration of the jiggling particles along gravity_direction, rig units/s^2 (9.81 for metres), [-1e6, 1e6]"},
    {"gravity_direction", ParamSpec::Type::kList, "0,-1,0",
     "the way gravity pulls, in the rig's frame (x, y, z; normalized, not 0): the rig's -y unless set (a z-up "
     "DCC's rig: 0,0,-1)", {}, kDirectionSpecs},
    {"damping", ParamSpec::Type::kNumber, "0",
     "velocity damping of the jiggling particles per second (v *= exp(-damping dt)), [0, 1e4]"},
    {"quasi_static", ParamSpec::Type::kFlag, "false",
     "pose without time: no inertia or gravity, the frame depends on its pose only, velocities are zeroed"},
    {"solver", ParamSpec::Type::kChoice, "pbd",
     "pbd (stiffnesses; softness depends on the iteration count) or xpbd (compliances)", kSolverWords},
    {"stretch_compliance", ParamSpec::Type::kNumber, "0", "xpbd: compliance of the tet edges, [0, 1e6]; 0 rigid"},
    {"volume_compliance", ParamSpec::Type::kNumber, "0", "xpbd: compliance of the tet volumes, [0, 1e6]; 0 rigid"},
    {"bind_compliance", ParamSpec::Type::kNumber, "0",
     "xpbd: compliance of the distances to the bones, [0, 1e6]; 0 rigid"},
    {"jiggle_compliance", ParamSpec::Type::kNumber, "0.0001",
     "xpbd: compliance of the constraints that touch a jiggling particle, [0, 1e6]; higher jiggles more"},
};

// The render vertex nearest to each particle (of equally near ones the first). Until 2026-12-02
// a hash of cells searched in growing rings, each ring's whole cube, until it found one: a tet
// mesh uploaded a few mesh lengths from the render mesh took days, and could not be cancelled.
// The rig's painted jiggle ("pbs_jiggle", 0 skinned … 1 free), or null: the last of that name,
// as the rig's attributes are read everywhere.
const AttributeMap* JiggleAttribute(const Rig& rig) {
  const AttributeMap* jiggle = nullptr;
  for (const AttributeMap& a : rig.attributes) {
    if (a.name == "pbs_jiggle") jiggle = &a;
  }
  return jiggle;
}

std::vector<uint32_t> NearestRenderVertex(std::span<const float> positions,
                                          std::span<const Eigen::Vector3d> particles) {
  const NearestPointTree tree(positions);
  std::vector<uint32_t> out(particles.size(), 0);
  for (size_t i = 0; i < particles.size(); ++i) out[i] = tree.Nearest(particles[i]);
  return out;
}

// A tet whose particles are skinned to joints more than this many parent–child steps apart
// bridges two parts (an arm and the torso: upper arm, clavicle, spine, ...; two fingers: 4).
constexpr int kBridgeHops = 4;

// Inverted tets are projected to pbs_device::kRecoveryTarget (a tenth) of their rest volume
// (PbsParams::recovery_passes): the least push that turns them right side out. Projecting them to
// their full rest volume compresses their neighbours instead (the elbow cylinder at 90°: −0.55 %
// volume, against −0.46 % at a tenth); the sweeps of the next frames restore the rest.
constexpr float kRecoveryTarget = pbs_device::kRecoveryTarget;

// The closest point to p on the segment [a, b].
Eigen::Vector3f ClosestOnSegment(const Eigen::Vector3f& a, const Eigen::Vector3f& b, const Eigen::Vector3f& p) {
  const Eigen::Vector3f ab = b - a;
  const float len2 = ab.squaredNorm();
  const float t = len2 > 0 ? std::clamp((p - a).dot(ab) / len2, 0.f, 1.f) : 0.f;
  return a + t * ab;
}

double SegmentDistance(const Eigen::Vector3d& a, const Eigen::Vector3d& b, const Eigen::Vector3d& p, double* tau) {
  const Eigen::Vector3d ab = b - a;
  *tau = (p - a).dot(ab) / ab.squaredNorm();
  return (p - (a + std::clamp(*tau, 0.0, 1.0) * ab)).norm();
}

// Eq. 2 (spec §2.3): rigid on the nearest bone for τ in [1/6, 5/6]; otherwise 1/n for each of the
// n bones (at most 3, the nearest) touching the nearer end. A bone moves with its first joint.
void PaperWeights(std::span<const Eigen::Vector3d> joints, std::span<const std::pair<uint32_t, uint32_t>> bones,
                  std::span<const Eigen::Vector3d> particles, SkinWeights& out) {
  for (const Eigen::Vector3d& x : particles) {
    double best = std::numeric_limits<double>::infinity(), tau = 0;
    size_t nearest = 0;
    for (size_t k = 0; k < bones.size(); ++k) {
      double t;
      const double d = SegmentDistance(joints[bones[k].first], joints[bones[k].second], x, &t);
      if (d < best) {
        best = d;
        nearest = k;
        tau = t;
      }
    }
    std::vector<std::pair<double, uint32_t>> shared;  // (distance, joint) of the bones at the end
    if (tau >= 1.0 / 6 && tau <= 5.0 / 6) {
      shared.emplace_back(0.0, bones[nearest].first);
    } else {
      const uint32_t end = tau < 0.5 ? bones[nearest].first : bones[nearest].second;
      for (const auto& [from, to] : bones) {
        if (from != end && to != end) continue;
        double t;
        shared.emplace_back(SegmentDistance(joints[from], joints[to], x, &t), from);
      }
      std::sort(shared.begin(), shared.end());
      if (shared.size() > 3) shared.resize(3);
    }
    // Bones moving with the same joint share its weight.
    std::vector<std::pair<uint16_t, float>> w;
    for (const auto& [d, bound_joint] : shared) {
      const auto joint = bound_joint;  // clang 14 cannot capture a structured binding
      auto it = std::find_if(w.begin(), w.end(), [&](const auto& e) { return e.first == joint; });
      if (it == w.end()) {
        w.emplace_back(uint16_t(joint), 1.f / float(shared.size()));
      } else {
        it->second += 1.f / float(shared.size());
      }
    }
    std::sort(w.begin(), w.end(), [](const auto& a, const auto& b) { return a.second > b.second || (a.second == b.second && a.first < b.first); });
    for (const auto& [joint, weight] : w) {
      out.joints.push_back(joint);
      out.weights.push_back(weight);
    }
    out.offsets.push_back(uint32_t(out.joints.size()));
  }
}

template <class T>
void SortByColour(std::vector<T>& items, const Colouring& c, std::vector<uint32_t>& offsets) {
  std::vector<T> sorted;
  sorted.reserve(items.size());
  for (uint32_t i : c.order) sorted.push_back(items[i]);
  items = std::move(sorted);
  offsets = c.offsets;
}

// Particle i back to its rest distance from its bone, posed with the bone's joint.
void Bind(const PbsModel& m, std::span<const Affine34f> skinning, size_t i, float k, float* x) {
  const BindConstraint& c = m.bind[i];
  if (c.rest < 0) return;  // no bone moves with its joints
  const Affine34f& s = skinning[c.from];
  const Eigen::Vector3f a = s * m.joints[c.from].cast<float>().homogeneous();
  const Eigen::Vector3f b = s * m.joints[c.to].cast<float>().homogeneous();
  Eigen::Map<Eigen::Vector3f> p(x + 3 * i);
  const Eigen::Vector3f d = p - ClosestOnSegment(a, b, p);
  const float length = d.norm();
  if (length < 1e-9f) return;  // on the bone: no direction
  p -= (k * (length - c.rest) / length) * d;
}

// The same by XPBD (constraints.h): C = |d| − rest, ∇_p C = d/|d|, one particle.
void BindXpbd(const PbsModel& m, std::span<const Affine34f> skinning, size_t i, float alpha_tilde, float& lambda,
              float* x) {
  const BindConstraint& c = m.bind[i];
  if (c.rest < 0) return;
  const Affine34f& s = skinning[c.from];
  const Eigen::Vector3f a = s * m.joints[c.from].cast<float>().homogeneous();
  const Eigen::Vector3f b = s * m.joints[c.to].cast<float>().homogeneous();
  Eigen::Map<Eigen::Vector3f> p(x + 3 * i);
  const Eigen::Vector3f d = p - ClosestOnSegment(a, b, p);
  const float length = d.norm();
  if (length < 1e-9f) return;
  const float dlambda = (-(length - c.rest) - alpha_tilde * lambda) / (1 + alpha_tilde);
  lambda += dlambda;
  p += (dlambda / length) * d;
}

class PbsDeformer final : public Deformer {
 public:
  PbsDeformer(std::shared_ptr<const Rig> rig, std::shared_ptr<const PbsModel> model, const PbsParams& params)
      : rig_(std::move(rig)),
        model_(std::move(model)),
        params_(params),
        world_(rig_->joint_count()),
        skinning_(rig_->joint_count()),
        matrices_(rig_->joint_count()) {
    state_.x.reserve(3 * model_->mesh.rest.size());
  }

  void Reset() override { state_.fresh = true; }

  // Checks the frame and poses the skeleton into matrices_; the step its dynamics advance by
  // (kPbsMinStep, kPbsMaxStep).
  absl::StatusOr<double> PoseFrame(const FrameInput& frame) {
    if (auto st = CheckSkeletalFrame(*rig_, frame, "pbs"); !st.ok()) return st;
    // As the server checks it (kMinTimeStep there): 0 (the session's own) or at least 1e-6 s.
    if (!(frame.time_step == 0 || (frame.time_step >= 1e-6 && std::isfinite(frame.time_step)))) {
      return absl::InvalidArgumentError(
          absl::StrCat("time_step: ", frame.time_step, " s is neither 0 (the session's own) nor a finite number >= 1e-6"));
    }
    SkinningTransforms(rig_->skeleton, *frame.pose, world_, skinning_);
    for (size_t j = 0; j < skinning_.size(); ++j) matrices_[j] = skinning_[j].cast<float>();
    return std::clamp(frame.time_step > 0 ? frame.time_step : params_.time_step, kPbsMinStep, kPbsMaxStep);
  }

  // The device runs the whole frame (gpu/pbs/) and keeps the particles; the CPU poses the
  // skeleton and sends the parameters with the frame (core/pbs/device_layout.h).
  DeviceStage device_stage() const override {
    DeviceStage s;
    s.kernel = "pbs";
    s.device_data_key = "pbs:" + PbsKey(DeformerConfig("pbs", std::make_shared<PbsParams>(params_)));
    s.model = model_;
    s.params_per_frame = true;
    s.state_on_device = true;
    return s;
  }
  size_t device_param_count() const override { return pbs_device::FrameFloats(rig_->joint_count()); }
  bool DeviceStateCanDiverge() const override { return Jiggles(); }  // as Deform's own check
  absl::Status DeviceFrame(const FrameInput& frame, std::vector<float>& params) override {
    auto dt = PoseFrame(frame);
    if (!dt.ok()) return dt.status();
    namespace L = pbs_device;
    params.assign(L::FrameFloats(rig_->joint_count()), 0.f);
    const PbsParams& p = params_;
    params[L::kFresh] = state_.fresh ? 1.f : 0.f;
    params[L::kTimeStep] = float(*dt);
    params[L::kJiggle] = p.jiggle ? 1.f : 0.f;
    params[L::kQuasiStatic] = p.quasi_static ? 1.f : 0.f;
    params[L::kXpbd] = p.solver == PbsParams::Solver::kXpbd ? 1.f : 0.f;
    params[L::kIterations] = float(p.iterations);
    params[L::kRecoveryPasses] = float(p.recovery_passes);
    params[L::kStretchK] = float(p.stretch_stiffness);
    params[L::kVolumeK] = float(p.volume_stiffness);
    params[L::kBindK] = float(p.bind_stiffness);
    params[L::kJiggleK] = float(p.jiggle_stiffness);
    params[L::kStretchA] = float(p.stretch_compliance);
    params[L::kVolumeA] = float(p.volume_compliance);
    params[L::kBindA] = float(p.bind_compliance);
    params[L::kJiggleA] = float(p.jiggle_compliance);
    for (int c = 0; c < 3; ++c) params[L::kGravity + c] = float(p.gravity * p.gravity_direction[c]);
    params[L::kDamping] = float(p.damping);
    // As on the CPU, jiggle switched on starts the painted particles still where they are.
    params[L::kStill] = Jiggles() && !device_jiggle_ && !state_.fresh ? 1.f : 0.f;
    device_jiggle_ = Jiggles();
    for (size_t j = 0; j < matrices_.size(); ++j) {
      for (int r = 0; r < 3; ++r) {
        for (int c = 0; c < 4; ++c) params[L::kHeaderFloats + L::kJointFloats * j + 4 * r + c] = matrices_[j](r, c);
      }
    }
    state_.fresh = false;
    return absl::OkStatus();
  }

  absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) override {
    if (out.size() != rig_->positions.size()) return absl::InternalError("output buffer does not hold 3 floats per vertex");
    auto dt = PoseFrame(frame);
    if (!dt.ok()) return dt.status();
    // A frame the host may stop keeps the particles and velocities it started from (24 bytes a
    // particle with jiggle), so that a stopped frame leaves the session as it was.
    const bool keep = frame.stop != nullptr && Jiggles();  // without jiggle every frame starts from LBS
    if (keep) {
      undo_.x.assign(state_.x.begin(), state_.x.end());
      undo_.v.assign(state_.v.begin(), state_.v.end());
      undo_.fresh = state_.fresh;
    }
    if (const auto stopped = SolvePbsFrame(*model_, params_, matrices_, *dt, state_, pool, kPbsColourGrain, frame.stop)) {
      if (keep) {
        state_.x.swap(undo_.x);
        state_.v.swap(undo_.v);
        state_.fresh = undo_.fresh;
      }
      const uint32_t sweeps = params_.iterations;
      return absl::CancelledError(absl::StrCat("frame: pbs stopped by its caller before ",
                                               *stopped < sweeps ? "sweep " : "recovery pass ",
                                               *stopped < sweeps ? *stopped + 1 : *stopped - sweeps + 1, " of ",
                                               *stopped < sweeps ? sweeps : params_.recovery_passes,
                                               "; the session's state is as this frame found it"));
    }
    // Steps of very different lengths (1e-6 s, then 60 s: the first's velocities carried over the
    // second) can drive jiggling particles past float's range within a few frames. Until
    // 2026-12-02 the state then stayed infinite and every later frame failed; it now starts again
    // from rest. Without jiggle there are no dynamics to diverge, and no scan.
    const auto finite = [](const std::vector<float>& a) {
      return std::all_of(a.begin(), a.end(), [](float f) { return std::isfinite(f); });
    };
    if (Jiggles() && (!finite(state_.x) || !finite(state_.v))) {
      state_.fresh = true;
      return absl::OutOfRangeError(absl::StrCat(
          "pbs: the particles left float's range at this frame (a step of ", *dt,
          " s; steps that change by orders of magnitude from frame to frame do this); the session starts again "
          "from rest at its next frame"));
    }
    const PbsModel& m = *model_;
    const std::vector<float>& x = state_.x;
    // The render mesh follows its tets.
    const size_t nv = rig_->vertex_count();
    ParallelFor(pool, nv, 4096, [&](size_t b, size_t e) {
      for (size_t v = b; v < e; ++v) {
        const auto& t = m.mesh.tets[m.embedding.tet[v]];
        const auto& beta = m.embedding.beta[v];
        Eigen::Vector3f q = Eigen::Vector3f::Zero();
        for (int k = 0; k < 4; ++k) q += float(beta[k]) * Eigen::Map<const Eigen::Vector3f>(&x[3 * size_t(t[k])]);
        Eigen::Map<Eigen::Vector3f> written(&out[3 * v]);
        written = q;
      }
    });
    return absl::OkStatus();
  }

  // Bytes: "pbs-state" 1, particle count (u64), fresh (u8), velocities present (u8), positions and
  // velocities (float32, 3 per particle), then an FNV-1a 64 of everything before it. The same
  // for sessions on a device, whose positions and velocities are the device's.
  // A state that starts from rest saves no particles: its next frame starts them at LBS with no
  // velocity whatever they were, and after a frame that left float's range they are not finite,
  // which LoadState (rightly) refuses.
  absl::StatusOr<std::string> SaveState() const override {
    const size_t n = model_->mesh.rest.size();
    if (state_.fresh || state_.x.size() != 3 * n) return Encode(true, {}, {});
    // Jiggle switched on since the last frame (which kept no velocities): still, as the next
    // frame would start them. Until 2026-12-03 none were saved and LoadState refused the bytes
    // ("saved by a session with jiggle off") in a session like this one.
    if (Jiggles() && state_.v.size() != 3 * n) return Encode(false, state_.x, std::vector<float>(3 * n, 0.f));
    return Encode(false, state_.x,
                  Jiggles() && state_.v.size() == 3 * n ? std::span<const float>(state_.v) : std::span<const float>());
  }

  absl::Status LoadState(std::string_view bytes) override {
    const size_t n = model_->mesh.rest.size();
    std::vector<float> x, v;
    auto fresh = Decode(bytes, x, v);
    if (!fresh.ok()) return fresh.status();
    state_.fresh = *fresh;
    state_.x = x.empty() ? std::vector<float>(3 * n, 0.f) : std::move(x);
    state_.v = std::move(v);
    if (Jiggles() && state_.v.empty()) state_.v.assign(3 * n, 0.f);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> SaveDeviceState(std::span<const float> resident) const override {
    const size_t n = model_->mesh.rest.size();
    if (resident.size() < 6 * n) return absl::InternalError("pbs: the device state is smaller than 6 floats per particle");
    // Particles past float's range: the frame that drove them there failed, and the server starts
    // the session's next frame from rest (it may not have seen that frame's positions yet).
    const std::span<const float> x = resident.first(3 * n);
    // Jiggle switched on since the last frame: the device's velocities are those of an earlier
    // jiggling stretch, which the next frame does not use (kStill); it starts still, so they are
    // saved still (until 2026-12-03 the stale ones were, and a restored session diverged).
    const std::vector<float> still = Jiggles() && !device_jiggle_ ? std::vector<float>(3 * n, 0.f) : std::vector<float>();
    const std::span<const float> v = !Jiggles() ? std::span<const float>()
                                     : device_jiggle_ ? resident.subspan(3 * n, 3 * n)
                                                      : std::span<const float>(still);
    const auto finite = [](std::span<const float> a) {
      return std::all_of(a.begin(), a.end(), [](float f) { return std::isfinite(f); });
    };
    if (state_.fresh || !finite(x) || !finite(v)) return Encode(true, {}, {});
    return Encode(false, x, v);
  }

  absl::Status LoadDeviceState(std::string_view bytes, std::span<float> resident) override {
    const size_t n = model_->mesh.rest.size();
    if (resident.size() < 6 * n) return absl::InternalError("pbs: the device state is smaller than 6 floats per particle");
    std::vector<float> x, v;
    auto fresh = Decode(bytes, x, v);
    if (!fresh.ok()) return fresh.status();
    state_.fresh = *fresh;
    if (!x.empty()) std::copy(x.begin(), x.end(), resident.begin());
    std::fill(resident.begin() + 3 * n, resident.begin() + 6 * n, 0.f);
    if (!v.empty()) std::copy(v.begin(), v.end(), resident.begin() + 3 * n);
    device_jiggle_ = Jiggles();
    return absl::OkStatus();
  }

  absl::Status SetParams(const DeformerConfig& config) override {
    const PbsParams& p = ParamsOf<PbsParams>(config);
    if (p.jiggle && model_->alpha.empty()) return JiggleWithoutAttribute();
    params_ = p;
    return absl::OkStatus();
  }

  size_t StateBytes() const override {
    const size_t n = model_->mesh.rest.size();
    const size_t lambda = params_.solver == PbsParams::Solver::kXpbd
                              ? model_->stretch.size() + model_->volume.size() + model_->bind.size()
                              : 0;
    // With jiggle the particles and velocities twice: the frame's undo (FrameInput::stop, which a
    // server always gives; a session on a device keeps none, and is counted as if).
    return world_.size() * sizeof(Similarity) + skinning_.size() * sizeof(Affine34d) +
           matrices_.size() * sizeof(Affine34f) + (3 * n * (params_.jiggle ? 4 : 1) + lambda) * sizeof(float);
  }

  static absl::Status JiggleWithoutAttribute() {
    return absl::FailedPreconditionError(
        "method pbs: jiggle needs the rig's per-vertex \"pbs_jiggle\" attribute (1 component, 0 skinned … 1 free); "
        "upload it with the rig");
  }

 private:
  static constexpr std::string_view kMagic{"pbs-state\x01", 10};

  bool Jiggles() const { return params_.jiggle && !model_->alpha.empty(); }

  // SaveState's bytes from positions (empty: never deformed, zeros) and velocities (empty: none).
  std::string Encode(bool fresh, std::span<const float> x, std::span<const float> v) const {
    const uint64_t n = model_->mesh.rest.size();
    StateWriter out(kMagic);
    out.Put(n);
    out.Put(uint8_t(fresh || x.empty()));
    out.Put(uint8_t(!v.empty()));
    if (!x.empty()) {
      out.PutArray(x);
    } else {
      out.PutZeros(3 * n * sizeof(float));
    }
    if (!v.empty()) out.PutArray(v);
    return std::move(out).Finish();
  }

  // Checks SaveState's bytes against this session and unpacks them: whether the next frame starts
  // from rest; x (3 per particle); v (3 per particle, or empty when saved without jiggle).
  absl::StatusOr<bool> Decode(std::string_view bytes, std::vector<float>& x, std::vector<float>& v) const {
    const uint64_t n = model_->mesh.rest.size();
    StateReader in(bytes, kMagic, "a pbs session state");
    const uint64_t count = in.Get<uint64_t>();
    if (!in.ok()) return in.status();
    if (count != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("state: saved with ", count, " particles; this session's tet mesh has ", n));
    }
    const bool fresh = in.Get<uint8_t>() != 0, velocities = in.Get<uint8_t>() != 0;
    const size_t floats = 3 * n * (velocities ? 2 : 1);
    if (in.remaining() != floats * sizeof(float)) {
      return absl::DataLossError(absl::StrCat("state: ", bytes.size(), " bytes where ", n, " particles need ",
                                              bytes.size() - in.remaining() + floats * sizeof(float)));
    }
    // A state that starts from rest carries no motion: any session may take it.
    if (!fresh && velocities != Jiggles()) {
      return absl::FailedPreconditionError(absl::StrCat("state: saved by a session with jiggle ",
                                                        velocities ? "on" : "off", "; this one has it ",
                                                        velocities ? "off" : "on"));
    }
    x.resize(3 * n);
    in.GetArray(std::span<float>(x));
    v.clear();
    if (velocities && Jiggles()) {
      v.resize(3 * n);
      in.GetArray(std::span<float>(v));
    }
    // The checksum is the client's to compute: a state it wrote may hold anything.
    for (const auto* values : {&x, &v}) {
      for (size_t i = 0; i < values->size(); ++i) {
        if (!std::isfinite((*values)[i])) {
          return absl::InvalidArgumentError(absl::StrCat("state: particle ", i / 3, "'s ",
                                                         values == &x ? "position" : "velocity", " is not finite"));
        }
      }
    }
    return fresh;
  }

  std::shared_ptr<const Rig> rig_;
  std::shared_ptr<const PbsModel> model_;
  PbsParams params_;
  std::vector<Similarity> world_;
  std::vector<Affine34d> skinning_;
  std::vector<Affine34f> matrices_;
  PbsState state_;  // the session's: particles, (with jiggle) velocities; on a device only `fresh`
  PbsState undo_;   // the state a frame the host may stop started from (FrameInput::stop)
  bool device_jiggle_ = false;  // on a device: the last frame had jiggle (switching it on starts still)
};

}  // namespace

bool PbsStateful(const DeformerConfig& config) { return ParamsOf<PbsParams>(config).jiggle; }

std::optional<uint32_t> SolvePbsFrame(const PbsModel& m, const PbsParams& params,
                                      std::span<const Affine34f> skinning, double dt, PbsState& state,
                                      ThreadPool* pool, size_t grain, const StopFn* stop) {
  const auto stop_wanted = [stop] { return stop != nullptr && (*stop)(); };
  const size_t n = m.mesh.rest.size();
  state.x.resize(3 * n);
  const bool jiggle = params.jiggle && !m.alpha.empty();
  if (!jiggle) {
    state.v.clear();
  } else if (state.v.size() != 3 * n) {
    state.v.assign(3 * n, 0.f);  // jiggle switched on: at rest where the last frame left the particles
  }
  const bool xpbd = params.solver == PbsParams::Solver::kXpbd;
  if (xpbd) {
    state.lambda.assign(m.stretch.size() + m.volume.size() + m.bind.size(), 0.f);  // a new step
  } else {
    state.lambda.clear();
  }
  const bool dynamic = jiggle && !state.fresh && !params.quasi_static;
  float* x = state.x.data();
  float* v = jiggle ? state.v.data() : nullptr;  // holds the previous positions during the sweeps
  const float h = float(dt), damp = float(std::exp(-params.damping * dt));
  const Eigen::Vector3f fall = Eigen::Vector3f(float(params.gravity * params.gravity_direction[0]),
                                                float(params.gravity * params.gravity_direction[1]),
                                                float(params.gravity * params.gravity_direction[2])) * h * h;
  // The prediction: LBS, blended towards inertia by α.
  ParallelFor(pool, n, 2048, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      Affine34f a = Affine34f::Zero();
      for (uint32_t k = m.weights.offsets[i]; k < m.weights.offsets[i + 1]; ++k) {
        a += m.weights.weights[k] * skinning[m.weights.joints[k]];
      }
      Eigen::Map<Eigen::Vector3f> predicted(x + 3 * i);
      const Eigen::Vector3f lbs = a * m.mesh.rest[i].cast<float>().homogeneous();
      if (!jiggle) {
        predicted = lbs;
        continue;
      }
      Eigen::Map<Eigen::Vector3f> velocity(v + 3 * i);
      const Eigen::Vector3f previous = state.fresh ? lbs : Eigen::Vector3f(predicted);
      const float alpha = m.alpha[i];
      if (dynamic && alpha > 0) {
        const Eigen::Vector3f inert = previous + (h * damp) * Eigen::Vector3f(velocity) + fall;
        predicted = (1 - alpha) * lbs + alpha * inert;
      } else {
        predicted = lbs;
      }
      velocity = previous;
    }
  });
  const float ks = float(params.stretch_stiffness), kv = float(params.volume_stiffness), kb = float(params.bind_stiffness);
  const float kj = float(params.jiggle_stiffness);
  // XPBD's α̃ = compliance / dt².
  const float inv_h2 = h > 0 ? 1.f / (h * h) : 0.f;
  const float as = float(params.stretch_compliance) * inv_h2, av = float(params.volume_compliance) * inv_h2,
              ab = float(params.bind_compliance) * inv_h2, aj = float(params.jiggle_compliance) * inv_h2;
  float* lambda_stretch = xpbd ? state.lambda.data() : nullptr;
  float* lambda_volume = xpbd ? lambda_stretch + m.stretch.size() : nullptr;
  float* lambda_bind = xpbd ? lambda_volume + m.volume.size() : nullptr;
  // Sweeps: stretch, then volume, colour by colour (parallel within a colour: its constraints
  // share no particle, so the result is the serial colour-order Gauss–Seidel's), then bind.
  // A sweep is one run of passes on the pool: each colour, then the binds.
  const size_t stretch_colours = std::max<size_t>(m.stretch_colours.size(), 1) - 1,
               volume_colours = std::max<size_t>(m.volume_colours.size(), 1) - 1;
  std::vector<size_t>& sizes = state.pass_sizes;
  sizes.clear();
  for (size_t c = 0; c < stretch_colours; ++c) sizes.push_back(m.stretch_colours[c + 1] - m.stretch_colours[c]);
  for (size_t c = 0; c < volume_colours; ++c) sizes.push_back(m.volume_colours[c + 1] - m.volume_colours[c]);
  if (!m.bind.empty()) sizes.push_back(n);
  auto pass = [&](size_t p, size_t b, size_t e) {
    if (p < stretch_colours) {
      const size_t first = m.stretch_colours[p];
      for (size_t k = first + b; k < first + e; ++k) {
        const bool soft = jiggle && m.stretch_jiggles[k];
        if (xpbd) ProjectStretchXpbd(m.stretch[k], soft ? aj : as, lambda_stretch[k], x);
        else ProjectStretch(m.stretch[k], soft ? kj : ks, x);
      }
    } else if (p < stretch_colours + volume_colours) {
      const size_t first = m.volume_colours[p - stretch_colours];
      for (size_t k = first + b; k < first + e; ++k) {
        const bool soft = jiggle && m.volume_jiggles[k];
        if (xpbd) ProjectVolumeXpbd(m.volume[k], soft ? aj : av, lambda_volume[k], x);
        else ProjectVolume(m.volume[k], soft ? kj : kv, x);
      }
    } else {
      for (size_t i = b; i < e; ++i) {
        const bool soft = jiggle && m.alpha[i] > 0;
        if (xpbd) BindXpbd(m, skinning, i, soft ? aj : ab, lambda_bind[i], x);
        else Bind(m, skinning, i, soft ? kj : kb, x);
      }
    }
  };
  for (uint32_t it = 0; it < params.iterations; ++it) {
    if (stop_wanted()) return it;
    ParallelPasses(pool, sizes, grain, state.pass_scratch, pass);
  }
  // Inverted tets: a tet turned inside out can satisfy every stretch constraint (its mirror image
  // has the rest edge lengths), a local minimum the sweeps leave it in. Up to `recovery_passes`
  // passes over the volume colours project only the tets still inverted, and stop after a pass
  // that finds none.
  for (uint32_t pass = 0; params.iterations > 0 && pass < params.recovery_passes; ++pass) {
    if (stop_wanted()) return params.iterations + pass;
    std::atomic<size_t> found{0};
    for (size_t c = 0; c + 1 < m.volume_colours.size(); ++c) {
      const uint32_t first = m.volume_colours[c], count = m.volume_colours[c + 1] - first;
      ParallelFor(pool, count, grain, [&](size_t b, size_t e) {
        size_t here = 0;
        for (size_t k = first + b; k < first + e; ++k) {
          const VolumeConstraint& q = m.volume[k];
          Eigen::Vector3f p[4];
          for (int i = 0; i < 4; ++i) p[i] = Eigen::Map<const Eigen::Vector3f>(x + 3 * size_t(q.p[i]));
          if ((p[1] - p[0]).cross(p[2] - p[0]).dot(p[3] - p[0]) > 0) continue;
          ++here;
          VolumeConstraint outward = q;
          outward.rest *= kRecoveryTarget;
          ProjectVolume(outward, 1.f, x);
        }
        found += here;
      });
    }
    if (found == 0) break;
  }
  if (jiggle) {  // each particle's velocity over this step, for the next prediction
    const float inv_h = dynamic && h > 0 ? 1.f / h : 0.f;  // quasi-static and first frames: at rest
    ParallelFor(pool, n, 4096, [&](size_t b, size_t e) {
      for (size_t i = 3 * b; i < 3 * e; ++i) v[i] = (x[i] - v[i]) * inv_h;
    });
  }
  state.fresh = false;
  return std::nullopt;
}

std::span<const ParamSpec> PbsParamSpecs() { return kPbsSpecs; }

absl::StatusOr<std::shared_ptr<const MethodParams>> ParsePbsParams(const ParamSet& set, std::string_view field) {
  auto p = std::make_shared<PbsParams>();
  ParamReader r(set, field);
  int tets = 0;
  r.Choice("tets", kTetWords, tets);
  p->tets = PbsParams::Tets(tets);
  r.Number("cell_size", p->cell_size, 0, 1e30).Number("voxel_size", p->voxel_size, 0, 1e30).Count("iterations", p->iterations, 1, 1000);
  r.Count("recovery_passes", p->recovery_passes, 0, 100);
  r.Number("stretch_stiffness", p->stretch_stiffness, 0, 1, /*open_lo=*/true)
      .Number("volume_stiffness", p->volume_stiffness, 0, 1)
      .Number("bind_stiffness", p->bind_stiffness, 0, 1);
  int weights = 0;
  r.Choice("weights", kWeightWords, weights);
  p->weights = weights == 1 ? PbsParams::Weights::kPaper : PbsParams::Weights::kTransfer;
  r.Flag("cut_bridges", p->cut_bridges).Flag("jiggle", p->jiggle).Number("jiggle_stiffness", p->jiggle_stiffness, 0, 1, /*open_lo=*/true);
  int selection = 0;
  r.Choice("jiggle_selection", kSelectionWords, selection);
  p->jiggle_selection = PbsParams::JiggleSelection(selection);
  r.Number("time_step", p->time_step, 1e-6, 1)
      .Number("gravity", p->gravity, -1e6, 1e6)
      .Number("damping", p->damping, 0, 1e4)
      .Flag("quasi_static", p->quasi_static);
  r.List("gravity_direction", [&](const ParamSet& item, const std::string& where) -> absl::Status {
    double d[3] = {0, 0, 0};
    ParamReader c(item, where);
    c.Number("x", d[0], -1e30, 1e30).Number("y", d[1], -1e30, 1e30).Number("z", d[2], -1e30, 1e30);
    if (!c.status().ok()) return c.status();
    const double norm = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    if (!(norm > 0) || !std::isfinite(norm)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": a direction, not (", d[0], ", ", d[1], ", ", d[2], ")"));
    }
    p->gravity_direction = {d[0] / norm, d[1] / norm, d[2] / norm};
    return absl::OkStatus();
  });
  int solver = 0;
  r.Choice("solver", kSolverWords, solver);
  p->solver = solver == 1 ? PbsParams::Solver::kXpbd : PbsParams::Solver::kPbd;
  r.Number("stretch_compliance", p->stretch_compliance, 0, 1e6)
      .Number("volume_compliance", p->volume_compliance, 0, 1e6)
      .Number("bind_compliance", p->bind_compliance, 0, 1e6)
      .Number("jiggle_compliance", p->jiggle_compliance, 0, 1e6);
  if (!r.status().ok()) return r.status();
  return std::shared_ptr<const MethodParams>(std::move(p));
}

size_t PbsModel::Bytes() const {
  return mesh.rest.size() * (sizeof(Eigen::Vector3d) + sizeof(uint32_t) + sizeof(BindConstraint)) +
         mesh.tets.size() * (sizeof(mesh.tets[0]) + sizeof(double) + sizeof(VolumeConstraint)) +
         stretch.size() * sizeof(StretchConstraint) + weights.joints.size() * (sizeof(uint16_t) + sizeof(float)) +
         embedding.tet.size() * (sizeof(uint32_t) + 4 * sizeof(double));
}

std::string PbsModel::Summary() const {
  size_t binds = 0;
  for (const BindConstraint& b : bind) binds += b.rest >= 0;
  auto colours = [](const std::vector<uint32_t>& offsets) { return offsets.empty() ? size_t{0} : offsets.size() - 1; };
  return absl::StrCat("tets from ", mesh.source, ": ", mesh.rest.size(), " particles, ", mesh.tets.size(), " tets (",
                      mesh.cut, " cut as bridging parts, ", mesh.rejected, " degenerate",
                      mesh.reoriented ? absl::StrCat(", ", mesh.reoriented, " given inside out") : "",
                      "); constraints: ", stretch.size(),
                      " stretch in ", colours(stretch_colours), " colours, ", volume.size(), " volume in ",
                      colours(volume_colours), ", ", binds, " bind; ", embedding.outside,
                      " render vertices outside their tet",
                      embedding.outside ? absl::StrFormat(" (by at most %.3g)", embedding.farthest) : "",
                      alpha.empty() ? "" : "; jiggle painted");
}

std::string PbsKey(const DeformerConfig& config) {
  const PbsParams& p = ParamsOf<PbsParams>(config);
  std::string tets(kTetWords[int(p.tets)]);
  if (p.tets == PbsParams::Tets::kAuto || p.tets == PbsParams::Tets::kMesher) absl::StrAppend(&tets, ",cell=", KeyNumber(p.cell_size));
  if (p.tets == PbsParams::Tets::kAuto || p.tets == PbsParams::Tets::kVoxels) absl::StrAppend(&tets, ",voxel=", KeyNumber(p.voxel_size));
  return absl::StrCat("tets=", tets, ",weights=", std::string(kWeightWords[int(p.weights)]),
                      p.cut_bridges ? "" : ",uncut",
                      p.jiggle_selection == PbsParams::JiggleSelection::kPaper ? ",jiggle=paper" : "");
}

namespace {

// The paper's jiggle selection (§4, spec §2.11) from the render vertices painted above 0: the
// particle nearest each painted vertex, and every particle "between" painted ones and its bone —
// where the ray from its bone through it leaves the mesh (generalized winding number below ½,
// stepping by h), the nearest render vertex is painted. Of these, the ones farther from their
// bone than their mean distance are free (α 1), the others skinned (α 0).
// Progress runs from `from` to `to` over the walk (a winding-number query per step, up to a few
// hundred steps a particle: the slow part on a large rig); false from it cancels (nullopt).
std::optional<std::vector<float>> PaperJiggle(const Rig& rig, const AttributeMap& painted, const PbsModel& m, double h,
                                              const ProgressFn& progress, double from, double to) {
  const size_t n = m.mesh.rest.size();
  std::vector<uint8_t> selected(n, 0);
  std::vector<float> particles;
  particles.reserve(3 * n);
  for (const Eigen::Vector3d& q : m.mesh.rest) particles.insert(particles.end(), {float(q.x()), float(q.y()), float(q.z())});
  std::vector<Eigen::Vector3d> marked;
  for (size_t v = 0; v < rig.vertex_count(); ++v) {
    if (painted.values[v] > 0) marked.emplace_back(rig.positions[3 * v], rig.positions[3 * v + 1], rig.positions[3 * v + 2]);
  }
  for (uint32_t i : NearestRenderVertex(particles, marked)) selected[i] = 1;
  if (rig.triangle_count() > 0 && !m.bind.empty()) {
    const WindingNumberTree inside(rig.positions, rig.triangles);
    const double limit = double((rig.bbox_max - rig.bbox_min).norm());
    std::vector<Eigen::Vector3d> exits;
    std::vector<uint32_t> of;
    // Said every few thousand particles (until 2026-12-07 not at all between 0.3 and 0.6).
    const size_t every = std::clamp<size_t>(n / 16, 1, 4096);
    for (size_t i = 0; i < n; ++i) {
      if (progress && i % every == 0 && !progress(from + (to - from) * double(i) / double(n))) return std::nullopt;
      if (selected[i] || m.bind[i].rest <= 0) continue;
      const Eigen::Vector3d a = m.joints[m.bind[i].from], ab = m.joints[m.bind[i].to] - a;
      const Eigen::Vector3d c = a + std::clamp((m.mesh.rest[i] - a).dot(ab) / ab.squaredNorm(), 0.0, 1.0) * ab;
      const Eigen::Vector3d d = (m.mesh.rest[i] - c).normalized();
      Eigen::Vector3d x = m.mesh.rest[i];
      for (double walked = 0; walked < limit && std::abs(inside(x)) >= 0.5; walked += h / 2) x += (h / 2) * d;
      exits.push_back(x);
      of.push_back(uint32_t(i));
    }
    const std::vector<uint32_t> nearest = NearestRenderVertex(rig.positions, exits);
    for (size_t k = 0; k < of.size(); ++k) selected[of[k]] = painted.values[nearest[k]] > 0;
  }
  double mean = 0;
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    if (selected[i] && !m.bind.empty() && m.bind[i].rest >= 0) {
      mean += m.bind[i].rest;
      ++count;
    }
  }
  mean /= double(std::max<size_t>(count, 1));
  std::vector<float> alpha(n, 0.f);
  for (size_t i = 0; i < n; ++i) alpha[i] = selected[i] && !m.bind.empty() && m.bind[i].rest > mean ? 1.f : 0.f;
  return alpha;
}

PbsParams::Tets ResolveTets(const Rig& rig, PbsParams::Tets tets) {
  if (tets != PbsParams::Tets::kAuto) return tets;
  return rig.tet_mesh.empty() ? PbsParams::Tets::kVoxels : PbsParams::Tets::kRig;
}

// The tetrahedra from the source `p.tets` names (resolved for the rig).
absl::StatusOr<TetMesh> BuildTets(const Rig& rig, const PbsParams& p, const ProgressFn& progress) {
  const double longest = std::max(1e-30, double((rig.bbox_max - rig.bbox_min).maxCoeff()));
  const PbsParams::Tets source = ResolveTets(rig, p.tets);
  if (source == PbsParams::Tets::kRig) {
    if (rig.tet_mesh.empty()) {
      return absl::FailedPreconditionError("method pbs: tets \"rig\" needs the rig's tet_mesh; the rig has none");
    }
    if (const size_t n = rig.tet_mesh.positions.size() / 3; n > kPbsMaxParticles) {
      return absl::ResourceExhaustedError(absl::StrCat("rig.tet_mesh: ", n, " particles, more than the ", kPbsMaxParticles,
                                                       " a pbs preparation takes"));
    }
    return UploadedTetMesh(rig.tet_mesh.positions, rig.tet_mesh.tets);
  }
  if (rig.triangle_count() == 0) {
    return absl::FailedPreconditionError(
        "method pbs needs a triangle mesh to build its tetrahedra (or a tet_mesh uploaded with the rig); the rig has "
        "neither");
  }
  if (source == PbsParams::Tets::kMesher) {
    MesherOptions options;
    options.cell_size = p.cell_size > 0 ? p.cell_size : longest / 24;
    options.max_vertices = kPbsMaxParticles;
    return MeshVolume(rig.positions, rig.triangles, options, [&] { return !progress || progress(0.05); });
  }
  // The grid is bounded before it is built: at most 16 cells a particle the method takes (until
  // 2026-12-03 the voxels' own 2^26 cells, gigabytes of corners and labels before the particle
  // limit below was checked).
  auto grid = Voxelize(rig.positions, rig.triangles,
                       {p.voxel_size > 0 ? p.voxel_size : longest / 32, 16 * kPbsMaxParticles});
  if (!grid.ok()) {
    return absl::Status(grid.status().code(), absl::StrCat("deformer.pbs.voxel_size: ", grid.status().message()));
  }
  // Bounded like the mesher's (until 2026-12-01 only the voxels' own cells bounded these:
  // millions of particles, gigabytes of constraints and frames of seconds).
  if (grid->vertices.size() > kPbsMaxParticles) {
    return absl::ResourceExhaustedError(absl::StrCat("deformer.pbs.voxel_size: ", grid->h, " makes ",
                                                     grid->vertices.size(), " particles, more than the ", kPbsMaxParticles,
                                                     " a pbs preparation takes; choose a larger voxel size"));
  }
  return VoxelTetMesh(*grid);
}

}  // namespace

absl::Status CheckPbsConfig(const Rig& rig, const DeformerConfig& config) {
  if (auto st = SkeletalDeformer::CheckRig(rig, "pbs"); !st.ok()) return st;
  // Jiggle's attribute is the rig's, so it is refused here too, before the tets are asked for: a
  // host serving the fallback while they are built learnt of it only when the method's deformer
  // was made, and then served the fallback for good (until 2026-12-04).
  if (ParamsOf<PbsParams>(config).jiggle && JiggleAttribute(rig) == nullptr) return PbsDeformer::JiggleWithoutAttribute();
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Prepared>> PreparePbs(const Rig& rig, const DeformerConfig& config,
                                                           ThreadPool*, const ProgressFn& progress) {
  if (auto st = SkeletalDeformer::CheckRig(rig, "pbs"); !st.ok()) return st;
  const double longest = std::max(1e-30, double((rig.bbox_max - rig.bbox_min).maxCoeff()));
  const PbsParams& p = ParamsOf<PbsParams>(config);
  auto model = std::make_shared<PbsModel>();
  auto mesh = BuildTets(rig, p, progress);
  if (!mesh.ok()) return mesh.status();
  model->mesh = std::move(*mesh);
  {
    // Each tet's longest edge within the float solver's range (kPbsMaxTetEdge).
    double big = 0, small = 1e300;
    size_t big_at = 0, small_at = 0;
    for (size_t t = 0; t < model->mesh.tets.size(); ++t) {
      double e = 0;
      for (int a = 0; a < 4; ++a) {
        for (int b = a + 1; b < 4; ++b) {
          e = std::max(e, (model->mesh.rest[model->mesh.tets[t][a]] - model->mesh.rest[model->mesh.tets[t][b]]).norm());
        }
      }
      if (e > big) big = e, big_at = t;
      if (e < small) small = e, small_at = t;
    }
    const char* what = model->mesh.source == "rig"      ? "the uploaded tets"
                       : model->mesh.source == "voxels" ? "deformer.pbs.voxel_size"
                                                        : "deformer.pbs.cell_size";
    if (big > kPbsMaxTetEdge) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "pbs: tet %d has an edge of %g rig units (the rig's longest side %g); the float solver's volume constraints "
          "take edges up to %g: scale the rig down (or make %s smaller)",
          big_at, big, longest, kPbsMaxTetEdge, what));
    }
    if (!model->mesh.tets.empty() && small < kPbsMinTetEdge) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "pbs: tet %d is %g rig units across (the rig's longest side %g); the float solver's volume constraints "
          "take tets from %g: scale the rig up (or make %s larger)",
          small_at, small, longest, kPbsMinTetEdge, what));
    }
  }
  if (progress && !progress(0.3)) return absl::CancelledError("pbs: cancelled");
  // Progress from here: embedding 0.3–0.4, cutting bridges 0.4–0.45, embedding again 0.45–0.5,
  // the jiggle selection 0.5–0.6, colouring 0.6–1 (until 2026-12-07 nothing between 0.3 and 0.6
  // or after it: an upload of overlapping tets prepared for minutes that no cancel could end).
  auto part = [&](double from, double to) -> std::function<bool(double)> {
    if (!progress) return {};
    return [&progress, from, to](double f) { return progress(from + (to - from) * f); };
  };
  model->embedding = EmbedInTets(model->mesh, rig.positions, {}, part(0.3, 0.4));
  if (model->embedding.stopped) return absl::CancelledError("pbs: cancelled");
  const size_t n = model->mesh.rest.size();

  // Bones: joint → child segments longer than 1e-6 of the rig's size; each particle binds to the
  // nearest at rest.
  const Skeleton& sk = rig.skeleton;
  for (size_t j = 0; j < sk.size(); ++j) model->joints.push_back(Inverse(sk.inverse_bind[j]).col(3));
  const double size = std::max(1e-30, double(rig.bbox_diagonal()));
  std::vector<std::pair<uint32_t, uint32_t>> bones;
  for (size_t j = 0; j < sk.size(); ++j) {
    const int32_t parent = sk.parents[j];
    if (parent >= 0 && (model->joints[j] - model->joints[parent]).norm() > 1e-6 * size) {
      bones.emplace_back(uint32_t(parent), uint32_t(j));
    }
  }
  // Particle weights: the nearest render vertex's, the 3 largest, renormalised; or Eq. 2.
  model->weights.offsets.push_back(0);
  if (p.weights == PbsParams::Weights::kPaper) {
    if (bones.empty()) return absl::FailedPreconditionError("pbs: the paper's weights need a bone of non-zero length");
    PaperWeights(model->joints, bones, model->mesh.rest, model->weights);
  }
  const AttributeMap* jiggle = JiggleAttribute(rig);
  if (jiggle != nullptr) {
    if (auto st = CheckKnownAttribute(*jiggle, rig.vertex_count(), rig.joint_count(), "rig attribute"); !st.ok()) {
      return st;
    }
  }
  const std::vector<uint32_t> nearest = p.weights == PbsParams::Weights::kTransfer || jiggle != nullptr
                                            ? NearestRenderVertex(rig.positions, model->mesh.rest)
                                            : std::vector<uint32_t>();
  if (jiggle != nullptr) {
    for (size_t i = 0; i < n; ++i) model->alpha.push_back(jiggle->values[nearest[i]]);
  }
  for (size_t i = 0; i < nearest.size() && p.weights == PbsParams::Weights::kTransfer; ++i) {
    const uint32_t v = nearest[i];
    const uint32_t b = rig.weights.offsets[v], e = std::min(rig.weights.offsets[v + 1], b + 3);  // sorted by weight
    float sum = 0;
    for (uint32_t k = b; k < e; ++k) sum += rig.weights.weights[k];
    for (uint32_t k = b; k < e; ++k) {
      model->weights.joints.push_back(rig.weights.joints[k]);
      model->weights.weights.push_back(rig.weights.weights[k] / sum);
    }
    model->weights.offsets.push_back(uint32_t(model->weights.joints.size()));
  }

  // Tets bridging two parts: coarse voxels merge fingers, an arm and the torso; and in a bind pose
  // parts can touch or overlap (hands resting on the hips), which no mesher separates. A tet is
  // cut when two of its particles are skinned to joints far apart in the skeleton (more than
  // kBridgeHops parent–child steps between their nearest joints: the parts move independently),
  // or skinned to no common joint with the tet's centroid outside the mesh (neighbouring fingers);
  // the render vertices are embedded again, preferring tets whose particles all share a joint
  // with them.
  auto share = [&](std::span<const uint16_t> a, std::span<const uint16_t> b) {
    for (uint16_t j : a) {
      if (std::find(b.begin(), b.end(), j) != b.end()) return true;
    }
    return false;
  };
  auto joints_of = [&](uint32_t i) {
    return std::span<const uint16_t>(model->weights.joints.data() + model->weights.offsets[i],
                                     model->weights.offsets[i + 1] - model->weights.offsets[i]);
  };
  std::vector<int> depth(sk.size(), 0);
  for (int32_t j : sk.order) depth[j] = sk.parents[j] < 0 ? 0 : depth[sk.parents[j]] + 1;
  // Whether two joints are at most kBridgeHops parent–child steps apart: at most that many steps
  // up from the deeper (until 2026-12-03 the walk went on to their common ancestor, O(depth) for
  // each pair of a tet's particles: hours on a chain of 65 535 joints).
  auto near = [&](int32_t a, int32_t b) {
    for (int n = 0; a != b; ++n) {
      if (n == kBridgeHops || a < 0 || b < 0) return false;  // farther, or different trees
      if (depth[a] >= depth[b]) {
        a = sk.parents[a];
      } else {
        b = sk.parents[b];
      }
    }
    return true;
  };
  auto far_apart = [&](std::span<const uint16_t> a, std::span<const uint16_t> b) {
    for (uint16_t x : a) {
      for (uint16_t y : b) {
        if (near(x, y)) return false;
      }
    }
    return !a.empty() && !b.empty();
  };
  std::vector<uint8_t> keep(model->mesh.tets.size(), 1);
  bool cutting = false;
  std::optional<WindingNumberTree> winding;
  const size_t tets = model->mesh.tets.size();
  for (size_t t = 0; p.cut_bridges && t < tets; ++t) {
    if (progress && t % 4096 == 0 && !progress(0.4 + 0.05 * double(t) / double(tets))) {
      return absl::CancelledError("pbs: cancelled");
    }
    const auto& q = model->mesh.tets[t];
    bool apart = false, disjoint = false;
    for (int a = 0; a < 4 && !apart; ++a) {
      for (int b = a + 1; b < 4 && !apart; ++b) {
        if (share(joints_of(q[a]), joints_of(q[b]))) continue;
        disjoint = true;
        apart = far_apart(joints_of(q[a]), joints_of(q[b]));
      }
    }
    if (!disjoint) continue;
    if (!apart) {
      if (rig.triangle_count() == 0) continue;  // no surface to be outside of
      const Eigen::Vector3d centroid =
          (model->mesh.rest[q[0]] + model->mesh.rest[q[1]] + model->mesh.rest[q[2]] + model->mesh.rest[q[3]]) / 4;
      if (!winding) winding.emplace(rig.positions, rig.triangles);
      if (std::abs((*winding)(centroid)) >= 0.5) continue;
    }
    keep[t] = 0;
    cutting = true;
  }
  if (cutting) {
    const size_t before = model->mesh.tets.size();
    RemoveTets(model->mesh, keep);
    // Nothing left to embed in (every render vertex read tet 0 of an empty mesh: the server
    // crashed on the first frame until 2026-12-03).
    if (model->mesh.tets.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "pbs: cut_bridges cut all ", before, " tets (each joins parts skinned to joints more than ", kBridgeHops,
          " bones apart, or lies outside the mesh); give cut_bridges=false, or tets that follow the parts"));
    }
    auto fits = [&](size_t v, uint32_t t) {
      const std::span<const uint16_t> own(rig.weights.joints.data() + rig.weights.offsets[v],
                                          rig.weights.offsets[v + 1] - rig.weights.offsets[v]);
      for (uint32_t p : model->mesh.tets[t]) {
        if (!share(own, joints_of(p))) return false;
      }
      return true;
    };
    model->embedding = EmbedInTets(model->mesh, rig.positions, fits, part(0.45, 0.5));
    if (model->embedding.stopped) return absl::CancelledError("pbs: cancelled");
  }

  // Each particle binds to the nearest bone among those that move with a joint it is skinned to
  // (the nearest bone outright can belong to another limb, whose pull fights the skinning: on
  // BCN_Epileptic that left 29 % of the volume off and 579 tets inverted); none: no bind.
  // The bones moving with each joint, so that a particle looks at its own joints' bones only (in
  // bone order, as a scan of every bone did: the same ties), not at every bone (until 2026-12-07
  // particles x bones, with no progress call between 0.3 and 0.6).
  if (!bones.empty()) {
    model->bind.assign(n, {0, 0, -1.f});
    std::vector<std::vector<uint32_t>> bones_from(sk.size());
    for (size_t b = 0; b < bones.size(); ++b) bones_from[bones[b].first].push_back(uint32_t(b));
    std::vector<uint32_t> candidates;
    for (size_t i = 0; i < n; ++i) {
      double best = std::numeric_limits<double>::infinity();
      candidates.clear();
      for (uint32_t k = model->weights.offsets[i]; k < model->weights.offsets[i + 1]; ++k) {
        const uint32_t j = model->weights.joints[k];
        if (j < bones_from.size()) candidates.insert(candidates.end(), bones_from[j].begin(), bones_from[j].end());
      }
      std::sort(candidates.begin(), candidates.end());
      candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
      for (uint32_t b : candidates) {
        const auto [from, to] = bones[b];
        const Eigen::Vector3d a = model->joints[from], ab = model->joints[to] - a;
        const double t = std::clamp((model->mesh.rest[i] - a).dot(ab) / ab.squaredNorm(), 0.0, 1.0);
        const double d = (model->mesh.rest[i] - (a + t * ab)).norm();
        if (d < best) {
          best = d;
          model->bind[i] = {from, to, float(d)};
        }
      }
    }
  }
  if (jiggle != nullptr && p.jiggle_selection == PbsParams::JiggleSelection::kPaper) {
    auto alpha = PaperJiggle(rig, *jiggle, *model, longest / 64, progress, 0.5, 0.6);
    if (!alpha) return absl::CancelledError("pbs: cancelled");
    model->alpha = std::move(*alpha);
  }
  if (progress && !progress(0.6)) return absl::CancelledError("pbs: cancelled");

  // Constraints, coloured per type and stored in colour order.
  model->stretch = TetEdges(model->mesh.tets, model->mesh.rest);
  std::vector<std::array<uint32_t, 2>> ends;
  for (const auto& s : model->stretch) ends.push_back({s.a, s.b});
  SortByColour(model->stretch, ColourConstraints(std::span<const std::array<uint32_t, 2>>(ends), n),
               model->stretch_colours);
  if (progress && !progress(0.8)) return absl::CancelledError("pbs: cancelled");
  for (size_t t = 0; t < model->mesh.tets.size(); ++t) {
    model->volume.push_back({model->mesh.tets[t], float(model->mesh.rest_volume[t])});
  }
  SortByColour(model->volume,
               ColourConstraints(std::span<const std::array<uint32_t, 4>>(model->mesh.tets), n), model->volume_colours);
  if (!model->alpha.empty()) {
    auto free = [&](uint32_t i) { return model->alpha[i] > 0; };
    for (const auto& s : model->stretch) model->stretch_jiggles.push_back(free(s.a) || free(s.b));
    for (const auto& c : model->volume) {
      model->volume_jiggles.push_back(std::any_of(c.p.begin(), c.p.end(), free));
    }
  }
  if (progress && !progress(1.0)) return absl::CancelledError("pbs: cancelled");
  return std::shared_ptr<const Prepared>(std::move(model));
}

absl::StatusOr<std::unique_ptr<Deformer>> CreatePbsDeformer(std::shared_ptr<const Rig> rig,
                                                            std::shared_ptr<const Prepared> prepared,
                                                            const DeformerConfig& config) {
  auto model = std::dynamic_pointer_cast<const PbsModel>(prepared);
  if (!model) return absl::InternalError("pbs: created without its prepared tetrahedral mesh");
  if (ParamsOf<PbsParams>(config).jiggle && model->alpha.empty()) return PbsDeformer::JiggleWithoutAttribute();
  return std::unique_ptr<Deformer>(new PbsDeformer(std::move(rig), std::move(model), ParamsOf<PbsParams>(config)));
}

}  // namespace sinew
