#include "core/baseline/baseline.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace sinew {
namespace {

using baseline::End;
using baseline::PointCode;

constexpr std::string_view kProfileWords[] = {"cubic", "linear"};
constexpr ParamSpec kBaselineSpecs[] = {
    {"profile", ParamSpec::Type::kChoice, "cubic",
     "how twist and bend angles grow along a bone: cubic (3u^2 - 2u^3, the paper's: tangents kept at both ends) or "
     "linear",
     kProfileWords},
    {"modulate_detail", ParamSpec::Type::kFlag, "false",
     "keep the details' normal offset where the detail direction tilts (h' = h cos b / cos b', cos b' >= 0.1)"},
    {"exact_joints", ParamSpec::Type::kFlag, "false",
     "solve every point's joints itself instead of interpolating the frame's per-joint tables (about 1.4x slower on "
     "dense point sets; equal to float rounding except where a baseline switches between an arc and a crease at a "
     "joint, within 1e-5 of the bone radius there)"},
};

class BaselineDeformer final : public Deformer {
 public:
  BaselineDeformer(std::shared_ptr<const Rig> rig, std::shared_ptr<const BaselineModel> model,
                   const BaselineParams& params)
      : rig_(std::move(rig)), model_(std::move(model)), params_(params) {}

  void Reset() override {}

  absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) override {
    if (out.size() != rig_->positions.size()) return absl::InternalError("output buffer does not hold 3 floats per point");
    // A refused frame leaves no extras behind: PoseEnds may have posed part of it (until
    // 2026-12-07 base points then mixed its twists with the frame before's bone ends).
    failed_ = true;
    if (auto st = PoseEnds(frame); !st.ok()) return st;
    failed_ = false;
    status_.resize(model_->codes.size());
    const std::vector<PointCode>& codes = model_->codes;
    const baseline::JointTables& tables = model_->tables;
    const bool tabled = !params_.exact_joints && !tables.keys.empty();
    if (tabled) baseline::BuildJointFrame(tables, ends_, posed_.twist, pool, joints_);
    ParallelFor(pool, codes.size(), 256, [&](size_t b, size_t e) {
      baseline::Section<double> s;
      s.profile = params_.profile;
      for (size_t i = b; i < e; ++i) {
        const PointCode& code = codes[i];
        if (code.flags & baseline::kDegenerate) {
          const baseline::V3<double> p = baseline::RigidPoint(code, ends_[2 * size_t(code.bone)]);
          out[3 * i] = float(p.x);
          out[3 * i + 1] = float(p.y);
          out[3 * i + 2] = float(p.z);
          status_[i] = uint8_t(code.piece | (code.flags << 3));
          continue;
        }
        baseline::SectionEnds(code, ends_, posed_.twist, s);
        if (tabled) {
          for (int side = 0; side < 2; ++side) {
            const uint32_t key = tables.of_code[i][side];
            if (key != baseline::kNoTable) baseline::LookUpJoint(tables, joints_, key, code.phi, s.ends[side]);
          }
        }
        baseline::BuildSection(s);
        baseline::V3<double> p;
        const baseline::SectionPoint<double> at = baseline::Decode(code, s, params_.modulate_detail, p);
        out[3 * i] = float(p.x);
        out[3 * i + 1] = float(p.y);
        out[3 * i + 2] = float(p.z);
        status_[i] = uint8_t(uint8_t(at.piece) | (s.degenerate ? kBaselineStatusDegenerate : 0) | (code.flags << 3));
      }
    });
    return absl::OkStatus();
  }

  // Before a frame the status bytes are not there yet on the CPU either: whether they will be is
  // whether the session runs on a device.
  absl::Status Offers(const FrameExtras& wanted) const override { return Check(wanted, on_device_); }
  void RunsOnDevice() override { on_device_ = true; }
  absl::Status Extras(const FrameExtras& extras) const override {
    if (failed_ && (extras.base_points != nullptr || extras.vertex_states != nullptr)) {
      return absl::FailedPreconditionError(
          "outputs: the last frame failed: its base points and vertex states are not there (a frame that succeeds "
          "brings them)");
    }
    if (auto st = Check(extras, status_.empty()); !st.ok()) return st;
    if (extras.vertex_states != nullptr) *extras.vertex_states = status_;
    if (extras.base_points != nullptr) BasePoints(*extras.base_points);
    return absl::OkStatus();
  }

