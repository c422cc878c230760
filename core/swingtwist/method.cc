#include "core/swingtwist/method.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "core/deformer/skeletal.h"
#include "core/rig/pose.h"
#include "core/util/state_bytes.h"

namespace sinew {
namespace {

constexpr ParamSpec kSwingTwistSpecs[] = {
    {"voxel_size", ParamSpec::Type::kNumber, "0",
     "edge of the voxels the weights are computed on, in rig units; 0: the mesh's longest side / 64"},
    {"max_iterations", ParamSpec::Type::kInteger, "30", "local/global iterations of each weight solve, [1, 1000]"},
    {"influences", ParamSpec::Type::kInteger, "4", "joint deformers kept per vertex, [1, 8]"},
    {"swing_samples", ParamSpec::Type::kInteger, "1",
     "swing rotation samples per axis and sign, at (90°/n)·q, q = 1..n, [1, 16]; 1: the paper's R_x, R_y at ±90°"},
    {"twist_samples", ParamSpec::Type::kInteger, "1",
     "twist rotation samples per sign, at (90°/n)·q, [1, 16]; 1: the paper's R_z at ±90°"},
    {"epsilon", ParamSpec::Type::kNumber, "1e-06",
     "regularization of each weight solve, times the mean diagonal (spec §2.4), (0, 1]: without it the solves "
     "are singular"},
    {"tolerance", ParamSpec::Type::kNumber, "0.0001", "relative energy decrease that ends a weight solve, (0, 1)"},
    {"unwrap_twist", ParamSpec::Type::kFlag, "false",
     "continue each joint's twist angle from the previous frame's instead of wrapping at ±180°; makes the "
     "session stateful; within ±100 turns (a frame past them is refused)"},
};

class SwingTwistDeformer final : public Deformer {
 public:
  SwingTwistDeformer(std::shared_ptr<const Rig> rig, std::shared_ptr<const SwingTwistModel> model, std::string key,
                     bool unwrap)
      : rig_(std::move(rig)),
        model_(std::move(model)),
        key_(std::move(key)),
        last_theta_(unwrap ? rig_->joint_count() : 0, 0.0),
        world_(rig_->joint_count()),
        skinning_(rig_->joint_count()),
        joints_(rig_->joint_count()) {}

  absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) override {
    if (out.size() != rig_->positions.size()) return absl::InternalError("output buffer does not hold 3 floats per vertex");
    if (auto st = Joints(frame); !st.ok()) return st;
    SwingTwistSkinning(rig_->positions, model_->weights, joints_, out, pool, &model_->cpu_blocks);
    return absl::OkStatus();
  }

