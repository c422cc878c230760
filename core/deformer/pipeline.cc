#include "core/deformer/pipeline.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/util/state_bytes.h"

namespace sinew {
namespace {

class Pipeline final : public Deformer {
 public:
  Pipeline(std::shared_ptr<const Rig> rig, std::vector<const MethodInfo*> methods,
           std::vector<std::unique_ptr<Deformer>> stages)
      : rig_(std::move(rig)),
        methods_(std::move(methods)),
        stages_(std::move(stages)),
        between_(stages_.size() > 1 ? rig_->positions.size() : 0),
        params_(stages_.size()) {
    for (const MethodInfo* m : methods_) reads_ |= m->inputs;
    FuseDeviceStage();
  }

  absl::Status Deform(const FrameInput& frame, std::span<float> out, ThreadPool* pool) override {
    if (auto st = CheckInputs(frame); !st.ok()) return st;
    const size_t n = stages_.size();
    std::span<float> prev;
    for (size_t k = 0; k < n; ++k) {
      // Stage k writes the output when n - 1 - k is even, else the buffer: the last writes `out`
      // and no stage reads the buffer it writes.
      const std::span<float> target = (n - 1 - k) % 2 == 0 ? out : std::span<float>(between_);
      const FrameInput in = StageFrame(k, frame);
      const absl::Status st = k == 0 ? stages_[k]->Deform(in, target, pool)
                                     : stages_[k]->DeformAfter(in, prev, target, pool);
      if (!st.ok()) return Stage(k, st);
      prev = target;
    }
    return absl::OkStatus();
  }

  absl::Status Extras(const FrameExtras& extras) const override { return EachFromAStage(extras, false); }
  absl::Status Offers(const FrameExtras& wanted) const override { return EachFromAStage(wanted, true); }

  // Each wanted extra from the last stage that has it (`offers`: asked, not filled).
  absl::Status EachFromAStage(const FrameExtras& extras, bool offers) const {
    auto one = [&](FrameExtras only, const char* field) -> absl::Status {
      for (size_t k = stages_.size(); k-- > 0;) {
        if ((offers ? stages_[k]->Offers(only) : stages_[k]->Extras(only)).ok()) return absl::OkStatus();
      }
      return absl::FailedPreconditionError(absl::StrCat("outputs.", field, ": no stage of this pipeline has it"));
    };
    absl::Status st;
    if (extras.posed_cage && st.ok()) st = one({.posed_cage = extras.posed_cage}, "posed_cage");
    if (extras.rest_cage && st.ok()) st = one({.rest_cage = extras.rest_cage}, "rest_cage");
    if (extras.joints && st.ok()) st = one({.joints = extras.joints}, "joints");
    if (extras.vertex_states && st.ok()) st = one({.vertex_states = extras.vertex_states}, "vertex_states");
    if (extras.normals && st.ok()) st = one({.normals = extras.normals}, "normals");
    if (extras.base_points && st.ok()) st = one({.base_points = extras.base_points}, "base_points");
    return st;
  }

  void Reset() override {
    for (auto& s : stages_) s->Reset();
  }