  // The device decodes every point itself (gpu/baseline/, core/baseline/device_layout.h): its
  // rows are the PointCodes, a frame's parameters the posed bone ends.
  DeviceStage device_stage() const override {
    DeviceStage s;
    s.kernel = "baseline";
    s.device_data_key = "baseline encoding";
    return s;
  }
  size_t device_param_count() const override {
    return baseline::BaselineFrameFloats(uint32_t(model_->skeleton.bone_count()));
  }
  void DeviceCoefficients(std::vector<float>& values, uint32_t& cols) const override {
    cols = baseline::kBaselineRowFloats;
    values.resize(size_t{cols} * model_->codes.size());
    std::memcpy(values.data(), static_cast<const void*>(model_->codes.data()), model_->codes.size() * sizeof(PointCode));
  }
  absl::Status DeviceFrame(const FrameInput& frame, std::vector<float>& params) override {
    if (auto st = PoseEnds(frame); !st.ok()) return st;
    status_.clear();  // the device makes no status bytes
    const uint32_t bones = uint32_t(model_->skeleton.bone_count());
    params.assign(baseline::BaselineFrameFloats(bones), 0.f);
    const uint32_t profile = uint32_t(params_.profile);
    std::memcpy(&params[0], &bones, sizeof(bones));
    std::memcpy(&params[1], &profile, sizeof(profile));
    params[2] = params_.modulate_detail ? 1.f : 0.f;
    for (uint32_t k = 0; k < bones; ++k) {
      float* bone = params.data() + baseline::kBaselineHeaderFloats + size_t{baseline::kBaselineBoneFloats} * k;
      std::memcpy(bone, static_cast<const void*>(&ends_[2 * k]), 2 * sizeof(End<double>));
      std::memcpy(bone + 2 * sizeof(End<double>) / sizeof(float), &posed_.twist[k], sizeof(double));
    }
    return absl::OkStatus();
  }

  size_t StateBytes() const override {
    return ends_.capacity() * sizeof(End<double>) + status_.capacity() +
           joints_.d1.capacity() * 2 * sizeof(double) + joints_.flags.capacity() +
           (posed_.centres.capacity() + scratch_.world.capacity()) * sizeof(Eigen::Vector3d) * 4;
  }

 private:
  // The last frame's base points, its sections built again (the same ends and joint tables, so
  // the same sections): a second pass asked for by the client, on one thread.
  void BasePoints(std::vector<float>& out) const {
    const std::vector<PointCode>& codes = model_->codes;
    const baseline::JointTables& tables = model_->tables;
    const bool tabled = !params_.exact_joints && !tables.keys.empty();
    out.resize(3 * codes.size());
    baseline::Section<double> s;
    s.profile = params_.profile;
    for (size_t i = 0; i < codes.size(); ++i) {
      const PointCode& code = codes[i];
      baseline::V3<double> b;
      if (code.flags & baseline::kDegenerate) {
        b = baseline::RigidPoint(code, ends_[2 * size_t(code.bone)]);
      } else {
        baseline::SectionEnds(code, ends_, posed_.twist, s);
        for (int side = 0; tabled && side < 2; ++side) {
          const uint32_t key = tables.of_code[i][side];
          if (key != baseline::kNoTable) baseline::LookUpJoint(tables, joints_, key, code.phi, s.ends[side]);
        }
        baseline::BuildSection(s);
        b = baseline::PointAt(s, code.ratio * s.length).b;
      }
      out[3 * i] = float(b.x);
      out[3 * i + 1] = float(b.y);
      out[3 * i + 2] = float(b.z);
    }
  }