  // Device stage: the joint records are made here, the per-vertex sum on the device
  // (gpu/swingtwist/), its influences a fixed-width coefficient row per vertex.
  DeviceStage device_stage() const override {
    DeviceStage s;
    s.kernel = "swing-twist";
    s.device_data_key = absl::StrCat("swing-twist ", key_);
    return s;
  }
  size_t device_param_count() const override { return kSwingTwistDeviceJointFloats * rig_->joint_count(); }
  void DeviceCoefficients(std::vector<float>& values, uint32_t& cols) const override {
    SwingTwistDeviceRows(model_->weights, values, cols);
  }
  absl::Status DeviceFrame(const FrameInput& frame, std::vector<float>& params) override {
    params.resize(device_param_count());
    if (auto st = Joints(frame); !st.ok()) return st;
    SwingTwistDeviceJoints(joints_, params);
    return absl::OkStatus();
  }
  // Snapshots (Deformer::SaveState): with unwrap_twist the history is each joint's last twist
  // angle (on a device too: the joint records are made here). Bytes: "swing-twist-state" 1, the
  // angle count (u64: the joints, 0 without unwrapping), the angles (double), then an FNV-1a 64
  // (core/util/state_bytes.h).
  absl::StatusOr<std::string> SaveState() const override {
    StateWriter out(kStateMagic);
    out.Put(uint64_t(last_theta_.size()));
    out.PutArray(std::span<const double>(last_theta_));
    return std::move(out).Finish();
  }
  absl::Status LoadState(std::string_view bytes) override {
    StateReader in(bytes, kStateMagic, "a swing-twist session state");
    const uint64_t count = in.Get<uint64_t>();
    if (!in.ok()) return in.status();
    if (count != last_theta_.size()) {
      if (count == 0 || last_theta_.empty()) {
        return absl::FailedPreconditionError(absl::StrCat("state: saved by a session with unwrap_twist ",
                                                          count ? "on" : "off", "; this one has it ",
                                                          count ? "off" : "on"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("state: saved with ", count, " joints; this session's rig has ", last_theta_.size()));
    }
    if (in.remaining() != count * sizeof(double)) {
      return absl::DataLossError(absl::StrCat("state: ", in.remaining(), " bytes where ", count, " angles need ",
                                              count * sizeof(double)));
    }
    std::vector<double> theta(count);
    in.GetArray(std::span<double>(theta));
    if (auto st = in.Done(); !st.ok()) return st;
    for (size_t j = 0; j < count; ++j) {
      // Finite, and within the turns a frame accepts.
      if (!std::isfinite(theta[j]) || std::abs(theta[j]) > kMaxUnwrappedTwist) {
        return absl::InvalidArgumentError(absl::StrCat("state: joint ", j, "'s twist angle ", theta[j],
                                                       " rad is not finite or beyond ", kMaxTwistTurns, " turns"));
      }
    }
    last_theta_ = std::move(theta);
    return absl::OkStatus();
  }
  size_t StateBytes() const override {
    return world_.size() * sizeof(Similarity) + skinning_.size() * sizeof(Affine34d) + joints_.size() * sizeof(JointRecord) +
           last_theta_.size() * sizeof(double);
  }

 private:
  std::shared_ptr<const Rig> rig_;
  void Reset() override { std::fill(last_theta_.begin(), last_theta_.end(), 0.0); }

  absl::Status Joints(const FrameInput& frame) {
    if (auto st = CheckSkeletalFrame(*rig_, frame, "swing-twist"); !st.ok()) return st;
    SkinningTransforms(rig_->skeleton, *frame.pose, world_, skinning_);
    if (auto st = SwingTwistJoints(*rig_, model_->frames, skinning_, joints_, model_->weights.parents); !st.ok()) {
      return st;
    }
    // Unwrapping: θ + 2πk nearest the last frame's. Checked for every joint before any is kept,
    // so that a refused frame leaves the session's history as it was.
    auto unwrapped_of = [&](size_t j) {
      const double theta = joints_[j].theta;
      return theta + kTurn * std::round((last_theta_[j] - theta) / kTurn);
    };
    for (size_t j = 0; j < last_theta_.size(); ++j) {
      const double unwrapped = unwrapped_of(j);
      if (std::abs(unwrapped) > kMaxUnwrappedTwist) {
        const auto& names = rig_->skeleton.names;
        const std::string name = j < names.size() ? names[j] : "";
        return absl::FailedPreconditionError(absl::StrCat(
            "swing-twist: joint ", j, name.empty() ? "" : absl::StrCat(" ('", name, "')"), " has twisted ",
            absl::SixDigits(unwrapped / kTurn), " turns from its rest with unwrap_twist (at most ",
            kMaxTwistTurns, " either way); reset the session"));
      }
    }
    for (size_t j = 0; j < last_theta_.size(); ++j) {
      last_theta_[j] = unwrapped_of(j);
      joints_[j].theta = float(last_theta_[j]);
    }
    return absl::OkStatus();
  }

  static constexpr std::string_view kStateMagic{"swing-twist-state\x01", 18};
  static constexpr double kTurn = 2 * std::numbers::pi;
  // An unwrapped twist is kept within ±100 turns: a float angle there is exact to 6e-5 rad, and
  // t θ stays far inside the kernel's sine reduction (exact to about 8 000 quarter turns). Past it
  // a frame is refused (a spinning joint would otherwise lose its precision, then its quadrant).
  static constexpr int kMaxTwistTurns = 100;
  static constexpr double kMaxUnwrappedTwist = kMaxTwistTurns * kTurn;

  std::shared_ptr<const SwingTwistModel> model_;
  std::string key_;  // SwingTwistKey: names the weights' device copy
  std::vector<double> last_theta_;  // per joint, with unwrapping (the session's only state)
  std::vector<Similarity> world_;
  std::vector<Affine34d> skinning_;
  std::vector<JointRecord> joints_;
};

}  // namespace

std::span<const ParamSpec> SwingTwistParamSpecs() { return kSwingTwistSpecs; }

absl::StatusOr<std::shared_ptr<const MethodParams>> ParseSwingTwistParams(const ParamSet& set, std::string_view field) {
  auto p = std::make_shared<SwingTwistParams>();
  ParamReader r(set, field);
  r.Number("voxel_size", p->voxel_size, 0, 1e30).Count("max_iterations", p->max_iterations, 1, 1000).Count(
      "influences", p->influences, 1, 8);
  r.Count("swing_samples", p->swing_samples, 1, 16).Count("twist_samples", p->twist_samples, 1, 16);
  r.Number("epsilon", p->epsilon, 0, 1, /*open_lo=*/true).Number("tolerance", p->tolerance, 0, 1, /*open_lo=*/true);
  r.Flag("unwrap_twist", p->unwrap_twist);
  if (!r.status().ok()) return r.status();
  return std::shared_ptr<const MethodParams>(std::move(p));
}

size_t SwingTwistModel::Bytes() const {
  const size_t e = weights.joints.size();
  return sizeof(uint32_t) * weights.offsets.size() + e * (sizeof(uint16_t) + 3 * sizeof(float)) +
         sizeof(int32_t) * weights.parents.size() +
         frames.frame.size() * (2 * sizeof(Affine34d) + sizeof(Eigen::Vector3d) + sizeof(double)) + cpu_blocks.Bytes();
}

// A joint's motion relative to its parent is split into swing and twist only if it is a rotation
// (with uniform scale): conjugated by a sheared or unevenly scaled inverse bind it is not, and
// every bending frame failed, after a preparation of minutes (until 2026-12-03).
static absl::Status CheckSimilarBind(const Rig& rig) {
  if (rig.skeleton.inverse_bind_is_similarity) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "method swing-twist needs inverse bind matrices that are similarities (rotation, uniform scale, "
      "translation); this rig's ", NotSimilarity(rig.skeleton), ": use lbs"));
}