  // Snapshots: each stage's own bytes (none for a stage whose method keeps no state:
  // UNIMPLEMENTED). Bytes: "pipeline-state" 1, the stage count (u64), per stage whether it has a
  // state (u8), its length (u64) and its bytes, then an FNV-1a 64 (core/util/state_bytes.h). A
  // one-stage pipeline on a device is its stage's.
  absl::StatusOr<std::string> SaveState() const override {
    StateWriter out(kStateMagic);
    out.Put(uint64_t(stages_.size()));
    for (size_t k = 0; k < stages_.size(); ++k) {
      auto bytes = stages_[k]->SaveState();
      if (!bytes.ok() && bytes.status().code() != absl::StatusCode::kUnimplemented) return Stage(k, bytes.status());
      out.Put(uint8_t(bytes.ok()));
      out.Put(uint64_t(bytes.ok() ? bytes->size() : 0));
      if (bytes.ok()) out.PutArray(std::span<const char>(*bytes));
    }
    return std::move(out).Finish();
  }
  absl::Status LoadState(std::string_view bytes) override {
    StateReader in(bytes, kStateMagic, "a pipeline session state");
    const uint64_t count = in.Get<uint64_t>();
    if (!in.ok()) return in.status();
    if (count != stages_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("state: saved by a pipeline of ", count, " stages; this one has ", stages_.size()));
    }
    std::vector<std::optional<std::string>> states(count);
    for (auto& state : states) {
      const bool has = in.Get<uint8_t>() != 0;
      const uint64_t length = in.Get<uint64_t>();
      if (!in.ok() || length > in.remaining()) return absl::DataLossError("state: a stage's bytes end early");
      if (!has) continue;
      state.emplace(length, '\0');
      in.GetArray(std::span<char>(*state));
    }
    if (auto st = in.Done(); !st.ok()) return st;
    // A stage that keeps a state gets one: left out, the stage would keep this session's own
    // history beside the others' saved ones, a mix SaveState never writes (until 2026-12-07 taken).
    for (size_t k = 0; k < count; ++k) {
      if (!states[k] && stages_[k]->SaveState().ok()) {
        return Stage(k, absl::InvalidArgumentError("state: holds no state for this stage, whose method keeps one"));
      }
    }
    // All or nothing: the stages loaded before one that refuses its bytes get their own back.
    std::vector<std::optional<std::string>> before(count);
    for (size_t k = 0; k < count; ++k) {
      if (!states[k]) continue;
      if (auto b = stages_[k]->SaveState(); b.ok()) before[k] = std::move(*b);
      absl::Status st = stages_[k]->LoadState(*states[k]);
      if (st.code() == absl::StatusCode::kUnimplemented) {
        st = absl::InvalidArgumentError("state: holds a state for this stage, whose method keeps none");
      }
      if (!st.ok()) {
        for (size_t j = 0; j < k; ++j) {
          if (before[j]) (void)stages_[j]->LoadState(*before[j]);
        }
        return Stage(k, st);
      }
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> SaveDeviceState(std::span<const float> resident) const override {
    if (stages_.size() != 1) return Deformer::SaveDeviceState(resident);
    auto bytes = stages_[0]->SaveDeviceState(resident);
    return bytes.ok() ? bytes : Stage(0, bytes.status());
  }
  absl::Status LoadDeviceState(std::string_view bytes, std::span<float> resident) override {
    if (stages_.size() != 1) return Deformer::LoadDeviceState(bytes, resident);
    return Stage(0, stages_[0]->LoadDeviceState(bytes, resident));
  }

  size_t StateBytes() const override {
    size_t b = sizeof(*this) + between_.size() * sizeof(float);
    for (const auto& s : stages_) b += s->StateBytes();
    for (const auto& p : params_) b += p.capacity() * sizeof(float);
    return b;
  }

  DeviceStage device_stage() const override { return device_; }
  size_t device_param_count() const override {
    if (stages_.size() == 1) return stages_[0]->device_param_count();
    return device_.kernel.empty() ? 0 : stages_[0]->device_param_count() + stages_[1]->device_param_count();
  }
  void DeviceCoefficients(std::vector<float>& values, uint32_t& cols) const override {
    stages_[0]->DeviceCoefficients(values, cols);  // single stages and the fused cage stage
  }
  absl::Status DeviceFrame(const FrameInput& frame, std::vector<float>& params) override {
    if (auto st = CheckInputs(frame); !st.ok()) return st;
    if (stages_.size() == 1) return Stage(0, stages_[0]->DeviceFrame(StageFrame(0, frame), params));
    if (device_.kernel.empty()) return absl::UnimplementedError("this pipeline has no device stage");
    // The fused kernel: the cage stage's parameters, then the skinning stage's.
    for (size_t k = 0; k < 2; ++k) {
      if (auto st = stages_[k]->DeviceFrame(StageFrame(k, frame), params_[k]); !st.ok()) return Stage(k, st);
    }
    params.resize(params_[0].size() + params_[1].size());
    std::copy(params_[0].begin(), params_[0].end(), params.begin());
    std::copy(params_[1].begin(), params_[1].end(), params.begin() + params_[0].size());
    return absl::OkStatus();
  }
  bool DeviceStateCanDiverge() const override { return stages_.size() == 1 && stages_[0]->DeviceStateCanDiverge(); }
  void RunsOnDevice() override {
    for (auto& s : stages_) s->RunsOnDevice();
    std::vector<float>().swap(between_);
  }

 private:
  void FuseDeviceStage() {
    if (stages_.size() == 1) {
      device_ = stages_[0]->device_stage();
      return;
    }
    if (stages_.size() != 2) return;
    const DeviceStage cage = stages_[0]->device_stage(), skin = stages_[1]->device_stage();
    if (cage.kernel != "cage" || methods_[1]->follows != StageInput::kRest) return;
    if (skin.kernel == "lbs") device_.kernel = "cage+lbs";
    else if (skin.kernel == "dqs") device_.kernel = "cage+dqs";
    else return;
    device_.with_rest = cage.with_rest;
    device_.device_data_key = cage.device_data_key;
  }

  absl::Status CheckInputs(const FrameInput& frame) const {
    if (frame.pose && !(reads_ & kInputPose)) {
      return absl::InvalidArgumentError("pose: no stage of this pipeline takes a skeleton pose");
    }
    if (!frame.cages.empty() && !(reads_ & kInputCages)) {
      return absl::InvalidArgumentError("cages: no stage of this pipeline takes cage input");
    }
    if (frame.posed_cage && !(reads_ & kInputPosedCage)) {
      return absl::InvalidArgumentError("posed_cage: no stage of this pipeline takes a posed cage");
    }
    if (frame.spheres && !(reads_ & kInputSpheres)) {
      return absl::InvalidArgumentError("spheres: no stage of this pipeline takes a posed sphere-mesh");
    }
    return absl::OkStatus();
  }

  // The inputs stage k's method reads (the frame's time step goes to every stage).
  FrameInput StageFrame(size_t k, const FrameInput& frame) const {
    const uint32_t reads = methods_[k]->inputs;
    FrameInput out = frame;
    if (!(reads & kInputPose)) out.pose = nullptr;
    if (!(reads & kInputCages)) out.cages = {};
    if (!(reads & kInputPosedCage)) out.posed_cage = nullptr;
    if (!(reads & kInputSpheres)) out.spheres = nullptr;
    // Only the first stage may stop the frame: a later one runs after stages that, if stateful,
    // have moved on (the elastic implicit method, the one that stops, is always a first stage).
    if (k > 0) out.stop = nullptr;
    return out;
  }

  absl::Status Stage(size_t k, const absl::Status& st) const {
    if (st.ok()) return st;
    return absl::Status(st.code(), absl::StrCat("stage ", k, " (", std::string(methods_[k]->name), "): ", st.message()));
  }

  static constexpr std::string_view kStateMagic{"pipeline-state\x01", 15};

  std::shared_ptr<const Rig> rig_;
  std::vector<const MethodInfo*> methods_;
  std::vector<std::unique_ptr<Deformer>> stages_;
  std::vector<float> between_;               // 3 floats per vertex, between stages
  std::vector<std::vector<float>> params_;   // device parameters per stage (fused kernel)
  uint32_t reads_ = 0;                       // FrameInputs any stage reads
  DeviceStage device_;
};

}  // namespace

absl::Status InStage(const absl::Status& status, size_t k) {
  if (status.ok()) return status;
  constexpr std::string_view kField = "deformer.";
  const std::string m(status.message());
  const std::string stage = absl::StrCat("deformer.stages[", k, "]");
  if (m.substr(0, kField.size()) == kField) {
    return absl::Status(status.code(), absl::StrCat(stage, ".", m.substr(kField.size())));
  }
  return absl::Status(status.code(), absl::StrCat(stage, ": ", m));
}

absl::Status CheckPipeline(const DeformerConfig& config, std::string_view field) {
  const std::string f = absl::StrCat(std::string(field), ".stages");
  if (config.stages.empty() || config.stages.size() > kMaxStages) {
    return absl::InvalidArgumentError(absl::StrCat(f, ": a pipeline has 1 to ", kMaxStages, " stages, not ",
                                                   config.stages.size()));
  }
  for (size_t k = 0; k < config.stages.size(); ++k) {
    const DeformerConfig& s = config.stages[k];
    const std::string fk = absl::StrCat(f, "[", k, "]");
    if (!s.stages.empty()) return absl::InvalidArgumentError(absl::StrCat(fk, ".stages: stages do not nest"));
    const MethodInfo* m = FindMethod(s.method);
    if (m == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(fk, ".method: \"", s.method, "\" is not a registered method"));
    }
    if (k > 0 && m->follows == StageInput::kFirst) {
      return absl::InvalidArgumentError(absl::StrCat(fk, ": method ", s.method,
                                                     " deforms the rig's rest mesh itself; it can only be the first stage"));
    }
  }
  return absl::OkStatus();
}

bool PipelineStateful(const DeformerConfig& config) {
  if (config.stages.empty()) {
    const MethodInfo* m = FindMethod(config.method);
    return m != nullptr && (m->stateful || (m->stateful_with != nullptr && m->stateful_with(config)));
  }
  for (const DeformerConfig& s : config.stages) {
    if (PipelineStateful(s)) return true;
  }
  return false;
}

bool PipelineCostFollowsMotion(const DeformerConfig& config) {
  if (config.stages.empty()) {
    const MethodInfo* m = FindMethod(config.method);
    return m != nullptr && m->cost_follows_motion;
  }
  return std::any_of(config.stages.begin(), config.stages.end(), PipelineCostFollowsMotion);
}

std::unique_ptr<Deformer> MakePipeline(std::shared_ptr<const Rig> rig, const DeformerConfig& config,
                                       std::vector<std::unique_ptr<Deformer>> stages) {
  std::vector<const MethodInfo*> methods;
  for (const DeformerConfig& s : config.stages) methods.push_back(FindMethod(s.method));
  return std::make_unique<Pipeline>(std::move(rig), std::move(methods), std::move(stages));
}

}  // namespace sinew