  // Checks the frame and poses the sphere-mesh: posed_, and ends_ (2 per bone).
  absl::Status PoseEnds(const FrameInput& frame) {
    if (frame.pose != nullptr) {
      if (auto st = ValidatePose(*frame.pose, rig_->joint_count()); !st.ok()) return st;
    }
    if (frame.spheres != nullptr) {
      if (auto st = ValidateSphereFrame(*rig_, *frame.spheres); !st.ok()) return st;
    }
    if (!frame.cages.empty() || frame.posed_cage != nullptr) {
      return absl::InvalidArgumentError("cages: method baseline takes no cage input");
    }
    const baseline::SphereSkeleton& sk = model_->skeleton;
    if (auto st = baseline::PoseSpheres(sk, *rig_, frame, scratch_, posed_); !st.ok()) return st;
    ends_.resize(2 * sk.bone_count());
    for (uint32_t k = 0; k < sk.bone_count(); ++k) {
      ends_[2 * k] = baseline::EndOf(sk, posed_, k, 0);
      ends_[2 * k + 1] = baseline::EndOf(sk, posed_, k, 1);
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const Rig> rig_;
  std::shared_ptr<const BaselineModel> model_;
  BaselineParams params_;
  baseline::PoseScratch scratch_;
  baseline::PosedSpheres posed_;
  std::vector<End<double>> ends_;
  baseline::JointFrame joints_;
  std::vector<uint8_t> status_;
  bool on_device_ = false;  // RunsOnDevice: the device makes no status bytes
  bool failed_ = false;     // the last Deform was refused: no extras

  // What Extras refuses, `no_states` saying whether there are (or will be) no status bytes.
  absl::Status Check(const FrameExtras& wanted, bool no_states) const {
    FrameExtras rest = wanted;
    rest.vertex_states = nullptr;
    rest.base_points = nullptr;
    if (auto st = Deformer::Offers(rest); !st.ok()) return st;
    for (const auto& [asked, field] : {std::pair{wanted.vertex_states != nullptr, "vertex_states"},
                                       std::pair{wanted.base_points != nullptr, "base_points"}}) {
      if (asked && no_states) {
        return absl::FailedPreconditionError(absl::StrCat(
            "outputs.", field, ": method baseline reports them from CPU frames only (this session runs on the GPU)"));
      }
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::span<const ParamSpec> BaselineParamSpecs() { return kBaselineSpecs; }

absl::StatusOr<std::shared_ptr<const MethodParams>> ParseBaselineParams(const ParamSet& set, std::string_view field) {
  auto p = std::make_shared<BaselineParams>();
  ParamReader r(set, field);
  int profile = 0;
  r.Choice("profile", kProfileWords, profile)
      .Flag("modulate_detail", p->modulate_detail)
      .Flag("exact_joints", p->exact_joints);
  if (!r.status().ok()) return r.status();
  p->profile = baseline::Profile(profile);
  return std::shared_ptr<const MethodParams>(std::move(p));
}

size_t BaselineModel::Bytes() const {
  return codes.capacity() * sizeof(PointCode) + tables.Bytes() +
         skeleton.bone_count() * (sizeof(skeleton.bones[0]) + sizeof(Eigen::Vector3d) + 3 * sizeof(int32_t)) +
         skeleton.centres.size() * (sizeof(Eigen::Vector3d) + sizeof(double));
}

std::string BaselineModel::Summary() const {
  return absl::StrCat(codes.size(), " points over ", skeleton.bone_count(), " bones: ", counts.cone, " on bones, ",
                      counts.arc, " on joint arcs, ", counts.pole, " on end caps; ", counts.retried,
                      " encoded on a neighbour, ", counts.clamped, " clamped, ", counts.beyond_focus,
                      " beyond their detail focus, ", counts.degenerate, " with a degenerate rest section (moved rigidly); ",
                      tables.keys.size(), " joint ends tabled per frame (", tables.rest_other.size(), " samples)");
}

std::string BaselineKey(const DeformerConfig&) { return "encoding"; }

absl::StatusOr<std::shared_ptr<const Prepared>> PrepareBaseline(const Rig& rig, const DeformerConfig&, ThreadPool* pool,
                                                                const ProgressFn& progress) {
  auto sk = baseline::MakeSphereSkeleton(rig);
  if (!sk.ok()) return sk.status();
  auto model = std::make_shared<BaselineModel>();
  model->skeleton = std::move(*sk);
  auto codes = baseline::EncodePoints(model->skeleton, rig, pool, progress, &model->counts);
  if (!codes.ok()) return codes.status();
  model->codes = std::move(*codes);
  baseline::PosedSpheres rest;
  baseline::RestSpheres(model->skeleton, rest);
  std::vector<End<double>> ends;
  for (uint32_t k = 0; k < model->skeleton.bone_count(); ++k) {
    ends.push_back(baseline::EndOf(model->skeleton, rest, k, 0));
    ends.push_back(baseline::EndOf(model->skeleton, rest, k, 1));
  }
  model->tables = baseline::PlanJointTables(model->codes, ends);
  return std::shared_ptr<const Prepared>(std::move(model));
}

absl::StatusOr<std::unique_ptr<Deformer>> CreateBaselineDeformer(std::shared_ptr<const Rig> rig,
                                                                 std::shared_ptr<const Prepared> prepared,
                                                                 const DeformerConfig& config) {
  auto model = std::dynamic_pointer_cast<const BaselineModel>(prepared);
  if (!model) return absl::InternalError("baseline: created without its encoding");
  return std::unique_ptr<Deformer>(
      new BaselineDeformer(std::move(rig), std::move(model), ParamsOf<BaselineParams>(config)));
}

}  // namespace sinew