bool SwingTwistStateful(const DeformerConfig& config) { return ParamsOf<SwingTwistParams>(config).unwrap_twist; }

std::string SwingTwistKey(const DeformerConfig& config) {
  const SwingTwistParams& p = ParamsOf<SwingTwistParams>(config);
  return absl::StrCat("voxel=", KeyNumber(p.voxel_size), ",iterations=", p.max_iterations, ",influences=",
                      p.influences, ",samples=", p.swing_samples, "/", p.twist_samples, ",epsilon=",
                      KeyNumber(p.epsilon), ",tolerance=", KeyNumber(p.tolerance));
}

absl::Status CheckSwingTwistConfig(const Rig& rig, const DeformerConfig&) {
  if (auto st = SkeletalDeformer::CheckRig(rig, "swing-twist"); !st.ok()) return st;
  return CheckSimilarBind(rig);
}

absl::StatusOr<std::shared_ptr<const Prepared>> PrepareSwingTwist(const Rig& rig, const DeformerConfig& config,
                                                                  ThreadPool* pool, const ProgressFn& progress) {
  if (auto st = CheckSwingTwistConfig(rig, config); !st.ok()) return st;
  const SwingTwistParams& p = ParamsOf<SwingTwistParams>(config);
  auto model = std::make_shared<SwingTwistModel>();
  auto frames = ComputeCanonicalFrames(rig);
  if (!frames.ok()) return frames.status();
  model->frames = std::move(*frames);
  ElasticWeightsOptions options;
  options.voxel_size = p.voxel_size;
  options.emw.max_iterations = int(p.max_iterations);
  options.emw.epsilon = p.epsilon;
  options.emw.tolerance = p.tolerance;
  options.swing_samples = int(p.swing_samples);
  options.twist_samples = int(p.twist_samples);
  options.influences = p.influences;
  auto weights = ComputeElasticWeights(rig, model->frames, options, pool, progress, &model->stats);
  if (!weights.ok()) return weights.status();
  model->weights = std::move(*weights);
  if (auto st = CheckSwingTwistWeights(model->weights, rig.vertex_count(), rig.joint_count()); !st.ok()) {
    return absl::InternalError(absl::StrCat("swing-twist: the computed weights are malformed: ", st.message()));
  }
  model->cpu_blocks = SwingTwistCpuBlocks(rig.positions, model->weights, model->frames);
  return std::shared_ptr<const Prepared>(std::move(model));
}

namespace {
// Version 2 (2026-12-04): leaf joints that carry geometry have their own swing and twist weights.
// Version 3 (2026-12-04, later): d scaled by the rig's weights on the bones meeting at each handle.
// Version 4 (2026-12-04, later): per joint, the joint its deformer blends from.
// Version 5 (2026-12-04, later): siblings that share a handle each have a deformer.
constexpr std::string_view kSaveMagic = "sinew swing-twist weights 5\n";

template <class T>
void Put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <class T>
void PutArray(std::string& out, const std::vector<T>& v) {
  Put(out, uint64_t(v.size()));
  out.append(reinterpret_cast<const char*>(v.data()), sizeof(T) * v.size());
}
struct Reader {
  std::string_view in;
  bool ok = true;
  template <class T>
  T Get() {
    T v{};
    if (in.size() < sizeof(T)) {
      ok = false;
      return v;
    }
    std::memcpy(&v, in.data(), sizeof(T));
    in.remove_prefix(sizeof(T));
    return v;
  }
  template <class T>
  std::vector<T> GetArray(uint64_t limit) {
    const uint64_t n = Get<uint64_t>();
    if (!ok || n > limit || in.size() < n * sizeof(T)) {
      ok = false;
      return {};
    }
    std::vector<T> v(n);
    std::memcpy(v.data(), in.data(), n * sizeof(T));
    in.remove_prefix(n * sizeof(T));
    return v;
  }
};
}  // namespace

std::string SaveSwingTwist(const Prepared& prepared) {
  const auto& m = static_cast<const SwingTwistModel&>(prepared);
  std::string out(kSaveMagic);
  Put(out, uint64_t(m.weights.offsets.size()));
  PutArray(out, m.weights.offsets);
  PutArray(out, m.weights.joints);
  PutArray(out, m.weights.d);
  PutArray(out, m.weights.s);
  PutArray(out, m.weights.t);
  PutArray(out, m.weights.parents);
  const ElasticWeightsStats& st = m.stats;
  Put(out, st.voxel_size);
  for (uint64_t v : {uint64_t(st.voxels), uint64_t(st.grid_vertices), uint64_t(st.handles), uint64_t(st.solved_joints),
                     uint64_t(st.max_iterations)}) {
    Put(out, v);
  }
  PutArray(out, std::vector<char>(st.blend_solver.begin(), st.blend_solver.end()));
  return out;
}

absl::StatusOr<std::shared_ptr<const Prepared>> LoadSwingTwist(const Rig& rig, const DeformerConfig&,
                                                               std::string_view bytes) {
  if (bytes.substr(0, kSaveMagic.size()) != kSaveMagic) {
    return absl::InvalidArgumentError("swing-twist: not a saved swing-twist preparation (or another version)");
  }
  Reader r{bytes.substr(kSaveMagic.size())};
  auto model = std::make_shared<SwingTwistModel>();
  const uint64_t rows = r.Get<uint64_t>();
  const uint64_t limit = uint64_t{8} * rig.vertex_count() + 1;  // entries: at most 8 influences per vertex
  model->weights.offsets = r.GetArray<uint32_t>(rig.vertex_count() + 1);
  model->weights.joints = r.GetArray<uint16_t>(limit);
  model->weights.d = r.GetArray<float>(limit);
  model->weights.s = r.GetArray<float>(limit);
  model->weights.t = r.GetArray<float>(limit);
  model->weights.parents = r.GetArray<int32_t>(rig.joint_count());
  ElasticWeightsStats& st = model->stats;
  st.voxel_size = r.Get<double>();
  st.voxels = r.Get<uint64_t>();
  st.grid_vertices = r.Get<uint64_t>();
  st.handles = r.Get<uint64_t>();
  st.solved_joints = r.Get<uint64_t>();
  st.max_iterations = int(r.Get<uint64_t>());
  const std::vector<char> solver = r.GetArray<char>(256);
  st.blend_solver.assign(solver.begin(), solver.end());
  if (!r.ok || !r.in.empty() || rows != rig.vertex_count() + 1) {
    return absl::DataLossError("swing-twist: the saved preparation is truncated or was made for another rig");
  }
  if (auto s = CheckSwingTwistWeights(model->weights, rig.vertex_count(), rig.joint_count()); !s.ok()) {
    return absl::DataLossError(absl::StrCat("swing-twist: the saved weights do not fit this rig: ", s.message()));
  }
  auto frames = ComputeCanonicalFrames(rig);
  if (!frames.ok()) return frames.status();
  model->frames = std::move(*frames);
  model->cpu_blocks = SwingTwistCpuBlocks(rig.positions, model->weights, model->frames);
  return std::shared_ptr<const Prepared>(std::move(model));
}

absl::StatusOr<std::unique_ptr<Deformer>> CreateSwingTwistDeformer(std::shared_ptr<const Rig> rig,
                                                                   std::shared_ptr<const Prepared> prepared,
                                                                   const DeformerConfig& config) {
  auto model = std::dynamic_pointer_cast<const SwingTwistModel>(prepared);
  if (!model) return absl::InternalError("swing-twist: created without its prepared weights");
  if (auto st = CheckSimilarBind(*rig); !st.ok()) return st;
  return std::unique_ptr<Deformer>(new SwingTwistDeformer(std::move(rig), std::move(model), SwingTwistKey(config),
                                                          SwingTwistStateful(config)));
}

}  // namespace sinew
